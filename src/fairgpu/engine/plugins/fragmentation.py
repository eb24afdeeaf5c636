"""GPU-sharing placement scores: best-fit, dot-product, GPU packing, GPU clustering, random,
FGD (fragmentation gradient descent, USENIX ATC'23) and our fragmentation-aware policy.

All scores depend only on the scored node's own state (free compute per device, free CPU, the
GPU-sharing pods on it), so they are cached per pod shape and per node and recomputed only for
the nodes whose :attr:`ClusterState.node_version` changed since: one placement dirties one
node, so scoring a pod is usually a handful of small numpy operations, not a pass over all
nodes x devices x typical shapes.

Fragmentation (the FGD paper's measure): for a node and a "typical" pod shape, the GPU milli the
shape cannot use -- all free GPU milli if the shape cannot run there at all (CPU-only shape,
GPU model not allowed, not enough CPU, not enough devices with room), otherwise the free milli
of the devices that have less room than the shape needs. A node's expected fragmentation ``F``
weighs the shapes by their frequency in the workload (:class:`TypicalPods`).
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fairgpu.cluster.state import COL_CPU, COL_MEMORY, ClusterState
from fairgpu.engine.framework import (
    MAX_NODE_SCORE,
    CycleState,
    DevicePolicy,
    ScorePlugin,
)
from fairgpu.engine.plugins.gpu import DeviceBestFit, idle_mask, shared_fit
from fairgpu.engine.plugins.packing_plan import DeviceContents, PackingPlan
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import CPU, MEMORY, PodInfo

# The published simulator's normalisers: the biggest node has 128 CPUs and 8 GPUs.
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8 * WHOLE
# CycleState key under which a score plugin leaves its per-node device choice for the device
# policy (device choice is evaluated jointly with the node choice).
DEVICE_CHOICE = "fairgpu.io/device-choice"
# Bound of the secondary term of the lexicographic score (milli-GPU of fragmentation change,
# far above any node's 8000 milli).
LEX_SPAN = 100_000
# The gap-balance term (a change of a sum of squares of device counts) is divided by
# GAP_SPAN, clipped to +-0.45 and scaled by GAP_STEP: below one step of the terms before it.
GAP_SPAN = 100_000
GAP_STEP = 1e-6
# One tier of the packing plan (above FGD's 0..101 and everything ordered below it).
PLAN_STEP = 128.0
# The packing plan is solved again when the typical shares moved by more than this (L1).
PLAN_RELEARN = 0.05
# Fragmentation deltas are rounded to this many decimals of a milli-GPU.
DELTA_DECIMALS = 6

Shape = tuple[int, int, int, frozenset[str] | None]


# ---- the workload's typical pods -----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TypicalPods:
    """The most frequent pod shapes of a workload with their renormalised weights.

    A shape is (cpu milli, per-device GPU milli, device count, allowed GPU models or None);
    CPU-only shapes have ``count == 0`` and ``milli == 0``. ``memory``: the mean memory
    (bytes) the pods of each shape ask, or None when unknown; it is not part of the shape (FGD
    ignores memory), only the packing-capacity measure reads it.
    """

    cpu: np.ndarray
    milli: np.ndarray
    count: np.ndarray
    models: tuple[frozenset[str] | None, ...]
    weight: np.ndarray
    memory: np.ndarray | None = None
    # Every shape of the workload (coverage 1), when these are the most frequent ones only.
    full: TypicalPods | None = None

    @property
    def size(self) -> int:
        """Number of shapes."""
        return int(self.cpu.size)

    @staticmethod
    def shape_of(pod: PodInfo) -> Shape:
        """A pod's shape as the fragmentation measure sees it."""
        gpu = pod.gpu
        if gpu.count <= 0:
            return (pod.requests.get(CPU, 0), 0, 0, gpu.models)
        return (pod.requests.get(CPU, 0), min(gpu.milli, WHOLE), gpu.count, gpu.models)

    @classmethod
    def from_counts(  # type: ignore[no-untyped-def]
        cls,
        counts: Counter[Shape] | dict[Shape, float],
        coverage: float = 0.95,
        memory: dict[Shape, float] | None = None,
    ):
        """The most frequent shapes that together cover ``coverage`` of the pods.

        Ties in frequency are broken by the shape itself, so the result is deterministic.
        ``memory``: mean memory (bytes) per shape, kept for the chosen shapes when every one
        of them has it.
        """
        if not 0 < coverage <= 1:
            raise ValueError(f"TypicalPods.coverage: {coverage} is outside (0, 1]")
        if not all(math.isfinite(float(c)) for c in counts.values()):
            raise ValueError("TypicalPods: shape counts must be finite")
        items = sorted(
            ((s, float(c)) for s, c in counts.items() if c > 0),
            key=lambda kv: (-kv[1], kv[0][:3], sorted(kv[0][3] or ())),
        )
        total = sum(c for _, c in items)
        if total <= 0:
            raise ValueError("TypicalPods: no pods to learn shapes from")
        chosen: list[tuple[Shape, float]] = []
        acc = 0.0
        for shape, c in items:
            chosen.append((shape, c))
            acc += c
            if coverage < 1 and acc >= coverage * total - 1e-9:
                break
        weight = np.array([c for _, c in chosen], dtype=np.float64)
        mem = None
        if memory is not None and all(s in memory for s, _ in chosen):
            mem = np.array([memory[s] for s, _ in chosen], dtype=np.float64)
        full = None
        if len(chosen) < len(items):
            full = cls.from_counts(dict(items), 1.0, memory)
        return cls(
            cpu=np.array([s[0] for s, _ in chosen], dtype=np.int64),
            milli=np.array([s[1] for s, _ in chosen], dtype=np.int64),
            count=np.array([s[2] for s, _ in chosen], dtype=np.int64),
            models=tuple(s[3] for s, _ in chosen),
            weight=weight / weight.sum(),
            memory=mem,
            full=full,
        )

    @classmethod
    def from_pods(cls, pods: Iterable[PodInfo], coverage: float = 0.95):  # type: ignore[no-untyped-def]
        """Learn the typical shapes (and their mean memory) from a list of pods."""
        counts: Counter[Shape] = Counter()
        memory: dict[Shape, float] = {}
        for p in pods:
            shape = cls.shape_of(p)
            counts[shape] += 1
            memory[shape] = memory.get(shape, 0.0) + p.requests.get(MEMORY, 0)
        means = {s: memory[s] / counts[s] for s in counts}
        return cls.from_counts(counts, coverage, means)

    @classmethod
    def from_args(cls, shapes: Sequence[dict[str, Any]]):  # type: ignore[no-untyped-def]
        """From plugin arguments: ``[{cpu, milli, count, models, weight, memory}, ...]``
        (weights are renormalised; ``models`` is a list or a ``|``-separated string;
        ``memory`` in bytes is optional and used only when every shape has it)."""
        counts: dict[Shape, float] = {}
        tail: dict[Shape, float] = {}
        memory: dict[Shape, float] = {}
        for i, item in enumerate(shapes):
            try:
                models = item.get("models")
                if isinstance(models, str):
                    models = [m for m in models.split("|") if m]
                shape: Shape = (
                    int(item["cpu"]),
                    int(item.get("milli", 0)),
                    int(item.get("count", 0)),
                    frozenset(models) if models else None,
                )
                w = float(item.get("weight", 1.0))
                if not math.isfinite(w) or w < 0:
                    raise ValueError(f"weight must be a finite number >= 0 (got {w})")
                into = tail if item.get("tail") else counts
                into[shape] = into.get(shape, 0.0) + w
                if item.get("memory") is not None:
                    mem = float(item["memory"])
                    if not math.isfinite(mem) or mem < 0:
                        raise ValueError(f"memory must be a finite number >= 0 (got {mem})")
                    memory[shape] = memory.get(shape, 0.0) + w * mem
            except (KeyError, TypeError, ValueError) as error:
                raise ValueError(f"typical_pods[{i}]: {error}") from None
        both = dict(counts)
        for shape, w in tail.items():
            both[shape] = both.get(shape, 0.0) + w
        means = {s: memory[s] / both[s] for s in memory if both[s] > 0}
        main = cls.from_counts(counts, coverage=1.0, memory=means)
        if not tail:
            return main
        full = cls.from_counts(both, coverage=1.0, memory=means)
        return cls(main.cpu, main.milli, main.count, main.models, main.weight, main.memory, full)

    def to_args(self) -> list[dict[str, Any]]:
        """The inverse of :meth:`from_args` (JSON-friendly). The shapes beyond the most
        frequent ones (:attr:`full`) come last, marked ``tail``, weighted on the same scale."""
        out = [self._arg(i) for i in range(self.size)]
        full = self.full
        if full is not None:
            mine = {self._key(i) for i in range(self.size)}
            own = {full._key(j): float(full.weight[j]) for j in range(full.size)}
            scale = sum(own.get(k, 0.0) for k in mine)
            for j in range(full.size):
                if full._key(j) not in mine and scale > 0:
                    item = full._arg(j)
                    item["weight"] = float(full.weight[j]) / scale
                    item["tail"] = True
                    out.append(item)
        return out

    def distance(self, other: TypicalPods) -> float:
        """L1 distance (0..2) between the two workloads' shape distributions, over every
        shape (:attr:`full` where present); a shape one side lacks weighs 0 there."""
        mine, theirs = (t.full if t.full is not None else t for t in (self, other))
        a = {mine._key(i): float(mine.weight[i]) for i in range(mine.size)}
        b = {theirs._key(j): float(theirs.weight[j]) for j in range(theirs.size)}
        return sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in a.keys() | b.keys())

    def _key(self, i: int) -> Shape:
        return (int(self.cpu[i]), int(self.milli[i]), int(self.count[i]), self.models[i])

    def _arg(self, i: int) -> dict[str, Any]:
        return {
            "cpu": int(self.cpu[i]),
            "milli": int(self.milli[i]),
            "count": int(self.count[i]),
            "models": "|".join(sorted(self.models[i])) if self.models[i] else "",
            "weight": float(self.weight[i]),
            **({"memory": float(self.memory[i])} if self.memory is not None else {}),
        }


