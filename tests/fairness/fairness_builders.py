"""Former fairness-test builders, kept for test files that still import them: the old
signatures (CPU in cores, eight 80 GiB GPUs per node) over ``tests.builders``."""

from __future__ import annotations

from typing import Any

from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import PodInfo
from tests.builders import GI, cluster, node_info, pod_info
from tests.fairness.runner import gpus_by_namespace, run_until_idle

__all__ = ["GI", "cluster", "gpus_by_namespace", "node", "pod", "run_until_idle"]


def node(name: str, gpus: int = 8, cpu: int = 64, memory_gi: int = 512) -> NodeInfo:
    """``node_info`` with ``gpus`` 80 GiB devices, ``cpu`` cores and ``memory_gi`` GiB."""
    return node_info(
        name, gpus=gpus, model="", gpu_memory_mib=81920, cpu=cpu * 1000, memory=memory_gi * GI
    )


def pod(name: str, namespace: str = "default", gpus: int = 1, cpu: int = 1, **kw: Any) -> PodInfo:
    """``pod_info`` with ``cpu`` in cores."""
    return pod_info(name, namespace, gpus=gpus, cpu=cpu * 1000, **kw)
