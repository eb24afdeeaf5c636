"""Reporting only what changed: a pending pod's reason is handed out when it differs from the
last one reported for it.

A backlog of thousands of pods that wait for the same reason would otherwise cost a report
per pod in every cycle -- an object built by the engine and read by the adapter --, however
little the cycle could start. An adapter that keeps each pod's last reason itself (the
simulator) turns :attr:`~fairgpu.engine.engine.Engine.report_unchanged` off; then a pod
alone is reported only when its (reason, resolvable) differs from the last one reported for
the same pod object (:attr:`~fairgpu.engine.jobs.Job.reported`, kept on its job in the
backlog). Everything else is reported as always: pod group members, gated pods, pods the
backlog does not hold. Any report the adapter gets is therefore the one it would have got,
and the last reason it holds for a pod is always the last one the engine gave: a report is
left out only when it repeats the previous one for that pod.

The record is made at the end of the cycle, from the reports as they leave the engine (a
starvation reservation's note is appended to its job's reasons after allocation). The
settled followers of a failed pod (:func:`~fairgpu.engine.actions.allocate.allocate`) are
compared in bulk, without building their reports first (:func:`unchanged_dropped`), and
recorded there and then: such a pod holds no reservation, so its reason gets no note
later. The spans of their reports (:attr:`~fairgpu.engine.session.Session.recorded`) pass
the end of the cycle as they are (:func:`changed_reports`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import compress, islice, repeat
from operator import attrgetter, ne

from fairgpu.engine.decisions import Unschedulable
from fairgpu.engine.jobs import Job

_REPORTED = attrgetter("reported")


def unchanged_dropped(jobs: list[Job], outcome: tuple[str, bool]) -> list[Job]:
    """The ``jobs`` (pods alone) whose last report differs from ``outcome`` (C-level scan:
    one comparison per job)."""
    return list(compress(jobs, map(ne, map(_REPORTED, jobs), repeat(outcome))))


def changed_reports(
    items: list[Unschedulable],
    alone: Mapping[str, Job],
    recorded: Sequence[tuple[int, int]] = (),
) -> list[Unschedulable]:
    """``items`` without the reports that repeat the last one for the same pod alone, and
    record the rest on the pods' jobs (``alone``: the backlog's jobs by pod uid).
    ``recorded``: spans (start, end) of ``items``, in order, already compared and recorded
    (settled followers, :mod:`~fairgpu.engine.actions.settle`): kept as they are, in
    place."""
    keep: list[Unschedulable] = []
    at = 0
    for start, end in recorded:
        _record_changed(islice(items, at, start), alone, keep)
        keep.extend(islice(items, start, end))
        at = end
    _record_changed(islice(items, at, None), alone, keep)
    return keep


def unrecorded(
    items: list[Unschedulable], recorded: Sequence[tuple[int, int]]
) -> Iterator[Unschedulable]:
    """The ``items`` outside the ``recorded`` spans (settled followers, see
    :func:`changed_reports`), in order."""
    at = 0
    for start, end in recorded:
        yield from islice(items, at, start)
        at = end
    yield from islice(items, at, None)


def _record_changed(
    items: Iterable[Unschedulable], alone: Mapping[str, Job], keep: list[Unschedulable]
) -> None:
    """Append to ``keep`` the ``items`` that differ from their pods' last reports, and
    record those on the pods' jobs."""
    for item in items:
        job = alone.get(item.pod.uid)
        if job is None or job.pods[0] is not item.pod:
            keep.append(item)
            continue
        got = (item.reason, item.resolvable)
        if job.reported != got:
            job.reported = got
            keep.append(item)
