"""Priority at the quota cap: a job its queue's quota refuses now may take the place of
lower-priority pods of its own queue.

Inside a queue, priority orders work (Kubernetes' contract: a higher-priority pod preempts
lower-priority ones). Without this step that contract broke exactly when it matters most:
a queue at its quota cap (``static`` mode's nominal quota, nominal quota + borrowing limit,
or what its cohort lends) refused a higher-priority pod at admission, before any victim
search, although evicting one of its own lower-priority pods would make room in the quota --
and node room often exists (a quota caps the queue, not the cluster).

So when admission refuses a job only because the quota is used up now
(:class:`~fairgpu.engine.actions.admit.QuotaFull`), :func:`quota_room` looks among the
pods the victim policy lets the job's pods preempt inside its queue
(:meth:`~fairgpu.engine.actions.preempt.VictimPolicy.quota_candidates`: strictly lower
priority, run at least ``minRuntimeSeconds``, not protected, other users' pods only while
the preemptor's user stays within its share of the queue) for the cheapest set whose
eviction lets the quota admit the job, as kube-scheduler picks victims on a node: evict all
candidates, then spare them one by one -- highest priority first, then the most work lost
-- while the quota still admits the job. A pod group breaks whole (a rigid group's running
members go together; an elastic group loses only members beyond ``minMember``,
:class:`~fairgpu.engine.victim_cost.VictimCost`). The job is then placed as any other
(:func:`~fairgpu.engine.actions.allocate.place_job`) in a statement that evicts those
victims first: if it does not fit on the nodes, nothing is evicted. Nothing here touches
another queue: borrowing from other queues is the reclaim rule's business.

Pods of the queue already terminating count as gone: one its owner deleted, or an earlier
victim put back whole when its preemptor gave up (the live scheduler), holds its place in the
book until its deletion is observed, and counting it would evict a running pod for room that
is about to come free. When they alone make room, nobody is evicted: the job waits for them,
as kube-scheduler does not preempt again while lower-priority pods terminate on the node it
nominated.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from fairgpu.engine.actions.admit import QuotaFull
from fairgpu.engine.actions.preempt import VictimPolicy
from fairgpu.engine.jobs import Job
from fairgpu.engine.session import Session
from fairgpu.engine.victim_cost import VictimCost, running_gangs
from fairgpu.model.pod import PodInfo


def quota_room(
    session: Session, job: Job, victims: VictimPolicy, full: QuotaFull
) -> list[PodInfo] | None:
    """The pods of ``job``'s queue to evict so that its quota admits ``job`` now (see the
    module docstring), or None when no such set exists among the candidates."""
    head = job.pods[0]
    candidates = victims.quota_candidates(job, head)
    if not candidates:
        return None
    book, cluster = session.book, session.cluster
    queue = job.tenant.queue
    gangs = running_gangs(
        book, session.resolver, cluster, session.fragile_jobs, session.loose_leader_worker_sets
    )
    cost = VictimCost(cluster, gangs, session.now)
    eligible = set(candidates)
    units = [uid for uid in candidates if cost.admissible(uid, eligible)]

    placements = cluster.placements
    leaving = _held(
        session, (u for u in book.queue_pods.get(queue, ()) if placements[u].terminating)
    )
    if book.admit(queue, full.need, leaving) is None:
        return None  # the queue's pods on their way out make the room: wait for them

    def admits(chosen: Iterable[str]) -> bool:
        freed = _held(session, cost.closure(chosen)) + leaving
        return book.admit(queue, full.need, freed) is None

    if not units or not admits(units):
        return None
    chosen = set(units)
    for uid in sorted(units, key=lambda u: _spare_first(session, cost, u)):
        rest = chosen - {uid}
        if rest and admits(sorted(rest)):
            chosen = rest
    pods = cluster.pods
    return [pods[uid] for uid in cost.closure(sorted(chosen))]


def _held(session: Session, uids: Iterable[str]) -> np.ndarray:
    """What the pods ``uids`` hold in the queue book, together."""
    entries = session.book.entries
    total = None
    for uid in uids:
        vec = entries[uid].vec
        total = vec.copy() if total is None else total + vec
    return total if total is not None else np.zeros_like(session.book.capacity)


def _spare_first(session: Session, cost: VictimCost, uid: str) -> tuple[float, float, str]:
    """Which candidates to spare first: the highest priority, then the most work an
    eviction would lose (its whole group's when it breaks one), then by uid."""
    pod = session.cluster.pods[uid]
    return (-float(pod.priority), -cost.unit_cost(uid), uid)
