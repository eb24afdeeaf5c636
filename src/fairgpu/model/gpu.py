"""GPU requests: whole devices, a fraction of one device, or MIG slices.

Resource names are configurable (:class:`GpuResourceNames`) and default to the names NVIDIA's
device plugin and HAMi use. A GPU ask is normalised to ``count`` devices each needing
``milli`` thousandths of compute (1000 = a whole device) and ``memory_mib`` of device memory
(0 = no memory constraint; a whole device always takes all of its memory).
"""

from __future__ import annotations

from dataclasses import dataclass

WHOLE = 1000


@dataclass(frozen=True, slots=True)
class GpuResourceNames:
    """The resource names through which pods ask for GPUs and nodes advertise them."""

    gpu: str = "nvidia.com/gpu"
    cores_percent: str = "nvidia.com/gpucores"
    memory_mib: str = "nvidia.com/gpumem"
    memory_percent: str = "nvidia.com/gpumem-percentage"
    milli: str = "fairgpu.io/gpu-milli"
    product_label: str = "nvidia.com/gpu.product"
    memory_label: str = "nvidia.com/gpu.memory"
    count_label: str = "nvidia.com/gpu.count"

    def all_request_names(self) -> frozenset[str]:
        """Names consumed by the GPU model rather than treated as plain extended resources."""
        return frozenset(
            {self.gpu, self.cores_percent, self.memory_mib, self.memory_percent, self.milli}
        )


DEFAULT_NAMES = GpuResourceNames()


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """``count`` devices, each with ``milli`` compute and ``memory_mib`` (or ``memory_percent``)."""

    count: int = 0
    milli: int = WHOLE
    memory_mib: int = 0
    memory_percent: int = 0
    models: frozenset[str] | None = None

    @property
    def is_whole(self) -> bool:
        """True for whole-device asks (no compute or memory fraction)."""
        return self.milli >= WHOLE and self.memory_mib == 0 and self.memory_percent in (0, 100)

    @property
    def is_shared(self) -> bool:
        """True for an ask for part of one device."""
        return self.count > 0 and not self.is_whole

    @property
    def total_milli(self) -> int:
        """Compute asked across devices, in milli-GPU."""
        return self.count * self.milli


NO_GPU = GpuRequest()


def gpu_request_from(
    requests: dict[str, int], names: GpuResourceNames, models: frozenset[str] | None
) -> GpuRequest:
    """Build a :class:`GpuRequest` from a pod's effective requests.

    Raises ``ValueError`` for asks no device can meet: cores above 100%, a fraction together
    with more than one device, negative values.
    """
    count = requests.get(names.gpu, 0)
    cores = requests.get(names.cores_percent)
    mem = requests.get(names.memory_mib, 0)
    mem_pct = requests.get(names.memory_percent, 0)
    milli = requests.get(names.milli)
    for label, value in (
        (names.gpu, count),
        (names.cores_percent, cores or 0),
        (names.memory_mib, mem),
        (names.memory_percent, mem_pct),
        (names.milli, milli or 0),
    ):
        if value < 0:
            raise ValueError(f"{label}: must not be negative (got {value})")
    if cores is not None and cores > 100:
        raise ValueError(f"{names.cores_percent}: {cores}% is more than one whole GPU (max 100)")
    if mem_pct > 100:
        raise ValueError(f"{names.memory_percent}: {mem_pct}% is more than one GPU (max 100)")
    if milli is not None and milli > WHOLE:
        raise ValueError(f"{names.milli}: {milli} is more than one whole GPU (max {WHOLE})")
    fraction_asked = (
        (cores is not None and cores < 100)
        or mem > 0
        or 0 < mem_pct < 100
        or (milli is not None and milli < WHOLE)
    )
    if count == 0 and (fraction_asked or cores or milli):
        count = 1  # a compute or memory share implies one device, as in HAMi
    if count > 1 and fraction_asked:
        raise ValueError(
            f"{names.gpu}: a fraction of a GPU can only be asked for one device (got {count})"
        )
    if count == 0:
        return NO_GPU if models is None else GpuRequest(models=models)
    if milli is None:
        milli = WHOLE if cores is None else cores * 10
    return GpuRequest(count, milli, mem, mem_pct if mem_pct < 100 else 0, models)