class _ModelCodes:
    """Per node slot: a small integer code of the node's GPU model ("" for GPU-less nodes),
    and the GPUs of each model. Depends on the node set only (cached per static version)."""

    _cache: ClassVar[dict[int, tuple[weakref.ref[ClusterState], int, _ModelCodes]]] = {}

    def __init__(self, cluster: ClusterState) -> None:
        vocab: dict[str, int] = {}
        codes = np.zeros(cluster.size, dtype=np.int64)
        for idx, node in enumerate(cluster.nodes):
            model = node.gpu_model if node is not None and node.gpu_count else ""
            codes[idx] = vocab.setdefault(model, len(vocab))
        self.vocab = vocab
        self.codes = codes
        self.gpus = np.zeros(len(vocab), dtype=np.float64)
        np.add.at(self.gpus, codes, np.asarray(cluster.gpu_count[: cluster.size], dtype=np.float64))

    @classmethod
    def of(cls, cluster: ClusterState) -> _ModelCodes:
        """The codes of ``cluster``'s current node set (built once per static version)."""
        hit = cls._cache.get(id(cluster))
        if hit is not None and hit[0]() is cluster and hit[1] == cluster.static_version:
            return hit[2]
        if len(cls._cache) > 16:
            cls._cache.clear()
        codes = cls(cluster)
        cls._cache[id(cluster)] = (weakref.ref(cluster), cluster.static_version, codes)
        return codes


class _Access:
    """Per node slot: which typical shapes may use the node's GPU model (cached per cluster)."""

    def __init__(self, cluster: ClusterState, typical: TypicalPods) -> None:
        models = _ModelCodes.of(cluster)
        table = np.zeros((len(models.vocab), typical.size), dtype=bool)
        for model, code in models.vocab.items():
            for t, allowed in enumerate(typical.models):
                gpu_shape = typical.count[t] > 0
                table[code, t] = gpu_shape and (allowed is None or model in allowed) and model != ""
        self.codes = models.codes
        self.table = table
        # Scarcity per shape: all GPUs over the GPUs of the models the shape may use (0 when
        # none): demand for a scarce model weighs more per GPU of that model.
        gpus = models.gpus
        usable = gpus @ table
        self.scarcity = np.where(usable > 0, gpus.sum() / np.maximum(usable, 1.0), 0.0)

    def rows(self, nodes: np.ndarray) -> np.ndarray:
        """(len(nodes), T) usable-model mask."""
        return self.table[self.codes[nodes]]


def fragmentation(
    free: np.ndarray, cpu_left: np.ndarray, access: np.ndarray, typical: TypicalPods
) -> np.ndarray:
    """Expected fragmentation ``F`` (milli-GPU) of node states.

    ``free``: (..., D) free milli per device (0 for absent devices); ``cpu_left``: (...);
    ``access``: (..., T). Returns (...) floats.
    """
    f = free.astype(np.int64)
    total = f.sum(-1)
    um, inv = _by_milli(typical)
    lt = f[..., :, None] < um  # (..., D, U) device too small for the shape's milli
    small = np.where(lt, f[..., :, None], 0).sum(-2)[..., inv]  # (..., T)
    roomy = (~lt).sum(-2)[..., inv]
    ok = access & (cpu_left[..., None] >= typical.cpu) & (roomy >= typical.count)
    frag = np.where(ok, small, total[..., None])
    return _weighted_sum(frag, typical.weight)


