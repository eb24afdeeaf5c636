"""The published GPU-sharing baselines: best-fit, dot-product, GPU packing, GPU clustering and
random placement, as scored in the FGD paper's simulator (USENIX ATC'23)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import MAX_NODE_SCORE, CycleState, ScorePlugin
from fairgpu.engine.plugins.node_cache import CachedNodeScore, cpu_left, free_milli
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import CPU, PodInfo

Array = npt.NDArray[Any]
# The published simulator's normalisers: the biggest node has 128 CPUs and 8 GPUs.
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8 * WHOLE


def min_max(scores: Array) -> Array:
    """The published simulator's integer min-max rescaling to 0..100."""
    s = scores.astype(np.int64)
    lo, hi = int(s.min()), int(s.max())
    if hi == lo:
        return np.zeros(s.shape, dtype=np.float64)
    return ((s - lo) * MAX_NODE_SCORE // (hi - lo)).astype(np.float64)


class GpuBestFitScore(CachedNodeScore):
    """BestFit: ``int(100 * (1 - cpu_free_after/2/128000 - gpu_free_after/2/8000))``, min-max
    rescaled over the feasible nodes. Memory is ignored (as published)."""

    name = "GpuBestFit"

    def __init__(self, max_cpu: int = MAX_SPEC_CPU, max_gpu: int = MAX_SPEC_GPU) -> None:
        super().__init__()
        self.max_cpu = max_cpu
        self.max_gpu = max_gpu

    def compute(self, pod: PodInfo, cluster: ClusterState, nodes: Array) -> tuple[Array, Array]:
        """Raw integer best-fit scores."""
        cpu_after = cpu_left(cluster, nodes) - pod.requests.get(CPU, 0)
        gpu_after = free_milli(cluster, nodes).sum(1) - pod.gpu.total_milli
        share = cpu_after / self.max_cpu * 0.5 + gpu_after / self.max_gpu * 0.5
        raw = np.trunc((1.0 - share) * MAX_NODE_SCORE)
        return raw, np.full(nodes.size, -1)

    def normalize(self, scores: Array) -> Array:
        """Integer min-max to 0..100."""
        return min_max(scores)


class DotProductScore(CachedNodeScore):
    """Tetris dot-product (merged GPU dimension, normalised by the biggest node):
    ``int(100 * (1 - (cpu_free*cpu_req/128000² + gpu_free*gpu_req/8000²) / 2))``."""

    name = "GpuDotProduct"

    def __init__(self, max_cpu: int = MAX_SPEC_CPU, max_gpu: int = MAX_SPEC_GPU) -> None:
        super().__init__()
        self.max_cpu = max_cpu
        self.max_gpu = max_gpu

    def compute(self, pod: PodInfo, cluster: ClusterState, nodes: Array) -> tuple[Array, Array]:
        """Smaller alignment between free and asked resources scores higher."""
        cpu_free = cpu_left(cluster, nodes) / self.max_cpu
        gpu_free = free_milli(cluster, nodes).sum(1) / self.max_gpu
        dot = cpu_free * (pod.requests.get(CPU, 0) / self.max_cpu) + gpu_free * (
            pod.gpu.total_milli / self.max_gpu
        )
        raw = np.trunc((1.0 - dot / 2.0) * MAX_NODE_SCORE)
        return raw, np.full(nodes.size, -1)


class GpuPackingScore(CachedNodeScore):
    """GPU packing, from high to low: use a partly used device (100 - its free %/10, >= 50);
    use idle devices on a node already in use (50 - idle devices taken, >= 33); open an idle
    node (33 - its device count). CPU-only pods score 0 everywhere."""

    name = "GpuPacking"

    def compute(self, pod: PodInfo, cluster: ClusterState, nodes: Array) -> tuple[Array, Array]:
        """Integer packing tiers."""
        gpu = pod.gpu
        out = np.zeros(nodes.size, dtype=np.float64)
        if gpu.count <= 0:
            return out, np.full(nodes.size, -1)
        free = free_milli(cluster, nodes)
        exists = cluster.device_exists[nodes]
        total = cluster.gpu_count[nodes].astype(np.int64)
        idle = (free >= WHOLE) & exists
        n_idle = idle.sum(1)
        # Devices taken: fitting devices, least free first (stable: lowest index on ties).
        fits = exists & (free >= min(gpu.milli, WHOLE))
        key = np.where(fits, free, WHOLE + 1)
        order = np.argsort(key, axis=1, kind="stable")[:, : gpu.count]
        taken = np.take_along_axis(free, order, axis=1)
        taken_ok = np.take_along_axis(fits, order, axis=1)
        idle_used = ((taken >= WHOLE) & taken_ok).sum(1)
        used_ratio = (np.where(taken_ok, taken, 0) * 100 // WHOLE).sum(1)
        all_idle = n_idle == total
        case3 = np.maximum(MAX_NODE_SCORE // 3 - n_idle, n_idle)
        case2 = np.maximum(MAX_NODE_SCORE // 2 - idle_used, MAX_NODE_SCORE // 3)
        case1 = np.maximum(MAX_NODE_SCORE - used_ratio // 10, MAX_NODE_SCORE // 2)
        out = np.where(all_idle, case3, np.where(idle_used > 0, case2, case1))
        return out.astype(np.float64), np.full(nodes.size, -1)


SHARE_TAG = "share"


def _affinity_tag(pod: PodInfo) -> str | None:
    gpu = pod.gpu
    if gpu.count <= 0:
        return None
    if gpu.is_shared:
        return SHARE_TAG
    return f"{gpu.count}-gpu"


# (holds this shape, holds exactly one shape, holds none) -> tier
_CLUSTER_TIERS = {
    (True, True, False): 3,
    (True, False, False): 2,
    (False, False, True): 1,
    (False, True, False): 0,
    (False, False, False): 0,
}


class GpuClusteringScore(CachedNodeScore):
    """GPU clustering: keep pods of one GPU shape (shared / 1-GPU / 2-GPU / ...) together.

    Tiers: node holding only this shape (75..100), several shapes including it (50..75), an
    empty node (25..50), other shapes only (0..25); within a tier fuller nodes score higher.
    """

    name = "GpuClustering"

    def compute(self, pod: PodInfo, cluster: ClusterState, nodes: Array) -> tuple[Array, Array]:
        """Reads the GPU shapes of the pods on each scored node."""
        tag = _affinity_tag(pod)
        out = np.zeros(nodes.size, dtype=np.float64)
        if tag is None:
            return out, np.full(nodes.size, -1)
        left = free_milli(cluster, nodes).sum(1)
        fill = (MAX_NODE_SCORE // 4) * (MAX_SPEC_GPU - left) // MAX_SPEC_GPU
        for i, idx in enumerate(nodes.tolist()):
            tags = {_affinity_tag(p) for p in cluster.node_pods[idx].values()} - {None}
            # Tiers: only this shape 3, several including it 2, empty node 1, other shapes 0.
            base = _CLUSTER_TIERS[(tag in tags, len(tags) == 1, not tags)]
            out[i] = fill[i] + base * MAX_NODE_SCORE // 4
        return out, np.full(nodes.size, -1)


class RandomScore(ScorePlugin):
    """A uniformly random feasible node (seeded): one node gets 100, the others 0."""

    name = "GpuRandom"

    def score(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: Array) -> Array:
        """Uses the cycle's seeded RNG."""
        out = np.zeros(nodes.size, dtype=np.float64)
        rng = cycle.rng or np.random.default_rng(0)
        out[rng.integers(nodes.size)] = MAX_NODE_SCORE
        return out
