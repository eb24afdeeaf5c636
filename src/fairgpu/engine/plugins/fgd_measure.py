"""FGD's expected fragmentation of a node (USENIX ATC'23) and its exact change per placement.

For a node and a typical pod shape, the fragmentation is the GPU milli the shape cannot use:
all free GPU milli if the shape cannot run there at all (CPU-only shape, GPU model not
allowed, not enough CPU, not enough devices with room), otherwise the free milli of the
devices that have less room than the shape needs. A node's expected fragmentation ``F``
weighs the shapes by their frequency in the workload (:class:`TypicalPods`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.plugins.model_access import ModelAccess
from fairgpu.engine.plugins.node_cache import NodeCache, cpu_left, free_milli, whole_take
from fairgpu.engine.plugins.scene import Scene
from fairgpu.engine.plugins.shape_learning import TypicalPods
from fairgpu.model.gpu import WHOLE

Array = npt.NDArray[Any]


def fragmentation(free: Array, cpu_left: Array, access: Array, typical: TypicalPods) -> Array:
    """Expected fragmentation ``F`` (milli-GPU) of node states.

    ``free``: (..., D) free milli per device (0 for absent devices); ``cpu_left``: (...);
    ``access``: (..., T). Returns (...) floats.
    """
    f = free.astype(np.int64)
    total = f.sum(-1)
    um, inv = by_milli(typical)
    lt = f[..., :, None] < um  # (..., D, U) device too small for the shape's milli
    small = np.where(lt, f[..., :, None], 0).sum(-2)[..., inv]  # (..., T)
    roomy = (~lt).sum(-2)[..., inv]
    ok = access & (cpu_left[..., None] >= typical.cpu) & (roomy >= typical.count)
    frag = np.where(ok, small, total[..., None])
    return weighted_sum(frag, typical.weight)


def weighted_sum(values: Array, weight: Array) -> Array:
    """``values @ weight`` over the last axis, rounded the same way for a row whatever the
    batch it is in (a matrix product's rounding depends on the batch shape), so a node's
    "before" and "after" terms computed in different calls still give exact zero deltas."""
    total: Array = (values * weight).sum(-1)
    return total


_BY_MILLI: dict[int, tuple[TypicalPods, Array, Array]] = {}


def by_milli(typical: TypicalPods) -> tuple[Array, Array]:
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


def fgd_deltas(
    scene: Scene, typical: TypicalPods, access: ModelAccess, terms: NodeCache
) -> tuple[Array, Array]:
    """``F_before - F_after`` of placing ``scene.pod`` on ``scene.nodes``, and ``F_before``.

    Sharing pods: (len(nodes), D) per candidate device (NaN where the device cannot host the
    pod). Whole-GPU and CPU-only pods: (len(nodes), 1), devices as the engine assigns them
    (lowest-index idle devices). ``terms`` caches the pod-independent per-node terms.
    """
    pod, cluster, nodes, free = scene.pod, scene.cluster, scene.nodes, scene.free
    um, inv = by_milli(typical)

    def node_terms(stale: Array) -> dict[str, Array]:
        f = free_milli(cluster, stale)
        lt = f[:, :, None] < um  # (S, D, U): device too small for the shape's milli
        return {
            "before": fragmentation(f, cpu_left(cluster, stale), access.rows(stale), typical),
            "small": np.where(lt, f[:, :, None], 0).sum(1),
            "roomy": (~lt).sum(1),
        }

    got = terms.get(cluster, nodes, node_terms)
    before = got["before"]
    acc = access.rows(nodes)
    gpu = pod.gpu
    cpu_after = scene.cpu_after
    if not gpu.is_shared:
        # CPU-only and whole-GPU pods: the taken devices are idle (free = WHOLE, fitting
        # every shape); afterwards they are 0, too small for every GPU shape, adding 0.
        taken = whole_take(cluster, nodes, gpu.count).sum(1) if gpu.count > 0 else 0
        roomy = got["roomy"] - np.outer(taken, um > 0)
        ok = acc & (cpu_after[:, None] >= typical.cpu) & (roomy[:, inv] >= typical.count)
        total = free.sum(1) - taken * WHOLE
        frag = np.where(ok, got["small"][:, inv], total[:, None])
        return (before - weighted_sum(frag, typical.weight))[:, None], before
    # Sharing pod: only the chosen device changes, so update the per-shape sums
    # incrementally, once per distinct candidate (node, free milli).
    m = gpu.milli
    cand = scene.candidates()
    s, f = cand.node, cand.free  # (P,)
    f2 = f - m
    lt_f, lt2 = f[:, None] < um, f2[:, None] < um  # (P, U)
    small2 = got["small"][s] - np.where(lt_f, f[:, None], 0) + np.where(lt2, f2[:, None], 0)
    roomy2 = (got["roomy"][s] - (~lt_f) + (~lt2))[:, inv]  # (P, T)
    ok2 = acc[s] & (cpu_after[s, None] >= typical.cpu) & (roomy2 >= typical.count)
    frag2 = np.where(ok2, small2[:, inv], (free.sum(1)[s] - m)[:, None])
    return cand.scatter(before[s] - weighted_sum(frag2, typical.weight)), before


def cluster_fragmentation(cluster: ClusterState, typical: TypicalPods) -> float:
    """Expected fragmentation of the whole cluster, milli-GPU (sum over active nodes)."""
    nodes = np.flatnonzero(cluster.active[: cluster.size])
    if nodes.size == 0:
        return 0.0
    acc = ModelAccess(cluster, typical).rows(nodes)
    free, cpu = free_milli(cluster, nodes), cpu_left(cluster, nodes)
    return float(fragmentation(free, cpu, acc, typical).sum())
