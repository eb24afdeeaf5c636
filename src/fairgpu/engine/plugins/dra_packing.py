"""DynamicResourcesPacking: among feasible nodes, prefer the one whose device choice fills
partitioned GPUs best.

kube-scheduler does not score devices (KEP-4970 is open), so claims that ask for MIG
partitions land wherever other scores and the random tie-break send them, opening a fresh GPU
on each node they visit. This score is the node-level half of our fragmentation-aware device
choice: for the allocation the DynamicResources filter chose on each node, the share of each
touched counter set (one GPU) in use once the partition is taken, averaged over the
partitions; a partition that completes a GPU scores 100, one that breaks a whole GPU scores
only its own size. Claims of devices without counters (or no claims) score 0 everywhere,
which leaves the choice to the other scores.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.dra import InUse
from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import MAX_NODE_SCORE, CycleState, ScorePlugin
from fairgpu.model.dra import DeviceResult
from fairgpu.model.pod import PodInfo


class DynamicResourcesPacking(ScorePlugin):
    """See the module doc."""

    name = "DynamicResourcesPacking"

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """Per candidate slot: how full the GPUs its chosen partitions land on become."""
        out = np.zeros(len(nodes), dtype=np.float64)
        if not pod.resource_claims:
            return out
        choice = cluster.dra.choices.get(pod.uid)
        if choice is None:
            return out
        in_use = cluster.dra.in_use(cluster)
        for i, slot in enumerate(nodes):
            allocs = choice.node.get(int(slot), ())
            out[i] = self._fill(cluster, in_use, [r for a in allocs for r in a.results])
        return out

    @staticmethod
    def _fill(cluster: ClusterState, in_use: InUse, results: list[DeviceResult]) -> float:
        store = cluster.dra
        fills = []
        for r in results:
            device = store.device(r.key)
            if device is None or not device.consumes or r.admin:
                continue
            for set_name, amounts in device.consumes.items():
                ck = (r.driver, r.pool, set_name)
                total = store.counter_totals(ck)
                used = in_use.counters.get(ck, {})
                shares = [
                    (used.get(c, 0) + amount) / total[c]
                    for c, amount in amounts.items()
                    if total.get(c)
                ]
                if shares:
                    fills.append(sum(shares) / len(shares))
        return MAX_NODE_SCORE * sum(fills) / len(fills) if fills else 0.0
