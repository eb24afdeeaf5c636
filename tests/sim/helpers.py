"""Small builders for simulator tests: nodes and pods as Kubernetes objects."""

from __future__ import annotations

from typing import Any

from fairgpu.api import objects as k8s
from fairgpu.model.node import NodeInfo, node_from_k8s
from fairgpu.model.pod import PodInfo, pod_from_k8s


def gpu_node(
    name: str,
    gpus: int = 4,
    cpu: str = "32",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> NodeInfo:
    """A GPU node decoded from a v1 Node."""
    raw: dict[str, Any] = {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "A100", **(labels or {})}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {
                "cpu": cpu,
                "memory": "256Gi",
                "pods": "110",
                "nvidia.com/gpu": str(gpus),
            }
        },
    }
    return node_from_k8s(k8s.decode(raw, k8s.Node))


def gpu_pod(
    name: str,
    namespace: str = "default",
    gpus: str = "1",
    cpu: str = "1",
    labels: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> PodInfo:
    """A pod asking for ``gpus`` whole GPUs (plus any ``extra`` resources)."""
    requests = {"cpu": cpu, "nvidia.com/gpu": gpus, **(extra or {})}
    raw = {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]},
    }
    return pod_from_k8s(k8s.decode(raw, k8s.Pod))
