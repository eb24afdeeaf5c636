"""Gap balance: the sum-of-squares rule of online bin packing over the cluster's partly used
GPUs (Csirik et al.), used to order a sharing pod's otherwise equal devices."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.plugins.node_cache import free_milli
from fairgpu.model.gpu import WHOLE

Array = npt.NDArray[Any]


class GapCounts:
    """N(g): the cluster's partly used devices per free-milli size g (0 < g < 1000), updated
    from the nodes changed since the last call (by node version) instead of recounting every
    device of the cluster for each pod. Build a new one when the node set changes."""

    def __init__(self) -> None:
        self._versions = np.empty(0, dtype=np.int64)
        self._free = np.zeros((0, 0), dtype=np.int64)
        self._counts = np.zeros(WHOLE + 1, dtype=np.int64)

    def counts(self, cluster: ClusterState) -> Array:
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
    cluster: ClusterState, nodes: Array, milli: int, counts: Array | None = None
) -> Array:
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
    gap = np.clip(free_milli(cluster, nodes), 0, WHOLE)
    left = np.clip(gap - milli, 0, WHOLE)
    taken = np.where((gap > 0) & (gap < WHOLE), 1 - 2 * counts[gap], 0)
    made = np.where((left > 0) & (left < WHOLE), 1 + 2 * counts[left], 0)
    balance: Array = -(taken + made).astype(np.float64)
    return balance
