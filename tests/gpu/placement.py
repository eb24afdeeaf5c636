"""Schedulers for GPU placement tests: a named preset, and placing one pod with it."""

from __future__ import annotations

from pathlib import Path

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.policies import policy, with_typical_pods
from fairgpu.engine.scheduler import Scheduler
from fairgpu.model.pod import PodInfo

OPENB = Path(__file__).resolve().parents[3] / "shared" / "traces" / "openb"


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
