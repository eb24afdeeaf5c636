"""NodeResourcesFit and NodeResourcesBalancedAllocation, vectorised over all nodes.

Filtering checks every requested resource (cpu, memory, pods, ephemeral-storage, every extended
resource); GPU devices are checked by :mod:`fairgpu.engine.plugins.gpu`. Scoring strategies are
kube-scheduler's LeastAllocated (spread), MostAllocated (binpack) and RequestedToCapacityRatio,
with the same integer arithmetic.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import COL_CPU, COL_GPU_MEMORY, COL_GPU_MILLI, COL_MEMORY, ClusterState
from fairgpu.engine.framework import (
    MAX_NODE_SCORE,
    CycleState,
    FilterPlugin,
    FilterResult,
    ScorePlugin,
)
from fairgpu.model.gpu import DEFAULT_NAMES
from fairgpu.model.pod import PODS, PodInfo

# kube-scheduler scores pods that request nothing as if they asked for this much.
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024
_ALIASES = {DEFAULT_NAMES.gpu: "fairgpu.io/gpu-milli"}


class NodeResourcesFit(FilterPlugin, ScorePlugin):
    """Filter on free resources; score by ``strategy``.

    Args: ``strategy`` (LeastAllocated | MostAllocated | RequestedToCapacityRatio),
    ``resources`` (list of {name, weight}; ``nvidia.com/gpu`` scores GPU compute),
    ``shape`` (RequestedToCapacityRatio points: list of {utilization, score 0..10}).
    """

    name = "NodeResourcesFit"

    def __init__(
        self,
        strategy: str = "LeastAllocated",
        resources: list[dict[str, object]] | None = None,
        shape: list[dict[str, int]] | None = None,
    ) -> None:
        if strategy not in ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"):
            raise ValueError(f"NodeResourcesFit.strategy: unknown strategy {strategy!r}")
        self.strategy = strategy
        resources = resources or [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
        self.resources = [
            (_ALIASES.get(str(r["name"]), str(r["name"])), int(r.get("weight", 1)))
            for r in resources
        ]  # type: ignore[call-overload]
        if any(w <= 0 for _, w in self.resources):
            raise ValueError("NodeResourcesFit.resources[].weight: must be positive")
        points = shape or [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]
        self.shape_x = np.array([p["utilization"] for p in points], dtype=np.float64)
        self.shape_y = np.array([p["score"] * 10 for p in points], dtype=np.float64)
        if np.any(np.diff(self.shape_x) <= 0):
            raise ValueError("NodeResourcesFit.shape[].utilization: must increase strictly")

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Nodes whose free amount of any requested resource is below the request fail."""
        cols, amounts = cluster.request_vector(pod)
        if pod.gpu.count:  # GPU columns are checked per device by GpuFit
            keep = (cols != COL_GPU_MILLI) & (cols != COL_GPU_MEMORY)
            cols, amounts = cols[keep], amounts[keep]
        n = cluster.size
        if cols.size == 0:
            return FilterResult(np.ones(n, dtype=bool))
        free = cluster.allocatable[:n, cols] - cluster.requested[:n, cols]
        short = free < amounts
        mask = ~short.any(axis=1)
        reasons = {}
        for j, col in enumerate(cols):
            failing = short[:, j]
            if failing.any():
                rname = cluster.resources[col]
                reasons["Too many pods" if rname == PODS else f"Insufficient {rname}"] = failing
        return FilterResult(mask, reasons)

    def _after(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray, col: int
    ) -> np.ndarray:
        rname = cluster.resources[col]
        if col == COL_GPU_MILLI:
            ask = pod.gpu.total_milli
        else:
            ask = pod.requests.get(rname, 0)
            if ask == 0 and col == COL_CPU:
                ask = DEFAULT_MILLI_CPU
            elif ask == 0 and col == COL_MEMORY:
                ask = DEFAULT_MEMORY
        return cluster.requested[nodes, col] + ask

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """Weighted integer average of per-resource scores, as kube-scheduler computes it."""
        total = np.zeros(len(nodes), dtype=np.int64)
        weights = 0
        for rname, weight in self.resources:
            col = cluster.resource_column(rname)
            capacity = cluster.allocatable[nodes, col]
            requested = self._after(pod, cluster, nodes, col)
            safe = np.maximum(capacity, 1)
            if self.strategy == "LeastAllocated":
                per = np.where(
                    requested > capacity, 0, (capacity - requested) * MAX_NODE_SCORE // safe
                )
            elif self.strategy == "MostAllocated":
                per = np.minimum(requested, capacity) * MAX_NODE_SCORE // safe
            else:
                util = np.minimum(requested, capacity) * MAX_NODE_SCORE / safe
                per = np.interp(util, self.shape_x, self.shape_y).astype(np.int64)
            per = np.where(capacity == 0, 0, per)
            total += per * weight
            weights += weight
        return total // max(weights, 1)


class BalancedAllocation(ScorePlugin):
    """NodeResourcesBalancedAllocation: prefer nodes whose resource fractions stay even."""

    name = "NodeResourcesBalancedAllocation"

    def __init__(self, resources: list[str] | None = None) -> None:
        self.resources = resources or ["cpu", "memory"]

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """``(1 - std(requested/capacity)) * 100`` over the configured resources."""
        fractions = []
        for rname in self.resources:
            col = cluster.resource_column(_ALIASES.get(rname, rname))
            capacity = cluster.allocatable[nodes, col].astype(np.float64)
            ask = pod.gpu.total_milli if col == COL_GPU_MILLI else pod.requests.get(rname, 0)
            requested = cluster.requested[nodes, col] + ask
            frac = np.where(capacity > 0, np.minimum(requested / np.maximum(capacity, 1), 1.0), 0)
            fractions.append(frac)
        std = np.std(np.vstack(fractions), axis=0) if fractions else np.zeros(len(nodes))
        return ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)
