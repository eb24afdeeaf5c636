"""Preemption: who may be evicted for whom, and when a search is worth running.

A :class:`VictimPolicy` decides which running pods a job's pod may evict and how the eviction
is labelled; :func:`~fairgpu.engine.preemption.find_preemption` then searches for the
smallest victim set on the best node. Two policies:

:class:`FairVictims`
    reclaim from queues above the preemptor's (:mod:`~fairgpu.engine.actions.reclaim`, at most
    :data:`MAX_RECLAIM_QUEUES` queues, those furthest above first; victims ran at least
    ``reclaimMinRuntimeSeconds`` and sit on no GPU that changed tenant within
    ``reclaimCooldownSeconds``), then the pods of other queues that could run at once on
    nodes the preemptor may not use (:mod:`~fairgpu.engine.actions.relocate`), then
    strictly lower priority inside the preemptor's own queue, then all pools together.
    Inside a queue, users are treated as queues are between them: a pod may take another
    user's lower-priority pods only while its own user stays at or below its fair share of
    what the queue holds (weighted max-min over the queue's users, capped by demand), a
    gang member judged with every member its gang still needs, as in reclaim; its own
    user's lower-priority pods it may always take, as kube-scheduler would. Victims are
    chosen by the work they lose, a pod group as one victim
    (:mod:`~fairgpu.engine.victim_cost`), and a pod alone asking GPUs preempts only while
    waiting for declared run times to free room would cost more than the kill loses.
:class:`KubeDefaultVictims`
    kube-scheduler's priority preemption: any pod of strictly lower priority.

Whatever the policy, :func:`eligible_victim` must hold for every victim.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fairgpu.cluster.state import Placement
from fairgpu.engine.actions import relocate
from fairgpu.engine.actions.order import Lanes
from fairgpu.engine.actions.reclaim import (
    below_share,
    may_reclaim_from,
    note_reclaims,
    reclaim_key,
    reclaim_refusal,
    refused_whatever_the_victims,
    reverses,
    share_key,
)
from fairgpu.engine.actions.reclaim import held as held_share
from fairgpu.engine.actions.reserve import protected_until
from fairgpu.engine.jobs import Job
from fairgpu.engine.preemption import PreemptionPlan, find_preemption, victim_eligible
from fairgpu.engine.session import EngineState, Session
from fairgpu.engine.victim_cost import (
    VictimCost,
    declared_ends,
    hours,
    lost_work,
    running_gangs,
    time_to_fit,
    waiting_is_cheaper,
)
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.fairshare import weighted_max_min

# Reclaim looks for victims in at most this many queues (those furthest above the preemptor).
MAX_RECLAIM_QUEUES = 4
# Preemption searches per cycle (each scans running pods); the rest wait for the next cycle.
MAX_PREEMPTION_ATTEMPTS = 32


def eligible_victim(session: Session, uid: str, min_runtime: float) -> bool:
    """May the pod ``uid`` be a victim at all? Only if it was not placed in this cycle and
    :func:`~fairgpu.engine.preemption.victim_eligible` holds (bound or held -- one of the
    session's ``displaceable`` on a node where none was displaced in this cycle --, not
    terminating, run at least ``min_runtime`` seconds)."""
    pl = session.cluster.placements.get(uid)
    return uid not in session.placed_now and victim_eligible(
        pl, session.now, min_runtime, displaceable(session, uid, pl)
    )


def displaceable(session: Session, uid: str, placement: Placement | None) -> bool:
    """Is ``uid`` a held preemptor whose place may be taken now: one of the session's
    ``displaceable``, on a node where none was displaced yet in this cycle?"""
    return (
        uid in session.displaceable
        and placement is not None
        and placement.node not in session.displaced_nodes
    )


def held_first(session: Session, sets: list[list[str]]) -> list[list[str]]:
    """``sets`` with, in front, the displaceable pods among them: taking a held preemptor's
    place loses no work, so it is tried before any plan evicting running pods (as
    kube-scheduler ignores the nominations of lower priority when it places a pod)."""
    held = session.displaceable
    if not held:
        return sets
    first = sorted({u for pool in sets for u in pool if u in held})  # eligible ones only
    return [first, *sets] if first else sets


@dataclass(slots=True)
class _Pools:
    """A search's candidate pools (:meth:`FairVictims.candidate_sets`), the refusal met
    while finding them, the candidates held back by time and, per queue some of whose pods
    they are, what holds them (a reason's text), and the queues whose pods the pools hold,
    sorted."""

    held: HeldBack
    sets: list[list[str]] = field(default_factory=list)
    refusal: str | None = None
    held_back: list[str] = field(default_factory=list)
    queues: tuple[str, ...] = ()
    named: list[tuple[str, list[str]]] = field(default_factory=list)
    # Relocation (:mod:`~fairgpu.engine.actions.relocate`): the queues whose pools hold pods
    # that may run elsewhere, those pods, and the nodes where they would go.
    relocating: frozenset[str] = frozenset()
    movable: set[str] = field(default_factory=set)
    where: np.ndarray | None = None
    # The preemptor's queue is below its share and no other queue holds more than its own.
    nobody_above: bool = False


#: The refusal of a queue below its share when no other queue is above its own: what it
#: lacks stands idle, drains for a reservation or is in pieces no pending pod fits.
NOBODY_ABOVE = "reclaim refused: no other queue holds more than its fair share"


@dataclass(slots=True)
class HeldCauses:
    """Why a queue's pods are held back from reclaim: pods per rule ("young",
    "cooling", "reversal", "protected"), and the first end of a
    protection among them (when the first protected pod may become a victim; a cycle is
    asked for then)."""

    counts: dict[str, int] = field(default_factory=dict)
    protected_until: float = math.inf

    def add(self, cause: str, until: float = math.inf) -> None:
        """One more pod held back by ``cause`` (a protection: until ``until``)."""
        self.counts[cause] = self.counts.get(cause, 0) + 1
        self.protected_until = min(self.protected_until, until)

    def __bool__(self) -> bool:
        return bool(self.counts)


# A queue's reclaimable pods, the first moment a held one frees, the held ones (uid ->
# when), and why they are held (FairVictims._reclaimable_kept).
_Kept = tuple[list[str], float, dict[str, float], HeldCauses]


@dataclass(slots=True)
class _Freeable:
    """What every search of one ask may evict in one cycle state (:meth:`FairVictims.freeable`):
    the pods, those a time rule holds back, and the rule that refused a queue's pods ("")."""

    key: tuple[object, ...]
    pods: set[str]
    held: HeldBack
    refusal: str


