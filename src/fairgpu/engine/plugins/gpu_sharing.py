"""The GPU-sharing placement scores and device policies, as one catalogue: best-fit,
dot-product, GPU packing, GPU clustering, random, FGD (fragmentation gradient descent,
USENIX ATC'23) and our fragmentation-aware policy."""

from __future__ import annotations

from fairgpu.engine.plugins.device_choice import DeviceFromScore
from fairgpu.engine.plugins.fgd_score import DeviceFgd, FgdScore
from fairgpu.engine.plugins.fragmentation import DeviceFragmentation, FragmentationScore
from fairgpu.engine.plugins.gpu_baselines import (
    DotProductScore,
    GpuBestFitScore,
    GpuClusteringScore,
    GpuPackingScore,
    RandomScore,
)

__all__ = [
    "DEVICE_POLICIES",
    "SCORE_PLUGINS",
    "DeviceFgd",
    "DeviceFragmentation",
    "DeviceFromScore",
    "DotProductScore",
    "FgdScore",
    "FragmentationScore",
    "GpuBestFitScore",
    "GpuClusteringScore",
    "GpuPackingScore",
    "RandomScore",
]

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
