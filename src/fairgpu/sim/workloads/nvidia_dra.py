"""NVIDIA-shaped DRA objects for simulations: ResourceSlices with GPUs and MIG partitions.

Shaped like what NVIDIA's DRA driver (driver ``gpu.nvidia.com``) publishes: one pool per
node, a device ``gpu-<i>`` per GPU with attributes ``type`` (``gpu``/``mig``), ``uuid``,
``productName``, ``architecture``, ``index`` (MIG devices add ``profile``, ``parentIndex``,
``parentUUID``) and capacity ``memory`` (MIG devices add ``multiprocessors``). With
``mig=True`` every GPU is partitionable: its shared counter set ``gpu-<i>-counters`` holds
its memory, multiprocessors and eight memory slices, the whole-GPU device consumes all of
them, and each possible MIG placement is a device consuming its slices, memory and SMs, so
a GPU serves either one whole-GPU claim or a valid mix of MIG partitions (KEP-4815).

Objects are produced as plain mappings (what YAML holds), decoded by the same path as any
workload file.
"""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
MEMORY_SLICES = 8


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A MIG profile: name, memory slices it spans, GiB, SMs and allowed start slices."""

    name: str
    slices: int
    memory_gib: int
    multiprocessors: int
    starts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GpuModel:
    """A GPU product with its MIG profiles."""

    product: str
    architecture: str
    memory_gib: int
    multiprocessors: int
    profiles: tuple[MigProfile, ...]


A100_80GB = GpuModel(
    "NVIDIA A100-SXM4-80GB",
    "Ampere",
    80,
    108,
    (
        MigProfile("1g.10gb", 1, 10, 14, (0, 1, 2, 3, 4, 5, 6)),
        MigProfile("2g.20gb", 2, 20, 28, (0, 2, 4)),
        MigProfile("3g.40gb", 4, 40, 42, (0, 4)),
        MigProfile("4g.40gb", 4, 40, 56, (0,)),
        MigProfile("7g.80gb", 8, 80, 98, (0,)),
    ),
)
PROFILES = {p.name: p for p in A100_80GB.profiles}


def _uuid(node: str, index: int, part: str = "") -> str:
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"{node}/{index}/{part}"))


def _gpu_device(node: str, i: int, model: GpuModel, mig: bool) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": f"gpu-{i}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": _uuid(node, i)},
            "productName": {"string": model.product},
            "architecture": {"string": model.architecture},
            "index": {"int": i},
        },
        "capacity": {"memory": {"value": f"{model.memory_gib}Gi"}},
    }
    if mig:
        counters = {f"memory-slice-{s}": {"value": "1"} for s in range(MEMORY_SLICES)}
        counters["memory"] = {"value": f"{model.memory_gib}Gi"}
        counters["multiprocessors"] = {"value": str(model.multiprocessors)}
        device["consumesCounters"] = [{"counterSet": f"gpu-{i}-counters", "counters": counters}]
    return device


def _mig_device(node: str, i: int, model: GpuModel, p: MigProfile, start: int) -> dict[str, Any]:
    counters = {f"memory-slice-{s}": {"value": "1"} for s in range(start, start + p.slices)}
    counters["memory"] = {"value": f"{p.memory_gib}Gi"}
    counters["multiprocessors"] = {"value": str(p.multiprocessors)}
    return {
        "name": f"gpu-{i}-mig-{p.name.replace('.', '')}-{start}",
        "attributes": {
            "type": {"string": "mig"},
            "uuid": {"string": _uuid(node, i, f"{p.name}@{start}")},
            "parentUUID": {"string": _uuid(node, i)},
            "productName": {"string": model.product},
            "architecture": {"string": model.architecture},
            "profile": {"string": p.name},
            "index": {"int": i},
            "parentIndex": {"int": i},
        },
        "capacity": {
            "memory": {"value": f"{p.memory_gib}Gi"},
            "multiprocessors": {"value": str(p.multiprocessors)},
        },
        "consumesCounters": [{"counterSet": f"gpu-{i}-counters", "counters": counters}],
    }


def nvidia_slice(
    node: str, gpus: int = 8, model: GpuModel = A100_80GB, mig: bool = True
) -> dict[str, Any]:
    """One ResourceSlice for ``node`` with ``gpus`` GPUs (and their MIG placements)."""
    devices: list[dict[str, Any]] = []
    shared: list[dict[str, Any]] = []
    for i in range(gpus):
        devices.append(_gpu_device(node, i, model, mig))
        if not mig:
            continue
        for p in model.profiles:
            devices.extend(_mig_device(node, i, model, p, s) for s in p.starts)
        counters = {f"memory-slice-{s}": {"value": "1"} for s in range(MEMORY_SLICES)}
        counters["memory"] = {"value": f"{model.memory_gib}Gi"}
        counters["multiprocessors"] = {"value": str(model.multiprocessors)}
        shared.append({"name": f"gpu-{i}-counters", "counters": counters})
    spec: dict[str, Any] = {
        "driver": DRIVER,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "nodeName": node,
        "devices": devices,
    }
    if shared:
        spec["sharedCounters"] = shared
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": spec,
    }


def nvidia_device_classes() -> list[dict[str, Any]]:
    """The DeviceClasses NVIDIA's driver installs: whole GPUs and MIG devices."""
    out = []
    for name, kind in ((GPU_CLASS, "gpu"), (MIG_CLASS, "mig")):
        expr = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expr}}]},
            }
        )
    return out


def claim_spec(gpus: int = 0, mig_profile: str = "") -> dict[str, Any]:
    """A claim spec for ``gpus`` whole GPUs, or one MIG partition of ``mig_profile``."""
    if mig_profile:
        if mig_profile not in PROFILES:
            raise ValueError(f"unknown MIG profile {mig_profile!r}; known: {sorted(PROFILES)}")
        sel = f"device.attributes['{DRIVER}'].profile == '{mig_profile}'"
        exactly: dict[str, Any] = {
            "deviceClassName": MIG_CLASS,
            "selectors": [{"cel": {"expression": sel}}],
        }
    else:
        exactly = {"deviceClassName": GPU_CLASS, "count": max(1, gpus)}
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}