@dataclass(slots=True)
class HeldBack:
    """The candidates a time rule alone keeps from being victims now -- too young
    (``minRuntimeSeconds``, ``reclaimMinRuntimeSeconds``), on GPUs that changed tenant within
    the cooldown, on a node where a reclaim would reverse a recent one, started from a
    reservation and still protected. Between two events only these rules change who may be
    a victim.

    ``at``: the moment a cycle is asked for -- the first at which one of them becomes a
    victim by the rules that ask for cycles (the reclaim minimum run, the cooldown, the
    protection; ``inf``: none). ``pods``: each such pod's uid and the moment those rules
    release it -- no later than it becomes a victim (one also held by another rule may still
    be held then). Pods no cycle is ever asked for (a younger pod of the preemptor's own
    queue, one held only behind a recent reclaim) are not listed: no moment brings them."""

    at: float = math.inf
    pods: dict[str, float] = field(default_factory=dict)

    def add(self, uid: str, until: float = math.inf) -> None:
        """``uid`` is held back until ``until``; a cycle is asked for then."""
        self.pods[uid] = until
        self.at = min(self.at, until)


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

    def freeable(self, job: Job, pod: PodInfo) -> set[str]:
        """Every pod a search for ``pod`` could evict now (a superset of any plan's)."""

    def held_back(self, job: Job, pod: PodInfo) -> HeldBack:
        """The candidates of a search for ``pod`` that a time rule holds back, and when they
        become victims (for the pods of :meth:`freeable`). Asks for no cycle."""

    def placed(self, pod: PodInfo) -> None:
        """``pod`` was placed in this cycle (its statement committed)."""

    def refusal(self, pod: PodInfo) -> str:
        """The rule that refused the last search for ``pod``, or a queue's pods when
        :meth:`freeable` was last asked for it ("" if none did)."""

    def quota_candidates(self, job: Job, pod: PodInfo) -> list[str]:
        """The pods of ``job``'s own queue that ``pod`` may preempt to make room in the
        queue's quota (:mod:`~fairgpu.engine.actions.quota_room`); [] where queues have no
        quotas."""


def _members_needed(job: Job) -> int:
    """How many members the preemptor's end state holds in a committed-state search: 1 for
    a pod alone, the gang's need for a member (:meth:`FairVictims._end_vector`), so what
    the reclaim and user-share rules answer is kept per need."""
    return job.need if job.group is not None else 1


def take_search(session: Session) -> bool:
    """Count one preemption search against the cycle's budget; False when it is spent.

    Every search counts -- a pod alone's and each gang member's alike --, so a cycle runs
    at most :data:`MAX_PREEMPTION_ATTEMPTS` of them however large the backlog; work that
    did not get one waits for the next cycle. Searches the failed-search memo answers
    (:attr:`~fairgpu.engine.memo.CycleMemo.preempt_front`) are not run and do not count.
    """
    memo = session.memo
    if memo.preempt_attempts >= MAX_PREEMPTION_ATTEMPTS:
        return False
    memo.preempt_attempts += 1
    return True


