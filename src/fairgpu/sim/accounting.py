"""Every run attempt of every pod, so lost work is a number rather than a guess.

A *run attempt* starts when a pod is bound and ends when it completes, is evicted or the
simulated clock stops. Its ``outcome`` says why it ended:

- ``completed``: the pod finished its work;
- ``preempted``: the engine chose it as a victim (``cause`` ``reclaim`` between queues,
  ``relocate`` to run on nodes its preemptor may not use, ``priority`` inside a queue);
- ``gang-restart``: a sibling of its pod group was evicted, so the whole group restarts (as a job
  controller restarts a distributed job that lost a worker); ``preemptor`` is the sibling's;
- ``gang-timeout``: its pod group stayed below minMember too long and was released;
- ``deleted``: the pod was deleted while running (its batch/v1 Job failed -- its pods were
  evicted more often than its ``backoffLimit`` allows -- and the Job controller deleted it);
- ``deadline-exceeded``: it still ran at its ``activeDeadlineSeconds`` and the kubelet
  failed it (a Job's controller replaces it, counting the failure);
- ``backfill-overrun``: it was let onto nodes held for a starving job because it declared
  it would end first, and was evicted for running past that
  (:mod:`fairgpu.engine.actions.backfill_contract`);
- ``running``: still running when the clock stopped (its end is that instant).

Work of ``completed`` and ``running`` attempts is *useful*; all the others' is *lost*. A gang
member's work begins only when its group reaches minMember (:mod:`fairgpu.sim.rendezvous`,
``work_start``); the GPU time a useful attempt held before that is lost as ``gang-wait``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fairgpu.model.gpu import GpuRequest
from fairgpu.model.pod import PodInfo

if TYPE_CHECKING:
    from fairgpu.sim.simulator import PodRecord

USEFUL = ("completed", "running")
#: The outcome of a run its pod's activeDeadlineSeconds ended (the kubelet failed it).
DEADLINE_EXCEEDED = "deadline-exceeded"
#: The outcome of a run evicted for outliving the run time it declared to backfill onto
#: held nodes (:mod:`fairgpu.engine.actions.backfill_contract`).
BACKFILL_OVERRUN = "backfill-overrun"
LOST = ("preempted", "gang-restart", "gang-timeout", "deleted", DEADLINE_EXCEEDED, BACKFILL_OVERRUN)
#: Lost work that is not an outcome: useful attempts' GPU time before their work began.
GANG_WAIT = "gang-wait"


@dataclass(slots=True)
class RunAttempt:
    """One bind-to-end interval of one pod (times in simulated seconds)."""

    namespace: str
    name: str
    uid: str
    tenant: str
    user: str
    group: str
    node: str
    devices: tuple[int, ...]
    gpu: GpuRequest
    start: float
    end: float | None = None
    outcome: str = ""
    cause: str = ""
    preemptor: str = ""
    preemptor_tenant: str = ""
    seq: int = -1  # order in which attempts ended (several end at one instant)
    work_start: float | None = None  # when its work began (None: it never did)

    @property
    def gpu_milli(self) -> int:
        """GPU compute held, milli-GPU."""
        return self.gpu.total_milli

    @property
    def useful(self) -> bool:
        """True when the attempt's work was kept (it completed or was still running)."""
        return self.outcome in USEFUL

    def gpu_seconds(self) -> float:
        """GPU-seconds the attempt held (0 while it has no end)."""
        return 0.0 if self.end is None else self.gpu_milli / 1000.0 * (self.end - self.start)

    @property
    def until(self) -> float:
        """Its end, ``inf`` while it has none."""
        return math.inf if self.end is None else self.end

    def worked_gpu_seconds(self) -> float:
        """GPU-seconds from the start of its work to its end (0 if its work never began)."""
        if self.end is None or self.work_start is None:
            return 0.0
        return self.gpu_milli / 1000.0 * max(0.0, self.end - self.work_start)

    def waited_gpu_seconds(self) -> float:
        """GPU-seconds it held before its work began (``gang-wait`` of a useful attempt)."""
        return self.gpu_seconds() - self.worked_gpu_seconds()

    def useful_span(self) -> tuple[float, float] | None:
        """(work start, end) of a useful attempt whose work began, else None."""
        if not self.useful or self.work_start is None:
            return None
        return self.work_start, self.until


def sibling_cause(trigger: tuple[str, PodInfo | None]) -> tuple[str, PodInfo | None]:
    """The cause recorded for a gang member torn down because ``trigger`` evicted a sibling."""
    kind, preemptor = trigger
    return ("gang-timeout" if kind == "gang-timeout" else "gang-restart", preemptor)


