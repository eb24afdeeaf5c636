"""Preemption: who may be evicted for whom, and when a search is worth running.

A :class:`VictimPolicy` decides which running pods a job's pod may evict and how the eviction
is labelled; :func:`~fairgpu.engine.preemption.find_preemption` then searches for the
smallest victim set on the best node. Two policies:

:class:`FairVictims`
    reclaim from queues above the preemptor's (:mod:`~fairgpu.engine.actions.reclaim`, at most
    :data:`MAX_RECLAIM_QUEUES` queues, those furthest above first), then strictly lower
    priority inside the preemptor's own queue, then both pools together.
:class:`KubeDefaultVictims`
    kube-scheduler's priority preemption: any pod of strictly lower priority.

Whatever the policy, :func:`eligible_victim` must hold for every victim.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fairgpu.engine.actions.reclaim import may_reclaim_from, reclaim_allowed, reclaim_key
from fairgpu.engine.jobs import Job
from fairgpu.engine.preemption import PreemptionPlan, find_preemption, victim_eligible
from fairgpu.engine.session import Session
from fairgpu.model.pod import PodInfo

# Reclaim looks for victims in at most this many queues (those furthest above the preemptor).
MAX_RECLAIM_QUEUES = 4
# Preemption searches per cycle (each scans running pods); the rest wait for the next cycle.
MAX_PREEMPTION_ATTEMPTS = 32


def eligible_victim(session: Session, uid: str, min_runtime: float) -> bool:
    """May the pod ``uid`` be a victim at all? Only if it was not placed in this cycle and
    :func:`~fairgpu.engine.preemption.victim_eligible` holds (bound, not terminating, run at
    least ``min_runtime`` seconds)."""
    return uid not in session.placed_now and victim_eligible(
        session.cluster.placements.get(uid), session.now, min_runtime
    )


class VictimPolicy(Protocol):
    """Who a job's pod may evict, and what the eviction is called."""

    def may_preempt(self, pod: PodInfo) -> bool:
        """May ``pod`` preempt anyone at all (preemption enabled, its policy, priority)?"""

    def memo_key(self, job: Job, pod: PodInfo) -> tuple[object, ...]:
        """What, besides the pod's ask, makes two preemption searches the same."""

    def plan(
        self, session: Session, job: Job, pod: PodInfo, allowed: np.ndarray | None
    ) -> PreemptionPlan | None:
        """The victims to evict and the node ``pod`` then fits on (``allowed`` nodes only)."""

    def kind(self, job: Job, victim: PodInfo) -> str:
        """``priority`` or ``reclaim``."""

    def placed(self, pod: PodInfo) -> None:
        """``pod`` was placed in this cycle."""


def worth_searching(
    session: Session,
    policy: VictimPolicy,
    key: tuple[object, ...] | None,
    pod: PodInfo,
    vec: np.ndarray | None,
) -> bool:
    """The preemption gate for a pod alone: the policy lets it preempt, the same search did
    not already fail in this cycle, and the cycle's search budget is not spent."""
    memo = session.memo
    if not policy.may_preempt(pod):
        return False
    if key is not None and vec is not None and memo.preempt_front.find(key, vec) is not None:
        return False
    return memo.preempt_attempts < MAX_PREEMPTION_ATTEMPTS


