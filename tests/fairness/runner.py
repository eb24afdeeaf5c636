"""A declarative runner for fairness scenarios: arrivals in, cycles and GPU shares out."""

from __future__ import annotations

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.model.pod import PodInfo


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