class RunLog:
    """Open and closed run attempts, keyed by pod uid while open.

    ``tenant_of`` maps a preemptor pod to its queue, so a preemption row names both sides.
    """

    def __init__(self, tenant_of: Callable[[PodInfo], str]) -> None:
        self.tenant_of = tenant_of
        self.attempts: list[RunAttempt] = []
        self._open: dict[str, RunAttempt] = {}
        self._ended = 0

    def start(
        self, rec: PodRecord, now: float, node: str, devices: tuple[int, ...], group: str
    ) -> None:
        """Open an attempt for ``rec`` (a PodRecord) bound to ``node`` at ``now``."""
        pod = rec.pod
        attempt = RunAttempt(
            pod.namespace,
            pod.name,
            pod.uid,
            rec.tenant,
            rec.user,
            group,
            node,
            tuple(devices),
            pod.gpu,
            now,
        )
        self._open[pod.uid] = attempt
        self.attempts.append(attempt)

    def work(self, uid: str, now: float) -> None:
        """``uid``'s open attempt starts its work at ``now`` (its bind, or its gang's
        rendezvous)."""
        attempt = self._open.get(uid)
        if attempt is not None and attempt.work_start is None:
            attempt.work_start = now

    def stop(self, uid: str, now: float, kind: str, preemptor: PodInfo | None = None) -> None:
        """Close ``uid``'s open attempt: ``kind`` is ``completed``, ``deleted``,
        ``deadline-exceeded``, an eviction
        kind of the engine (``reclaim``/``relocate``/``precedence``/``priority`` -> outcome
        ``preempted``, the kind kept as its cause) or
        one of ``gang-restart``/``gang-timeout``."""
        attempt = self._open.pop(uid, None)
        if attempt is None:
            return
        attempt.end = now
        attempt.seq = self._ended
        self._ended += 1
        preempted = kind in ("reclaim", "relocate", "precedence", "priority", "")
        attempt.outcome = "preempted" if preempted else kind
        attempt.cause = kind if attempt.outcome == "preempted" else ""
        if preemptor is not None:
            attempt.preemptor = f"{preemptor.namespace}/{preemptor.name}"
            attempt.preemptor_tenant = self.tenant_of(preemptor)

    def close(self, now: float) -> list[RunAttempt]:
        """Mark every open attempt ``running`` until ``now`` and return all attempts."""
        for attempt in self._open.values():
            attempt.end = max(now, attempt.start)
            attempt.outcome = "running"
            attempt.seq = self._ended
            self._ended += 1
        self._open.clear()
        return self.attempts


def reversals(attempts: Iterable[RunAttempt], window: float) -> int:
    """Preemptions that undo an earlier one between the same two queues on the same node.

    A *move* is a ``preempted`` attempt whose preemptor belongs to another queue: at ``end``,
    queue ``preemptor_tenant`` took GPUs of node ``node`` from queue ``tenant``. A move ``q``
    is a *reversal within* ``window`` seconds when an earlier move ``p`` exists with

    - ``p.tenant == q.preemptor_tenant`` and ``p.preemptor_tenant == q.tenant`` (the opposite
      direction),
    - ``p.node == q.node`` (the same GPUs change hands back), and
    - ``0 <= q.end - p.end <= window``, where at one instant (the same scheduling cycle)
      "earlier" means ended earlier in the cycle's order (``seq``).

    ``window=0`` counts reversals inside one cycle; 600 and 3600 give the 10-minute and hour
    figures. Each move counts at most once, however many moves it undoes; moves inside one
    queue (priority preemption) and gang members torn down with a victim are not moves.
    """
    moves = sorted(
        (
            a
            for a in attempts
            if a.outcome == "preempted" and a.preemptor_tenant and a.preemptor_tenant != a.tenant
        ),
        key=lambda a: (a.end, a.seq),
    )
    last: dict[tuple[str, str, str], float] = {}
    count = 0
    for q in moves:
        assert q.end is not None
        before = last.get((q.node, q.preemptor_tenant, q.tenant))
        if before is not None and q.end - before <= window:
            count += 1
        last[(q.node, q.tenant, q.preemptor_tenant)] = q.end
    return count


def gang_stats(attempts: Iterable[RunAttempt], arrival: Mapping[str, float]) -> dict[str, Any]:
    """Per pod group: how often it started and how long it waited.

    A group's *starts* is the most run attempts any one member had (members restart together).
    Its *wait* runs from its first member's arrival (``arrival``: uid -> seconds) to the start
    of the last member's final attempt; groups with a member that never ran have no wait.
    """
    runs: dict[str, dict[str, list[float]]] = {}
    for a in attempts:
        if a.group:
            runs.setdefault(a.group, {}).setdefault(a.uid, []).append(a.start)
    starts = {g: max(len(v) for v in members.values()) for g, members in runs.items()}
    waits = [
        max(max(v) for v in members.values()) - min(arrival.get(u, 0.0) for u in members)
        for members in runs.values()
    ]
    return {
        "gangs_started": len(runs),
        "max_gang_starts": max(starts.values(), default=0),
        "gangs_started_more_than_twice": sum(1 for n in starts.values() if n > 2),
        "gang_wait_s": sorted(waits),
    }


def evictions_by_kind(attempts: Iterable[RunAttempt]) -> dict[str, int]:
    """How many run attempts ended evicted, by kind: a preemption's (``reclaim``,
    ``relocate``, ``precedence``, ``priority``) or a gang's (``gang-restart``,
    ``gang-timeout``), most first."""
    kinds: dict[str, int] = {}
    for a in attempts:
        kind = (a.cause or a.outcome) if a.outcome == "preempted" else a.outcome
        if a.outcome in ("preempted", "gang-restart", "gang-timeout"):
            kinds[kind] = kinds.get(kind, 0) + 1
    return dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))


def work_totals(attempts: Iterable[RunAttempt]) -> dict[str, Any]:
    """GPU-seconds of useful and lost work, lost by outcome (and ``gang-wait``: what useful
    attempts held before their work began) and by preemption kind, per tenant."""
    useful = 0.0
    lost: dict[str, float] = dict.fromkeys((*LOST, GANG_WAIT), 0.0)
    kinds: dict[str, float] = {}
    tenant_useful: dict[str, float] = {}
    for a in attempts:
        if a.useful:
            worked = a.worked_gpu_seconds()
            useful += worked
            lost[GANG_WAIT] += a.waited_gpu_seconds()
            tenant_useful[a.tenant] = tenant_useful.get(a.tenant, 0.0) + worked
        elif a.outcome in lost:
            gs = a.gpu_seconds()
            lost[a.outcome] += gs
            if a.cause:
                kinds[a.cause] = kinds.get(a.cause, 0.0) + gs
    return {"useful": useful, "lost": lost, "preempted_by_kind": kinds, "tenants": tenant_useful}