class FairVictims:
    """Reclaim between queues and lower priority inside a queue (see the module docstring).

    ``queues``: the cycle's pending jobs per queue and user; their demand counts in the users'
    shares inside a queue (without it only what users hold counts).
    """

    def __init__(
        self, session: Session, deserved: dict[str, float], queues: Lanes | None = None
    ) -> None:
        self.s = session
        self.deserved = deserved
        self.queues = queues or {}
        self._pending_users: dict[str, dict[str, np.ndarray]] = {}
        self._moves: dict[str, list[tuple[str, int]]] = {}
        self._flows: dict[str, set[tuple[str, str]]] = {}  # (node, victim queue) per reclaim
        self._refusal: dict[str, str] = {}
        self._gangs = running_gangs(session.book, session.resolver, session.cluster)
        self._collateral: frozenset[str] = frozenset()
        self._relocated: frozenset[str] = frozenset()  # of the last plan
        self._freeable: _Freeable | None = None
        self._sets: dict[tuple[object, ...], _Pools] = {}
        self._waits: dict[tuple[object, ...], float] = {}
        self._ends: tuple[tuple[int, int, int], list[tuple[float, int, Placement]]] | None = None
        self._kept: dict[tuple[object, ...], _Kept] = {}
        self._noted = 0  # reclaims committed in this cycle (they change cooldowns)
        cfg = session.tenancy.preemption
        # How long a pod of another queue must have run to be a reclaim victim.
        self._min_run = max(cfg.min_runtime_seconds, cfg.reclaim_min_runtime_seconds)
        self._room: dict[tuple[object, ...], tuple[np.ndarray, set[str]] | None] = {}

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
        """Same queue, same user (users' shares gate priority preemption), same priority,
        and for a gang member the members the gang needs (the reclaim rule judges the end
        state with all of them running: :meth:`_end_vector`)."""
        return (job.tenant.queue, job.tenant.user, pod.priority, _members_needed(job))

    def kind(self, job: Job, victim: PodInfo) -> str:
        """``priority`` inside the preemptor's queue, ``reclaim`` across queues, ``relocate``
        for a pod of the last plan that may run at once on nodes the preemptor may not use
        (:mod:`~fairgpu.engine.actions.relocate`); ``gang-restart`` for a member of the last
        plan that goes only because its group breaks."""
        if victim.uid in self._collateral:
            return "gang-restart"
        if victim.uid in self._relocated:
            return "relocate"
        return "priority" if self._same_queue(job, victim) else "reclaim"

    def _same_queue(self, job: Job, victim: PodInfo) -> bool:
        return self.s.resolver.resolve(victim).queue == job.tenant.queue

    def _tier(self, job: Job) -> Callable[[PodInfo], float]:
        """Victims of the preemptor's own queue rank by priority before cost; other queues'
        by cost alone (:class:`~fairgpu.engine.victim_cost.VictimCost`)."""
        return lambda v: float(v.priority) if self._same_queue(job, v) else -np.inf

    def placed(self, pod: PodInfo) -> None:
        """A committed placement: if it reclaimed, the GPUs its victims freed and those it
        took changed tenant now (the reclaim cooldown)."""
        moved = self._moves.pop(pod.uid, None)
        if moved is None:
            return
        self._noted += 1
        s = self.s
        note_reclaims(s.state, s.resolver.resolve(pod).queue, self._flows.pop(pod.uid), s.now)
        pl = s.cluster.placements.get(pod.uid)
        if pl is not None:
            name = s.cluster.node(pl.node).name
            moved = moved + [(name, d) for d in pl.devices]
        record_tenant_change(s.state, moved, s.now, s.tenancy.preemption.reclaim_cooldown_seconds)

    def freeable(self, job: Job, pod: PodInfo) -> set[str]:
        """The pods of every candidate pool (:meth:`candidate_sets`), computed once for the
        same preemptor queue, user and ask while the cluster's load does not change. Asks
        for no cycle (see :meth:`held_back`)."""
        return self._freeable_entry(job, pod).pods

    def held_back(self, job: Job, pod: PodInfo) -> HeldBack:
        """See :meth:`VictimPolicy.held_back`."""
        return self._freeable_entry(job, pod).held

    def _freeable_entry(self, job: Job, pod: PodInfo) -> _Freeable:
        t, req = job.tenant, tuple(sorted(pod.requests.items()))
        need = _members_needed(job)
        key = (t.queue, t.user, pod.priority, pod.gpu, req, need, self.s.cluster.load_version)
        got = self._freeable
        if got is None or got.key != key:
            pools = self._entry(job, pod)
            kept, why = self._not_refused(job, pod, pools)
            got = _Freeable(key, {uid for _, pool in kept for uid in pool}, pools.held, why)
            self._freeable = got
        if got.refusal:
            self._say_first(pod, got.refusal)
        return got

    def _say_first(self, pod: PodInfo, refusal: str) -> None:
        """Make ``refusal`` -- why other queues give nothing back -- the first rule named
        for ``pod``, before what the candidate search said (the within-queue rule, pods held
        back), which stays after it."""
        said = self._refusal.get(pod.uid)
        if not said:
            self._refusal[pod.uid] = refusal
        elif refusal not in said:
            self._refusal[pod.uid] = f"{refusal}; {said}"

    def _not_refused(
        self, job: Job, pod: PodInfo, pools: _Pools
    ) -> tuple[list[tuple[str, list[str]]], str]:
        """The pools of ``named`` whose queue a search for ``pod`` may take victims from, and
        the rule that refuses the first one it may not (""). A queue the reclaim rule
        refuses whatever the victims, for the preemptor's end state (:meth:`_end_vector`),
        gives no victim to any search of this ask in this cycle state -- and a gang's
        members landing one by one bring only more refusals (its queue holds more, its
        victims' queues less) --, so its pods are not freeable."""
        queue = job.tenant.queue
        vec = self._end_vector(job, pod)
        band = self.s.tenancy.preemption.reclaim_tolerance_band
        kept: list[tuple[str, list[str]]] = []
        first = ""
        for other, pool in pools.named:
            why = None
            if other != queue:
                why = refused_whatever_the_victims(
                    self.s.book, queue, vec, other, self.deserved, band, other in pools.relocating
                )
            if why is None:
                kept.append((other, pool))
            elif not first:
                first = self._reclaim_refused(job, pod, why)
        return kept, first

    def moved(self, job: Job, pod: PodInfo, victims: list[PodInfo]) -> frozenset[str]:
        """The ``victims`` a search for ``pod`` would evict as a relocation: they run at once
        on nodes the pod may not use (:mod:`~fairgpu.engine.actions.relocate`)."""
        return _moved(self.s, self._entry(job, pod), victims)

    def refusal(self, pod: PodInfo) -> str:
        """Why the last search for ``pod`` found no plan, or why :meth:`freeable` left a
        queue's pods out for it, when a rule refused ("" if none)."""
        return self._refusal.get(pod.uid, "")

    def plan(
        self, session: Session, job: Job, pod: PodInfo, allowed: np.ndarray | None
    ) -> PreemptionPlan | None:
        """The first candidate pool that yields a plan the reclaim rule accepts."""
        queue = job.tenant.queue
        book = session.book
        vec = self._end_vector(job, pod)
        band = session.tenancy.preemption.reclaim_tolerance_band
        self._moves.pop(pod.uid, None)
        self._collateral = self._relocated = frozenset()
        refused: list[str] = []
        pools = self._entry(job, pod)
        self._retry_for(pools.held)
        sets = pools.sets
        rule = self._refused_whatever(job, vec, band, pools) if sets else None
        if rule is not None:
            self._refusal[pod.uid] = self._reclaim_refused(job, pod, rule)
            return None
        gpus, wait = self._wait_for_room(job, pod, allowed) if sets else (0.0, np.inf)

        def accept(victims: list[PodInfo]) -> bool:
            moved = _moved(session, pools, victims)
            why = reclaim_refusal(book, queue, vec, victims, self.deserved, band, moved)
            if why is not None:
                refused.append(self._reclaim_refused(job, pod, why))
                return False
            loss = lost_work((v.uid for v in victims), session.cluster, session.now)
            if waiting_is_cheaper(loss, gpus, wait):
                lose = f"evicting would lose {hours(loss)} of work, more than that wait costs"
                refused.append(_cheaper_wait(session, lose, wait))
                return False
            return True

        cost = VictimCost(session.cluster, self._gangs, session.now, self._tier(job))
        if np.isfinite(wait):
            cost.max_loss = gpus * wait
        for eligible in held_first(session, sets):
            plan = find_preemption(
                pod, session.cluster, session.scheduler, eligible, allowed, accept, cost=cost
            )
            if plan is not None:
                self._refusal.pop(pod.uid, None)
                self._collateral = plan.collateral
                self._relocated = _moved(session, pools, plan.victims)
                self._note_moves(job, pod, plan)
                return plan
        if cost.pruned:
            lose = "every plan would lose more work than that wait costs"
            refused.append(_cheaper_wait(session, lose, wait))
        if refused:
            self._refusal[pod.uid] = refused[0]
        if pools.held_back:
            # Name what the time rules kept out too: the pods that may free the room, when.
            first = self._refusal.get(pod.uid)
            self._refusal[pod.uid] = "; ".join([*([first] if first else []), *pools.held_back])
        return None

    def _end_vector(self, job: Job, pod: PodInfo) -> np.ndarray:
        """What the preemptor's queue takes with ``pod``'s placement, as the reclaim rule
        judges it: ``pod`` alone, or for a gang member, it and the members the gang still
        needs after those placed in this cycle (:meth:`_end_members`) -- a gang starts whole
        or not at all, so its queue's end state holds all of them (a member that alone would
        keep the queue within its share does not, once its siblings land, on free GPUs or
        its victims' leftovers). Every member of one attempt is so judged against the same
        end state."""
        book = self.s.book
        vec = book.pending_vector(pod)
        for other in self._end_members(job, pod)[1:]:
            vec = vec + book.pending_vector(other)
        return vec

    def _end_members(self, job: Job, pod: PodInfo) -> list[PodInfo]:
        """``pod`` and, for a gang member, the other members its gang still needs after
        those placed in this cycle."""
        if job.group is None:
            return [pod]
        placed_now = self.s.placed_now
        placed = sum(1 for p in job.pods if p.uid in placed_now)
        rest = [p for p in job.pods if p is not pod and p.uid not in placed_now]
        return [pod, *rest[: max(0, job.need - placed - 1)]]

    def _reclaim_refused(self, job: Job, pod: PodInfo, why: str) -> str:
        """A reclaim refusal as a pending reason: the rule, and for a gang member judged
        with its siblings, how many members the move counted. It names no group: memos
        hand the same text to every gang of the same shape (each reason already starts
        with its own group's name)."""
        counted = len(self._end_members(job, pod))
        if counted < 2:
            return f"reclaim refused: {why}"
        return f"reclaim refused: {why}, counting the {counted} members its pod group still needs"

    def _refused_whatever(
        self, job: Job, vec: np.ndarray, band: float, pools: _Pools
    ) -> str | None:
        """The reclaim rule that refuses every plan, known before any search: all the
        pools' pods belong to other queues (``pools.queues``), and for each of them the rule
        refuses the move whatever the victims
        (:func:`~fairgpu.engine.actions.reclaim.refused_whatever_the_victims`; for a queue
        whose pods would run elsewhere, the relocation rule). Named by the first queue's
        reason, as :func:`~fairgpu.engine.actions.reclaim.reclaim_refusal` names a plan's
        first victim queue's. None when some plan may pass."""
        queue, queues = job.tenant.queue, pools.queues
        if not queues or queue in queues:
            return None
        book = self.s.book
        first: str | None = None
        for other in queues:
            moving = other in pools.relocating
            why = refused_whatever_the_victims(book, queue, vec, other, self.deserved, band, moving)
            if why is None:
                return None
            first = first or why
        return first

    def _wait_for_room(
        self, job: Job, pod: PodInfo, allowed: np.ndarray | None
    ) -> tuple[float, float]:
        """(GPUs, seconds) of waiting that a kill saves a pod alone asking GPUs: its GPUs, and
        the time until declared run times free room for it on a node it may use (``inf``:
        unknown). A kill that loses at least their product is refused: waiting is cheaper
        (:func:`~fairgpu.engine.victim_cost.waiting_is_cheaper`). A member of a gang is not
        judged (``inf``): the gang starts only when all its members fit, which one member
        cannot tell. (Judging it by the time until every member its gang still needs fits
        was measured on ``benchmarks/fairness``: less work lost on the demo, but the flood
        mix's training gangs then waited for the flood's short pods, whose room the flood
        took first, and fell to 0.58x their share from 0.78x; only for a gang holding a
        reservation, no share gained on the demo either. Judging a pod alone by the time
        until room frees for it and the identical pods waiting behind it in its lane -- one
        eviction moves the whole run one room earlier -- changed little and not one way:
        demo seeds 0-7 mean useful allocation 72.07% -> 72.26%, lost 1.53% -> 1.38%, mean
        lowest share ratio 0.725 -> 0.713 (seed 1: 0.721 -> 0.646); the flexible mix on
        seed 1 0.427 -> 0.524, its useful allocation 63.5% -> 62.3%.)"""
        s = self.s
        gpus = pod.gpu.total_milli / 1000.0
        if job.group is not None or gpus <= 0:
            return gpus, np.inf
        mask = s.scheduler.static_mask(pod, s.cluster)
        if allowed is not None:
            mask = mask & allowed[: mask.size]
        key = (pod.gpu, mask.tobytes(), s.cluster.load_version, s.cluster.static_version)
        if key not in self._waits:  # once per ask and nodes while the cluster stays
            self._waits[key] = time_to_fit(pod, 1, s.cluster, mask, s.now, self._declared_ends)
        return gpus, self._waits[key]

    def _declared_ends(self) -> list[tuple[float, int, Placement]]:
        """:func:`~fairgpu.engine.victim_cost.declared_ends` of the cluster, once per state
        in a cycle (``now`` is fixed): one walk of the running pods for every mask asked."""
        c = self.s.cluster
        key = (c.load_version, c.static_version, c.size)
        if self._ends is None or self._ends[0] != key:
            self._ends = (key, declared_ends(c, self.s.now))
        return self._ends[1]

    def _note_moves(self, job: Job, pod: PodInfo, plan: PreemptionPlan) -> None:
        """Remember the GPUs a reclaim plan frees, whole groups included (recorded if the
        placement commits)."""
        s = self.s
        moved = [
            (s.cluster.node(s.cluster.placements[v.uid].node).name, d)
            for v in plan.victims
            if not self._same_queue(job, v)
            for d in s.cluster.placements[v.uid].devices
        ]
        if moved:
            self._moves[pod.uid] = moved
            flows = {(self._node_of(v.uid), s.resolver.resolve(v).queue) for v in plan.victims}
            self._flows[pod.uid] = {f for f in flows if f[1] != job.tenant.queue}

    def candidate_sets(self, job: Job, pod: PodInfo) -> list[list[str]]:
        """Victim pools to try in order: each queue above the preemptor's (most above first),
        then its own lower-priority pods, then all together; a cycle is asked for when the
        first candidate a time rule holds back becomes a victim (:class:`HeldBack`)."""
        pools = self._entry(job, pod)
        self._retry_for(pools.held)
        return pools.sets

    def _retry_for(self, held: HeldBack) -> None:
        """Ask for a cycle when the first held-back candidate becomes a victim: then a search
        may find what this one did not."""
        if math.isfinite(held.at):
            self.s.out.retry_no_later_than(held.at)

    def _entry(self, job: Job, pod: PodInfo) -> _Pools:
        """The candidate pools of a search for ``pod``. Shared; once per preemptor tenant,
        ask and permission while the cluster does not change (nor then do shares, run
        times, cooldowns; ``now`` is fixed): a hit names this pod the same refusal."""
        c, t, req = self.s.cluster, job.tenant, tuple(sorted(pod.requests.items()))
        may, versions = self.may_preempt(pod), (c.load_version, c.static_version)
        need = _members_needed(job)  # the user's end state (_lower_priority)
        key = (t.queue, t.user, pod.priority, pod.gpu, req, need, may, versions)
        self._refusal.pop(pod.uid, None)
        got = self._sets.get(key)
        if got is None:
            got = _Pools(held=HeldBack())
            got.sets = self._candidate_sets(job, pod, got)
            got.refusal = self._refusal.get(pod.uid)
            self._sets[key] = got
        elif got.refusal is not None:
            self._refusal[pod.uid] = got.refusal
        return got

    def _candidate_sets(self, job: Job, pod: PodInfo, pools: _Pools) -> list[list[str]]:
        if not self.may_preempt(pod):
            return []
        s = self.s
        queue = job.tenant.queue
        lim = s.book.queue_limits(queue)
        named: list[tuple[str, list[str]]] = []
        if lim.preemption.reclaim:
            others = self._reclaimable_queues(queue)
            named.extend(self._reclaim_sets(job, pod, pools, others))
            named.extend(self._relocation_sets(job, pod, pools, set(others)))
        if lim.preemption.within_queue == "LowerPriority":
            named.append((queue, self._lower_priority(job, pod, pools.held)))
        if pools.nobody_above:
            self._say_first(pod, NOBODY_ABOVE)
        named = [(q, x) for q, x in named if x]
        pools.named = named
        pools.queues = tuple(sorted({q for q, _ in named}))
        sets = [x for _, x in named]
        if len(sets) > 1:
            sets.append(sorted({u for x in sets for u in x}))
        return sets

    def _reclaim_sets(
        self, job: Job, pod: PodInfo, pools: _Pools, others: list[str]
    ) -> list[tuple[str, list[str]]]:
        """Per reclaimable queue (``others``, :meth:`_reclaimable_queues`), its name and its
        pods that ran long enough and whose GPUs are not cooling down; those held back by
        time go to ``pools.held``, and what holds back some of a queue's pods to
        ``pools.held_back`` (for a search that finds no plan; when all are held back, it is
        the refusal)."""
        held = pools.held
        s = self.s
        min_run = self._min_run
        queue = job.tenant.queue
        sets: list[tuple[str, list[str]]] = []
        if not others:
            pools.nobody_above = self._no_reclaimable_queue(job, pod)
        for other in others:
            ok, soonest, causes = self._reclaimable_kept(other, queue, min_run, held)
            if len(ok) < len(s.book.queue_pods[other]) and soonest < np.inf:
                # Pods held back only by time (too young to reclaim, or on GPUs cooling
                # down) become victims later: the first such moment.
                held.at = min(held.at, float(soonest))
            sets.append((other, ok))
            if not ok and causes:
                self._refusal.setdefault(
                    pod.uid,
                    f"reclaim refused: every pod of queue {other!r} is held back: "
                    + self._held_back_text(causes, min_run),
                )
            elif causes:
                pools.held_back.append(
                    f"queue {other!r} has pods held back from reclaim: "
                    + self._held_back_text(causes, min_run)
                )
        return sets

    def _relocation_sets(
        self, job: Job, pod: PodInfo, pools: _Pools, skip: set[str]
    ) -> list[tuple[str, list[str]]]:
        """Per queue the preemptor may not reclaim from (not in ``skip``, the reclaimable
        queues) but comes before in reclaim order,
        its pods that the time rules let go and that could run now on nodes the preemptor
        may not use (:mod:`~fairgpu.engine.actions.relocate`); only while the preemptor's
        queue is below its share and such nodes have free GPUs. Those pods go to
        ``pools.movable``, their queues to ``pools.relocating``."""
        s = self.s
        book, deserved, queue = s.book, self.deserved, job.tenant.queue
        if not below_share(book, deserved, queue):
            return []
        room = self._room_elsewhere(queue, pod)
        if room is None:
            return []
        where, flexible = room
        min_run = self._min_run
        mine = share_key(book, deserved, queue)
        found: list[tuple[str, list[str]]] = []
        for other, uids in sorted(self._preemptible_others(queue)):
            if other in skip or flexible.isdisjoint(uids):
                continue
            if not mine < share_key(book, deserved, other):
                # Its pods could make room by moving, but the order rule keeps them.
                self._refusal.setdefault(
                    pod.uid,
                    f"relocation refused: queue {queue!r} does not come before {other!r} "
                    "in reclaim order",
                )
                continue
            ok, soonest, causes = self._reclaimable_kept(other, queue, min_run, pools.held)
            pods = relocate.movable(s, (u for u in ok if u in flexible), where)
            if pods:
                found.append((other, pods))
                continue
            kept = set(ok)
            held = (u for u in uids if u in flexible and u not in kept)
            if causes and relocate.movable(s, held, where):
                # Pods that could run elsewhere, all held back by the time rules: a cycle
                # when the first comes free, and the refusal says what holds them.
                pools.held.at = min(pools.held.at, float(soonest))
                self._refusal.setdefault(
                    pod.uid,
                    f"reclaim refused: every pod of queue {other!r} that could run elsewhere "
                    "is held back: " + self._held_back_text(causes, min_run),
                )
        found = found[:MAX_RECLAIM_QUEUES]
        if found:
            pools.where = where
            pools.relocating = frozenset(q for q, _ in found)
            pools.movable = {u for _, x in found for u in x}
        return found

    def _room_elsewhere(self, queue: str, pod: PodInfo) -> tuple[np.ndarray, set[str]] | None:
        """Where victims of a relocation for ``pod`` of ``queue`` could go
        (:func:`~fairgpu.engine.actions.relocate.elsewhere` less what waiting queues below
        their share may use), and the placed pods on nodes ``pod`` may use that could go
        there (:func:`~fairgpu.engine.actions.relocate.could_go`); None when there is no such
        pod. Kept while the cluster's pods and the reservations stay the same: the many
        preemptors of one shape in a cycle ask alike."""
        s = self.s
        c = s.cluster
        key = (c.load_version, c.static_version, pod.static_key(), queue, *s.state.reservations)
        if key in self._room:
            return self._room[key]
        got = None
        usable = s.scheduler.static_mask(pod, c)
        where = relocate.elsewhere(s, usable)
        if where is not None:
            where = relocate.unwanted(s, where, self._waiting_below_share(queue))
        if where is not None:
            flexible = relocate.could_go(s, where, usable)
            got = (where, flexible) if flexible else None
        self._room[key] = got
        return got

    def _waiting_below_share(self, queue: str) -> list[PodInfo]:
        """The first GPU pod of each user's next job in every other queue below its fair
        share: the work a relocation must not take room from."""
        book, out = self.s.book, []
        for other, users in self.queues.items():
            if other == queue or not below_share(book, self.deserved, other):
                continue
            for jobs in users.values():
                head = next((p for j in jobs[:1] for p in j.pods if p.gpu.count), None)
                if head is not None:
                    out.append(head)
        return out

    def _no_reclaimable_queue(self, job: Job, pod: PodInfo) -> bool:
        """When ``queue`` is below its fair share yet no queue passes the reclaim pre-screen
        (:meth:`_reclaimable_queues`), the refusal names the rule that keeps out the queue
        holding the most above its own share (the first victim queue were it allowed) -- a
        tenant that waits with nothing is otherwise told only what the nodes lack. True
        when other queues hold pods but none more than its share (:data:`NOBODY_ABOVE`,
        said once the candidates are known). Nothing is said while ``queue`` is at or above
        its share (it may not reclaim at all)."""
        book, deserved, queue = self.s.book, self.deserved, job.tenant.queue
        if not below_share(book, deserved, queue):
            return False
        band = self.s.tenancy.preemption.reclaim_tolerance_band
        above = [
            (held_share(book, deserved, other) - deserved.get(other, 0.0), other)
            for other, _ in self._preemptible_others(queue)
        ]
        excess, other = max(above, default=(0.0, ""))
        if excess <= 0.0:
            return bool(above)
        vec = self._end_vector(job, pod)
        why = refused_whatever_the_victims(book, queue, vec, other, deserved, band)
        if why is not None:
            self._refusal.setdefault(pod.uid, self._reclaim_refused(job, pod, why))
        return False

    def _held_back_text(self, causes: HeldCauses, min_run: float) -> str:
        """What holds a queue's pods back from reclaim, rule by rule, with how many pods
        each holds (:meth:`_reclaimable`): the rules differ in what a user can expect --
        a young pod or a cooling GPU comes free within minutes, a protected run at its
        declared end."""
        s = self.s
        cfg = s.tenancy.preemption
        setting = (
            "minRuntimeSeconds"
            if cfg.min_runtime_seconds > cfg.reclaim_min_runtime_seconds
            else "reclaimMinRuntimeSeconds"
        )
        cooldown = f"{cfg.reclaim_cooldown_seconds:g}"
        texts = {
            "young": f"ran less than {setting} ({min_run:g})",
            "cooling": f"on GPUs that changed tenant within reclaimCooldownSeconds ({cooldown})",
            "reversal": "on a node where it would undo a reclaim made within "
            f"reclaimCooldownSeconds ({cooldown})",
            "protected": "protected after starting from a reservation (or again after a teardown)",
        }
        parts = [f"{causes.counts[c]} {text}" for c, text in texts.items() if c in causes.counts]
        n = causes.counts.get("protected", 0)
        if n:  # the last part
            parts[-1] += f", {'' if n == 1 else 'the first '}until "
            parts[-1] += s.time_label(causes.protected_until)
        return ", ".join(parts)

    def _reclaimable_kept(
        self, other: str, queue: str, min_run: float, held: HeldBack
    ) -> tuple[list[str], float, HeldCauses]:
        """:meth:`_reclaimable` of ``other``'s pods, computed again only when what it reads
        may have changed since the last time in this cycle (``now`` is fixed): ``other``'s
        pods (the book counts their changes; a pod placed or evicted in this cycle is one),
        a committed reclaim (cooldowns, reversals -- a GPU shared with a victim changes
        tenant too), a displaced held pod. Between, a cycle places pods of other queues,
        which it does not read. The pods it holds back go to ``held`` either way."""
        s = self.s
        key = (
            other,
            queue,
            min_run,
            s.book.queue_changes.get(other, 0),
            self._noted,
            len(s.displaced_nodes),
        )
        got = self._kept.get(key)
        if got is None:
            later: dict[str, float] = {}
            causes = HeldCauses()
            pool = s.book.queue_pods[other]
            ok, soonest = self._reclaimable(pool, other, queue, min_run, later, causes)
            got = self._kept[key] = (ok, soonest, later, causes)
        held.pods.update(got[2])
        return got[0], got[1], got[3]

    def _reclaimable(
        self,
        pool: Iterable[str],
        other: str,
        queue: str,
        min_run: float,
        later: dict[str, float],
        causes: HeldCauses,
    ) -> tuple[list[str], float]:
        """The pods of ``pool`` (queue ``other``) that ``queue`` may reclaim, sorted: eligible
        victims (:func:`eligible_victim`) not on cooling GPUs, whose reclaim would not reverse
        one ``other`` made from ``queue`` there and not protected by a reservation they
        started from; and the first later moment at which a bound pod of ``pool`` has run
        ``min_run`` and its GPUs have cooled down, or a protection ends (``inf``: none). The
        pods only those time rules keep out go to ``later`` (uid -> when), and each pod those
        rules keep out is counted in ``causes`` under the first rule that holds it. One pass
        with the cycle's constants bound once; each rule is asked only while the earlier ones
        hold, as they have effects (forgotten entries)."""
        s = self.s
        cfg = s.tenancy.preemption
        state, now, cooldown = s.state, s.now, cfg.reclaim_cooldown_seconds
        cluster = s.cluster
        placements, placed_now = cluster.placements, s.placed_now
        changed = self._changed_by_slot()
        hot = self._hot_gpus(changed)
        hot_nodes = {node for node, _ in hot}
        recent, expired = self._reversals(other, queue) if state.reclaimed else (set(), {})
        ok: list[str] = []
        soonest = np.inf
        for u in pool:
            if u in placed_now:
                continue
            pl = placements.get(u)
            if pl is None or pl.terminating:
                continue
            if not (pl.bound or displaceable(s, u, pl)):
                continue
            when = pl.started + min_run
            devices = changed.get(pl.node)
            if devices is not None:
                cooled = max((devices.get(d, -np.inf) for d in pl.devices), default=-np.inf)
                when = max(when, cooled + cooldown)
            if now < when < soonest:
                soonest = when
            # victim_eligible, inlined: this loop runs over every pod of the queue.
            if now - pl.started < min_run:
                later[u] = when
                causes.add("young")
                continue
            if pl.node in hot_nodes and any((pl.node, d) in hot for d in pl.devices):
                later[u] = when
                causes.add("cooling")
                continue
            if pl.node in recent:  # no cycle is asked for when a reversal window ends
                causes.add("reversal")
                continue
            if pl.node in expired:  # what reverses() forgets when a pod there asks
                reverses(state, expired.pop(pl.node), other, queue, now, cfg)
            until = protected_until(s, u) if state.protected else None
            if until is not None:
                later[u] = until
                soonest = min(soonest, until)
                causes.add("protected", until)
                continue
            ok.append(u)
        ok.sort()
        return ok, soonest

    def _reversals(self, victim: str, queue: str) -> tuple[set[int], dict[int, str]]:
        """Node slots where ``queue`` reclaiming pods of ``victim`` would reverse a reclaim
        ``victim`` made from ``queue`` within the cooldown (:func:`reverses`), and those
        (to node names) where such a reclaim is recorded but expired -- one pass over the
        recorded reclaims instead of one lookup per pod; the expired entry is forgotten, as
        :func:`reverses` does, when a pod on its node reaches that rule."""
        s = self.s
        index, now = s.cluster.node_index, s.now
        cooldown = s.tenancy.preemption.reclaim_cooldown_seconds
        recent: set[int] = set()
        expired: dict[int, str] = {}
        for (node, by, of), when in s.state.reclaimed.items():
            slot = index.get(node) if by == victim and of == queue else None
            if slot is None:
                continue
            if now - when <= cooldown:
                recent.add(slot)
            else:
                expired[slot] = node
        return recent, expired

    def _changed_by_slot(self) -> dict[int, dict[int, float]]:
        """When each GPU last changed tenant (:attr:`EngineState.tenant_changed`), by node slot
        and device: a pod's GPUs are looked up by its slot, without its node's name, and a
        pod on a node where none changed is not looked up at all."""
        index = self.s.cluster.node_index
        out: dict[int, dict[int, float]] = {}
        for (name, device), when in self.s.state.tenant_changed.items():
            slot = index.get(name)
            if slot is not None:
                out.setdefault(slot, {})[device] = when
        return out

    def _hot_gpus(self, changed: dict[int, dict[int, float]]) -> set[tuple[int, int]]:
        """(node slot, device) of every GPU that changed tenant within the cooldown (a pod on
        one is held back from reclaim), from :meth:`_changed_by_slot`, once per pass."""
        now, cooldown = self.s.now, self.s.tenancy.preemption.reclaim_cooldown_seconds
        return {
            (slot, d)
            for slot, devices in changed.items()
            for d, when in devices.items()
            if now - when < cooldown
        }

    def _node_of(self, uid: str) -> str:
        return self.s.cluster.node(self.s.cluster.placements[uid].node).name

    def _preemptible_others(self, queue: str) -> list[tuple[str, set[str]]]:
        """The other queues holding pods that may be preempted, with those pods' uids."""
        book = self.s.book
        return [
            (other, uids)
            for other, uids in book.queue_pods.items()
            if other != queue and uids and book.queue_limits(other).preemption.preemptible
        ]

    def _reclaimable_queues(self, queue: str) -> list[str]:
        """The queues ``queue`` may reclaim from (the pre-screen,
        :func:`~fairgpu.engine.actions.reclaim.may_reclaim_from`), those furthest above
        first, at most :data:`MAX_RECLAIM_QUEUES`."""
        book = self.s.book
        band = self.s.tenancy.preemption.reclaim_tolerance_band
        above = [
            (reclaim_key(book, other), other)
            for other, _ in self._preemptible_others(queue)
            if may_reclaim_from(book, self.deserved, queue, other, band)
        ]
        return [other for _, other in sorted(above, reverse=True)[:MAX_RECLAIM_QUEUES]]

    def quota_candidates(self, job: Job, pod: PodInfo) -> list[str]:
        """:meth:`_lower_priority`'s pods, when ``pod`` may preempt and its queue preempts
        inside itself (``withinQueue: LowerPriority``)."""
        lim = self.s.book.queue_limits(job.tenant.queue)
        if lim.preemption.within_queue != "LowerPriority" or not self.may_preempt(pod):
            return []
        return self._lower_priority(job, pod, HeldBack())

    def _lower_priority(self, job: Job, pod: PodInfo, held: HeldBack) -> list[str]:
        """The queue's pods of strictly lower priority that ran ``minRuntimeSeconds``; other
        users' pods only while the preemptor's user stays within its share of the queue.
        Those protected go to ``held``."""
        s = self.s
        queue, user = job.tenant.queue, job.tenant.user
        min_run = s.tenancy.preemption.min_runtime_seconds
        others_ok: bool | None = None
        own = []
        for uid in s.book.queue_pods.get(queue, ()):
            p = s.cluster.pods.get(uid)
            # No cycle is asked for when a younger one comes of age: it is not held back.
            if p is None or p.priority >= pod.priority or not eligible_victim(s, uid, min_run):
                continue
            until = protected_until(s, uid)
            if until is not None:
                held.add(uid, until)
                continue
            entry = s.book.entries.get(uid)
            if entry is not None and entry.tenant.user != user:
                if others_ok is None:
                    others_ok = self._user_within_share(queue, user, self._end_vector(job, pod))
                if not others_ok:
                    continue
            own.append(uid)
        if others_ok is False:
            self._refusal.setdefault(
                pod.uid,
                f"priority preemption refused: user {user!r} would be above its share of "
                f"queue {queue!r}, so it may not preempt other users' pods",
            )
        return sorted(own)

    def _user_within_share(self, queue: str, user: str, ask: np.ndarray) -> bool:
        """Would ``user`` hold at most its fair share of what ``queue`` holds with ``ask``
        added (the preemptor's end state, :meth:`_end_vector`: a gang's remaining members
        with it)? Shares: weighted max-min over the queue's users, each capped by its demand
        (what it holds plus what it had pending when the cycle began)."""
        book = self.s.book
        pending = self._user_pending(queue)
        demand: dict[str, float] = {}
        for (q, u), used in book.user_usage.items():
            if q == queue:
                demand[u] = book.dominant(used + pending.get(u, 0.0))
        for u, vec in pending.items():
            demand.setdefault(u, book.dominant(vec))
        mine = book.user_usage.get((queue, user))
        after = book.dominant(ask if mine is None else mine + ask)
        demand[user] = max(demand.get(user, 0.0), after)
        weights = {u: book.user_weight(queue, u) for u in demand}
        shares = weighted_max_min(book.dominant(book.used(queue)), demand, weights)
        return after <= shares.get(user, 0.0) + 1e-9

    def _user_pending(self, queue: str) -> dict[str, np.ndarray]:
        got = self._pending_users.get(queue)
        if got is None:
            book = self.s.book
            got = {}
            for u, jobs in self.queues.get(queue, {}).items():
                vec = np.zeros_like(book.used(queue))
                for j in jobs:
                    for p in j.pods:
                        vec += book.pending_vector(p)
                got[u] = vec
            self._pending_users[queue] = got
        return got


