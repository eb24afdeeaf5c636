"""An elastic pod group (minMember smaller than the group) that loses a member beyond minMember
keeps running: only that member is stopped, no sibling restarts."""

from __future__ import annotations

from fairgpu.engine.engine import Engine, Ordering
from fairgpu.sim.simulator import Simulation, SimulationResult
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy import parse_config
from tests.builders import k8s_pod
from tests.sim.helpers import gpu_node, gpu_pod


def _run(min_member: int, ordering: Ordering = "fair") -> SimulationResult:
    """Queue a runs a 4-member group (one GPU each) on four one-GPU nodes from 0 s; queue b's
    one-GPU pod (priority 100) arrives at 100 s and takes one member's GPU."""
    config = parse_config(
        {
            "preemption": {"enabled": True, "reclaimMinRuntimeSeconds": 0},
            "queues": [{"name": "a", "namespaces": ["a"]}, {"name": "b", "namespaces": ["b"]}],
        }
    )
    nodes = [gpu_node(f"n{i}", gpus=1) for i in range(4)]
    group = [
        gpu_pod(f"e{i}", namespace="a", labels={"fairgpu.io/pod-group": "e"}) for i in range(4)
    ]
    for pod in group:
        pod.annotations["fairgpu.io/min-member"] = str(min_member)
    arrivals = [PodArrival(p, 0.0, 1000.0) for p in group]
    late = k8s_pod("late", "b", gpus="1", cpu="1", priority=100)
    arrivals.append(PodArrival(late, 100.0, 50.0))
    engine = Engine(tenancy=config, ordering=ordering)
    return Simulation(Workload("elastic", nodes, arrivals), engine).run()


def _outcomes(result: SimulationResult) -> list[tuple[str, str]]:
    return sorted((a.name, a.outcome) for a in result.runs if a.namespace == "a" and a.end == 100.0)


def test_an_elastic_group_keeps_running_without_a_member_beyond_min_member() -> None:
    result = _run(min_member=2)
    stopped = _outcomes(result)
    assert len(stopped) == 1 and stopped[0][1] == "preempted"
    assert not any(a.outcome == "gang-restart" for a in result.runs)


def test_a_rigid_group_restarts_whole() -> None:
    # kube-default ordering evicts one member by priority, knowing nothing of groups.
    result = _run(min_member=4, ordering="kube-default")
    outcomes = sorted(o for _, o in _outcomes(result))
    assert outcomes == ["gang-restart", "gang-restart", "gang-restart", "preempted"]
