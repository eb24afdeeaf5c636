"""Relocation: a queue below its fair share takes the place of another queue's pods that can
run elsewhere right now.

Pool-aware fair shares (:func:`~fairgpu.tenancy.pool_share.pool_fair_shares`) count every
pool a queue's pods may use. A queue whose pods may run anywhere can then hold exactly its
share while sitting on the nodes a queue confined to one pool needs, with nodes it could use
instead standing free: four 8-GPU nodes, one of them an inference node that team-a's training
pod may not use; team-b's three pods, which tolerate every taint, fill the other three.
team-b's share is 24 GPUs (it may use all four nodes), team-a's 8: team-b is *at* its share,
so the reclaim rule (:mod:`~fairgpu.engine.actions.reclaim`) gives team-a nothing, and team-a
waits with no GPU while the inference node stands empty -- for as long as team-b's pods run.

A relocation ends that: queue Q, below its share, may evict pods of a queue V that it could
not reclaim from, when

1. Q comes before V in reclaim order (:func:`~fairgpu.engine.actions.reclaim.share_key`:
   it holds less for its weight) before the move and does not pass it after, and Q stays at
   or below its share;
2. every victim fits *now*, all of them together, on nodes Q's pod may not use (its
   load-independent filters), no reservation holds and no waiting pod of another queue
   below its share may use (:func:`elsewhere`, :func:`unwanted`, :func:`fits_elsewhere`)
   -- so V's evicted pods, pending again, start there, V ends the move holding what it
   held, and the room goes to no one else who waits for it;
3. the victims pass the same time rules as reclaim victims (``reclaimMinRuntimeSeconds``,
   the cooldown, protection after a reserved start) and the move loses less work than
   waiting for declared run times costs (:func:`~fairgpu.engine.victim_cost.waiting_is_cheaper`).

No cycle: once V's pods run again elsewhere V holds what it held and Q at most its share, so
the reclaim rule gives V nothing back (Q would have to be above its share by the band), and a
relocation back would need V below its share and Q's pods able to run on nodes V may not
use; either way the GPUs the move freed and took changed tenant, and for
``reclaimCooldownSeconds`` no pod on them is a victim (the property test in
``tests/fairness/test_stability.py`` replays random arrivals across two pools). What a move
costs is the victims' work so far, counted as for any reclaim.

Tried and not adopted: dropping condition 1 where V holds at least its share (the move
leaves V what it held, so it takes nothing V is owed). In the flexible-and-confined mix of
``benchmarks/fairness`` (seed 0) ``train`` then relocates the five one-GPU ``batch`` pods
that hold ``train-0`` once the inference nodes have room, at 6 394 s: useful allocation
76.09% -> 78.55%, lowest share ratio 0.707 -> 0.741, but lost GPU time 0.94% -> 5.95% of
capacity (the victims had run about 5 000 s each; waiting for their declared ends would
have cost more by this rule's count, 8 GPUs x 5 664 s), above the 5% the benchmark allows;
every other scenario unchanged. The room elsewhere appears only when the victims are old.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from fairgpu.cluster.state import COL_GPU_MILLI, ClusterState
from fairgpu.engine.actions.order import Lanes
from fairgpu.engine.actions.reclaim import below_share, comes_before, share_key
from fairgpu.engine.actions.victim_eligibility import HeldBack, ReclaimEligibility
from fairgpu.engine.memo import memoisable
from fairgpu.engine.plugins.gpu import lowest_devices
from fairgpu.engine.session import Session
from fairgpu.model.pod import PodInfo

# Suffix of the uid of a victim's stand-in while :func:`fits_elsewhere` places it.
_PROBE = "\x00elsewhere"


def elsewhere(session: Session, usable: np.ndarray) -> np.ndarray | None:
    """The nodes outside ``usable`` (those the preemptor's load-independent filters pass)
    that have free GPU capacity and are held by no reservation -- where another queue's pods
    could go instead; None when there are none (the common case: no node pools, or all
    full)."""
    cluster = session.cluster
    n = cluster.size
    if not n:
        return None
    other = cluster.active[:n] & ~usable
    if not other.any():
        return None
    other &= cluster.free()[:, COL_GPU_MILLI] > 0
    for reservation in session.state.reservations.values():
        other[reservation.nodes[reservation.nodes < n]] = False
    return other if other.any() else None


def unwanted(session: Session, where: np.ndarray, waiting: Iterable[PodInfo]) -> np.ndarray | None:
    """The nodes of ``where`` that none of ``waiting`` (the next pods of other queues below
    their share) may use: a relocation must not move a pod onto room someone else below
    its share waits for. None when none is left."""
    cluster, scheduler = session.cluster, session.scheduler
    out = where.copy()
    for pod in waiting:
        out &= ~scheduler.static_mask(pod, cluster)
        if not out.any():
            return None
    return out


def could_go(session: Session, where: np.ndarray, usable: np.ndarray) -> set[str]:
    """The placed GPU pods on nodes of ``usable`` whose load-independent filters pass some
    node of ``where``: the only candidates :func:`movable` may keep. One lookup per pod shape
    (the filters' cache), so a cluster whose pods are all confined to their pools answers
    with an empty set at the cost of a pass over its placed pods."""
    cluster, scheduler = session.cluster, session.scheduler
    placements = cluster.placements
    fits: dict[object, bool] = {}
    out = set()
    for uid, pod in cluster.pods.items():
        if not pod.gpu.count or not usable[placements[uid].node]:
            continue
        key = pod.static_key()
        ok = fits.get(key)
        if ok is None:
            ok = fits[key] = bool((scheduler.static_mask(pod, cluster) & where).any())
        if ok:
            out.add(uid)
    return out


def movable(session: Session, uids: Iterable[str], where: np.ndarray) -> list[str]:
    """Those of ``uids`` -- candidates of :func:`could_go`: placed GPU pods on nodes the
    preemptor may use whose load-independent filters reach ``where`` -- that pass every
    filter on some node of ``where`` as the cluster stands (each alone;
    :func:`fits_elsewhere` judges a set). Pods of one shape are judged once."""
    cluster, scheduler = session.cluster, session.scheduler
    seen: dict[tuple[object, ...], bool] = {}
    out = []
    for uid in uids:
        pod = cluster.pods[uid]
        key = (pod.static_key(), tuple(sorted(pod.requests.items())), pod.gpu)
        fits = seen.get(key)
        if fits is None:
            # Pods whose fit depends on other pods or on claims and volumes stay put.
            fits = memoisable(pod) and bool(scheduler.filter(pod, cluster, restrict=where)[0].any())
            seen[key] = fits
        if fits:
            out.append(uid)
    return out


def fits_elsewhere(session: Session, victims: list[PodInfo], where: np.ndarray) -> bool:
    """Can ``victims`` all run now on nodes of ``where``, together? Each in turn, largest
    first, passes every filter on some node (the first such) and takes devices there (the
    lowest idle ones, or the first device with room for a share), through a stand-in the next
    ones see; the stand-ins are removed before returning. Nothing is scored, so nothing is
    learned from them (the placement score learns pod shapes from the pods it scores).
    First fit finds a placement only where one exists: a set it refuses might fit by a
    smarter choice, a set it accepts does."""
    cluster, scheduler = session.cluster, session.scheduler
    probes: list[str] = []
    try:
        for victim in sorted(victims, key=lambda v: -v.gpu.total_milli):
            probe = copy.copy(victim)
            probe.uid = f"{victim.uid}{_PROBE}"
            mask, _ = scheduler.filter(probe, cluster, restrict=where)
            placed = _first_fit(probe, cluster, np.flatnonzero(mask))
            if placed is None:
                return False
            cluster.assign(probe, *placed)
            probes.append(probe.uid)
        return True
    finally:
        for uid in probes:
            cluster.release(uid)


def moved(session: Session, found: Relocations | None, victims: list[PodInfo]) -> frozenset[str]:
    """The ``victims`` that run elsewhere at once: those of the relocation pools ``found``, if
    they all fit there together (else none: the plan is judged as a plain reclaim)."""
    if found is None:
        return frozenset()
    moving = [v for v in victims if v.uid in found.movable]
    if not moving or not fits_elsewhere(session, moving, found.where):
        return frozenset()
    return frozenset(v.uid for v in moving)


def _first_fit(
    pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
) -> tuple[int, tuple[int, ...]] | None:
    """The first of ``nodes`` (that passed the filters) with devices for ``pod``, and those
    devices; None if none has them."""
    for node in nodes.tolist():
        devices = lowest_devices(pod, cluster, node)
        if devices is not None:
            return node, devices
    return None


@dataclass(slots=True)
class Relocations:
    """What a relocation search found for one preemptor: per victim queue its movable pods
    (``found``, name and sorted uids) and the nodes where they would go (``where``); derived
    from them, the queues (``relocating``) and all those pods (``movable``)."""

    found: list[tuple[str, list[str]]]
    where: np.ndarray
    relocating: frozenset[str] = field(init=False)
    movable: set[str] = field(init=False)

    def __post_init__(self) -> None:
        self.relocating = frozenset(q for q, _ in self.found)
        self.movable = {u for _, pods in self.found for u in pods}


class RelocationSearch:
    """Relocation candidates for one cycle's preemptors (the rules of the module docstring):
    per queue the preemptor may not reclaim from but comes before in reclaim order, its pods
    that the time rules let go (``eligibility``, victims that ran ``min_run``) and that could
    run now on nodes the preemptor may not use, from at most ``limit`` queues. ``queues``:
    the cycle's pending jobs per queue and user (room that a waiting queue below its share
    may use is not offered)."""

    def __init__(
        self,
        session: Session,
        deserved: Mapping[str, float],
        queues: Lanes,
        eligibility: ReclaimEligibility,
        min_run: float,
        limit: int,
    ) -> None:
        self.s = session
        self.deserved = deserved
        self.queues = queues
        self.eligibility = eligibility
        self.min_run = min_run
        self.limit = limit
        self._room: dict[tuple[object, ...], tuple[np.ndarray, set[str]] | None] = {}

    def search(
        self,
        queue: str,
        pod: PodInfo,
        others: Callable[[], list[tuple[str, set[str]]]],
        held: HeldBack,
        say: Callable[[str], None],
    ) -> Relocations | None:
        """The relocation pools of ``pod`` of ``queue`` among ``others()`` (queues and their
        preemptible pods, those the preemptor may reclaim from left out; asked for only when
        a relocation may be); only while ``queue`` is below its share and such nodes have
        free GPUs. Pods held back by time go to ``held``; ``say`` is told why a queue whose
        pods could move gives none (the order rule, the time rules). None when no queue
        gives any."""
        s, min_run = self.s, self.min_run
        book, deserved = s.book, self.deserved
        if not below_share(book, deserved, queue):
            return None
        room = self._room_elsewhere(queue, pod)
        if room is None:
            return None
        where, flexible = room
        mine = share_key(book, deserved, queue)
        found: list[tuple[str, list[str]]] = []
        for other, uids in sorted(others()):
            if flexible.isdisjoint(uids):
                continue
            if not comes_before(mine, share_key(book, deserved, other)):
                # Its pods could make room by moving, but the order rule keeps them.
                say(
                    f"relocation refused: queue {queue!r} does not come before {other!r} "
                    "in reclaim order"
                )
                continue
            ok, soonest, causes = self.eligibility.kept(other, queue, min_run, held)
            pods = movable(s, (u for u in ok if u in flexible), where)
            if pods:
                found.append((other, pods))
                continue
            kept = set(ok)
            waiting = (u for u in uids if u in flexible and u not in kept)
            if causes and movable(s, waiting, where):
                # Pods that could run elsewhere, all held back by the time rules: a cycle
                # when the first comes free, and the refusal says what holds them.
                held.at = min(held.at, float(soonest))
                say(
                    f"reclaim refused: every pod of queue {other!r} that could run elsewhere "
                    "is held back: " + self.eligibility.held_back_text(causes, min_run)
                )
        found = found[: self.limit]
        return Relocations(found, where) if found else None

    def _room_elsewhere(self, queue: str, pod: PodInfo) -> tuple[np.ndarray, set[str]] | None:
        """Where victims of a relocation for ``pod`` of ``queue`` could go (:func:`elsewhere`
        less what waiting queues below their share may use), and the placed pods on nodes
        ``pod`` may use that could go there (:func:`could_go`); None when there is no such
        pod. Kept while the cluster's pods and the reservations stay the same: the many
        preemptors of one shape in a cycle ask alike."""
        s = self.s
        c = s.cluster
        key = (c.load_version, c.static_version, pod.static_key(), queue, *s.state.reservations)
        if key in self._room:
            return self._room[key]
        got = None
        usable = s.scheduler.static_mask(pod, c)
        where = elsewhere(s, usable)
        if where is not None:
            where = unwanted(s, where, self._waiting_below_share(queue))
        if where is not None:
            flexible = could_go(s, where, usable)
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
