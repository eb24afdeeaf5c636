"""NodeResourcesFit and NodeResourcesBalancedAllocation, vectorised over all nodes.

Filtering checks every requested resource (cpu, memory, pods, ephemeral-storage, every extended
resource) and, for GPU pods, the node's GPU total (``nvidia.com/gpu`` allocatable, in milli-GPU)
as a backstop; which devices fit is checked by :mod:`fairgpu.engine.plugins.gpu`. Scoring
strategies are kube-scheduler's LeastAllocated (spread), MostAllocated (binpack) and
RequestedToCapacityRatio, with the same integer arithmetic.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import (
    COL_CPU,
    COL_EPHEMERAL,
    COL_GPU_MEMORY,
    COL_GPU_MILLI,
    COL_MEMORY,
    ClusterState,
)
from fairgpu.engine.framework import (
    MAX_NODE_SCORE,
    CycleState,
    FilterPlugin,
    FilterResult,
    ScorePlugin,
)
from fairgpu.model.gpu import DEFAULT_NAMES
from fairgpu.model.pod import PODS, PodInfo

_ALIASES = {DEFAULT_NAMES.gpu: "fairgpu.io/gpu-milli"}
# What kube-scheduler calls the node-level GPU total in its reasons.
_REASON_NAMES = {COL_GPU_MILLI: DEFAULT_NAMES.gpu}
# kube-scheduler scores these even when the pod does not ask for them; GPUs and extended
# resources the pod does not ask for are left out of the node's average.
_ALWAYS_SCORED = (COL_CPU, COL_MEMORY, COL_EPHEMERAL)


def _asks(pod: PodInfo, cluster: ClusterState, col: int) -> bool:
    if col in (COL_GPU_MILLI, COL_GPU_MEMORY):
        return pod.gpu.count > 0
    return pod.requests.get(cluster.resources[col], 0) > 0


def _devices_look_free(pod: PodInfo, cluster: ClusterState, n: int) -> np.ndarray:
    """Per node: do the per-device arrays show room for the pod's GPUs (compute only)?"""
    gpu = pod.gpu
    if gpu.is_whole:
        return cluster.idle_devices[:n] >= gpu.count
    roomy = cluster.device_exists[:n] & (cluster.device_milli_free[:n] >= gpu.milli)
    return np.asarray(roomy.sum(axis=1) >= gpu.count)


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
            (_ALIASES.get(str(r["name"]), str(r["name"])), int(r.get("weight", 1)))  # type: ignore[call-overload]
            for r in resources
        ]
        if any(w <= 0 for _, w in self.resources):
            raise ValueError("NodeResourcesFit.resources[].weight: must be positive")
        points = shape or [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]
        self.shape_x = np.array([p["utilization"] for p in points], dtype=np.float64)
        self.shape_y = np.array([p["score"] * 10 for p in points], dtype=np.float64)
        if np.any(np.diff(self.shape_x) <= 0):
            raise ValueError("NodeResourcesFit.shape[].utilization: must increase strictly")

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Nodes whose free amount of any requested resource is below the request fail.

        A GPU pod's total (devices x milli-GPU each) is checked against the node's GPU total
        too, as a backstop: it keeps a node from ever holding more GPUs than it has even if
        its per-device arrays were wrong. Which devices fit is GpuFit's to decide (with its
        own reasons), so the total rejects only nodes whose devices look free enough: while
        the arrays are right a short total implies devices too full, and nothing changes.
        """
        cols, amounts = cluster.request_vector(pod)
        n = cluster.size
        if cols.size == 0:
            return FilterResult(np.ones(n, dtype=bool))
        free = cluster.allocatable[:n, cols] - cluster.requested[:n, cols]
        short = free < amounts
        if pod.gpu.count:
            gpu = (cols == COL_GPU_MILLI).nonzero()[0]
            if gpu.size and np.count_nonzero(short[:, gpu[0]]):
                short[:, gpu[0]] &= _devices_look_free(pod, cluster, n)
        mask = ~short.any(axis=1)
        reasons = {}
        # Only the columns some node is short of (one reduction for all of them).
        for j in short.any(axis=0).nonzero()[0].tolist():
            col = cols[j]
            rname = _REASON_NAMES.get(int(col), cluster.resources[col])
            reasons["Too many pods" if rname == PODS else f"Insufficient {rname}"] = short[:, j]
        return FilterResult(mask, reasons)

    def _after(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray, col: int
    ) -> np.ndarray:
        if col in (COL_CPU, COL_MEMORY):
            # Requests with kube-scheduler's defaults for containers that ask for nothing,
            # on the node's residents as on the pod.
            which = 0 if col == COL_CPU else 1
            return np.asarray(
                cluster.scoring_requested[nodes, which] + pod.scoring_cpu_memory[which]
            )
        if col == COL_GPU_MILLI:
            return np.asarray(cluster.requested[nodes, col] + pod.gpu.total_milli)
        return np.asarray(
            cluster.requested[nodes, col] + pod.requests.get(cluster.resources[col], 0)
        )

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """Weighted integer average of per-resource scores, as kube-scheduler computes it.

        A resource a node does not have is left out of that node's average, and so is a GPU or
        extended resource the pod does not ask for (kube-scheduler's bypass). LeastAllocated and
        MostAllocated truncate; RequestedToCapacityRatio averages only positive scores, rounded.
        """
        total = np.zeros(len(nodes), dtype=np.int64)
        weights = np.zeros(len(nodes), dtype=np.int64)
        for rname, weight in self.resources:
            col = cluster.resource_column(rname)
            if col not in _ALWAYS_SCORED and not _asks(pod, cluster, col):
                continue
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
                util = np.where(requested > capacity, 100, requested * 100 // safe)
                per = self._shape_score(util)
            counted = capacity > 0
            if self.strategy == "RequestedToCapacityRatio":
                counted &= per > 0
            total += np.where(counted, per * weight, 0)
            weights += np.where(counted, weight, 0)
        if self.strategy == "RequestedToCapacityRatio":
            # Go's math.Round: halves away from zero (scores are never negative here).
            return np.floor(total / np.maximum(weights, 1) + 0.5).astype(np.int64)
        return total // np.maximum(weights, 1)

    def _shape_score(self, util: np.ndarray) -> np.ndarray:
        """kube-scheduler's BuildBrokenLinearFunction in integer arithmetic (Go truncation)."""
        xs = self.shape_x.astype(np.int64)
        ys = self.shape_y.astype(np.int64)
        out = np.full(util.shape, ys[-1], dtype=np.int64)
        done = np.zeros(util.shape, dtype=bool)
        for i in range(len(xs)):
            here = ~done & (util <= xs[i])
            if i == 0:
                out[here] = ys[0]
            else:
                num = (ys[i] - ys[i - 1]) * (util[here] - xs[i - 1])
                den = xs[i] - xs[i - 1]
                # Go integer division truncates toward zero; numpy's // floors.
                quot = np.abs(num) // den * np.sign(num)
                out[here] = ys[i - 1] + quot
            done |= here
        return out


class BalancedAllocation(ScorePlugin):
    """NodeResourcesBalancedAllocation: prefer nodes whose resource fractions stay even."""

    name = "NodeResourcesBalancedAllocation"

    def __init__(self, resources: list[str] | None = None) -> None:
        self.resources = resources or ["cpu", "memory"]

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """``(1 - std(requested/capacity)) * 100`` over the configured resources.

        As in kube-scheduler, a resource the node lacks is left out of its standard deviation,
        as is a GPU or extended resource the pod does not ask for.
        """
        fractions = []
        present = []
        for rname in self.resources:
            col = cluster.resource_column(_ALIASES.get(rname, rname))
            if col not in _ALWAYS_SCORED and not _asks(pod, cluster, col):
                continue
            capacity = cluster.allocatable[nodes, col].astype(np.float64)
            ask = pod.gpu.total_milli if col == COL_GPU_MILLI else pod.requests.get(rname, 0)
            requested = cluster.requested[nodes, col] + ask
            fractions.append(np.minimum(requested / np.maximum(capacity, 1), 1.0))
            present.append(capacity > 0)
        if not fractions:
            return np.full(len(nodes), MAX_NODE_SCORE, dtype=np.int64)
        frac = np.vstack(fractions)
        have = np.vstack(present)
        count = have.sum(axis=0)
        mean = np.where(have, frac, 0.0).sum(axis=0) / np.maximum(count, 1)
        var = np.where(have, (frac - mean) ** 2, 0.0).sum(axis=0) / np.maximum(count, 1)
        std = np.where(count >= 2, np.sqrt(var), 0.0)
        if frac.shape[0] == 2:
            # kube-scheduler's two-resource shortcut |a - b| / 2, which rounds differently.
            two = count == 2
            std = np.where(two, np.abs(frac[0] - frac[1]) / 2, std)
        return ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)
