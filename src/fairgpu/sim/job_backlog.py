"""A Job's backlog: the pods its controller has yet to create, for forecasts.

A batch/v1 Job with more ``completions`` than ``parallelism`` has only ``parallelism`` pods
in the cluster at a time; the controller creates the next one each time one succeeds
(:mod:`fairgpu.sim.job_controller`). A forecast that knew only the pods in the cluster would
see such a Job end after its first wave, predict the pods queued behind it too early, and
could not say when the Job itself finishes. :class:`JobAhead` is one Job as a forecast
continues it: its pods in the cluster now, then those still to come, as a
:class:`~fairgpu.sim.workload.BatchJob` the simulator's Job controller paces.

The adapters build them from what they read: the live cluster from each Job's spec and
status and the pods it owns (:func:`job_ahead`), a simulated run from its own Job controller
(:func:`jobs_ahead_in_run`). A Job's ``activeDeadlineSeconds`` runs in the forecast as in
a replay: a Job predicted to be still active then is predicted to fail then
(``DeadlineExceeded``), its pods deleted and none created any more. Work-queue Jobs (no
``completions``) are left out: the controller creates no pod after a success.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from fairgpu.model.job_failures import DEFAULT_BACKOFF_LIMIT
from fairgpu.model.pod import PodInfo
from fairgpu.sim.workload import BatchJob, PodArrival

__all__ = ["JobAhead", "JobCounts", "future_pod", "job_ahead", "jobs_ahead_in_run"]


@dataclass(frozen=True, slots=True)
class JobAhead:
    """One Job as a forecast continues it.

    ``job.pods`` are the uids of its pods in the cluster now (running or pending), then of
    ``future``, the pods its controller creates later (the first ``job.first`` of all of
    them exist from the start, the others come one per success); ``succeeded`` and
    ``completions``: its progress, for people."""

    job: BatchJob
    future: tuple[PodArrival, ...]
    completions: int
    succeeded: int

    @property
    def existing(self) -> tuple[str, ...]:
        """The uids of its pods in the cluster now."""
        return self.job.pods[: len(self.job.pods) - len(self.future)]


@dataclass(frozen=True, slots=True)
class JobCounts:
    """What a live Job's spec and status say about its progress (``key``: namespace/name);
    ``active_deadline``: its ``activeDeadlineSeconds``, counted from ``started`` (its
    ``status.startTime`` on the forecast's clock; None: not set yet)."""

    key: str
    uid: str
    completions: int | None
    parallelism: int
    succeeded: int
    failed: int = 0
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    on_disruption: str = "Count"
    done: bool = False  # finished (Complete, Failed, ...) or suspended: creates no pods
    active_deadline: float | None = None
    started: float | None = None


def future_pod(model: PodInfo, name: str, uid: str, now: float) -> PodInfo:
    """A pod the controller creates at ``now`` from the same template as ``model`` (one of
    the Job's pods, or its template decoded): pending, nothing of ``model``'s node or status
    kept."""
    pod = dataclasses.replace(
        model,
        name=name,
        uid=uid,
        node_name="",
        claim_statuses=(),
        created=now,
        source=None,
        _static_key=None,
        labels=dict(model.labels),
        annotations=dict(model.annotations),
    )
    return pod


def job_ahead(
    counts: JobCounts,
    pods: Sequence[PodInfo],
    template: PodInfo | None,
    now: float,
    runtime: Callable[[PodInfo], float | None],
) -> JobAhead | None:
    """The forecast's view of a live Job: ``pods``, its pods in the cluster now that are
    neither finished nor terminating (pending first or not, any order); the pods still to
    come copy the newest of them, else ``template`` (its pod template decoded), and run
    ``runtime(pod)`` seconds (None: until the forecast ends). None when the Job creates
    nothing more and has no such pod, or is a work queue.

    As the controller: it keeps ``min(parallelism, completions - succeeded)`` pods, creating
    any missing at once, and one more each time one succeeds until ``completions`` have. Its
    ``backoffLimit`` is what the failures counted so far left of it; its
    ``activeDeadlineSeconds`` runs from its start (a deadline already past: the controller
    fails it at once)."""
    if counts.done or counts.completions is None:
        return None
    remaining = max(0, counts.completions - counts.succeeded)
    active = len(pods)
    to_create = max(0, remaining - active)
    model = max(pods, key=lambda p: p.created) if pods else template
    if model is None:
        to_create = 0
    if not pods and not to_create:
        return None
    at_once = min(to_create, max(0, min(counts.parallelism, remaining) - active))
    future = []
    name = counts.key.rpartition("/")[2]
    for i in range(to_create):
        assert model is not None
        pod = future_pod(model, f"{name}-next-{i}", f"{counts.uid}/next-{i}", now)
        future.append(PodArrival(pod, now, runtime(pod)))
    created = None
    if counts.active_deadline is not None:
        started = now if counts.started is None else counts.started
        created = max(started, now - counts.active_deadline)
    job = BatchJob(
        counts.key,
        active + at_once,
        (*(p.uid for p in pods), *(a.pod.uid for a in future)),
        max(0, counts.backoff_limit - counts.failed),
        counts.on_disruption,
        counts.active_deadline,
        counts.uid,
        created=created,
    )
    return JobAhead(job, tuple(future), counts.completions, counts.succeeded)


def jobs_ahead_in_run(
    jobs: Sequence[BatchJob],
    present: set[str],
    later: Mapping[str, Iterable[PodArrival]],
    succeeded: Mapping[str, int],
    failures: Mapping[str, int],
    now: float,
    created: Mapping[str, float] | None = None,
) -> list[JobAhead]:
    """The active Jobs of a simulated run at ``now``: their pods in ``present`` (pending or
    running), then ``later`` (the controller's pods not created yet, by Job key), with the
    ``succeeded`` and ``failures`` counted so far and their ``activeDeadlineSeconds``
    counted from when each was ``created``. Pods still to come are copied, so the run is
    left as it was."""
    out = []
    for job in jobs:
        future = tuple(
            PodArrival(copy.copy(a.pod), now, a.duration) for a in later.get(job.key, ())
        )
        existing = tuple(u for u in job.pods if u in present)
        if not existing and not future:
            continue
        ahead = BatchJob(
            job.key,
            len(existing),
            (*existing, *(a.pod.uid for a in future)),
            max(0, job.backoff_limit - failures.get(job.key, 0)),
            job.on_disruption,
            job.active_deadline,
            job.uid,
            created=(created or {}).get(job.key),
        )
        out.append(JobAhead(ahead, future, len(job.pods), succeeded.get(job.key, 0)))
    return out
