"""GPU plugins: device-level fit, GPU model selection and the built-in device policies.

A whole-GPU pod needs ``count`` idle devices; a sharing pod needs one device with enough free
compute (milli-GPU) and memory (MiB). Device policies choose *which* devices of the chosen node.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import (
    CycleState,
    DevicePolicy,
    FilterPlugin,
    FilterResult,
    PreFilterPlugin,
    Status,
)
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import PodInfo

INSUFFICIENT_GPU = "Insufficient nvidia.com/gpu"
NO_DEVICE = "no single GPU with enough free compute and memory"
WRONG_MODEL = "GPU model not requested by the pod"


def shared_fit(pod: PodInfo, cluster: ClusterState, nodes: np.ndarray | slice | int) -> np.ndarray:
    """Per (node, device): can this device host the sharing pod? Shape (len(nodes), devices)."""
    gpu = pod.gpu
    milli_ok = cluster.device_milli_free[nodes] >= gpu.milli
    mem_ok: np.ndarray | bool
    if gpu.memory_mib:
        need = np.int64(gpu.memory_mib)
        mem_ok = cluster.device_memory_free[nodes] >= need
    elif gpu.memory_percent:
        need_arr = cluster.device_memory_total[nodes] * gpu.memory_percent // 100
        mem_ok = cluster.device_memory_free[nodes] >= need_arr
    else:
        mem_ok = True
    return cluster.device_exists[nodes] & milli_ok & mem_ok


def idle_mask(cluster: ClusterState, nodes: np.ndarray | slice | int) -> np.ndarray:
    """Per (node, device): is the device completely unused?"""
    return (
        cluster.device_exists[nodes]
        & (cluster.device_milli_free[nodes] >= WHOLE)
        & (cluster.device_memory_free[nodes] >= cluster.device_memory_total[nodes])
    )


class GpuRequestCheck(PreFilterPlugin):
    """Reject GPU asks no node in the cluster could ever satisfy, with a clear reason."""

    name = "GpuRequestCheck"

    def __init__(self) -> None:
        self._version = -1
        self._models: set[str] = set()
        self._max_count = 0
        self._max_memory = 0

    def _cluster_limits(self, cluster: ClusterState) -> None:
        # Node descriptions change rarely: recompute only when one does.
        if self._version == cluster.static_version:
            return
        n = cluster.size
        active = cluster.active[:n]
        self._models = {node.gpu_model for _, node in cluster.active_nodes() if node.gpu_count}
        self._max_count = int(cluster.gpu_count[:n][active].max(initial=0))
        self._max_memory = int(cluster.device_memory_total[:n][active].max(initial=0))
        self._version = cluster.static_version

    def pre_filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> Status:
        """Unknown model, more devices than any node has, memory above every device."""
        gpu = pod.gpu
        if gpu.count == 0 or cluster.size == 0:
            return Status()
        self._cluster_limits(cluster)
        present = self._models
        if gpu.models is not None and present and not (gpu.models & present):
            wanted = "|".join(sorted(gpu.models))
            return Status.unresolvable(
                self.name, f"GPU model {wanted} not in cluster (have {'|'.join(sorted(present))})"
            )
        if gpu.count > self._max_count:
            return Status.unresolvable(
                self.name,
                f"{gpu.count} GPUs asked, but no node has more than {self._max_count}",
            )
        if gpu.memory_mib and gpu.memory_mib > self._max_memory:
            return Status.unresolvable(
                self.name,
                f"{gpu.memory_mib} MiB of GPU memory asked, largest GPU has {self._max_memory}",
            )
        return Status()


class GpuModel(FilterPlugin):
    """Filter nodes whose GPU product is not one the pod allows (``V100M16|V100M32``)."""

    name = "GpuModel"
    static = True

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """All nodes pass when the pod names no model."""
        n = cluster.size
        models = pod.gpu.models
        if models is None or pod.gpu.count == 0:
            return FilterResult(np.ones(n, dtype=bool))
        mask = np.array(
            [node is not None and node.gpu_model in models for node in cluster.nodes], dtype=bool
        )
        return FilterResult(mask, {WRONG_MODEL: ~mask})


class GpuFit(FilterPlugin):
    """Device-level GPU fit: idle devices for whole asks, one roomy device for shared asks."""

    name = "GpuFit"

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Never over-commits a device: compute and memory are checked per device."""
        n = cluster.size
        gpu = pod.gpu
        if gpu.count == 0:
            return FilterResult(np.ones(n, dtype=bool))
        if gpu.is_whole:
            mask = cluster.idle_devices[:n] >= gpu.count
            return FilterResult(mask, {INSUFFICIENT_GPU: ~mask})
        mask = np.asarray(shared_fit(pod, cluster, slice(0, n)).any(axis=1))
        return FilterResult(mask, {NO_DEVICE: ~mask})


class _SharedDevicePolicy(DevicePolicy):
    """Whole-GPU pods take the lowest-index idle devices; a sharing pod gets the device that
    :meth:`pick` selects among those with room."""

    def pick(self, cycle: CycleState, cluster: ClusterState, node: int, fits: np.ndarray) -> int:
        """Index into ``fits`` (device indexes with room, ascending) of the chosen device."""
        raise NotImplementedError

    def choose(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, node: int
    ) -> tuple[int, ...] | None:
        """Devices for ``pod`` on ``node``, or None if they do not fit."""
        gpu = pod.gpu
        if gpu.count == 0:
            return ()
        if gpu.is_whole:
            idle = np.flatnonzero(idle_mask(cluster, node))
            return tuple(int(d) for d in idle[: gpu.count]) if idle.size >= gpu.count else None
        fits = np.flatnonzero(shared_fit(pod, cluster, node))
        if fits.size == 0:
            return None
        return (int(fits[self.pick(cycle, cluster, node, fits)]),)


class DeviceBestFit(_SharedDevicePolicy):
    """Sharing pods take the tightest-fitting device (lowest index on ties)."""

    name = "best-fit"

    def pick(self, cycle: CycleState, cluster: ClusterState, node: int, fits: np.ndarray) -> int:
        """Least free compute left."""
        return int(np.argmin(cluster.device_milli_free[node, fits]))


class DeviceSpread(_SharedDevicePolicy):
    """Sharing pods take the emptiest device (spreads interference; lowest index on ties)."""

    name = "spread"

    def pick(self, cycle: CycleState, cluster: ClusterState, node: int, fits: np.ndarray) -> int:
        """Most free compute left."""
        return int(np.argmax(cluster.device_milli_free[node, fits]))


class DeviceRandom(_SharedDevicePolicy):
    """Sharing pods take a random device with room, from the cycle's seeded RNG."""

    name = "random"

    def pick(self, cycle: CycleState, cluster: ClusterState, node: int, fits: np.ndarray) -> int:
        """Uniform among devices with room."""
        rng = cycle.rng or np.random.default_rng(0)
        return int(rng.integers(fits.size))
