"""Nodes and pods for the fairness benchmark's scenarios."""

from __future__ import annotations

from fairgpu.model.gpu import GpuRequest
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import CPU, LABEL_USER, MEMORY, PODS, PodInfo

GI = 2**30


def gpu_node(name: str, gpus: int = 8) -> NodeInfo:
    """A plain 8-GPU node with room for many pods."""
    return NodeInfo(
        name=name,
        allocatable={CPU: 128_000, MEMORY: 1024 * GI, PODS: 110},
        gpu_count=gpus,
        gpu_memory_mib=81920,
    )


def gpu_pod(
    name: str,
    tenant: str,
    created: float,
    gpus: int = 1,
    priority: int = 0,
    user: str = "",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> PodInfo:
    """A whole-GPU pod of ``tenant`` (namespace = queue)."""
    lab = {LABEL_USER: user or f"{tenant}-user"}
    lab.update(labels or {})
    return PodInfo(
        name=name,
        namespace=tenant,
        uid=f"{tenant}/{name}",
        labels=lab,
        annotations=dict(annotations or {}),
        requests={CPU: 4000, MEMORY: 16 * GI, PODS: 1},
        gpu=GpuRequest(gpus),
        priority=priority,
        created=created,
        scheduler_name="fairgpu",
    )
