"""Which running pods may be preemption victims now, and what holds the others back.

Whatever the victim policy, :func:`eligible_victim` must hold for every victim: placed before
this cycle, bound (or a held preemptor whose place may be taken, :func:`displaceable`), not
terminating, run the policy's minimum time. Reclaim between queues adds time rules that keep
the GPUs from changing hands back and forth (:mod:`~fairgpu.engine.actions.reclaim`'s "No
flipping over time"): a victim ran ``reclaimMinRuntimeSeconds``; it sits on no GPU that
changed tenant for it within ``reclaimCooldownSeconds`` (:func:`record_tenant_change`,
:func:`cooling`); taking it would not undo, on its node, a reclaim its queue made from the
preemptor's within the cooldown; and it is not protected after starting from a reservation
(:func:`~fairgpu.engine.actions.reserve.protected_until`). :class:`ReclaimEligibility` asks
them for a queue's pods in one pass, keeps the answer while nothing it reads changes, and
says what holds the rest back (:class:`HeldCauses`, :meth:`ReclaimEligibility.held_back_text`)
and when the first of them comes free (:class:`HeldBack`: a cycle is asked for then).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeGuard

import numpy as np

from fairgpu.cluster.state import Placement
from fairgpu.engine.actions.reclaim import reverses
from fairgpu.engine.actions.reserve import protected_until
from fairgpu.engine.preemption import victim_eligible
from fairgpu.engine.session import EngineState, Session


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


# A queue's reclaimable pods, the first moment a held one frees, the held ones (uid ->
# when), and why they are held (ReclaimEligibility.kept).
_Kept = tuple[list[str], float, dict[str, float], HeldCauses]


class ReclaimEligibility:
    """The reclaim victims of one cycle: per victim queue and preemptor queue, the pods the
    time rules let go (:meth:`kept`), what holds the others back and until when.

    ``noted`` counts the reclaims committed in this cycle (:meth:`note_reclaim`): they change
    cooldowns and reversals, so answers kept from before are not reused."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.noted = 0
        self._kept: dict[tuple[object, ...], _Kept] = {}

    def note_reclaim(self) -> None:
        """A reclaim committed in this cycle (the GPUs it moved are recorded in the state)."""
        self.noted += 1

    def kept(
        self, other: str, queue: str, min_run: float, held: HeldBack
    ) -> tuple[list[str], float, HeldCauses]:
        """:meth:`reclaimable` of ``other``'s pods, computed again only when what it reads
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
            self.noted,
            len(s.displaced_nodes),
        )
        got = self._kept.get(key)
        if got is None:
            later: dict[str, float] = {}
            causes = HeldCauses()
            pool = s.book.queue_pods[other]
            ok, soonest = self.reclaimable(pool, other, queue, min_run, later, causes)
            got = self._kept[key] = (ok, soonest, later, causes)
        held.pods.update(got[2])
        return got[0], got[1], got[3]

    def reclaimable(
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
                when = max(when, _cooled(devices, pl) + cooldown)
            if now < when < soonest:
                soonest = when
            # victim_eligible, inlined: this loop runs over every pod of the queue.
            if now - pl.started < min_run:
                later[u] = when
                causes.add("young")
                continue
            if pl.node in hot_nodes and any(
                cooling(hot.get((pl.node, d)), pl.started) for d in pl.devices
            ):
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

    def _hot_gpus(self, changed: dict[int, dict[int, float]]) -> dict[tuple[int, int], float]:
        """(node slot, device) of every GPU that changed tenant within the cooldown, to when it
        did (a pod on one that started then or later is held back from reclaim), from
        :meth:`_changed_by_slot`, once per pass."""
        now, cooldown = self.s.now, self.s.tenancy.preemption.reclaim_cooldown_seconds
        return {
            (slot, d): when
            for slot, devices in changed.items()
            for d, when in devices.items()
            if now - when < cooldown
        }

    def held_back_text(self, causes: HeldCauses, min_run: float) -> str:
        """What holds a queue's pods back from reclaim, rule by rule, with how many pods
        each holds (:meth:`reclaimable`): the rules differ in what a user can expect --
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


def cooling(changed_at: float | None, started: float) -> TypeGuard[float]:
    """Did the part of a GPU a pod that ``started`` then holds change tenant at
    ``changed_at`` (when the GPU last changed tenant, None: not recently)? Only if the pod
    started then or later: a reclaim's preemptor is placed in the reclaim's cycle, and a pod
    that shared the GPU before (a fraction beside the victim's) kept its part -- holding it
    back would keep a starved queue from a pod that never moved, for the whole cooldown.
    Whole GPUs are not shared, so every pod on one that changed tenant started after."""
    return changed_at is not None and changed_at <= started


def _cooled(devices: dict[int, float], pl: Placement) -> float:
    """When the last of ``pl``'s GPUs that changed tenant for it did (:func:`cooling`;
    ``devices``: device -> when, on its node), or -inf."""
    times = (devices.get(d) for d in pl.devices)
    return max((t for t in times if t is not None and cooling(t, pl.started)), default=-np.inf)


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
