"""Per-node caching of GPU placement scores, and the node state they read.

The GPU placement scores depend only on the scored node's own state (free compute per
device, free CPU, the GPU-sharing pods on it), so they are cached per pod shape and per node
and recomputed only for the nodes whose :attr:`ClusterState.node_version` changed since: one
placement dirties one node, so scoring a pod is usually a handful of small numpy operations,
not a pass over all nodes x devices.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from fairgpu.cluster.state import COL_CPU, COL_MEMORY, ClusterState
from fairgpu.engine.framework import CycleState, ScorePlugin
from fairgpu.engine.plugins.gpu import idle_mask
from fairgpu.model.pod import CPU, PodInfo

Array = npt.NDArray[Any]
# CycleState key under which a score plugin leaves its per-node device choice for the device
# policy (device choice is evaluated jointly with the node choice).
DEVICE_CHOICE = "fairgpu.io/device-choice"
# Past this many pod shapes a score drops all its per-shape caches (bounds memory).
MAX_CACHED_SHAPES = 2048


class NodeCache:
    """Named per-node arrays, valid while the node's :attr:`ClusterState.node_version` stays
    the one they were computed at; each score keeps one per pod shape, the fragmentation
    measures one for the pod-independent terms shared by every shape."""

    __slots__ = ("values", "versions")

    def __init__(self) -> None:
        self.versions = np.empty(0, dtype=np.int64)
        self.values: dict[str, Array] = {}

    def get(
        self,
        cluster: ClusterState,
        nodes: Array,
        compute: Callable[[Array], dict[str, Array]],
    ) -> dict[str, Array]:
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


def cache_for(caches: dict[tuple[Any, ...], NodeCache], key: tuple[Any, ...]) -> NodeCache:
    """The cache of one pod shape (all are dropped past :data:`MAX_CACHED_SHAPES`)."""
    cache = caches.get(key)
    if cache is None:
        if len(caches) > MAX_CACHED_SHAPES:
            caches.clear()
        cache = caches[key] = NodeCache()
    return cache


def pod_shape_key(pod: PodInfo) -> tuple[Any, ...]:
    """Everything about a pod the GPU placement scores depend on (memory aside)."""
    g = pod.gpu
    return (
        pod.requests.get(CPU, 0),
        g.count,
        g.milli,
        g.memory_mib,
        g.memory_percent,
        g.models,
    )


class CachedNodeScore(ScorePlugin):
    """Base of the GPU placement scores: caches per (pod shape, node) until the node changes.

    Subclasses implement :meth:`compute` for a set of node slots, returning the raw score per
    node and, for sharing pods, the device the score assumed (-1 when not applicable).
    """

    def __init__(self) -> None:
        self._caches: dict[tuple[Any, ...], NodeCache] = {}
        self._cluster: weakref.ref[ClusterState] | None = None
        self._static_version = -1

    def cache_key(self, pod: PodInfo) -> tuple[Any, ...]:
        """Everything about the pod the score depends on."""
        return pod_shape_key(pod)

    def reset(self) -> None:
        """Forget all cached scores (e.g. after the typical shapes changed)."""
        self._caches.clear()

    def check_cluster(self, cluster: ClusterState) -> None:
        """Forget everything cached when ``cluster`` is another one or its node set changed
        (calls :meth:`on_cluster_change`, then :meth:`reset`)."""
        current = self._cluster() if self._cluster is not None else None
        if current is not cluster or self._static_version != cluster.static_version:
            self._cluster = weakref.ref(cluster)
            self._static_version = cluster.static_version
            self.on_cluster_change(cluster)
            self.reset()

    def on_cluster_change(self, cluster: ClusterState) -> None:
        """Hook: the node set changed (rebuild per-node static tables)."""

    def compute(self, pod: PodInfo, cluster: ClusterState, nodes: Array) -> tuple[Array, Array]:
        """(scores, devices) for ``nodes``; implemented by subclasses."""
        raise NotImplementedError

    def cached(self, pod: PodInfo, cluster: ClusterState, nodes: Array) -> tuple[Array, Array]:
        """(scores, devices) for ``nodes``, recomputing only nodes changed since last time."""
        self.check_cluster(cluster)

        def compute(stale: Array) -> dict[str, Array]:
            scores, devices = self.compute(pod, cluster, stale)
            return {"scores": scores, "devices": devices}

        got = cache_for(self._caches, self.cache_key(pod)).get(cluster, nodes, compute)
        return got["scores"], got["devices"]

    def score(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: Array) -> Array:
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


# ---- the node state the scores read ------------------------------------------------------
def free_milli(cluster: ClusterState, nodes: Array) -> Array:
    """(len(nodes), D) free GPU milli per device, 0 for absent devices."""
    free = np.where(cluster.device_exists[nodes], cluster.device_milli_free[nodes], 0)
    return free.astype(np.int64)


def cpu_left(cluster: ClusterState, nodes: Array) -> Array:
    """Unrequested CPU milli of ``nodes``."""
    left: Array = cluster.allocatable[nodes, COL_CPU] - cluster.requested[nodes, COL_CPU]
    return left


def mem_left(cluster: ClusterState, nodes: Array) -> Array:
    """Unrequested memory bytes of ``nodes``."""
    left: Array = cluster.allocatable[nodes, COL_MEMORY] - cluster.requested[nodes, COL_MEMORY]
    return left


def whole_take(cluster: ClusterState, nodes: Array, count: int) -> Array:
    """(len(nodes), D) mask of the lowest-index idle devices a whole-GPU pod would take."""
    idle = idle_mask(cluster, nodes)
    taken: Array = idle & (np.cumsum(idle, axis=1) <= count)
    return taken
