"""Allocate: place jobs in queue order, each through one statement -- a pod alone is a gang
of one.

For every member of a job: check its namespace caps, schedule it (restricted by other jobs'
reservations), and if it does not fit, ask the victim policy for a preemption plan, evict the
victims tentatively and schedule it again on the plan's node. When at least ``need`` members
are placed the statement commits (evictions, then binds); otherwise it is discarded and the
job's pods are reported pending. A gang whose members must or should share a topology domain
is attempted once per domain, each attempt its own statement
(:mod:`~fairgpu.engine.actions.gang_domains`).

Two things apply only to a job of one pod, because a gang's attempt is rolled back as a whole
and what failed inside it says nothing about the cycle's state afterwards: the failed-ask
memo (:class:`~fairgpu.engine.memo.Front`) and the memo of failed preemption searches
(:attr:`~fairgpu.engine.memo.CycleMemo.preempt_front`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine import memo as memo_keys
from fairgpu.engine.actions.admit import Admission, QuotaFull
from fairgpu.engine.actions.backfill import allowed, backfill_key
from fairgpu.engine.actions.gang_domains import (
    OUTSIDE_DOMAIN,
    attempts,
    confinement,
    every_domain,
    no_domain,
)
from fairgpu.engine.actions.gang_screen import bound_over_time, members_bound
from fairgpu.engine.actions.order import QueueOrder
from fairgpu.engine.actions.preempt import VictimPolicy, take_search
from fairgpu.engine.actions.quota_room import quota_room
from fairgpu.engine.actions.reserve import (
    HELD_FOR_OTHERS,
    note_blocked,
    note_placed,
    note_torn_down,
)
from fairgpu.engine.actions.settle import settle_followers
from fairgpu.engine.decisions import Unschedulable
from fairgpu.engine.framework import Code
from fairgpu.engine.jobs import Job
from fairgpu.engine.session import Session
from fairgpu.engine.statement import Statement
from fairgpu.model.pod import PodInfo


@dataclass(frozen=True, slots=True)
class Rules:
    """What differs between orderings once a job is chosen: admission, victims, and whether
    a blocked large job may get a starvation reservation."""

    admission: Admission
    victims: VictimPolicy
    reserve: bool


@dataclass(slots=True)
class Member:
    """One member's attempt. ``final``: no change can help (unresolvable); ``capped``:
    refused by namespace caps (or, past the members its job needs, by its queue's quota or
    limit or its department's limit); ``stop``: a preemption was planned but the pod still did not
    fit, so the job stops here."""

    placed: bool
    reason: str = ""
    final: bool = False
    capped: bool = False
    stop: bool = False


def allocate(session: Session, order: QueueOrder, rules: Rules) -> None:
    """Try every job ``order`` hands out, once.

    A cycle costs in proportion to the distinct asks it tries, not to the backlog: when a
    pod alone fails, the pods the order would hand out next that ask for exactly the same
    (:func:`~fairgpu.engine.memo.same_outcome`, and the same nodes left by reservations)
    are settled with its outcome at once, without another attempt -- the decision each
    would have got by itself (see :func:`~fairgpu.engine.actions.settle.settle_followers`).
    """
    out = session.out
    while (job := order.pop()) is not None:
        n_before = len(out.unschedulable)
        changed = try_job(session, job, rules)
        order.update(changed)
        if not changed and len(out.unschedulable) == n_before + 1:
            settle_followers(session, order, job, rules.admission, rules.reserve)


def try_job(session: Session, job: Job, rules: Rules) -> set[str]:
    """Place ``job`` (or explain why not); returns the queues whose usage changed."""
    admission = rules.admission
    if not admission.valid(session, job):
        return set()
    out = session.out
    fast = admission.outcome_key(session, job)
    if fast is not None:
        known = session.memo.outcome.get(fast)
        if known is not None:
            head = job.pods[0]
            out.unschedulable.append(Unschedulable(head, known[0], known[1]))
            if rules.reserve and head.gpu.count >= session.tenancy.starvation.min_gpus:
                note_blocked(session, job)
            return set()
    n_before = len(out.unschedulable)
    verdict = admission.admit(session, job)
    if isinstance(verdict, QuotaFull):
        changed = _within_quota(session, job, rules, verdict)
    else:
        changed = place_job(session, job, rules) if verdict else set()
    if fast is not None and not changed and len(out.unschedulable) > n_before:
        last = out.unschedulable[-1]
        session.memo.outcome[fast] = (last.reason, last.resolvable)
    return changed


def _within_quota(session: Session, job: Job, rules: Rules, full: QuotaFull) -> set[str]:
    """A job its queue's quota refuses now: placed in the place of lower-priority pods of
    its queue when evicting some makes room in the quota
    (:mod:`~fairgpu.engine.actions.quota_room`), else reported with the quota's reason."""
    room = quota_room(session, job, rules.victims, full)
    if room is not None:
        head = job.pods[0]
        rules.victims.note_room(job, head, room)  # recorded as reclaims if it lands
        n_before = len(session.out.unschedulable)
        changed = place_job(session, job, rules, room)
        if not changed:
            rules.victims.note_room(job, head, [])
        if changed or len(session.out.unschedulable) > n_before:
            return changed
    refused = rules.victims.refusal(job.pods[0])  # a rule that kept candidates out
    reason = f"{full.reason}; {refused}" if refused else full.reason
    session.out.unschedulable.extend(Unschedulable(p, reason) for p in job.pods)
    return set()


def place_job(session: Session, job: Job, rules: Rules, room: Sequence[PodInfo] = ()) -> set[str]:
    """Place at least ``job.need`` members together, or none; ``room``: pods to evict first,
    whose place in its queue's quota or its department's limit the job takes
    (:mod:`~fairgpu.engine.actions.quota_room`).

    A gang of identical members whose failure shape (:func:`_gang_shape`) already failed
    in this cycle after ``k`` members fails again without an attempt when it needs more
    than ``k``: from the same committed state its members meet the same nodes and the same
    victims (placements in a cycle only take capacity and never become victims), so at
    most ``k`` of them fit, up to tie-breaks among equally scored nodes. A gang that keeps
    failing costs one attempt per shape and cycle, not one per pending gang.
    """
    # The gang memo and screen judge the committed state, which room changes, on every
    # node; a gang confined to a domain is screened per domain instead (gang_domains).
    topology = confinement(session, job)
    gang = None if room or topology is not None else _gang_shape(session, job, rules)
    seen = session.memo.gangs.get(gang) if gang is not None else None
    if seen is None and gang is not None:
        seen = _screen(session, job, rules, gang)
    if seen is not None and job.need > seen[0]:
        _report_failure(session, job, seen[0], [Member(False, seen[1])], rules)
        return set()
    tries: list[np.ndarray | None] = [None]
    if topology is not None and room:
        # The domains' order judges the committed state, which room changes: each domain in
        # turn (anywhere for a gang that only prefers one), never the members split.
        tries = [*every_domain(session, job)] if topology.required else [None]
    elif topology is not None:
        mask = allowed(session, job, job.pods[0])
        tries = attempts(session, job, topology, rules.victims, mask)
    if topology is not None and not tries:
        _report_failure(session, job, 0, [], rules, no_domain(topology, job))
        return set()
    best: tuple[int, list[Member]] | None = None
    for restrict in tries:
        stmt = session.statement()
        placed, results = _attempt(session, job, stmt, rules, room, restrict)
        if placed >= job.need:
            first = next((m.reason for m in results if m.reason), "")
            return _commit(session, job, stmt, first, rules)
        stmt.discard()
        if best is None or placed > best[0]:
            best = (placed, results)
    assert best is not None
    placed, results = best
    _report_failure(session, job, placed, results, rules)
    if gang is not None and not any(m.capped or m.final for m in results):
        first = next((m.reason for m in results if m.reason), "")
        session.memo.gangs[gang] = (placed, first)
    return set()


def _attempt(
    session: Session,
    job: Job,
    stmt: Statement,
    rules: Rules,
    room: Sequence[PodInfo],
    restrict: np.ndarray | None,
) -> tuple[int, list[Member]]:
    """Place ``job``'s members through ``stmt`` (after evicting ``room``), on the nodes
    ``restrict`` leaves (None: all; :mod:`~fairgpu.engine.actions.gang_domains`): how many
    were placed, and the members that were not."""
    for victim in room:
        if session.resolver.resolve(victim).queue == job.tenant.queue:
            reason = f"preempted by {_preemptor(job)} (priority) to make room in its queue's quota"
            stmt.evict(victim, job.pods[0], reason, "priority")
        else:  # another queue of its department, above its share there
            reason = (
                f"preempted by {_preemptor(job)} (reclaim) to make room in its department's limit"
            )
            stmt.evict(victim, job.pods[0], reason, "reclaim")
    placed = 0
    results: list[Member] = []
    for pod in job.pods:
        refused = rules.admission.extra(session, job, pod) if placed >= job.need else None
        if refused:  # admission judged the needed members only
            results.append(Member(False, refused, capped=True))
            continue
        member = place_member(session, job, pod, stmt, rules, restrict)
        if member.placed:
            placed += 1
            continue
        results.append(member)
        if member.stop or (not member.capped and placed < job.need):
            break
    return placed, results


def _screen(
    session: Session, job: Job, rules: Rules, gang: tuple[object, ...]
) -> tuple[int, str] | None:
    """(at most how many members fit, why no more) for a gang of identical members
    (:func:`~fairgpu.engine.actions.gang_screen.members_bound`); None when enough may fit
    to be worth an attempt.

    The bound is computed once per gang shape and cluster state in a cycle: its inputs --
    the member's ask and nodes (the shape), the victim pool (queue, user, priority and ask,
    in the same load), whether the member may preempt -- are then the same."""
    cluster = session.cluster
    head = job.pods[0]
    victims = rules.victims
    may = victims.may_preempt(head)
    key = (gang, cluster.load_version, cluster.static_version, may)
    screens = session.memo.screens
    bound = screens.get(key)
    if bound is None:
        pool = victims.freeable(job, head) if may else set()
        most, short = members_bound(session, head, allowed(session, job, head), pool)
        what = (
            "even with every pod it may preempt evicted"
            if pool
            else "and it may not preempt any pod there"
        )
        refused = victims.refusal(head) if may else ""
        bound = screens[key] = (
            most,
            f"not enough {short or 'room'} on the nodes it may use, {what}"
            + (f"; {refused}" if refused else ""),
        )
    if may:
        _wake_for_held_back(session, job, victims, key, bound[0])
    return None if bound[0] >= job.need else bound


def _wake_for_held_back(
    session: Session, job: Job, victims: VictimPolicy, key: tuple[object, ...], most: int
) -> None:
    """Ask for a cycle when candidates a time rule holds back (too young, cooling GPUs,
    protected) become victims -- at the first moment the gang's screen, counting each as
    evicted from when those rules release it (:class:`HeldBack`), would let it through:
    between events only time rules change who may be a victim, and the screen is an upper
    bound of what fits, so no earlier cycle those rules would ask for can start it. (A gang
    let through now asks for the first such moment, as its searches would.) Kept per
    screen ``key``, as the bound is."""
    table = session.memo.screens_held
    got = table.get(key)
    if got is None:
        held = victims.held_back(job, job.pods[0])
        got = table[key] = (held.at, held.pods, None)
    at, later, bounds = got
    asked = session.out.retry_at
    if not np.isfinite(at) or (asked is not None and asked <= at):
        return  # nothing to ask, or a cycle no later than any it could ask for is asked
    if most >= job.need:
        session.out.retry_no_later_than(at)
        return
    if bounds is None:
        head = job.pods[0]
        pool = victims.freeable(job, head)
        bounds = bound_over_time(session, head, allowed(session, job, head), pool, later)
        table[key] = (at, later, bounds)
    times, most_then = bounds
    enough = np.flatnonzero(most_then >= job.need)
    if enough.size:
        session.out.retry_no_later_than(float(times[enough[0]]))


def _gang_shape(session: Session, job: Job, rules: Rules) -> tuple[object, ...] | None:
    """What a gang's attempt depends on when all its pending members ask the same
    (:func:`~fairgpu.engine.memo.same_ask`): the failed-search memo group of a member
    (victim policy key, :func:`_ask_key` group) and its ask vector. None for a pod alone, a
    gang whose members differ, or members the memo cannot judge."""
    if job.group is None:
        return None
    head = job.pods[0]
    cluster, timed = session.cluster, bool(session.state.reservations)
    # Whether the members ask the same depends only on them and on which of labels and run
    # times matter: computed once per job (a waiting group keeps its job between cycles).
    flags = (bool(cluster.pods_with_affinity), timed)
    same = job.same_ask.get(flags)
    if same is None:
        same = job.same_ask[flags] = all(
            memo_keys.same_ask(head, p, cluster, timed) for p in job.pods[1:]
        )
    if not same:
        return None
    key = _ask_key(session, job, head, allowed(session, job, head))
    if key is None:
        return None
    if flags[0]:  # labels matter: the ask is computed afresh each time
        vector = tuple(key[1].tolist())
    else:  # the ask is the job's own (Job.asked), so is its tuple
        if job.ask_tuple is None:
            job.ask_tuple = tuple(key[1].tolist())
        vector = job.ask_tuple
    return (*rules.victims.memo_key(job, head), *key[0], vector)


def place_member(
    session: Session,
    job: Job,
    pod: PodInfo,
    stmt: Statement,
    rules: Rules,
    restrict: np.ndarray | None = None,
) -> Member:
    """One member: caps, then a plain attempt, then preemption; only on the nodes
    ``restrict`` leaves, when given."""
    caps = session.book.namespace_admit(pod)
    if caps:
        return Member(False, caps, capped=True)
    mask = allowed(session, job, pod)
    if restrict is not None:
        mask = restrict if mask is None else mask[: restrict.size] & restrict
    # Only an attempt in the committed state, on every node the pod may use, says anything
    # about other pods' attempts.
    fresh = restrict is None and not stmt.placed and not stmt.evicted
    key = _ask_key(session, job, pod, mask) if fresh else None
    known = session.memo.front.find(*key) if key is not None else None
    if known is not None:
        reason = known
    else:
        label = HELD_FOR_OTHERS if restrict is None else OUTSIDE_DOMAIN
        result = session.scheduler.schedule(pod, session.cluster, mask, label)
        if result.ok and result.node is not None:
            stmt.assign(pod, result.node, result.devices)
            return Member(True)
        reason = result.reason()
        if result.code in (Code.UNRESOLVABLE, Code.ERROR):
            # An error ends the attempt as in kube-scheduler: no preemption is tried.
            return Member(False, reason, final=True)
        if key is not None:
            top = memo_keys.ceiling(session.scheduler, pod, session.cluster, key[1])
            session.memo.front.add(*key, reason, top)
    return _preempt_member(session, job, pod, stmt, rules, mask, key, reason)


def _ask_key(
    session: Session, job: Job, pod: PodInfo, mask: np.ndarray | None
) -> tuple[tuple[object, ...], np.ndarray] | None:
    """The failed-ask memo key of ``pod`` (:func:`~fairgpu.engine.memo.ask`, plus the
    backfill key while reservations hold nodes), or None when the memo cannot judge it.

    Used only for attempts in the cycle's committed state -- a pod alone, a gang's first
    member --, so what fails for one fails for the next of the same key, whichever job it
    belongs to: a cycle searches once per failure shape, not once per pending gang.
    """
    key = _ask(job, pod, session.cluster)
    if key is None or mask is None:
        return key
    nodes = backfill_key(session, job, pod)
    return None if nodes is None else ((*key[0], nodes), key[1])


def _ask(
    job: Job, pod: PodInfo, cluster: ClusterState
) -> tuple[tuple[object, ...], np.ndarray] | None:
    """:func:`~fairgpu.engine.memo.ask`, kept on the job for its first pod while labels do
    not matter (then it depends on the pod alone; jobs live as long as their pods wait)."""
    if pod is not job.pods[0] or cluster.pods_with_affinity:
        return memo_keys.ask(pod, cluster)
    if job.asked is None:
        job.asked = (memo_keys.ask(pod, cluster),)
    return job.asked[0]


def _preempt_member(
    session: Session,
    job: Job,
    pod: PodInfo,
    stmt: Statement,
    rules: Rules,
    allowed: np.ndarray | None,
    key: tuple[tuple[object, ...], np.ndarray] | None,
    reason: str,
) -> Member:
    """Search victims for ``pod`` unless the policy forbids it, the same search already
    failed in this cycle (answered from the memo, refusal included) or the cycle's search
    budget is spent (:func:`~fairgpu.engine.actions.preempt.take_search`)."""
    victims = rules.victims
    memo = session.memo
    if not victims.may_preempt(pod):
        return Member(False, reason)
    pgroup = None if key is None else (*victims.memo_key(job, pod), *key[0])
    if pgroup is not None and key is not None:
        refused = memo.preempt_front.find(pgroup, key[1])
        if refused is not None:
            return Member(False, f"{reason}; {refused}" if refused else reason)
    if not take_search(session):
        return Member(False, reason)
    placed = _preempt(session, job, pod, stmt, victims, allowed)
    if placed:
        return Member(True)
    refused = victims.refusal(pod) if placed is None else ""
    if refused:
        reason = f"{reason}; {refused}"  # name the rule that refused, not only the fit
    if pgroup is not None and key is not None:
        memo.preempt_front.add(pgroup, key[1], refused)
    # No plan: the job may go on without this member; a plan that did not work: it stops.
    return Member(False, reason, stop=placed is False)


def _preempt(
    session: Session,
    job: Job,
    pod: PodInfo,
    stmt: Statement,
    victims: VictimPolicy,
    allowed: np.ndarray | None,
) -> bool | None:
    """Evict a plan's victims and place ``pod`` on its node: None without a plan, False if
    the pod still does not fit there (the caller discards the statement)."""
    plan = victims.plan(session, job, pod, allowed)
    if plan is None:
        return None
    cluster = session.cluster
    node_name = cluster.node(plan.node).name
    for victim in plan.victims:
        kind = victims.kind(job, victim)
        stmt.evict(victim, pod, _eviction_reason(job, pod, kind, node_name), kind)
    only = np.zeros(cluster.size, dtype=bool)
    only[plan.node] = True
    retry = session.scheduler.schedule(pod, cluster, restrict=only)
    if not retry.ok or retry.node is None:
        return False
    stmt.assign(pod, retry.node, retry.devices)
    return True


def _preemptor(job: Job) -> str:
    return job.pods[0].key if job.group is None else f"pod group {job.key}"


def _eviction_reason(job: Job, pod: PodInfo, kind: str, node_name: str) -> str:
    if job.group is None:
        return f"preempted by {pod.key} ({kind}) on {node_name}"
    return f"preempted by pod group {job.key} ({kind})"


def _commit(session: Session, job: Job, stmt: Statement, first: str, rules: Rules) -> set[str]:
    changed = {job.tenant.queue}
    for e in stmt.evicted:
        changed.add(session.resolver.resolve(e.victim).queue)
    evicted = bool(stmt.evicted)
    placed = {a.pod.uid for a in stmt.placed}
    if evicted and rules.reserve:  # what ran and goes (a displaced held pod ran nothing)
        tore = note_torn_down(session, [e.victim for e in stmt.evicted if e.placement.bound])
        if tore:  # the binds carry it: an engine started afresh learns it from them
            session.tore_down_now.update(dict.fromkeys(placed, tore))
    for a in stmt.placed:
        rules.victims.placed(a.pod)
    note_placed(session, job)  # before the binds are made: they carry its protection
    stmt.commit()
    for pod in job.pods:
        if pod.uid not in placed:
            session.out.unschedulable.append(
                Unschedulable(pod, first or "no room beyond minMember")
            )
    if evicted:
        session.released()
    return changed


def _report_failure(
    session: Session,
    job: Job,
    placed: int,
    results: list[Member],
    rules: Rules,
    why: str = "",
) -> None:
    """Report ``job`` pending: a pod alone with its own reason, a gang's members with
    ``why`` or else how many of them fit together and why no more."""
    out = session.out
    if job.group is None:
        # A pod alone reports its own reason.
        member = results[-1]
        if rules.reserve and not member.final and not member.capped:
            note_blocked(session, job)
        out.unschedulable.append(Unschedulable(job.pods[0], member.reason, not member.final))
        return
    first = next((m.reason for m in results if m.reason), "")
    reason = f"pod group {job.key}: " + (
        why or f"only {placed} of {job.need} needed members fit together ({first or 'no room'})"
    )
    out.unschedulable.extend(Unschedulable(p, reason) for p in job.pods)
    if rules.reserve:
        note_blocked(session, job)
