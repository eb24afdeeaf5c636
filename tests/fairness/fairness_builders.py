"""Small builders for fairness scenario tests: nodes, pods and a declarative runner."""

from __future__ import annotations

from typing import Any

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.model.gpu import GpuRequest
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import CPU, MEMORY, PODS, QOS_BEST_EFFORT, PodInfo

GI = 2**30


def node(name: str, gpus: int = 8, cpu: int = 64, memory_gi: int = 512) -> NodeInfo:
    """A GPU node with ``gpus`` whole devices."""
    return NodeInfo(
        name=name,
        allocatable={CPU: cpu * 1000, MEMORY: memory_gi * GI, PODS: 110},
        gpu_count=gpus,
        gpu_memory_mib=81920,
    )


def pod(
    name: str,
    namespace: str = "default",
    gpus: int = 1,
    cpu: int = 1,
    priority: int = 0,
    created: float = 0.0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    qos: str = QOS_BEST_EFFORT,
    milli: int = 1000,
    **kw: Any,
) -> PodInfo:
    """A pod asking ``gpus`` whole GPUs (or ``milli`` of one) and ``cpu`` cores."""
    gpu = GpuRequest(gpus, milli) if gpus else GpuRequest()
    return PodInfo(
        name=name,
        namespace=namespace,
        uid=f"{namespace}/{name}",
        labels=dict(labels or {}),
        annotations=dict(annotations or {}),
        requests={CPU: cpu * 1000, MEMORY: GI, PODS: 1},
        gpu=gpu,
        priority=priority,
        created=created,
        qos=qos,
        **kw,
    )


def cluster(
    *nodes: NodeInfo, placed: list[tuple[PodInfo, str, float]] | None = None
) -> ClusterState:
    """A cluster of ``nodes`` with ``placed`` pods (pod, node name, start time) running."""
    state = ClusterState(max_devices=8)
    for n in nodes:
        state.add_node(n)
    for p, where, started in placed or []:
        idx = state.node_index[where]
        free = [
            d
            for d in range(8)
            if state.device_exists[idx, d] and state.device_milli_free[idx, d] >= 1000
        ]
        state.assign(p, idx, tuple(free[: p.gpu.count]), started=started)
    return state


def gpus_by_namespace(state: ClusterState) -> dict[str, int]:
    """Whole GPUs held per namespace."""
    out: dict[str, int] = {}
    for uid, pl in state.placements.items():
        ns = state.pods[uid].namespace
        out[ns] = out.get(ns, 0) + len(pl.devices)
    return out


def run_until_idle(
    engine: Engine,
    state: ClusterState,
    arrivals: list[tuple[float, PodInfo, float]],
    until: float,
    step: float = 1.0,
) -> tuple[list[CycleResult], dict[str, float]]:
    """A tiny fixed-step loop: arrivals (time, pod, duration) join the queue, running pods end
    after their duration, one engine cycle per step. Returns every cycle's result and the
    time-averaged GPUs held per namespace."""
    pending: dict[str, PodInfo] = {}
    ends: dict[str, float] = {}
    durations = {p.uid: d for _, p, d in arrivals}
    queue = sorted(arrivals, key=lambda a: a[0])
    results: list[CycleResult] = []
    held: dict[str, float] = {}
    t = 0.0
    i = 0
    while t <= until:
        for uid in [u for u, e in ends.items() if e <= t]:
            state.release(uid)
            del ends[uid]
        while i < len(queue) and queue[i][0] <= t:
            pending[queue[i][1].uid] = queue[i][1]
            i += 1
        res = engine.cycle(state, list(pending.values()), t)
        for ev in res.evictions:
            state.release(ev.pod.uid)
            ends.pop(ev.pod.uid, None)
            pending[ev.pod.uid] = ev.pod
        for b in res.binds:
            pending.pop(b.pod.uid, None)
            ends[b.pod.uid] = t + durations[b.pod.uid]
        results.append(res)
        for ns, g in gpus_by_namespace(state).items():
            held[ns] = held.get(ns, 0.0) + g * step
        t += step
    span = until + step
    return results, {ns: v / span for ns, v in held.items()}
