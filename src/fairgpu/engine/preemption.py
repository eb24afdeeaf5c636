"""Preemption: find the minimal set of victims on the best node so that a pod fits.

Which pods *may* be victims is decided by the caller (the engine's rules: priority inside a
queue, reclaim between queues, kube-scheduler priority preemption for the baseline); this
module only searches. Like kube-scheduler's DefaultPreemption:

1. a vectorised pre-screen keeps nodes that pass the pod's static filters and on which
   removing *all* eligible victims would free enough CPU, memory, pod slots and GPU compute;
2. on the most promising nodes, all eligible victims are removed tentatively, the pod is
   scheduled restricted to that node, then victims are reprieved one by one, most important
   first (highest priority, Guaranteed before Burstable before BestEffort, longest running), as
   long as the pod still fits; what remains is that node's victim set;
3. the node whose victim set is smallest wins, then lowest highest-priority, lowest priority
   sum, lowest QoS, most recently started.

Given a :class:`~fairgpu.engine.victim_cost.VictimCost` (the fair ordering), the search is
work-aware and gang-aware instead: a member of a pod group that the eviction would break is a
candidate only if its whole group may go; victims are reprieved most costly first; a plan
evicts whole groups (every running member of a group it leaves below ``minMember``, on any
node -- members of such a group reprieved on this node go too, and the other victims get a
second chance to stay); and plans are ranked by the cost's tier (the preemptor's own queue:
priority), then lost work (GPU x seconds run), units (a group counts once), priorities, QoS
and start time. Nodes are tried cheapest possible first, and once a node's lower bound is no
better than the best plan, the search stops.

The cluster is always restored before returning; the caller applies the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fairgpu.cluster.state import (
    COL_CPU,
    COL_GPU_MILLI,
    COL_MEMORY,
    COL_PODS,
    ClusterState,
    Placement,
)
from fairgpu.engine.scheduler import Scheduler
from fairgpu.engine.victim_cost import VictimCost, lost_work
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import (
    CPU,
    MEMORY,
    QOS_BEST_EFFORT,
    QOS_BURSTABLE,
    QOS_GUARANTEED,
    PodInfo,
)

QOS_RANK = {QOS_BEST_EFFORT: 0, QOS_BURSTABLE: 1, QOS_GUARANTEED: 2}
MAX_NODES_TRIED = 8


@dataclass(slots=True)
class PreemptionPlan:
    """Evict ``victims`` from node slot ``node`` so that the preemptor fits there.

    ``collateral``: uids among ``victims`` evicted only because their pod group breaks (the
    preemptor does not need their room); ``loss``: the plan's lost work, GPU-seconds (0 when
    the search was not work-aware)."""

    node: int
    victims: list[PodInfo]
    collateral: frozenset[str] = frozenset()
    loss: float = 0.0

    def rank(self, placements: dict[str, Placement]) -> tuple[float, ...]:
        """Lower is better: fewest victims, lowest priorities, lowest QoS, newest."""
        if not self.victims:
            return (0, -np.inf, 0, 0, 0)
        prios = [v.priority for v in self.victims]
        qos = max(QOS_RANK.get(v.qos, 1) for v in self.victims)
        newest = min(placements[v.uid].started for v in self.victims)
        return (len(self.victims), max(prios), sum(prios), qos, -newest)


def victim_eligible(
    placement: Placement | None, now: float, min_runtime: float = 0.0, held: bool = False
) -> bool:
    """May the pod placed at ``placement`` be chosen as a preemption victim?

    Only a pod the API reports bound, whose deletion has not begun, that has run at least
    ``min_runtime`` seconds. An Eviction of an unbound pod (assumed, or a preemptor waiting
    for its own victims) deletes it outright, and a terminating pod frees nothing sooner for
    being chosen again: it holds its node until it is gone, as kube-scheduler counts it.
    ``held``: the pod is a preemptor held while its victims go (the session's
    ``displaceable``): unbound, it is *displaced*, never evicted, under the same rules (its
    run counted from when it was placed).
    """
    return (
        placement is not None
        and (placement.bound or held)
        and not placement.terminating
        and now - placement.started >= min_runtime
    )


def may_preempt_again(pod: PodInfo, cluster: ClusterState, nominated: str) -> bool:
    """kube-scheduler's ``PodEligibleToPreemptOthers``: False while ``pod``'s nominated node
    still holds a lower-priority pod that is terminating (its victims from an earlier attempt
    have not gone yet), so a preemptor never evicts more while earlier victims still hold a
    node. ``nominated``: the node name the pod was nominated to ("" for none)."""
    idx = cluster.node_index.get(nominated) if nominated else None
    if idx is None:
        return True
    placements = cluster.placements
    for uid, other in cluster.node_pods[idx].items():
        pl = placements.get(uid)
        if pl is not None and pl.terminating and other.priority < pod.priority:
            return False
    return True


def eviction_order(pod: PodInfo, placement: Placement) -> tuple[float, ...]:
    """Sort key, first evicted first: lowest priority, BestEffort, most recently started."""
    return (pod.priority, QOS_RANK.get(pod.qos, 1), -placement.started)


def _restore(cluster: ClusterState, saved: Sequence[tuple[PodInfo, Placement]]) -> None:
    for victim, pl in saved:
        if victim.uid not in cluster.placements:
            _reassign(cluster, victim, pl)


def _reassign(cluster: ClusterState, pod: PodInfo, pl: Placement) -> None:
    """Put ``pod`` back where ``pl`` had it, keeping what the adapter recorded about it."""
    new = cluster.assign(pod, pl.node, pl.devices, started=pl.started)
    new.bound, new.terminating = pl.bound, pl.terminating


def find_preemption(
    pod: PodInfo,
    cluster: ClusterState,
    scheduler: Scheduler,
    eligible: Sequence[str],
    allowed: np.ndarray | None = None,
    accept: Callable[[list[PodInfo]], bool] | None = None,
    max_nodes: int = MAX_NODES_TRIED,
    cost: VictimCost | None = None,
) -> PreemptionPlan | None:
    """The best plan evicting only pods in ``eligible`` (uids of placed pods), or None.

    ``allowed`` limits the nodes considered; ``accept`` vetoes a victim set (e.g. the reclaim
    rule between queues; it sees whole groups when ``cost`` is given); ``cost`` makes the
    search work- and gang-aware (module docstring). ``cluster`` is left exactly as it was.
    """
    by_node = _candidates(pod, cluster, scheduler, eligible, allowed, cost)
    if not by_node:
        return None
    if cost is not None:
        gate = _only_eligible(set(eligible), accept)
        return _cheapest(pod, cluster, scheduler, by_node, gate, max_nodes, cost)
    # Most promising first: fewest eligible pods, then lowest priorities.
    order = sorted(
        by_node,
        key=lambda i: (len(by_node[i]), sum(v.priority for v in by_node[i]), i),
    )
    placements = cluster.placements
    best: PreemptionPlan | None = None
    best_rank: tuple[float, ...] | None = None
    for node in order[:max_nodes]:
        plan = _plan_on_node(pod, cluster, scheduler, node, by_node[node])
        if plan is None or (accept is not None and not accept(plan.victims)):
            continue
        rank = plan.rank(placements)
        if best_rank is None or rank < best_rank:
            best, best_rank = plan, rank
            if len(plan.victims) == 1:
                break  # cannot do better than one victim on an earlier-ranked node
    return best


def _cheapest(
    pod: PodInfo,
    cluster: ClusterState,
    scheduler: Scheduler,
    by_node: dict[int, list[PodInfo]],
    accept: Callable[[list[PodInfo]], bool] | None,
    max_nodes: int,
    cost: VictimCost,
) -> PreemptionPlan | None:
    """The plan that loses the least work among the ``max_nodes`` nodes whose cheapest unit
    costs least (branch and bound on the loss)."""
    free = cluster.free()
    need = pod.gpu.count * (WHOLE if pod.gpu.is_whole else pod.gpu.milli)
    deficit = {i: (need - free[i, COL_GPU_MILLI]) / WHOLE for i in by_node}
    floors = {i: cost.floor(by_node[i], deficit[i]) for i in by_node}
    order = sorted(by_node, key=lambda i: (floors[i], len(by_node[i]), i))
    best: PreemptionPlan | None = None
    best_rank: tuple[float, ...] | None = None
    for node in order[:max_nodes]:
        if best_rank is not None and floors[node] >= best_rank[:2]:
            break  # nodes are sorted by floor: none left can do better on (tier, loss)
        if floors[node][1] >= cost.max_loss:
            cost.pruned = True  # every plan here would be refused: waiting is cheaper
            continue
        plan = _plan_on_node(pod, cluster, scheduler, node, by_node[node], cost)
        if plan is None or (accept is not None and not accept(plan.victims)):
            continue
        rank = _cost_rank(plan, cluster, cost)
        if best_rank is None or rank < best_rank:
            best, best_rank = plan, rank
    return best


def _only_eligible(
    eligible: set[str], accept: Callable[[list[PodInfo]], bool] | None
) -> Callable[[list[PodInfo]], bool]:
    """``accept``, refusing first a plan whose broken groups take a pod outside ``eligible``
    (an elastic group's member admitted on its own, whose siblings may not go)."""

    def gate(victims: list[PodInfo]) -> bool:
        if any(v.uid not in eligible for v in victims):
            return False
        return accept is None or accept(victims)

    return gate


def _cost_rank(plan: PreemptionPlan, cluster: ClusterState, cost: VictimCost) -> tuple[float, ...]:
    """Lower is better: lowest tier (:class:`~fairgpu.engine.victim_cost.VictimCost`), least
    lost work, fewest units, lowest priorities, lowest QoS, newest."""
    victims = plan.victims
    prios = [v.priority for v in victims]
    qos = max(QOS_RANK.get(v.qos, 1) for v in victims)
    newest = min(cluster.placements[v.uid].started for v in victims)
    units = cost.units(v.uid for v in victims)
    tier = max(cost.tier(v) for v in victims)
    return (tier, plan.loss, units, max(prios), sum(prios), qos, -newest)


def _candidates(
    pod: PodInfo,
    cluster: ClusterState,
    scheduler: Scheduler,
    eligible: Sequence[str],
    allowed: np.ndarray | None,
    cost: VictimCost | None = None,
) -> dict[int, list[PodInfo]]:
    """Eligible pods per node, on the nodes that pass the pod's static filters and where
    evicting all of them would free enough (the vectorised pre-screen); with ``cost``, only
    pods whose pod group may go as a whole if their eviction breaks it."""
    placements = cluster.placements
    uids = [u for u in eligible if u in placements]
    if cost is not None:
        allowed_uids = set(uids)
        uids = [u for u in uids if cost.admissible(u, allowed_uids)]
    if not uids:
        return {}
    mask = scheduler.static_mask(pod, cluster).copy()
    if allowed is not None:
        mask &= allowed
    nodes = np.fromiter((placements[u].node for u in uids), dtype=np.int64, count=len(uids))
    keep = mask[nodes]
    if not keep.any():
        return {}
    uids = [u for u, k in zip(uids, keep, strict=True) if k]
    nodes = nodes[keep]
    pods = [cluster.pods[u] for u in uids]
    cand = _enough_freed(pod, cluster, pods, nodes)
    if cand.size == 0:
        return {}
    wanted = set(cand.tolist())
    by_node: dict[int, list[PodInfo]] = {}
    for p, node in zip(pods, nodes.tolist(), strict=True):
        if node in wanted:
            by_node.setdefault(node, []).append(p)
    return by_node


def _enough_freed(
    pod: PodInfo, cluster: ClusterState, pods: list[PodInfo], nodes: np.ndarray
) -> np.ndarray:
    """The nodes among ``nodes`` where evicting all their ``pods`` would free enough CPU,
    memory, pod slots and GPU compute for ``pod``."""
    placements = cluster.placements
    freed = np.zeros((cluster.size, 4))
    amounts = np.array(
        [
            (
                p.requests.get(CPU, 0),
                p.requests.get(MEMORY, 0),
                1,
                placements[p.uid].device_milli * len(placements[p.uid].devices),
            )
            for p in pods
        ],
        dtype=float,
    )
    np.add.at(freed, nodes, amounts)
    free = cluster.free()
    gpu = pod.gpu
    need_gpu = gpu.count * (WHOLE if gpu.is_whole else gpu.milli)
    cand = np.unique(nodes)
    ok = (
        (free[cand, COL_CPU] + freed[cand, 0] >= pod.requests.get(CPU, 0))
        & (free[cand, COL_MEMORY] + freed[cand, 1] >= pod.requests.get(MEMORY, 0))
        & (free[cand, COL_PODS] + freed[cand, 2] >= 1)
        & (free[cand, COL_GPU_MILLI] + freed[cand, 3] >= need_gpu)
    )
    kept: np.ndarray = cand[ok]
    return kept


def _checks_gpu(scheduler: Scheduler) -> bool:
    """Does the profile filter with ``GpuFit`` (a whole-GPU pod needs that many idle
    devices)?"""
    return any(f.name == "GpuFit" for f in scheduler.dynamic_filters)


def _idle_after(cluster: ClusterState, node: int, pl: Placement) -> int:
    """Idle devices left on ``node`` if the released pod placed at ``pl`` came back: its
    devices are idle now if it had them whole; otherwise (a share) unknown, so as now."""
    idle = int(cluster.idle_devices[node])
    if pl.device_milli >= WHOLE and all(d < cluster.gpu_count[node] for d in pl.devices):
        return idle - len(pl.devices)
    return idle


def _plan_on_node(
    pod: PodInfo,
    cluster: ClusterState,
    scheduler: Scheduler,
    node: int,
    candidates: list[PodInfo],
    cost: VictimCost | None = None,
) -> PreemptionPlan | None:
    n = cluster.size
    only = np.zeros(n, dtype=bool)
    only[node] = True
    saved = [(v, cluster.placements[v.uid]) for v in candidates]
    if cost is None:
        order = sorted(saved, key=lambda s: eviction_order(*s), reverse=True)
    else:
        order = sorted(saved, key=lambda s: _costliest_first(cost, *s), reverse=True)
    cluster.dra.released.update(v.uid for v in candidates)  # their DRA claims are free too
    try:
        for v, _ in saved:
            cluster.release(v.uid)
        if not scheduler.schedule(pod, cluster, restrict=only).ok:
            return None
        # Reprieve the most important first; whoever cannot come back is a victim.
        victims = _reprieve(pod, cluster, scheduler, only, order)
        if not victims:
            return None  # it fits without preemption; the caller places it normally
        if cost is None:
            return PreemptionPlan(node, victims)
        victims, needed = _whole_groups(pod, cluster, scheduler, only, order, victims, cost)
    finally:
        _restore(cluster, saved)
        cluster.dra.released.difference_update(v.uid for v in candidates)
    return _closed_plan(node, victims, needed, cluster, cost)


def _costliest_first(cost: VictimCost, pod: PodInfo, placement: Placement) -> tuple[float, ...]:
    """Sort key, first evicted first: lowest tier, least lost work (a breaking group member
    costs the whole group), then lowest priority, BestEffort, most recently started."""
    return (cost.tier(pod), cost.unit_cost(pod.uid), *eviction_order(pod, placement))


def _reprieve(
    pod: PodInfo,
    cluster: ClusterState,
    scheduler: Scheduler,
    only: np.ndarray,
    order: Sequence[tuple[PodInfo, Placement]],
) -> list[PodInfo]:
    """Put the released pods of ``order`` back one by one while ``pod`` still fits on the
    node of ``only``; returns those that could not come back (left released). A whole-GPU
    preemptor is first checked with GpuFit's own test (same answer, far cheaper)."""
    node = int(np.flatnonzero(only)[0])
    whole = pod.gpu.count if pod.gpu.is_whole and _checks_gpu(scheduler) else 0
    victims: list[PodInfo] = []
    for v, pl in order:
        if whole and _idle_after(cluster, node, pl) < whole:
            victims.append(v)  # reprieving it would leave too few idle devices
            continue
        _reassign(cluster, v, pl)
        if (
            cluster.idle_devices[node] < whole
            or not scheduler.schedule(pod, cluster, restrict=only).ok
        ):
            cluster.release(v.uid)
            victims.append(v)
    return victims


def _whole_groups(
    pod: PodInfo,
    cluster: ClusterState,
    scheduler: Scheduler,
    only: np.ndarray,
    order: Sequence[tuple[PodInfo, Placement]],
    victims: list[PodInfo],
    cost: VictimCost,
) -> tuple[list[PodInfo], set[str]]:
    """The victims on the node of ``only`` once pod groups go whole, and the uids among them
    the preemptor needs gone: members of a broken group reprieved on this node leave too, so
    the other victims get a second chance to stay."""
    broken = cost.broken(v.uid for v in victims)
    if not broken:
        return victims, {v.uid for v in victims}
    in_broken = {v.uid for v, _ in order if cost.gangs.key(v.uid) in broken}
    for v, _ in order:
        if v.uid in in_broken and v.uid in cluster.placements:
            cluster.release(v.uid)
    mine = {v.uid for v in victims}
    retry = [s for s in order if s[0].uid in mine and s[0].uid not in in_broken]
    kept = [v for v, _ in order if v.uid in in_broken]
    again = _reprieve(pod, cluster, scheduler, only, retry)
    needed = (mine & in_broken) | {v.uid for v in again}
    return kept + again, needed


def _closed_plan(
    node: int, victims: list[PodInfo], needed: set[str], cluster: ClusterState, cost: VictimCost
) -> PreemptionPlan:
    """The plan evicting ``victims`` and every other running member of the groups they break
    (on any node); ``collateral`` is all but ``needed``; its loss is the work all of them lose
    (``cluster`` restored)."""
    uids = cost.closure(v.uid for v in victims)
    everyone = [cluster.pods[u] for u in uids]
    loss = lost_work(uids, cluster, cost.now)
    return PreemptionPlan(node, everyone, frozenset(uids) - needed, loss)
