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
from fairgpu.model.gpu import (
    DEFAULT_NAMES,
    MIG_PREFIX,
    MIG_STRATEGY_LABEL,
    WHOLE,
    GpuLimits,
    check_gpu_request,
    gpu_limits,
)
from fairgpu.model.pod import PodInfo

INSUFFICIENT_GPU = "Insufficient nvidia.com/gpu"
NO_DEVICE = "no single GPU with enough free compute and memory"
NO_DEVICES = "too few GPUs with enough free compute and memory for a share on each"
WRONG_MODEL = "GPU model not requested by the pod"
MIG_NOT_SHARED = "node(s) had only MIG slices, which cannot be shared"


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


def whole_devices(pod: PodInfo, cluster: ClusterState, node: int) -> tuple[int, ...] | None:
    """The lowest-index idle devices of node slot ``node`` for a whole-GPU ``pod``, or None
    if it has too few."""
    idle = np.flatnonzero(idle_mask(cluster, node))
    count = pod.gpu.count
    return tuple(int(d) for d in idle[:count]) if idle.size >= count else None


def lowest_devices(pod: PodInfo, cluster: ClusterState, node: int) -> tuple[int, ...] | None:
    """The lowest-index devices of node slot ``node`` with room for ``pod`` -- idle ones for
    whole GPUs, ones with its part free for a share (one per device it asks) --, () for a pod
    without GPUs, or None if the node has too few."""
    gpu = pod.gpu
    if gpu.count == 0:
        return ()
    if gpu.is_whole:
        return whole_devices(pod, cluster, node)
    room = np.flatnonzero(shared_fit(pod, cluster, node))
    return tuple(int(d) for d in room[: gpu.count]) if room.size >= gpu.count else None


class GpuRequestCheck(PreFilterPlugin):
    """Reject GPU asks no node in the cluster could ever satisfy, with a clear reason.

    Runs :func:`~fairgpu.model.gpu.check_gpu_request` (the contract of ``model/gpu.py``: an
    unknown GPU model, more devices or memory than any allowed node has, a share that only
    MIG single-strategy nodes could serve, a mixed-strategy MIG profile no node offers or not
    in the number asked) and answers UNRESOLVABLE, so the pod is not retried in a loop.
    The node summary is rebuilt only when the node set changes.
    """

    name = "GpuRequestCheck"

    def __init__(self) -> None:
        self._key: tuple[int, int, int] = (-1, -1, -1)
        self._limits: GpuLimits | None = None

    def _cluster_limits(self, cluster: ClusterState) -> GpuLimits:
        # Node descriptions change rarely: recompute only when one does.
        key = (id(cluster), cluster.static_version, cluster.size)
        if self._limits is None or key != self._key:
            self._limits = gpu_limits(cluster)
            self._key = key
        return self._limits

    def pre_filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> Status:
        """UNRESOLVABLE with every problem of the ask, or SUCCESS."""
        if cluster.size == 0:
            return Status()
        if pod.gpu.count == 0 and not any(r.startswith(MIG_PREFIX) for r in pod.requests):
            return Status()
        problems = check_gpu_request(pod, self._cluster_limits(cluster))
        if problems:
            return Status.unresolvable(self.name, *problems)
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


def mig_single_nodes(cluster: ClusterState) -> np.ndarray:
    """Per node slot: are its GPU devices MIG slices (single strategy, see ``model/gpu.py``)?

    Read from the label columns the cluster caches per node change.
    """
    strategy, values = cluster.label_codes(MIG_STRATEGY_LABEL)
    product, products = cluster.label_codes(DEFAULT_NAMES.product_label)
    single = [i for i, v in enumerate(values) if v == "single"]
    sliced = [i for i, v in enumerate(products) if "-MIG-" in v]
    return np.isin(strategy, single) | np.isin(product, sliced)


class GpuFit(FilterPlugin):
    """Device-level GPU fit: idle devices for whole asks, one roomy device for shared asks.

    A share never goes to a MIG single-strategy node: its devices are slices, which the
    device plugin hands out whole and cannot time-share.
    """

    name = "GpuFit"

    def __init__(self) -> None:
        self._mig_key: tuple[int, int, int] = (-1, -1, -1)
        self._mig = np.zeros(0, dtype=bool)

    def _mig_single(self, cluster: ClusterState) -> np.ndarray:
        key = (id(cluster), cluster.static_version, cluster.size)
        if key != self._mig_key:
            self._mig = mig_single_nodes(cluster)
            self._mig_key = key
        return self._mig

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Never over-commits a device: compute and memory are checked per device."""
        n = cluster.size
        gpu = pod.gpu
        if gpu.count == 0:
            return FilterResult(np.ones(n, dtype=bool))
        if gpu.is_whole:
            mask = cluster.idle_devices[:n] >= gpu.count
            return FilterResult(mask, {INSUFFICIENT_GPU: ~mask})
        sliced = self._mig_single(cluster)
        # A share of several devices needs that many distinct devices with room.
        room = shared_fit(pod, cluster, slice(0, n)).sum(axis=1) >= gpu.count
        mask = room & ~sliced
        # One reason per node, so a bigger share fails each node for the same reason.
        lacking = NO_DEVICE if gpu.count == 1 else NO_DEVICES
        return FilterResult(mask, {MIG_NOT_SHARED: sliced, lacking: ~room & ~sliced})


class _SharedDevicePolicy(DevicePolicy):
    """Whole-GPU pods take the lowest-index idle devices; a sharing pod gets the device that
    :meth:`pick` selects among those with room (a share of several devices: that many
    distinct devices, picked one after the other)."""

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
            return whole_devices(pod, cluster, node)
        fits = np.flatnonzero(shared_fit(pod, cluster, node))
        if fits.size < gpu.count:
            return None
        return tuple(sorted(self.pick_many(cycle, cluster, node, fits, gpu.count)))

    def pick_many(
        self, cycle: CycleState, cluster: ClusterState, node: int, fits: np.ndarray, count: int
    ) -> list[int]:
        """``count`` distinct devices of ``fits`` (at least that many), chosen in turn by
        :meth:`pick`: a share of several devices takes one each."""
        chosen: list[int] = []
        for _ in range(count):
            at = self.pick(cycle, cluster, node, fits)
            chosen.append(int(fits[at]))
            fits = np.delete(fits, at)
        return chosen


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
