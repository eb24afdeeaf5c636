"""Fragmentation by packing capacity: the free GPU milli the workload's typical shapes could
not consume on a node, and its exact change per placement.

Finer than FGD's measure (:func:`~fairgpu.engine.plugins.fgd_measure.fragmentation`), which
asks only whether one copy of a shape fits: here copies of each shape are packed into the
node until its devices, its CPU or (when the shapes' memory is known) its memory run out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fairgpu.engine.plugins.fgd_measure import by_milli, weighted_sum
from fairgpu.engine.plugins.model_access import ModelAccess
from fairgpu.engine.plugins.node_cache import NodeCache, cpu_left, free_milli, mem_left, whole_take
from fairgpu.engine.plugins.scene import Scene
from fairgpu.engine.plugins.shape_learning import TypicalPods
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import MEMORY

Array = npt.NDArray[Any]


def units_by_milli(f: Array, um: Array) -> Array:
    """(..., D, U): how many pods of each distinct milli fit in each device's free milli."""
    # Float division then floor is exact for these magnitudes (< 2**26) and, unlike integer
    # division by an array, vectorised.
    per = np.floor(f[..., :, None] / np.maximum(um, 1))
    # Whole-GPU shapes need an idle device; CPU-only shapes use no device.
    units: Array = np.where(um >= WHOLE, f[..., :, None] >= WHOLE, np.where(um > 0, per, 0))
    return units


def usable(
    units_sum: Array,
    cpu_left: Array,
    access: Array,
    typical: TypicalPods,
    mem_left: Array | None = None,
    weight: Array | None = None,
) -> Array:
    """(...): expected GPU milli the typical shapes could still consume, packing copies of
    each shape into the node until its devices, its CPU or (when both ``mem_left`` and the
    shapes' memory are known) its memory run out."""
    count = np.maximum(typical.count, 1)
    slots = np.floor(units_sum / count)  # exact, as in units_by_milli
    by_cpu = np.floor(np.maximum(cpu_left, 0)[..., None] / np.maximum(typical.cpu, 1))
    k = np.minimum(slots, np.where(typical.cpu > 0, by_cpu, slots))
    if mem_left is not None and typical.memory is not None:
        by_mem = np.floor(np.maximum(mem_left, 0)[..., None] / np.maximum(typical.memory, 1.0))
        k = np.minimum(k, np.where(typical.memory > 0, by_mem, k))
    usable = np.where(access, k * count * np.minimum(typical.milli, WHOLE), 0)
    return weighted_sum(usable, typical.weight if weight is None else weight)


def capacity_fragmentation(
    free: Array,
    cpu_left: Array,
    access: Array,
    typical: TypicalPods,
    mem_left: Array | None = None,
    weight: Array | None = None,
) -> Array:
    """Expected fragmentation by packing capacity (milli-GPU): free GPU milli minus what the
    typical shapes could still consume there, counting several copies per node and the CPU
    (and, given ``mem_left`` and the shapes' memory, the memory) each copy needs.
    """
    f = free.astype(np.int64)
    um, inv = by_milli(typical)
    units = units_by_milli(f, um).sum(-2)[..., inv]
    frag: Array = f.sum(-1) - usable(units, cpu_left, access, typical, mem_left, weight)
    return frag


def capacity_deltas(
    scene: Scene,
    typical: TypicalPods,
    access: ModelAccess,
    weight: Array | None,
    memory: bool,
    terms: NodeCache,
) -> tuple[Array, Array]:
    """``F_before - F_after`` under :func:`capacity_fragmentation` of placing ``scene.pod``
    on ``scene.nodes`` (shaped as :func:`~fairgpu.engine.plugins.fgd_measure.fgd_deltas`),
    and ``F_before``. ``weight``: the shapes' weights (None: their frequencies); ``memory``:
    limit copies by node memory too; ``terms`` caches the pod-independent per-node terms (one
    cache per choice of shapes and weights)."""
    pod, cluster, nodes, free = scene.pod, scene.cluster, scene.nodes, scene.free
    um, inv = by_milli(typical)

    def node_terms(stale: Array) -> dict[str, Array]:
        f = free_milli(cluster, stale)
        total_u = units_by_milli(f, um).sum(1)  # (S, U)
        usable_now = usable(
            total_u[:, inv],
            cpu_left(cluster, stale),
            access.rows(stale),
            typical,
            mem_left(cluster, stale) if memory else None,
            weight,
        )
        return {"before": f.sum(1) - usable_now, "total_u": total_u}

    got = terms.get(cluster, nodes, node_terms)
    before, total_u = got["before"], got["total_u"]
    acc = access.rows(nodes)
    gpu = pod.gpu
    cpu_after = scene.cpu_after
    mem_after = mem_left(cluster, nodes) - pod.requests.get(MEMORY, 0) if memory else None
    if not gpu.is_shared:
        # CPU-only and whole-GPU pods: the taken devices are idle (free = WHOLE).
        taken = whole_take(cluster, nodes, gpu.count).sum(1) if gpu.count > 0 else 0
        units = total_u - np.outer(taken, units_by_milli(np.array([WHOLE]), um)[0])
        usable_after = usable(units[:, inv], cpu_after, acc, typical, mem_after, weight)
        after = free.sum(1) - taken * WHOLE - usable_after
        return (before - after)[:, None], before
    cand = scene.candidates()
    s, f = cand.node, cand.free  # (P,): one row per distinct candidate (node, free milli)
    units_f = units_by_milli(f, um)  # (P, U)
    units2 = units_by_milli(np.maximum(f - gpu.milli, 0), um)
    sums = (total_u[s] - units_f + units2)[:, inv]  # (P, T)
    after = (free.sum(1)[s] - gpu.milli) - usable(
        sums,
        cpu_after[s],
        acc[s],
        typical,
        None if mem_after is None else mem_after[s],
        weight,
    )
    return cand.scatter(before[s] - after), before
