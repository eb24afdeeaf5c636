"""Former GPU-test builders, kept for test files that still import them: the old signatures
(``count`` devices, uid = name, room for 1000 pods) over ``tests.builders``."""

from __future__ import annotations

from fairgpu.cluster.state import ClusterState
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import PodInfo
from tests.builders import GI, cluster, node_info, pod_info
from tests.gpu.placement import OPENB, place, scheduler

__all__ = ["GI", "OPENB", "gpu_node", "gpu_pod", "make_cluster", "place", "scheduler"]


def gpu_node(name: str, gpus: int = 4, cpu: int = 64_000, model: str = "V100M16") -> NodeInfo:
    """``node_info`` with room for 1000 pods."""
    return node_info(name, gpus=gpus, cpu=cpu, model=model, pods=1000)


def gpu_pod(
    name: str,
    count: int = 1,
    milli: int = 1000,
    cpu: int = 1000,
    memory_mib: int = 0,
    models: frozenset[str] | None = None,
) -> PodInfo:
    """``pod_info`` asking ``count`` devices, with the pod's name as its uid."""
    return pod_info(
        name, gpus=count, milli=milli, cpu=cpu, gpu_memory_mib=memory_mib, models=models, uid=name
    )


def make_cluster(*nodes: NodeInfo) -> ClusterState:
    """``cluster`` of ``nodes``."""
    return cluster(*nodes)
