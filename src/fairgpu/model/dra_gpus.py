"""How much of a GPU a DRA device is, for fair shares, quotas and metrics.

A tenant must not escape its share by asking for GPUs through ResourceClaims instead of
``nvidia.com/gpu``: a device of a GPU driver (NVIDIA's DRA driver publishes GPUs and MIG
partitions, told apart by their ``type`` attribute) counts as a whole GPU, and a partition,
which consumes counters of its GPU's shared counter set, as its share of that GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fairgpu.model.dra import DeviceInfo
from fairgpu.model.gpu import WHOLE

#: Drivers whose devices are GPUs (NVIDIA's DRA driver).
GPU_DRIVERS = frozenset({"gpu.nvidia.com"})
# Values of a GPU driver's ``type`` attribute that are GPUs (absent: a GPU too).
_GPU_TYPES = (None, "gpu", "mig")

CounterTotals = Callable[[tuple[str, str, str]], Mapping[str, int]]


def device_gpu_milli(device: DeviceInfo, counter_totals: CounterTotals) -> int:
    """Milli-GPU of ``device``: a whole GPU of a GPU driver (:data:`GPU_DRIVERS`) is 1000; a
    partition (a device consuming counters of its GPU's counter set, e.g. a MIG device) the
    mean over the set's counters of the share it consumes, so an A100 MIG 3g.40gb (4 of 8
    memory slices, half the memory, 42 of 108 SMs) counts 489 and a 1g.10gb 125; any other
    device 0. ``counter_totals`` gives a counter set's totals by (driver, pool, set)."""
    if not _is_gpu(device):
        return 0
    if not device.consumes:
        return WHOLE
    shares = []
    for set_name, amounts in device.consumes.items():
        total = counter_totals((device.driver, device.pool, set_name))
        if total:
            used = sum(min(1.0, amounts.get(c, 0) / t) for c, t in total.items() if t > 0)
            shares.append(used / len(total))
    return round(WHOLE * min(1.0, sum(shares)))


MIB = 2**20


def device_gpu_memory_mib(device: DeviceInfo) -> int:
    """GPU memory of ``device``, MiB: its ``memory`` capacity when it is a GPU or a partition
    of one (:func:`device_gpu_milli` is not 0), else 0. A MIG 1g.10gb counts its 10 GiB, so
    a tenant's dominant share sees GPU memory asked through claims as it sees memory asked
    through ``nvidia.com/gpu``."""
    if not _is_gpu(device):
        return 0
    return device.capacity.get(f"{device.driver}/memory", 0) // MIB


def _is_gpu(device: DeviceInfo) -> bool:
    """Is ``device`` a GPU or a partition of one (a GPU driver's, of a GPU ``type``)?"""
    typ = device.attributes.get(f"{device.driver}/type")
    return device.driver in GPU_DRIVERS and typ in _GPU_TYPES


def selects(selectors: Iterable[Any], device: DeviceInfo) -> bool:
    """All selectors select ``device`` (a CEL error counts as not selected)."""
    try:
        return all(s.evaluate(device.cel_input()) for s in selectors)
    except ValueError:
        return False
