"""Builders for GPU placement tests: openb-style nodes and pods, clusters, schedulers."""

from __future__ import annotations

from pathlib import Path

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.policies import policy, with_typical_pods
from fairgpu.engine.scheduler import Scheduler
from fairgpu.model.gpu import GpuRequest
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import CPU, MEMORY, PODS, PodInfo

GI = 1 << 30
OPENB = Path(__file__).resolve().parents[3] / "shared" / "traces" / "openb"


def gpu_node(name: str, gpus: int = 4, cpu: int = 64_000, model: str = "V100M16") -> NodeInfo:
    """A GPU node with ``gpus`` devices of 16 GiB and plenty of memory."""
    return NodeInfo(
        name=name,
        labels={"nvidia.com/gpu.product": model} if gpus else {},
        allocatable={CPU: cpu, MEMORY: 512 * GI, PODS: 1000},
        gpu_count=gpus,
        gpu_memory_mib=16384,
        gpu_model=model if gpus else "",
    )


def gpu_pod(
    name: str,
    count: int = 1,
    milli: int = 1000,
    cpu: int = 1000,
    memory_mib: int = 0,
    models: frozenset[str] | None = None,
) -> PodInfo:
    """A pod asking ``count`` devices of ``milli`` each (count 0: CPU-only)."""
    gpu = GpuRequest(count, milli, memory_mib, 0, models) if count else GpuRequest()
    return PodInfo(name=name, uid=name, requests={CPU: cpu, MEMORY: GI, PODS: 1}, gpu=gpu)


def make_cluster(*nodes: NodeInfo) -> ClusterState:
    """A ClusterState holding ``nodes`` in order."""
    state = ClusterState(capacity=max(1, len(nodes)))
    for n in nodes:
        state.add_node(n)
    return state


def scheduler(name: str, typical: list[dict] | None = None, seed: int = 0) -> Scheduler:
    """A scheduler for the named preset (typical shapes for the fragmentation policies)."""
    prof = policy(name)
    if typical is not None:
        prof = with_typical_pods(prof, typical)
    return Scheduler(prof, seed)


def place(sched: Scheduler, state: ClusterState, pod: PodInfo) -> tuple[str, tuple[int, ...]]:
    """Schedule and assign; returns (node name, devices)."""
    result = sched.schedule(pod, state)
    assert result.node is not None, result.reason()
    state.assign(pod, result.node, result.devices)
    return result.node_name, result.devices