class FairVictims:
    """Reclaim between queues and lower priority inside a queue (see the module docstring)."""

    def __init__(self, session: Session, deserved: dict[str, float]) -> None:
        self.s = session
        self.deserved = deserved

    def may_preempt(self, pod: PodInfo) -> bool:
        """Preemption is enabled, the pod does not say ``Never`` and the adapter does not
        hold it back (its earlier victims still terminate)."""
        s = self.s
        return (
            s.tenancy.preemption.enabled
            and pod.preemption_policy != "Never"
            and pod.uid not in s.no_preemption
        )

    def memo_key(self, job: Job, pod: PodInfo) -> tuple[object, ...]:
        """Same queue, same priority."""
        return (job.tenant.queue, pod.priority)

    def kind(self, job: Job, victim: PodInfo) -> str:
        """``priority`` inside the preemptor's queue, ``reclaim`` across queues."""
        same = self.s.resolver.resolve(victim).queue == job.tenant.queue
        return "priority" if same else "reclaim"

    def placed(self, pod: PodInfo) -> None:
        """Nothing to track."""

    def plan(
        self, session: Session, job: Job, pod: PodInfo, allowed: np.ndarray | None
    ) -> PreemptionPlan | None:
        """The first candidate pool that yields a plan the reclaim rule accepts."""
        queue = job.tenant.queue
        book = session.book
        vec = book.pending_vector(pod)
        for eligible in self.candidate_sets(job, pod):
            plan = find_preemption(
                pod,
                session.cluster,
                session.scheduler,
                eligible,
                allowed,
                accept=lambda victims: reclaim_allowed(book, queue, vec, victims),
            )
            if plan is not None:
                return plan
        return None

    def candidate_sets(self, job: Job, pod: PodInfo) -> list[list[str]]:
        """Victim pools to try in order: each queue above the preemptor's (most above first),
        then the preemptor's own lower-priority pods, then all of those together."""
        if not self.may_preempt(pod):
            return []
        s = self.s
        lim = s.book.queue_limits(job.tenant.queue)
        min_run = s.tenancy.preemption.min_runtime_seconds
        sets: list[list[str]] = []
        if lim.preemption.reclaim:
            for other in self._reclaimable_queues(job.tenant.queue):
                pool = s.book.queue_pods[other]
                sets.append(sorted(u for u in pool if eligible_victim(s, u, min_run)))
        if lim.preemption.within_queue == "LowerPriority":
            sets.append(self._lower_priority(job.tenant.queue, pod, min_run))
        sets = [x for x in sets if x]
        if len(sets) > 1:
            sets.append(sorted({u for x in sets for u in x}))
        return sets

    def _reclaimable_queues(self, queue: str) -> list[str]:
        book = self.s.book
        above = []
        for other, uids in book.queue_pods.items():
            if other == queue or not uids:
                continue
            if not book.queue_limits(other).preemption.preemptible:
                continue
            if may_reclaim_from(book, self.deserved, queue, other):
                above.append((reclaim_key(book, other), other))
        return [other for _, other in sorted(above, reverse=True)[:MAX_RECLAIM_QUEUES]]

    def _lower_priority(self, queue: str, pod: PodInfo, min_run: float) -> list[str]:
        s = self.s
        own = []
        for uid in s.book.queue_pods.get(queue, ()):
            p = s.cluster.pods.get(uid)
            if p is not None and p.priority < pod.priority and eligible_victim(s, uid, min_run):
                own.append(uid)
        return sorted(own)


class KubeDefaultVictims:
    """kube-scheduler's priority preemption: strictly lower priority, anywhere, no minimum
    run time."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self._lowest = min((p.priority for p in session.cluster.pods.values()), default=0)

    def may_preempt(self, pod: PodInfo) -> bool:
        """Enabled, not ``Never``, not held back, and some running pod has a lower
        priority."""
        s = self.s
        return (
            s.tenancy.preemption.enabled
            and pod.preemption_policy != "Never"
            and pod.priority > self._lowest
            and pod.uid not in s.no_preemption
        )

    def memo_key(self, job: Job, pod: PodInfo) -> tuple[object, ...]:
        """Same priority."""
        return (pod.priority,)

    def kind(self, job: Job, victim: PodInfo) -> str:
        """Always ``priority``."""
        return "priority"

    def placed(self, pod: PodInfo) -> None:
        """Track the lowest running priority (the cheap gate of :meth:`may_preempt`)."""
        self._lowest = min(self._lowest, pod.priority)

    def plan(
        self, session: Session, job: Job, pod: PodInfo, allowed: np.ndarray | None
    ) -> PreemptionPlan | None:
        """The best plan among pods of strictly lower priority."""
        victims = [
            uid
            for uid, p in session.cluster.pods.items()
            if p.priority < pod.priority and eligible_victim(session, uid, 0.0)
        ]
        return find_preemption(pod, session.cluster, session.scheduler, victims, allowed)
