"""Room in a quota or a limit: a job its queue's quota refuses now may take the place of
lower-priority pods of its own queue; one its department's limit refuses, the place of pods
of the department's queues above their share.

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
another department's queues: borrowing from other queues is the reclaim rule's business.

**At the department's limit, the department's other queues give back first.** A
department's ``limit`` caps its queues together; a queue below its share there (its
department's amount split by weight) whose job the limit refuses takes pods back from the
department's other queues above theirs, as reclaim between queues does
(:meth:`~fairgpu.engine.actions.preempt.VictimPolicy.department_candidates`: the reclaim
pre-screen, and the time rules -- minimum run time, cooldown, protection -- on each pod),
the cheapest set that makes room in the limit (spared by the work they would lose: reclaim
weighs no priority across queues), judged on the end state by the reclaim rules
(:func:`~fairgpu.engine.actions.reclaim.reclaim_refusal`: the preemptor ends at or below
its share, the order between the queues does not flip) and recorded as a reclaim (its
cooldown). Otherwise, a queue's team waited beside a sibling that filled the limit first
until that sibling's pods ended of themselves. Only when no such set is allowed are the
queue's own lower-priority pods tried.

Pods of the queue (and of its department's other queues) already terminating count as
gone: one its owner deleted, or an earlier victim put back whole when its preemptor gave up
(the live scheduler), holds its place in the book until its deletion is observed, and
counting it would evict a running pod for room that is about to come free. When they alone
make room, nobody is evicted: the job waits for them, as kube-scheduler does not preempt
again while lower-priority pods terminate on the node it nominated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

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
    """The pods to evict so that ``job``'s queue's quota -- and its department's limit --
    admit ``job`` now (see the module docstring), or None when no such set exists among
    the candidates."""
    head = job.pods[0]
    book, cluster = session.book, session.cluster
    queue = job.tenant.queue
    placements = cluster.placements
    others = victims.department_candidates(job, head)
    own = victims.quota_candidates(job, head)
    if not others and not own:
        return None
    terminating = [u for u in book.queue_pods.get(queue, ()) if placements[u].terminating]
    leaving = _held(session, terminating)
    others_leaving = _held(session, _siblings_terminating(session, queue))
    if book.admit(queue, full.need, leaving, others_leaving) is None:
        return None  # the pods on their way out make the room: wait for them
    gangs = running_gangs(
        book, session.resolver, cluster, session.fragile_jobs, session.loose_leader_worker_sets
    )
    cost = VictimCost(cluster, gangs, session.now)

    def own_room(chosen: Iterable[str]) -> bool:
        freed = _held(session, cost.closure(chosen)) + leaving
        return book.admit(queue, full.need, freed, others_leaving) is None

    def department_room(chosen: Iterable[str]) -> bool:
        taken = _held(session, cost.closure(chosen)) + others_leaving
        return book.admit(queue, full.need, leaving, taken) is None

    # Another queue's pods are spared by the work they would lose alone: reclaim does not
    # weigh priority across queues.
    by_cost = lambda u: (-cost.unit_cost(u), u)  # noqa: E731
    taken = _fewest(cost, others, department_room, by_cost)
    if taken is not None and victims.department_refusal(job, head, taken) is None:
        return taken
    return _fewest(cost, own, own_room, lambda u: _spare_first(session, cost, u))


def _fewest(
    cost: VictimCost,
    candidates: list[str],
    admits: Callable[[Iterable[str]], bool],
    spare_first: Callable[[str], tuple[object, ...]],
) -> list[PodInfo] | None:
    """As kube-scheduler picks victims on a node: every candidate, then spared one by one
    (in ``spare_first`` order) while ``admits`` still holds; their pods, whole groups
    included, or None when even all of them do not make ``admits`` hold."""
    eligible = set(candidates)
    units = [uid for uid in candidates if cost.admissible(uid, eligible)]
    if not units or not admits(units):
        return None
    chosen = set(units)
    for uid in sorted(units, key=spare_first):
        rest = chosen - {uid}
        if rest and admits(sorted(rest)):
            chosen = rest
    pods = cost.cluster.pods
    return [pods[uid] for uid in cost.closure(sorted(chosen))]


def _siblings_terminating(session: Session, queue: str) -> list[str]:
    """The terminating pods of the other queues of ``queue``'s department, when that
    department sets a limit (they hold their place in it until their deletion is seen)."""
    book = session.book
    dept = book.department_limit(queue)
    if dept is None:
        return []
    placements = session.cluster.placements
    return [
        uid
        for other, uids in book.queue_pods.items()
        if other != queue and book.queue_limits(other).parent == dept.name
        for uid in uids
        if placements[uid].terminating
    ]


def _held(session: Session, uids: Iterable[str]) -> np.ndarray:
    """What the pods ``uids`` hold in the queue book, together -- a terminating victim's
    remainder with what it holds beyond it against the caps (``QueueBook.leaving``)."""
    entries, leaving = session.book.entries, session.book.leaving
    total = None
    for uid in uids:
        vec = entries[uid].vec
        beyond = leaving.get(uid)
        if beyond is not None:
            vec = vec + beyond[1]
        total = vec.copy() if total is None else total + vec
    return total if total is not None else np.zeros_like(session.book.capacity)


def _spare_first(session: Session, cost: VictimCost, uid: str) -> tuple[float, float, str]:
    """Which candidates to spare first: the highest priority, then the most work an
    eviction would lose (its whole group's when it breaks one), then by uid."""
    pod = session.cluster.pods[uid]
    return (-float(pod.priority), -cost.unit_cost(uid), uid)