def _moved(session: Session, pools: _Pools, victims: list[PodInfo]) -> frozenset[str]:
    """The ``victims`` that run elsewhere at once (:mod:`~fairgpu.engine.actions.relocate`):
    those of the relocation pools, if they all fit there together (else none: the plan is
    judged as a plain reclaim)."""
    moving = [v for v in victims if v.uid in pools.movable]
    if not moving or pools.where is None:
        return frozenset()
    if not relocate.fits_elsewhere(session, moving, pools.where):
        return frozenset()
    return frozenset(v.uid for v in moving)


def _cheaper_wait(session: Session, loss: str, wait: float) -> str:
    """The refusal of a kill that loses more than waiting ``wait`` seconds costs (``loss``
    says what the kill would lose, compared with that wait). The time is absolute (as in a
    reservation's note): the room is expected at the same moment from one cycle to the
    next, so the reason of a pod that keeps waiting for it stays the same and is not
    reported again every cycle (thousands of waiting pods share it)."""
    until = session.time_label(session.now + wait)
    return f"waiting is cheaper: declared run times free room by {until}, and {loss}"


def record_tenant_change(
    state: EngineState, gpus: list[tuple[str, int]], now: float, cooldown: float
) -> None:
    """Record that ``gpus`` (node name, device) changed tenant at ``now``; forget entries
    whose cooldown has passed, so the record stays as small as the recent reclaims."""
    changed = state.tenant_changed
    for key in [k for k, t in changed.items() if now - t >= cooldown]:
        del changed[key]
    for key in gpus:
        changed[key] = now
