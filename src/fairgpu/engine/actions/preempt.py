"""Preemption: who may be evicted for whom, and when a search is worth running.

A :class:`VictimPolicy` decides which running pods a job's pod may evict and how the eviction
is labelled; :func:`~fairgpu.engine.preemption.find_preemption` then searches for the
smallest victim set on the best node. Two policies:

:class:`FairVictims`
    reclaim from queues above the preemptor's (:mod:`~fairgpu.engine.actions.reclaim`, at most
    :data:`MAX_RECLAIM_QUEUES` queues, those furthest above first; victims pass the time
    rules of :mod:`~fairgpu.engine.actions.victim_eligibility`), then the pods of other
    queues that could run at once on nodes the preemptor may not use
    (:mod:`~fairgpu.engine.actions.relocate`), then the pods a pool precedence rule lets it
    evict (:mod:`~fairgpu.engine.actions.pool_precedence`), then strictly lower priority
    inside the preemptor's own queue, where users are treated as queues are between them
    (:mod:`~fairgpu.engine.actions.priority_in_queue`), then all pools together -- never the
    pods a precedence rule shields from it. Victims are
    chosen by the work they lose, a pod group as one victim
    (:mod:`~fairgpu.engine.victim_cost`), and a pod alone asking GPUs preempts only while
    waiting for declared run times to free room would cost more than the kill loses
    (:mod:`~fairgpu.engine.actions.room_wait`). This class puts those rules together for a
    search: the candidate pools in order, the end state the reclaim rule judges (a gang
    member with its siblings), and the refusal a pending pod is told.
:class:`KubeDefaultVictims`
    kube-scheduler's priority preemption: any pod of strictly lower priority.

Whatever the policy, :func:`~fairgpu.engine.actions.victim_eligibility.eligible_victim` must
hold for every victim.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fairgpu.engine.actions import relocate
from fairgpu.engine.actions.order import Lanes
from fairgpu.engine.actions.pool_precedence import PoolPrecedences
from fairgpu.engine.actions.priority_in_queue import UsersInQueue
from fairgpu.engine.actions.reclaim import (
    Before,
    band_for,
    below_share,
    may_reclaim_from,
    note_reclaims,
    reclaim_key,
    reclaim_refusal,
    refused_whatever_the_victims,
)
from fairgpu.engine.actions.reclaim import held as held_share
from fairgpu.engine.actions.room_wait import RoomWait, cheaper_wait
from fairgpu.engine.actions.victim_eligibility import (
    HeldBack,
    ReclaimEligibility,
    held_first,
    record_tenant_change,
)
from fairgpu.engine.decisions import ReclaimNote
from fairgpu.engine.jobs import Job
from fairgpu.engine.preemption import PreemptionPlan, find_preemption
from fairgpu.engine.session import Session
from fairgpu.engine.victim_cost import (
    VictimCost,
    hours,
    lost_work,
    running_gangs,
    waiting_is_cheaper,
)
from fairgpu.model.node_pools import workload_type
from fairgpu.model.pod import PodInfo

# Reclaim looks for victims in at most this many queues (those furthest above the preemptor).
MAX_RECLAIM_QUEUES = 4
# Preemption searches per cycle (each scans running pods); the rest wait for the next cycle.
MAX_PREEMPTION_ATTEMPTS = 32


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
    relocation: relocate.Relocations | None = None
    # The preemptor's queue is below its share and no other queue holds more than its own.
    nobody_above: bool = False
    # The pods a pool precedence rule lets the preemptor evict, share rules aside.
    precedence: frozenset[str] = frozenset()

    @property
    def relocating(self) -> frozenset[str]:
        """The queues whose pods in these pools would run elsewhere at once."""
        return self.relocation.relocating if self.relocation is not None else frozenset()


#: The refusal of a queue below its share when no other queue is above its own: what it
#: lacks stands idle, drains for a reservation or is in pieces no pending pod fits.
NOBODY_ABOVE = "reclaim refused: no other queue holds more than its fair share"


@dataclass(slots=True)
class _Freeable:
    """What every search of one ask may evict in one cycle state (:meth:`FairVictims.freeable`):
    the pods, those a time rule holds back, and the rule that refused a queue's pods ("")."""

    key: tuple[object, ...]
    pods: set[str]
    held: HeldBack
    refusal: str


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

    def department_candidates(self, job: Job, pod: PodInfo) -> list[str]:
        """The pods of the other queues of ``job``'s department that ``pod`` may take back
        to make room in the department's limit (:mod:`~fairgpu.engine.actions.quota_room`);
        [] where departments have no limits."""

    def department_refusal(self, job: Job, pod: PodInfo, victims: list[PodInfo]) -> str | None:
        """The rule that refuses ``job`` taking ``victims`` (pods of its department's other
        queues, whole groups included) back, or None."""

    def note_room(self, job: Job, pod: PodInfo, victims: list[PodInfo]) -> None:
        """``victims`` of other queues go to make room for ``job`` (recorded as reclaims if
        ``pod`` is placed: :meth:`placed`); none: forget an earlier note."""


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
        self._users = UsersInQueue(session, self.queues)
        self._moves: dict[str, list[tuple[str, int]]] = {}
        # Per gang member, the victims of its last plan: uid -> (queue, what it held).
        self._taken: dict[str, dict[str, tuple[str, np.ndarray]]] = {}
        self._flows: dict[str, set[tuple[str, str]]] = {}  # (node, victim queue) per reclaim
        # Per preemptor, what the department-limit room it evicts moves (quota_room).
        self._room: dict[str, tuple[list[tuple[str, int]], set[tuple[str, str]]]] = {}
        self._refusal: dict[str, str] = {}
        self._gangs = running_gangs(
            session.book,
            session.resolver,
            session.cluster,
            session.fragile_jobs,
            session.loose_leader_worker_sets,
        )
        self._collateral: frozenset[str] = frozenset()
        self._relocated: frozenset[str] = frozenset()  # of the last plan
        self._freeable: _Freeable | None = None
        self._sets: dict[tuple[object, ...], _Pools] = {}
        self._room_wait = RoomWait(session)
        self.eligibility = ReclaimEligibility(session)
        cfg = session.tenancy.preemption
        # How long a pod of another queue must have run to be a reclaim victim.
        self._min_run = max(cfg.min_runtime_seconds, cfg.reclaim_min_runtime_seconds)
        self._relocations = relocate.RelocationSearch(
            session, deserved, self.queues, self.eligibility, self._min_run, MAX_RECLAIM_QUEUES
        )
        self._precedence = PoolPrecedences(session, self.eligibility, self._min_run)
        self._preceded: frozenset[str] = frozenset()  # of the last plan

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
        (:mod:`~fairgpu.engine.actions.relocate`), ``precedence`` for one a pool precedence
        rule lets it evict (:mod:`~fairgpu.engine.actions.pool_precedence`);
        ``gang-restart`` for a member of the last plan that goes only because its group
        breaks."""
        if victim.uid in self._collateral:
            return "gang-restart"
        if victim.uid in self._relocated:
            return "relocate"
        if victim.uid in self._preceded:
            return "precedence"
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
        flows = self._flows.pop(pod.uid, set())
        room = self._room.pop(pod.uid, None)
        if room is not None:
            moved = (moved or []) + room[0]
            flows = flows | room[1]
        if moved is None:
            return
        self.eligibility.note_reclaim()
        s = self.s
        note_reclaims(s.state, s.resolver.resolve(pod).queue, flows, s.now)
        pl = s.cluster.placements.get(pod.uid)
        if pl is not None:
            name = s.cluster.node(pl.node).name
            moved = moved + [(name, d) for d in pl.devices]
        record_tenant_change(s.state, moved, s.now, s.tenancy.preemption.reclaim_cooldown_seconds)
        gpus = tuple(sorted(set(moved)))  # what the live adapter writes on the pod
        s.reclaim_notes[pod.uid] = ReclaimNote(s.now, tuple(sorted(flows)), gpus)

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
        kind = workload_type(pod)  # pool precedence rules decide by it
        key = (t.queue, t.user, pod.priority, pod.gpu, req, need, kind, self.s.cluster.load_version)
        got = self._freeable
        if got is None or got.key != key:
            pools = self._entry(job, pod)
            kept, why = self._not_refused(job, pod, pools)
            freeable = {uid for _, pool in kept for uid in pool} | pools.precedence
            got = _Freeable(key, freeable, pools.held, why)
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
        before = self._before(job)
        band = self._band(job, before)
        kept: list[tuple[str, list[str]]] = []
        first = ""
        for other, pool in pools.named:
            why = None
            if other != queue:
                moving = other in pools.relocating
                why = refused_whatever_the_victims(
                    self.s.book, queue, vec, other, self.deserved, band, moving, before
                )
            if why is None:
                kept.append((other, pool))
            elif not first:
                first = self._reclaim_refused(job, pod, why)
        return kept, first

    def moved(self, job: Job, pod: PodInfo, victims: list[PodInfo]) -> frozenset[str]:
        """The ``victims`` a search for ``pod`` would evict as a relocation: they run at once
        on nodes the pod may not use (:mod:`~fairgpu.engine.actions.relocate`)."""
        return relocate.moved(self.s, self._entry(job, pod).relocation, victims)

    def preceded(self, job: Job, pod: PodInfo) -> frozenset[str]:
        """The pods a pool precedence rule lets ``pod`` evict whatever the shares
        (:mod:`~fairgpu.engine.actions.pool_precedence`)."""
        return self._entry(job, pod).precedence

    def shielded(self, pod: PodInfo) -> frozenset[str]:
        """The pods a pool precedence rule keeps ``pod`` from ever evicting."""
        return self._precedence.shielded(pod) if self._precedence else frozenset()

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
        before = self._before(job)
        band = self._band(job, before)
        self._moves.pop(pod.uid, None)
        self._taken.pop(pod.uid, None)
        self._collateral = self._relocated = self._preceded = frozenset()
        refused: list[str] = []
        pools = self._entry(job, pod)
        self._retry_for(pools.held)
        sets = pools.sets
        rule = self._refused_whatever(job, vec, band, pools, before) if sets else None
        if rule is not None:
            self._refusal[pod.uid] = self._reclaim_refused(job, pod, rule)
            return None
        gpus, wait = self._room_wait.wait(job, pod, allowed) if sets else (0.0, np.inf)

        def accept(victims: list[PodInfo]) -> bool:
            moved = relocate.moved(session, pools.relocation, victims)
            # What a precedence rule lets go answers to no share rule; the rest does.
            judged = [v for v in victims if v.uid not in pools.precedence]
            why = reclaim_refusal(book, queue, vec, judged, self.deserved, band, moved, before)
            if why is not None:
                refused.append(self._reclaim_refused(job, pod, why))
                return False
            loss = lost_work((v.uid for v in victims), session.cluster, session.now)
            if waiting_is_cheaper(loss, gpus, wait):
                lose = f"evicting would lose {hours(loss)} of work, more than that wait costs"
                refused.append(cheaper_wait(session, lose, wait))
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
                self._relocated = relocate.moved(session, pools.relocation, plan.victims)
                self._preceded = frozenset(v.uid for v in plan.victims) & pools.precedence
                self._note_moves(job, pod, plan)
                if job.group is not None:
                    self._taken[pod.uid] = self._holdings(plan.victims)
                return plan
        if cost.pruned:
            lose = "every plan would lose more work than that wait costs"
            refused.append(cheaper_wait(session, lose, wait))
        if refused:
            self._refusal[pod.uid] = refused[0]
        if pools.held_back:
            # Name what the time rules kept out too: the pods that may free the room, when.
            first = self._refusal.get(pod.uid)
            self._refusal[pod.uid] = "; ".join([*([first] if first else []), *pools.held_back])
        return None

    def judged_by(self, job: Job, pod: PodInfo) -> tuple[np.ndarray, float]:
        """What the reclaim rule judges a move for ``pod`` by: its queue's end state
        (:meth:`_end_vector`, a gang member with the members its group still needs) and the
        tolerance band (:meth:`_band`) -- for a reader that asks the rule as the search
        does (``fairgpu explain``)."""
        return self._end_vector(job, pod), self._band(job, self._before(job))

    def _band(self, job: Job, before: Before | None) -> float:
        """The tolerance band ``job``'s reclaims are judged with
        (:func:`~fairgpu.engine.actions.reclaim.band_for`): none while its queue is starved,
        as it stood ``before`` the job (:meth:`_before`)."""
        band = self.s.tenancy.preemption.reclaim_tolerance_band
        if not band:
            return band
        return band_for(band, self.s.book, self.deserved, job.tenant.queue, before)

    def _before(self, job: Job) -> dict[str, np.ndarray] | None:
        """The queues as they stood before ``job``'s first member landed in this cycle, as
        changes to the book now (:data:`~fairgpu.engine.actions.reclaim.Before`): its own
        queue without the members placed, each queue with what their plans took back. A
        gang is one preemptor: its later members are judged by the rules' "before" as its
        first was, so a queue its first members took from down to its quota or into the
        band still gives the rest (a gang within its nominal quota had three of four
        members placed and the fourth refused that way). None for a pod alone."""
        if job.group is None:
            return None
        s, q = self.s, job.tenant.queue
        before: dict[str, np.ndarray] = {}
        gone: dict[str, tuple[str, np.ndarray]] = {}
        for p in job.pods:
            if p.uid not in s.placed_now:
                continue
            entry = s.book.entries.get(p.uid)  # what it holds as placed
            before[q] = before.get(q, 0.0) - (entry.vec if entry else s.book.pending_vector(p))
            # Only victims still gone: a plan of an attempt since discarded put them back.
            taken = self._taken.get(p.uid, {})
            gone.update((u, x) for u, x in taken.items() if u not in s.cluster.placements)
        for other, vec in gone.values():
            before[other] = before.get(other, 0.0) + vec
        return before or None

    def _holdings(self, victims: list[PodInfo]) -> dict[str, tuple[str, np.ndarray]]:
        """Each of ``victims`` with its queue and what it holds in the book."""
        book = self.s.book
        out: dict[str, tuple[str, np.ndarray]] = {}
        for v in victims:
            entry = book.entries.get(v.uid)
            if entry is not None:
                out[v.uid] = (entry.tenant.queue, entry.vec)
        return out

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
        self, job: Job, vec: np.ndarray, band: float, pools: _Pools, before: Before | None
    ) -> str | None:
        """The reclaim rule that refuses every plan, known before any search: all the
        pools' pods belong to other queues (``pools.queues``), and for each of them the rule
        refuses the move whatever the victims
        (:func:`~fairgpu.engine.actions.reclaim.refused_whatever_the_victims`; for a queue
        whose pods would run elsewhere, the relocation rule). Named by the first queue's
        reason, as :func:`~fairgpu.engine.actions.reclaim.reclaim_refusal` names a plan's
        first victim queue's. None when some plan may pass."""
        queue, queues = job.tenant.queue, pools.queues
        if not queues or queue in queues or pools.precedence:
            return None
        book = self.s.book
        first: str | None = None
        for other in queues:
            moving = other in pools.relocating
            why = refused_whatever_the_victims(
                book, queue, vec, other, self.deserved, band, moving, before
            )
            if why is None:
                return None
            first = first or why
        return first

    def _note_moves(self, job: Job, pod: PodInfo, plan: PreemptionPlan) -> None:
        """Remember the GPUs a reclaim plan frees, whole groups included (recorded if the
        placement commits)."""
        moved, flows = self._moved(job, plan.victims)
        if moved:
            self._moves[pod.uid] = moved
            self._flows[pod.uid] = flows

    def _moved(
        self, job: Job, victims: list[PodInfo]
    ) -> tuple[list[tuple[str, int]], set[tuple[str, str]]]:
        """The GPUs (node, device) ``victims`` of other queues than ``job``'s hold, and the
        (node, victim queue) flows of that reclaim."""
        s = self.s
        others = [v for v in victims if not self._same_queue(job, v)]
        moved = [
            (s.cluster.node(s.cluster.placements[v.uid].node).name, d)
            for v in others
            for d in s.cluster.placements[v.uid].devices
        ]
        flows = {(self._node_of(v.uid), s.resolver.resolve(v).queue) for v in others}
        return moved, flows

    def department_candidates(self, job: Job, pod: PodInfo) -> list[str]:
        """See :meth:`VictimPolicy.department_candidates`: the pods of the department's
        other queues that the reclaim pre-screen lets ``job``'s queue reclaim from
        (:func:`~fairgpu.engine.actions.reclaim.may_reclaim_from`: below its share, they
        above theirs, first in reclaim order), which the time rules let go."""
        s = self.s
        queue = job.tenant.queue
        dept = s.book.department_limit(queue)
        if dept is None or not self.may_preempt(pod):
            return []
        before = self._before(job)
        band = self._band(job, before)
        out: list[str] = []
        for other, _ in self._preemptible_others(queue):
            if s.book.queue_limits(other).parent != dept.name:
                continue
            if may_reclaim_from(s.book, self.deserved, queue, other, band, before):
                out.extend(self.eligibility.kept(other, queue, self._min_run, HeldBack())[0])
        return out

    def department_refusal(self, job: Job, pod: PodInfo, victims: list[PodInfo]) -> str | None:
        """See :meth:`VictimPolicy.department_refusal`: the reclaim rules
        (:func:`~fairgpu.engine.actions.reclaim.reclaim_refusal`) on the end state; a
        refusal is named for ``pod`` (:meth:`refusal`)."""
        before = self._before(job)
        vec = self._end_vector(job, pod)
        band = self._band(job, before)
        book, queue = self.s.book, job.tenant.queue
        why = reclaim_refusal(book, queue, vec, victims, self.deserved, band, (), before)
        if why is not None:
            self._refusal[pod.uid] = self._reclaim_refused(job, pod, why)
        return why

    def note_room(self, job: Job, pod: PodInfo, victims: list[PodInfo]) -> None:
        """See :meth:`VictimPolicy.note_room`."""
        moved, flows = self._moved(job, victims)
        if moved:
            self._room[pod.uid] = (moved, flows)
        else:
            self._room.pop(pod.uid, None)

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
        key = (t.queue, t.user, pod.priority, pod.gpu, req, need, workload_type(pod), may, versions)
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
            others = self._reclaimable_queues(job)
            named.extend(self._reclaim_sets(job, pod, pools, others))
            named.extend(self._relocation_sets(job, pod, pools, set(others)))
        preceded: list[str] = []
        shielded: frozenset[str] = frozenset()
        if self._precedence:
            preceded = self._precedence.victims(queue, pod, pools.held)
            pools.precedence = frozenset(preceded)
            shielded = self._precedence.shielded(pod)
            if shielded:
                named = [(q, [u for u in x if u not in shielded]) for q, x in named]
        if lim.preemption.within_queue == "LowerPriority":
            own = self._lower_priority(job, pod, pools.held)
            if shielded:
                own = [u for u in own if u not in shielded]
            named.append((queue, own))
        if pools.nobody_above:
            self._say_first(pod, NOBODY_ABOVE)
        named = [(q, x) for q, x in named if x]
        pools.named = named
        pools.queues = tuple(sorted({q for q, _ in named}))
        sets = [x for _, x in named]
        if preceded:  # after the share rules' pools, before the queue's own pods
            at = len(sets) - (1 if named and named[-1][0] == queue else 0)
            sets.insert(at, preceded)
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
            ok, soonest, causes = self.eligibility.kept(other, queue, min_run, held)
            if len(ok) < len(s.book.queue_pods[other]) and soonest < np.inf:
                # Pods held back only by time (too young to reclaim, or on GPUs cooling
                # down) become victims later: the first such moment.
                held.at = min(held.at, float(soonest))
            sets.append((other, ok))
            if not ok and causes:
                self._refusal.setdefault(
                    pod.uid,
                    f"reclaim refused: every pod of queue {other!r} is held back: "
                    + self.eligibility.held_back_text(causes, min_run),
                )
            elif causes:
                pools.held_back.append(
                    f"queue {other!r} has pods held back from reclaim: "
                    + self.eligibility.held_back_text(causes, min_run)
                )
        return sets

    def _relocation_sets(
        self, job: Job, pod: PodInfo, pools: _Pools, skip: set[str]
    ) -> list[tuple[str, list[str]]]:
        """The relocation pools (:class:`~fairgpu.engine.actions.relocate.RelocationSearch`)
        of the queues not in ``skip`` (the reclaimable ones); what they found goes to
        ``pools.relocation``, the pods held back by time to ``pools.held``."""
        queue = job.tenant.queue

        def others() -> list[tuple[str, set[str]]]:
            return [(q, u) for q, u in self._preemptible_others(queue) if q not in skip]

        def say(text: str) -> None:
            self._refusal.setdefault(pod.uid, text)

        found = self._relocations.search(queue, pod, others, pools.held, say)
        pools.relocation = found
        return found.found if found is not None else []

    def _no_reclaimable_queue(self, job: Job, pod: PodInfo) -> bool:
        """When ``queue`` is below its fair share yet no queue passes the reclaim pre-screen
        (:meth:`_reclaimable_queues`), the refusal names the rule that keeps out the queue
        holding the most above its own share (the first victim queue were it allowed) -- a
        tenant that waits with nothing is otherwise told only what the nodes lack. True
        when other queues hold pods but none more than its share (:data:`NOBODY_ABOVE`,
        said once the candidates are known). Nothing is said while ``queue`` is at or above
        its share (it may not reclaim at all)."""
        book, deserved, queue = self.s.book, self.deserved, job.tenant.queue
        before = self._before(job)
        if not below_share(book, deserved, queue, before):
            return False
        band = self._band(job, before)
        above = [
            (held_share(book, deserved, other) - deserved.get(other, 0.0), other)
            for other, _ in self._preemptible_others(queue)
        ]
        excess, other = max(above, default=(0.0, ""))
        if excess <= 0.0:
            return bool(above)
        vec = self._end_vector(job, pod)
        why = refused_whatever_the_victims(book, queue, vec, other, deserved, band, False, before)
        if why is not None:
            self._refusal.setdefault(pod.uid, self._reclaim_refused(job, pod, why))
        return False

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

    def _reclaimable_queues(self, job: Job) -> list[str]:
        """The queues ``job``'s queue may reclaim from (the pre-screen,
        :func:`~fairgpu.engine.actions.reclaim.may_reclaim_from`), those furthest above
        first, at most :data:`MAX_RECLAIM_QUEUES`."""
        book, queue = self.s.book, job.tenant.queue
        before = self._before(job)
        band = self._band(job, before)
        above = [
            (reclaim_key(book, other), other)
            for other, _ in self._preemptible_others(queue)
            if may_reclaim_from(book, self.deserved, queue, other, band, before)
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
        """:meth:`~fairgpu.engine.actions.priority_in_queue.UsersInQueue.lower_priority`,
        judged with the preemptor's end state (:meth:`_end_vector`); a refusal of other
        users' pods is named for ``pod``."""
        pods, why = self._users.lower_priority(job, pod, held, lambda: self._end_vector(job, pod))
        if why:
            self._refusal.setdefault(pod.uid, why)
        return pods