def _weighted_sum(values: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``values @ weight`` over the last axis, rounded the same way for a row whatever the
    batch it is in (a matrix product's rounding depends on the batch shape), so a node's
    "before" and "after" terms computed in different calls still give exact zero deltas."""
    return (values * weight).sum(-1)


_BY_MILLI: dict[int, tuple[TypicalPods, np.ndarray, np.ndarray]] = {}


def _by_milli(typical: TypicalPods) -> tuple[np.ndarray, np.ndarray]:
    """The shapes' distinct per-device milli U and, per shape, its index into U.

    Per-device quantities depend on the shape only through its milli, and many shapes share
    one (they differ in CPU or device count), so (..., D, U) arrays replace (..., D, T) ones.
    """
    hit = _BY_MILLI.get(id(typical))
    if hit is None or hit[0] is not typical:
        if len(_BY_MILLI) > 64:
            _BY_MILLI.clear()
        um, inv = np.unique(typical.milli, return_inverse=True)
        hit = (typical, um, inv.reshape(-1))
        _BY_MILLI[id(typical)] = hit
    return hit[1], hit[2]


def _units_u(f: np.ndarray, um: np.ndarray) -> np.ndarray:
    """(..., D, U): how many pods of each distinct milli fit in each device's free milli."""
    # Float division then floor is exact for these magnitudes (< 2**26) and, unlike integer
    # division by an array, vectorised.
    per = np.floor(f[..., :, None] / np.maximum(um, 1))
    # Whole-GPU shapes need an idle device; CPU-only shapes use no device.
    return np.where(um >= WHOLE, f[..., :, None] >= WHOLE, np.where(um > 0, per, 0))


def _usable(
    units_sum: np.ndarray,
    cpu_left: np.ndarray,
    access: np.ndarray,
    typical: TypicalPods,
    mem_left: np.ndarray | None = None,
    weight: np.ndarray | None = None,
) -> np.ndarray:
    """(...): expected GPU milli the typical shapes could still consume, packing copies of
    each shape into the node until its devices, its CPU or (when both ``mem_left`` and the
    shapes' memory are known) its memory run out."""
    count = np.maximum(typical.count, 1)
    slots = np.floor(units_sum / count)  # exact, as in _units_u
    by_cpu = np.floor(np.maximum(cpu_left, 0)[..., None] / np.maximum(typical.cpu, 1))
    k = np.minimum(slots, np.where(typical.cpu > 0, by_cpu, slots))
    if mem_left is not None and typical.memory is not None:
        by_mem = np.floor(np.maximum(mem_left, 0)[..., None] / np.maximum(typical.memory, 1.0))
        k = np.minimum(k, np.where(typical.memory > 0, by_mem, k))
    usable = np.where(access, k * count * np.minimum(typical.milli, WHOLE), 0)
    return _weighted_sum(usable, typical.weight if weight is None else weight)


def capacity_fragmentation(
    free: np.ndarray,
    cpu_left: np.ndarray,
    access: np.ndarray,
    typical: TypicalPods,
    mem_left: np.ndarray | None = None,
    weight: np.ndarray | None = None,
) -> np.ndarray:
    """Expected fragmentation by packing capacity (milli-GPU): free GPU milli minus what the
    typical shapes could still consume there, counting several copies per node and the CPU
    (and, given ``mem_left`` and the shapes' memory, the memory) each copy needs. Finer than
    :func:`fragmentation`, which asks only whether one copy fits.
    """
    f = free.astype(np.int64)
    um, inv = _by_milli(typical)
    units = _units_u(f, um).sum(-2)[..., inv]
    return f.sum(-1) - _usable(units, cpu_left, access, typical, mem_left, weight)


# ---- cached per-node scoring -------------------------------------------------------------
class _NodeCache:
    """Named per-node arrays, valid while the node's :attr:`ClusterState.node_version` stays
    the one they were computed at; each score keeps one per pod shape, the fragmentation
    measures one for the pod-independent terms shared by every shape."""

    __slots__ = ("values", "versions")

    def __init__(self) -> None:
        self.versions = np.empty(0, dtype=np.int64)
        self.values: dict[str, np.ndarray] = {}

    def get(
        self,
        cluster: ClusterState,
        nodes: np.ndarray,
        compute: Callable[[np.ndarray], dict[str, np.ndarray]],
    ) -> dict[str, np.ndarray]:
        """The arrays for ``nodes``, computing them (``compute(stale_nodes)``) where stale."""
        if self.versions.size < cluster.size:
            self.versions = np.full(max(cluster.size, 1), -1, dtype=np.int64)
            self.values = {}
        stale = nodes[self.versions[nodes] != cluster.node_version[nodes]]
        if stale.size:
            for key, value in compute(stale).items():
                table = self.values.get(key)
                if table is None:
                    shape = (self.versions.size, *value.shape[1:])
                    table = self.values[key] = np.zeros(shape, dtype=value.dtype)
                table[stale] = value
            self.versions[stale] = cluster.node_version[stale]
        return {key: table[nodes] for key, table in self.values.items()}


def _cache_for(caches: dict[tuple[Any, ...], _NodeCache], key: tuple[Any, ...]) -> _NodeCache:
    """The cache of one pod shape (all are dropped past 2048 shapes, to bound memory)."""
    cache = caches.get(key)
    if cache is None:
        if len(caches) > 2048:
            caches.clear()
        cache = caches[key] = _NodeCache()
    return cache


class CachedNodeScore(ScorePlugin):
    """Base of the GPU placement scores: caches per (pod shape, node) until the node changes.

    Subclasses implement :meth:`compute` for a set of node slots, returning the raw score per
    node and, for sharing pods, the device the score assumed (-1 when not applicable).
    """

    def __init__(self) -> None:
        self._caches: dict[tuple[Any, ...], _NodeCache] = {}
        self._cluster: weakref.ref[ClusterState] | None = None
        self._static_version = -1

    def cache_key(self, pod: PodInfo) -> tuple[Any, ...]:
        """Everything about the pod the score depends on."""
        g = pod.gpu
        return (
            pod.requests.get(CPU, 0),
            g.count,
            g.milli,
            g.memory_mib,
            g.memory_percent,
            g.models,
        )

    def reset(self) -> None:
        """Forget all cached scores (e.g. after the typical shapes changed)."""
        self._caches.clear()

    def _check_cluster(self, cluster: ClusterState) -> None:
        current = self._cluster() if self._cluster is not None else None
        if current is not cluster or self._static_version != cluster.static_version:
            self._cluster = weakref.ref(cluster)
            self._static_version = cluster.static_version
            self.on_cluster_change(cluster)
            self.reset()

    def on_cluster_change(self, cluster: ClusterState) -> None:
        """Hook: the node set changed (rebuild per-node static tables)."""

    def compute(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, devices) for ``nodes``; implemented by subclasses."""
        raise NotImplementedError

    def cached(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, devices) for ``nodes``, recomputing only nodes changed since last time."""
        self._check_cluster(cluster)

        def compute(stale: np.ndarray) -> dict[str, np.ndarray]:
            scores, devices = self.compute(pod, cluster, stale)
            return {"scores": scores, "devices": devices}

        got = _cache_for(self._caches, self.cache_key(pod)).get(cluster, nodes, compute)
        return got["scores"], got["devices"]

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """Cached raw scores; the assumed devices are left in ``cycle.data[DEVICE_CHOICE]``."""
        scores, devices = self.cached(pod, cluster, nodes)
        cycle.data[DEVICE_CHOICE] = (nodes, devices)
        return scores


def scored_device(cycle: CycleState, node: int) -> int | None:
    """The device a score plugin assumed for ``node`` in this attempt (None: not scored,
    -1: no device choice)."""
    entry = cycle.data.get(DEVICE_CHOICE)
    if entry is None:
        return None
    nodes, devices = entry
    hit = np.flatnonzero(nodes == node)
    return int(devices[hit[0]]) if hit.size else None


def _free(cluster: ClusterState, nodes: np.ndarray) -> np.ndarray:
    return np.where(cluster.device_exists[nodes], cluster.device_milli_free[nodes], 0).astype(
        np.int64
    )


def _cpu_left(cluster: ClusterState, nodes: np.ndarray) -> np.ndarray:
    return cluster.allocatable[nodes, COL_CPU] - cluster.requested[nodes, COL_CPU]


def _mem_left(cluster: ClusterState, nodes: np.ndarray) -> np.ndarray:
    return cluster.allocatable[nodes, COL_MEMORY] - cluster.requested[nodes, COL_MEMORY]


def _whole_take(cluster: ClusterState, nodes: np.ndarray, count: int) -> np.ndarray:
    """(len(nodes), D) mask of the lowest-index idle devices a whole-GPU pod would take."""
    idle = idle_mask(cluster, nodes)
    return idle & (np.cumsum(idle, axis=1) <= count)


def _min_max(scores: np.ndarray) -> np.ndarray:
    """The published simulator's integer min-max rescaling to 0..100."""
    s = scores.astype(np.int64)
    lo, hi = int(s.min()), int(s.max())
    if hi == lo:
        return np.zeros(s.shape, dtype=np.float64)
    return ((s - lo) * MAX_NODE_SCORE // (hi - lo)).astype(np.float64)


# ---- baselines ---------------------------------------------------------------------------
class GpuBestFitScore(CachedNodeScore):
    """BestFit: ``int(100 * (1 - cpu_free_after/2/128000 - gpu_free_after/2/8000))``, min-max
    rescaled over the feasible nodes. Memory is ignored (as published)."""

    name = "GpuBestFit"

    def __init__(self, max_cpu: int = MAX_SPEC_CPU, max_gpu: int = MAX_SPEC_GPU) -> None:
        super().__init__()
        self.max_cpu = max_cpu
        self.max_gpu = max_gpu

    def compute(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Raw integer best-fit scores."""
        cpu_after = _cpu_left(cluster, nodes) - pod.requests.get(CPU, 0)
        gpu_after = _free(cluster, nodes).sum(1) - pod.gpu.total_milli
        share = cpu_after / self.max_cpu * 0.5 + gpu_after / self.max_gpu * 0.5
        raw = np.trunc((1.0 - share) * MAX_NODE_SCORE)
        return raw, np.full(nodes.size, -1)

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Integer min-max to 0..100."""
        return _min_max(scores)


class DotProductScore(CachedNodeScore):
    """Tetris dot-product (merged GPU dimension, normalised by the biggest node):
    ``int(100 * (1 - (cpu_free*cpu_req/128000² + gpu_free*gpu_req/8000²) / 2))``."""

    name = "GpuDotProduct"

    def __init__(self, max_cpu: int = MAX_SPEC_CPU, max_gpu: int = MAX_SPEC_GPU) -> None:
        super().__init__()
        self.max_cpu = max_cpu
        self.max_gpu = max_gpu

    def compute(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Smaller alignment between free and asked resources scores higher."""
        cpu_free = _cpu_left(cluster, nodes) / self.max_cpu
        gpu_free = _free(cluster, nodes).sum(1) / self.max_gpu
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

    def compute(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Integer packing tiers."""
        gpu = pod.gpu
        out = np.zeros(nodes.size, dtype=np.float64)
        if gpu.count <= 0:
            return out, np.full(nodes.size, -1)
        free = _free(cluster, nodes)
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

    def compute(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Reads the GPU shapes of the pods on each scored node."""
        tag = _affinity_tag(pod)
        out = np.zeros(nodes.size, dtype=np.float64)
        if tag is None:
            return out, np.full(nodes.size, -1)
        left = _free(cluster, nodes).sum(1)
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

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """Uses the cycle's seeded RNG."""
        out = np.zeros(nodes.size, dtype=np.float64)
        rng = cycle.rng or np.random.default_rng(0)
        out[rng.integers(nodes.size)] = MAX_NODE_SCORE
        return out


# ---- fragmentation-aware scores ----------------------------------------------------------
class _FragmentationBase(CachedNodeScore):
    """Shared machinery: typical shapes (given or learned online) and exact ``F`` deltas."""

    def __init__(
        self,
        typical_pods: Sequence[dict[str, Any]] | None = None,
        coverage: float = 0.95,
        learn_every: int = 256,
        measure: str = "fgd",
        use_memory: bool = False,
        capacity_shapes: str = "typical",
        scarcity: float = 0.0,
        relearn_threshold: float = 0.2,
    ) -> None:
        super().__init__()
        # Weigh each shape in the capacity measure by the scarcity of the GPU models it may use
        # (all GPUs / GPUs it may use) to this power; 0: by frequency only.
        self.scarcity = float(scarcity)
        # The capacity measure also limits copies by node memory (shapes' mean memory).
        self.use_memory = use_memory
        if capacity_shapes not in ("typical", "all"):
            raise ValueError(
                f"{self.name}.capacity_shapes: unknown {capacity_shapes!r} (typical | all)"
            )
        # "all": the capacity measure counts every shape of the workload, not only the most
        # frequent ones (rare shapes pinned to a scarce GPU model still claim its GPUs).
        self.capacity_shapes = capacity_shapes
        self._full_access: _Access | None = None
        if measure not in ("fgd", "capacity"):
            raise ValueError(f"{self.name}.measure: unknown {measure!r} (fgd | capacity)")
        self.measure = measure
        if learn_every < 1:
            raise ValueError(f"{self.name}.learn_every: must be >= 1 (got {learn_every})")
        if not 0 <= relearn_threshold <= 2:
            raise ValueError(
                f"{self.name}.relearn_threshold: must be within [0, 2] (got {relearn_threshold})"
            )
        self.coverage = coverage
        self.learn_every = learn_every
        self.relearn_threshold = relearn_threshold
        self._next_learn = 1
        self.fixed = typical_pods is not None
        self.typical: TypicalPods | None = (
            TypicalPods.from_args(typical_pods) if typical_pods is not None else None
        )
        self._seen: Counter[Shape] = Counter()
        self._seen_uids: set[str] = set()
        self._since_learn = 0
        self._access: _Access | None = None
        self._fgd_terms = _NodeCache()
        self._capacity_terms = _NodeCache()
        self._pinned_terms = _NodeCache()

    def cache_key(self, pod: PodInfo) -> tuple[Any, ...]:
        """As :meth:`CachedNodeScore.cache_key`, plus the pod's memory when the capacity
        measure counts memory."""
        key = super().cache_key(pod)
        return (*key, pod.requests.get(MEMORY, 0)) if self.use_memory else key

    def on_cluster_change(self, cluster: ClusterState) -> None:
        """Rebuild the model-access table."""
        self._access = None
        self._full_access = None

    def cached(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Learns the shape distribution before scoring when none was configured."""
        self.observe(pod)
        return super().cached(pod, cluster, nodes)

    def observe(self, pod: PodInfo) -> None:
        """Learn the workload's shape distribution from the pods the engine sees (online).

        Only used when no distribution was configured; each pod counts once. The distribution
        is re-estimated after 1, 2, 4, ... new pods, then every ``learn_every``; it replaces
        the one in use only when they differ by more than ``relearn_threshold`` (L1; 0.2 means
        10% of the pods moved between shapes), because a replacement invalidates every cached
        score (the next pod of each shape then scores all its feasible nodes afresh).
        """
        if self.fixed or pod.uid in self._seen_uids:
            return
        self._seen_uids.add(pod.uid)
        self._seen[TypicalPods.shape_of(pod)] += 1
        self._since_learn += 1
        if self.typical is not None and self._since_learn < self._next_learn:
            return
        fresh = TypicalPods.from_counts(self._seen, self.coverage)
        self._since_learn = 0
        self._next_learn = min(2 * self._next_learn, self.learn_every)
        if self.typical is not None and fresh.distance(self.typical) <= self.relearn_threshold:
            return
        self.typical = fresh
        self._access = None
        self._full_access = None
        self.reset()

    def access(self, cluster: ClusterState, nodes: np.ndarray) -> np.ndarray:
        """(len(nodes), T) usable-model mask for the typical shapes."""
        if self._access is None or self._access.codes.size < cluster.size:
            assert self.typical is not None
            self._access = _Access(cluster, self.typical)
        return self._access.rows(nodes)

    def reset(self) -> None:
        """Forget cached scores and the cached per-node terms of both measures."""
        super().reset()
        self._fgd_terms = _NodeCache()
        self._capacity_terms = _NodeCache()
        self._pinned_terms = _NodeCache()

    def deltas(
        self,
        pod: PodInfo,
        cluster: ClusterState,
        nodes: np.ndarray,
        measure: str | None = None,
        scene: _Scene | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``F_before - F_after`` for ``nodes``.

        Sharing pods: (len(nodes), D) per candidate device (NaN where the device cannot host
        the pod). Whole-GPU and CPU-only pods: (len(nodes), 1), devices as the engine assigns
        them (lowest-index idle devices). Returns (deltas, F_before). ``measure`` overrides
        the plugin's measure (``fgd`` | ``capacity``); ``scene`` shares what was read of the
        nodes between the two measures of one scoring.
        """
        scene = scene if scene is not None else _Scene(pod, cluster, nodes)
        kind = measure or self.measure
        if kind in ("capacity", "capacity-pinned"):
            delta, before = self._capacity_deltas(scene, pinned_only=kind == "capacity-pinned")
        else:
            delta, before = self._fgd_deltas(scene)
        # A difference of two float sums carries rounding noise (-160 comes out as
        # -160.0000000000016); the scores truncate and floor deltas, so snap it away.
        return np.round(delta, DELTA_DECIMALS), before

    def _fgd_deltas(self, scene: _Scene) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`deltas` under :func:`fragmentation` for the typical shapes."""
        typical = self.typical
        assert typical is not None
        pod, cluster, nodes, free = scene.pod, scene.cluster, scene.nodes, scene.free
        um, inv = _by_milli(typical)

        def node_terms(stale: np.ndarray) -> dict[str, np.ndarray]:
            f = _free(cluster, stale)
            lt = f[:, :, None] < um  # (S, D, U): device too small for the shape's milli
            return {
                "before": fragmentation(
                    f, _cpu_left(cluster, stale), self.access(cluster, stale), typical
                ),
                "small": np.where(lt, f[:, :, None], 0).sum(1),
                "roomy": (~lt).sum(1),
            }

        terms = self._fgd_terms.get(cluster, nodes, node_terms)
        before = terms["before"]
        acc = self.access(cluster, nodes)
        gpu = pod.gpu
        cpu_after = scene.cpu_after
        if not gpu.is_shared:
            # CPU-only and whole-GPU pods: the taken devices are idle (free = WHOLE, fitting
            # every shape); afterwards they are 0, too small for every GPU shape, adding 0.
            taken = _whole_take(cluster, nodes, gpu.count).sum(1) if gpu.count > 0 else 0
            roomy = terms["roomy"] - np.outer(taken, um > 0)
            ok = acc & (cpu_after[:, None] >= typical.cpu) & (roomy[:, inv] >= typical.count)
            total = free.sum(1) - taken * WHOLE
            frag = np.where(ok, terms["small"][:, inv], total[:, None])
            return (before - _weighted_sum(frag, typical.weight))[:, None], before
        # Sharing pod: only the chosen device changes, so update the per-shape sums
        # incrementally, once per distinct candidate (node, free milli).
        m = gpu.milli
        cand = scene.candidates()
        s, f = cand.node, cand.free  # (P,)
        f2 = f - m
        lt_f, lt2 = f[:, None] < um, f2[:, None] < um  # (P, U)
        small2 = terms["small"][s] - np.where(lt_f, f[:, None], 0) + np.where(lt2, f2[:, None], 0)
        roomy2 = (terms["roomy"][s] - (~lt_f) + (~lt2))[:, inv]  # (P, T)
        ok2 = acc[s] & (cpu_after[s, None] >= typical.cpu) & (roomy2 >= typical.count)
        frag2 = np.where(ok2, small2[:, inv], (free.sum(1)[s] - m)[:, None])
        return cand.scatter(before[s] - _weighted_sum(frag2, typical.weight)), before

    def _capacity_deltas(
        self, scene: _Scene, pinned_only: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`deltas` under :func:`capacity_fragmentation`: the typical shapes (or all
        shapes, ``capacity_shapes="all"``), weighted by frequency times scarcity; with
        ``pinned_only`` only the shapes pinned to some GPU models count."""
        typical = self.typical
        assert typical is not None
        pod, cluster, nodes, free = scene.pod, scene.cluster, scene.nodes, scene.free
        table = self._access
        if table is None or table.codes.size < cluster.size:
            self.access(cluster, nodes)
            table = self._access
        if self.capacity_shapes == "all" and typical.full is not None:
            if self._full_access is None or self._full_access.codes.size < cluster.size:
                self._full_access = _Access(cluster, typical.full)
            table = self._full_access
            typical = typical.full
        assert table is not None
        weight = typical.weight * table.scarcity**self.scarcity if self.scarcity else None
        if pinned_only:
            pinned = np.array([models is not None for models in typical.models])
            weight = np.where(pinned, typical.weight if weight is None else weight, 0.0)
        cache = self._pinned_terms if pinned_only else self._capacity_terms
        memory = self.use_memory and typical.memory is not None
        um, inv = _by_milli(typical)

        def node_terms(stale: np.ndarray) -> dict[str, np.ndarray]:
            f = _free(cluster, stale)
            total_u = _units_u(f, um).sum(1)  # (S, U)
            usable = _usable(
                total_u[:, inv],
                _cpu_left(cluster, stale),
                table.rows(stale),
                typical,
                _mem_left(cluster, stale) if memory else None,
                weight,
            )
            return {"before": f.sum(1) - usable, "total_u": total_u}

        terms = cache.get(cluster, nodes, node_terms)
        before, total_u = terms["before"], terms["total_u"]
        acc = table.rows(nodes)
        gpu = pod.gpu
        cpu_after = scene.cpu_after
        mem_after = _mem_left(cluster, nodes) - pod.requests.get(MEMORY, 0) if memory else None
        if not gpu.is_shared:
            # CPU-only and whole-GPU pods: the taken devices are idle (free = WHOLE).
            taken = _whole_take(cluster, nodes, gpu.count).sum(1) if gpu.count > 0 else 0
            units = total_u - np.outer(taken, _units_u(np.array([WHOLE]), um)[0])
            usable = _usable(units[:, inv], cpu_after, acc, typical, mem_after, weight)
            after = free.sum(1) - taken * WHOLE - usable
            return (before - after)[:, None], before
        cand = scene.candidates()
        s, f = cand.node, cand.free  # (P,): one row per distinct candidate (node, free milli)
        units_f = _units_u(f, um)  # (P, U)
        units2 = _units_u(np.maximum(f - gpu.milli, 0), um)
        sums = (total_u[s] - units_f + units2)[:, inv]  # (P, T)
        after = (free.sum(1)[s] - gpu.milli) - _usable(
            sums,
            cpu_after[s],
            acc[s],
            typical,
            None if mem_after is None else mem_after[s],
            weight,
        )
        return cand.scatter(before[s] - after), before


class _Scene:
    """What one scoring reads of the scored nodes, gathered once for every measure."""

    __slots__ = ("_candidates", "_only", "cluster", "cpu", "cpu_after", "free", "nodes", "pod")

    def __init__(self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray) -> None:
        self.pod, self.cluster, self.nodes = pod, cluster, nodes
        self.free = _free(cluster, nodes)
        self.cpu = _cpu_left(cluster, nodes)
        self.cpu_after = self.cpu - pod.requests.get(CPU, 0)
        self._candidates: _Candidates | None = None
        self._only: np.ndarray | None = None

    def restrict(self, devices: np.ndarray) -> None:
        """From now on evaluate only the (node, device) pairs set in ``devices``."""
        self._only = devices
        self._candidates = None

    def candidates(self) -> _Candidates:
        """A sharing pod's distinct candidate devices."""
        if self._candidates is None:
            valid = shared_fit(self.pod, self.cluster, self.nodes)
            if self._only is not None:
                valid = valid & self._only
            self._candidates = _Candidates(valid, self.free)
        return self._candidates


class _Candidates:
    """The distinct (node, free milli) pairs among a sharing pod's candidate devices.

    A device's score depends on its node and its own free milli only, so the devices of one
    node with equal free milli are evaluated once (nodes mostly hold idle devices plus a few
    partly used ones: about two rows per node instead of one per device).
    """

    __slots__ = ("_cols", "_inverse", "_rows", "_shape", "free", "node")

    def __init__(self, valid: np.ndarray, free: np.ndarray) -> None:
        rows, cols = np.nonzero(valid)
        values = free[rows, cols]
        key = rows * (int(free.max(initial=0)) + 1) + values
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        self.node = rows[first]
        self.free = values[first]
        self._rows, self._cols, self._inverse = rows, cols, inverse.reshape(-1)
        self._shape = valid.shape

    def scatter(self, values: np.ndarray) -> np.ndarray:
        """(S, D) array of the per-candidate ``values``, NaN where the device cannot host."""
        out = np.full(self._shape, np.nan)
        out[self._rows, self._cols] = values[self._inverse]
        return out


def _gpu_weighted(typical: TypicalPods) -> TypicalPods:
    """The same shapes weighted by the GPU milli they ask rather than by pod count."""
    w = typical.weight * typical.count * np.minimum(typical.milli, WHOLE)
    if w.sum() <= 0:
        return typical
    return TypicalPods(typical.cpu, typical.milli, typical.count, typical.models, w / w.sum())


def _sigmoid_score(delta: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.trunc(MAX_NODE_SCORE / (1.0 + np.exp(-delta / 1000.0)))


class FgdScore(_FragmentationBase):
    """FGD as published: ``int(100 * sigmoid((F_before - F_after) / 1000))``.

    A sharing pod is scored with its best device (the first device reaching the best
    truncated score). Args: ``typical_pods`` (see :meth:`TypicalPods.from_args`; learned
    online from the pods seen when absent), ``coverage`` (0.95), ``learn_every`` (256) and
    ``relearn_threshold`` (0.2, see :meth:`_FragmentationBase.observe`).
    """

    name = "FGD"

    def compute(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Truncated sigmoid scores; for sharing pods the best device's."""
        delta, _ = self.deltas(pod, cluster, nodes)
        if delta.shape[1] == 1 and not pod.gpu.is_shared:
            return _sigmoid_score(delta[:, 0]), np.full(nodes.size, -1)
        scores = np.where(np.isnan(delta), -1.0, _sigmoid_score(np.nan_to_num(delta)))
        best = np.argmax(scores, axis=1)  # first device with the best truncated score
        return scores[np.arange(nodes.size), best], best


class FragmentationScore(_FragmentationBase):
    """Our fragmentation-aware score (policy ``fairgpu-frag``).

    Lexicographic, exact: (1) the smallest increase of expected fragmentation, untruncated,
    in units of ``resolution`` milli-GPU; (2) among equal increases, the tightest fit: the
    least GPU milli left on the node after placement, then the least CPU left. A sharing pod's
    device is chosen jointly with the node (the device giving the best node score). Remaining
    ties go to the profile's tie-break (``fixed-rank`` keeps filling the same nodes).
    Args as :class:`FgdScore`, plus ``resolution`` (milli-GPU, default 1).

    Lexicographic variant (policy ``fairgpu-frag-lex``): ``lead="fgd"`` puts FGD's truncated
    score first and squeezes the delta above into a tie-break below one FGD point;
    ``use_memory`` limits capacity copies by node memory; ``capacity_shapes="all"`` counts
    every shape of the workload (:attr:`TypicalPods.full`); ``scarcity`` (a power) weighs each
    shape by the scarcity of the GPU models it may use.

    ``sharing_ties="gap-balance"`` (with ``lead="fgd"``) orders a sharing pod's FGD ties
    differently: first by the packing capacity of the shapes pinned to GPU models only (so
    unpinned pods keep off the GPUs scarce models need), then by :func:`gap_balance`, the
    sum-of-squares rule of online bin packing over the cluster's partly used devices; whole-GPU
    and CPU-only pods keep the capacity order.

    ``packing_plan=True`` (with ``sharing_ties="gap-balance"``) puts a tier above FGD's score
    for sharing pods: a partly used device whose shares plus this one are part of an optimal
    packing of the workload's share sizes first, then an idle device, then the rest
    (:class:`~fairgpu.engine.plugins.packing_plan.PackingPlan`).
    """

    name = "FragmentationAware"

    def __init__(
        self,
        typical_pods: Sequence[dict[str, Any]] | None = None,
        coverage: float = 0.95,
        learn_every: int = 256,
        resolution: float = 1.0,
        packing_weight: float = 0.0,
        measure: str = "capacity",
        quantize: str = "linear",
        weight_by_gpu: bool = False,
        lead: str = "none",
        lead_weight: float = 1.0,
        lead_scale: float = 1000.0,
        refine: str = "all",
        use_memory: bool = False,
        capacity_shapes: str = "typical",
        scarcity: float = 0.0,
        relearn_threshold: float = 0.2,
        sharing_ties: str = "capacity",
        packing_plan: bool = False,
    ) -> None:
        super().__init__(
            typical_pods,
            coverage,
            learn_every,
            measure,
            use_memory,
            capacity_shapes,
            scarcity,
            relearn_threshold,
        )
        if lead not in ("none", "fgd", "fgd-exact"):
            raise ValueError(f"{self.name}.lead: unknown {lead!r} (none | fgd | fgd-exact)")
        self.lead = lead
        self.lead_weight = lead_weight
        self.lead_scale = lead_scale
        if refine not in ("all", "shared"):
            raise ValueError(f"{self.name}.refine: unknown {refine!r} (all | shared)")
        self.refine = refine
        self.weight_by_gpu = weight_by_gpu
        if weight_by_gpu and self.typical is not None:
            self.typical = _gpu_weighted(self.typical)
        if quantize not in ("linear", "sigmoid"):
            raise ValueError(f"{self.name}.quantize: unknown {quantize!r} (linear | sigmoid)")
        self.quantize = quantize
        if resolution <= 0:
            raise ValueError(f"{self.name}.resolution: must be positive (got {resolution})")
        self.resolution = resolution
        self.packing_weight = packing_weight
        if sharing_ties not in ("capacity", "gap-balance"):
            raise ValueError(
                f"{self.name}.sharing_ties: unknown {sharing_ties!r} (capacity | gap-balance)"
            )
        if sharing_ties == "gap-balance" and lead != "fgd":
            raise ValueError(f"{self.name}.sharing_ties: gap-balance needs lead='fgd'")
        self.sharing_ties = sharing_ties
        if packing_plan and sharing_ties != "gap-balance":
            raise ValueError(f"{self.name}.packing_plan: needs sharing_ties='gap-balance'")
        self.packing_plan = packing_plan
        self._plan: PackingPlan | None = None
        self._plan_current = False
        self._contents = DeviceContents()
        self._content_codes = _NodeCache()
        self._gap_counts = GapCounts()
        self._device_caches: dict[tuple[Any, ...], _NodeCache] = {}
        self._lead_caches: dict[tuple[Any, ...], _NodeCache] = {}

    def reset(self) -> None:
        """Also forget the per-device scores of sharing pods, the cached FGD deltas and the
        packing plan (it follows the typical shapes)."""
        super().reset()
        self._device_caches = {}
        self._lead_caches = {}
        self._plan_current = False

    def on_cluster_change(self, cluster: ClusterState) -> None:
        """Also forget the devices' contents and gap counts (another cluster or node set)."""
        super().on_cluster_change(cluster)
        self._contents = DeviceContents()
        self._content_codes = _NodeCache()
        self._gap_counts = GapCounts()

    def plan(self) -> PackingPlan:
        """The packing plan of the typical shapes' GPU shares (all shapes where known). It is
        solved again after the typical shapes changed only if their shares moved by more
        than :data:`PLAN_RELEARN` (the solve takes up to a few hundred ms)."""
        if self._plan is None or not self._plan_current:
            assert self.typical is not None
            shapes = self.typical.full if self.typical.full is not None else self.typical
            weights: dict[int, float] = {}
            for i in range(shapes.size):
                milli = int(shapes.milli[i])
                if shapes.count[i] == 1 and 0 < milli < WHOLE:
                    weights[milli] = weights.get(milli, 0.0) + float(shapes.weight[i])
            if self._plan is None or (weights and self._plan.distance(weights) > PLAN_RELEARN):
                self._plan = PackingPlan(weights)
            self._plan_current = True
        return self._plan

    def _lead_score(self, lead: np.ndarray) -> np.ndarray:
        """FGD's truncated score (0..100) of the deltas ``lead`` (NaN read as 0), on the
        ``lead_scale`` the policy set."""
        return _sigmoid_score(np.nan_to_num(lead) * (1000.0 / self.lead_scale))

    def _device_codes(self, cluster: ClusterState, nodes: np.ndarray) -> np.ndarray:
        """(len(nodes), D) content codes of the devices, cached per node version."""

        def compute(stale: np.ndarray) -> dict[str, np.ndarray]:
            return {"codes": self._contents.of(cluster, stale)}

        return self._content_codes.get(cluster, nodes, compute)["codes"]

    def _any_pinned_shape(self) -> bool:
        """Whether some shape the capacity measure counts is pinned to GPU models."""
        assert self.typical is not None
        shapes = self.typical
        if self.capacity_shapes == "all" and shapes.full is not None:
            shapes = shapes.full
        return any(models is not None for models in shapes.models)

    def _fgd_lead(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray, scene: _Scene
    ) -> np.ndarray:
        """FGD's deltas for ``nodes`` (as :meth:`deltas`), cached per node version under a key
        without the pod's memory: pods that differ only in memory (separate score caches when
        the capacity measure counts memory) share them."""
        if not self.use_memory:
            return self.deltas(pod, cluster, nodes, measure="fgd", scene=scene)[0]

        def compute(stale: np.ndarray) -> dict[str, np.ndarray]:
            part = scene if stale.size == nodes.size else None
            return {"lead": self.deltas(pod, cluster, stale, measure="fgd", scene=part)[0]}

        key = CachedNodeScore.cache_key(self, pod)
        return _cache_for(self._lead_caches, key).get(cluster, nodes, compute)["lead"]

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """As :meth:`CachedNodeScore.score`; under ``gap-balance`` a sharing pod's cached
        per-device scores get the gap-balance term of the moment before each node picks its
        device (the term reads every device of the cluster, so it is never cached)."""
        if self.sharing_ties != "gap-balance" or not pod.gpu.is_shared:
            return super().score(cycle, pod, cluster, nodes)
        self.observe(pod)
        self._check_cluster(cluster)
        per_device = self._device_scores(pod, cluster, nodes)
        counts = self._gap_counts.counts(cluster)
        balance = gap_balance(cluster, nodes, pod.gpu.milli, counts)
        balance = np.clip(balance / GAP_SPAN, -0.45, 0.45)
        total = per_device + balance * GAP_STEP
        best = np.argmax(total, axis=1)
        cycle.data[DEVICE_CHOICE] = (nodes, best)
        return total[np.arange(nodes.size), best]

    def _device_scores(self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray) -> np.ndarray:
        """(len(nodes), D): the packing plan's tier (with ``packing_plan``), FGD's truncated
        score, the pinned shapes' capacity change (below one FGD point); -inf where the
        device cannot host; cached per node version."""

        def compute(stale: np.ndarray) -> dict[str, np.ndarray]:
            scene = _Scene(pod, cluster, stale)
            lead = self._fgd_lead(pod, cluster, stale, scene)
            top = self._lead_score(lead)
            if self.packing_plan:
                codes = self._device_codes(cluster, stale)
                top = top + PLAN_STEP * self.plan().tiers(pod.gpu.milli, codes, self._contents)
            top = np.where(np.isnan(lead), -math.inf, top)
            if not self._any_pinned_shape():
                # Without model-pinned shapes the pinned capacity changes by the pod's own milli
                # on every device: it orders nothing.
                return {"values": top}
            # Only a node's best devices so far can be its choice: the capacity measure (the
            # costly part) is computed for those alone.
            best = top == top.max(axis=1, keepdims=True)
            scene.restrict(best & np.isfinite(top))
            pinned, _ = self.deltas(pod, cluster, stale, measure="capacity-pinned", scene=scene)
            tie = np.clip(np.floor(np.nan_to_num(pinned) / self.resolution), -LEX_SPAN, LEX_SPAN)
            return {"values": np.where(best, top + tie / (2.5 * LEX_SPAN), top)}

        cache = _cache_for(self._device_caches, self.cache_key(pod))
        return cache.get(cluster, nodes, compute)["values"]

    def compute(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Composite score: fragmentation delta first, best fit second."""
        scene = _Scene(pod, cluster, nodes)
        lead = None
        if self.lead == "fgd" and pod.gpu.is_shared and not self.packing_weight:
            # FGD's integer score comes first: a device below its node's best FGD score can
            # never be the node's choice, so only the devices at that score get the (costly)
            # capacity measure.
            lead = self._fgd_lead(pod, cluster, nodes, scene)
            top = np.where(np.isnan(lead), -1.0, self._lead_score(lead))
            scene.restrict(top == top.max(axis=1, keepdims=True))
        delta, _ = self.deltas(pod, cluster, nodes, scene=scene)
        free = scene.free
        gpu_left = free.sum(1) - pod.gpu.total_milli
        cpu_left = scene.cpu_after
        # Secondary criterion in [0, 1): fuller nodes first (GPU dominates CPU).
        fit = 1.0 - (
            np.clip(gpu_left, 0, MAX_SPEC_GPU) / (MAX_SPEC_GPU + 1) * 0.999
            + np.clip(cpu_left, 0, MAX_SPEC_CPU) / (MAX_SPEC_CPU + 1) * 0.000999
        )
        if self.quantize == "sigmoid":
            primary = _sigmoid_score(np.nan_to_num(delta))
            primary = np.where(np.isnan(delta), np.nan, primary)
        else:
            primary = np.floor(delta / self.resolution)  # (S, D) or (S, 1)
        if self.lead != "none":
            if lead is None:
                lead = self._fgd_lead(pod, cluster, nodes, scene)
            if self.refine == "shared" and not pod.gpu.is_shared:
                primary = np.zeros_like(primary)
            if self.lead == "fgd":
                # FGD's truncated score (0..100) first; our measure, squeezed into (-0.5, 0.5),
                # only orders FGD's ties. The total stays within 0..101, below the preference
                # scores' steps.
                top = self._lead_score(lead)
                primary = top + np.clip(primary, -LEX_SPAN, LEX_SPAN) / (2.5 * LEX_SPAN)
            else:
                primary = np.nan_to_num(lead) * self.lead_weight + primary
            primary = np.where(np.isnan(delta), np.nan, primary)
        if delta.shape[1] == 1 and not pod.gpu.is_shared:
            return primary[:, 0] + self.packing_weight * fit * 0.5, np.full(nodes.size, -1)
        # Sharing: per device, tighter device is better among equal deltas.
        dev_fit = 1.0 - np.clip(free - pod.gpu.milli, 0, WHOLE) / (WHOLE + 1)
        total = primary + self.packing_weight * (fit[:, None] * 0.5 + dev_fit * 0.0005)
        total = np.where(np.isnan(delta), -math.inf, total)
        best = np.argmax(total, axis=1)
        return total[np.arange(nodes.size), best], best


class GapCounts:
    """N(g): the cluster's partly used devices per free-milli size g (0 < g < 1000), updated
    from the nodes changed since the last call (by node version) instead of recounting every
    device of the cluster for each pod. Build a new one when the node set changes."""

    def __init__(self) -> None:
        self._versions = np.empty(0, dtype=np.int64)
        self._free = np.zeros((0, 0), dtype=np.int64)
        self._counts = np.zeros(WHOLE + 1, dtype=np.int64)

    def counts(self, cluster: ClusterState) -> np.ndarray:
        """N(g) for g = 0..1000 (entries 0 and 1000 are always 0)."""
        size = cluster.size
        if self._versions.size != size or self._free.shape[1] != cluster.max_devices:
            self._versions = np.full(size, -1, dtype=np.int64)
            self._free = np.zeros((size, cluster.max_devices), dtype=np.int64)
            self._counts = np.zeros(WHOLE + 1, dtype=np.int64)
        stale = np.flatnonzero(self._versions != cluster.node_version[:size])
        if stale.size:
            exists = cluster.device_exists[stale] & cluster.active[stale, None]
            free = np.where(exists, cluster.device_milli_free[stale], 0)
            fresh = np.where((free > 0) & (free < WHOLE), free, 0)
            self._counts -= np.bincount(self._free[stale].ravel(), minlength=WHOLE + 1)
            self._counts += np.bincount(fresh.ravel(), minlength=WHOLE + 1)
            self._counts[0] = 0
            self._free[stale] = fresh
            self._versions[stale] = cluster.node_version[stale]
        return self._counts


def gap_balance(
    cluster: ClusterState, nodes: np.ndarray, milli: int, counts: np.ndarray | None = None
) -> np.ndarray:
    """(len(nodes), D): minus the change of ``sum over gap sizes g of N(g)**2`` if a pod of
    ``milli`` went on each device, N(g) counting the cluster's partly used devices with g
    milli free (Csirik et al.'s sum-of-squares rule for online bin packing).

    Higher is better: taking a gap that many devices share and leaving one that few do keeps
    a spread of gap sizes for the pods still to come, instead of piling up one size no pod
    fits. Devices that cannot host the pod get meaningless values (mask them). ``counts``:
    N(g) when already known (:class:`GapCounts`).
    """
    if counts is None:
        counts = GapCounts().counts(cluster)
    gap = np.clip(_free(cluster, nodes), 0, WHOLE)
    left = np.clip(gap - milli, 0, WHOLE)
    taken = np.where((gap > 0) & (gap < WHOLE), 1 - 2 * counts[gap], 0)
    made = np.where((left > 0) & (left < WHOLE), 1 + 2 * counts[left], 0)
    return -(taken + made).astype(np.float64)


# ---- device policies -------------------------------------------------------------------
class DeviceFromScore(DevicePolicy):
    """Use the device the node's score was computed with (joint node/device choice).

    Falls back to the tightest fit when the score left no choice for this node (whole-GPU
    and CPU-only pods, or a different score plugin).
    """

    name = "score-device"

    def choose(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, node: int
    ) -> tuple[int, ...] | None:
        """The scored device if it still fits, else best-fit."""
        gpu = pod.gpu
        if gpu.is_shared:
            choice = scored_device(cycle, node)
            if choice is not None and choice >= 0 and bool(shared_fit(pod, cluster, node)[choice]):
                return (choice,)
        return DeviceBestFit().choose(cycle, pod, cluster, node)


class _DeviceFromOwnScore(DeviceFromScore):
    """Device choice recorded by a score plugin; when the node was not scored (a single
    feasible node is chosen without scoring) the plugin ``scorer`` evaluates it here."""

    scorer: ClassVar[type[ScorePlugin]]

    def __init__(self, **score_args: Any) -> None:
        self.score_args = score_args
        self._scorer: ScorePlugin | None = None

    def choose(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, node: int
    ) -> tuple[int, ...] | None:
        """Scored device, or a fresh evaluation of the node."""
        if pod.gpu.is_shared and scored_device(cycle, node) is None:
            if self._scorer is None:
                self._scorer = self.scorer(**self.score_args)
            self._scorer.score(cycle, pod, cluster, np.array([node]))
        return super().choose(cycle, pod, cluster, node)


class DeviceFgd(_DeviceFromOwnScore):
    """FGD's device choice: the device with the best FGD score."""

    name = "fgd"
    scorer = FgdScore


class DeviceFragmentation(_DeviceFromOwnScore):
    """Our policy's device choice, evaluated jointly with the node (see
    :class:`FragmentationScore`)."""

    name = "frag"
    scorer = FragmentationScore


def cluster_fragmentation(cluster: ClusterState, typical: TypicalPods) -> float:
    """Expected fragmentation of the whole cluster, milli-GPU (sum over active nodes)."""
    nodes = np.flatnonzero(cluster.active[: cluster.size])
    if nodes.size == 0:
        return 0.0
    acc = _Access(cluster, typical).rows(nodes)
    free, cpu = _free(cluster, nodes), _cpu_left(cluster, nodes)
    return float(fragmentation(free, cpu, acc, typical).sum())


SCORE_PLUGINS = (
    GpuBestFitScore,
    DotProductScore,
    GpuPackingScore,
    GpuClusteringScore,
    RandomScore,
    FgdScore,
    FragmentationScore,
)
DEVICE_POLICIES = (DeviceFromScore, DeviceFgd, DeviceFragmentation)
