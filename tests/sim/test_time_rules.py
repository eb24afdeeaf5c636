"""Time rules of reclaim in a replay: a pod held back only by time is tried when it ends."""

from __future__ import annotations

from fairgpu.engine.engine import Engine
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy import parse_config
from tests.builders import k8s_node, k8s_pod


def _late_tenant(preemption: dict[str, object]) -> dict[str, float]:
    """Queue a fills both GPUs at 0 s for 1 000 s; queue b's pod arrives at 10 s. Returns
    each pod's start of its last run."""
    config = parse_config(
        {
            "mode": "dynamic",
            "preemption": {"enabled": True, "minRuntimeSeconds": 0, **preemption},
            "queues": [{"name": "a", "namespaces": ["a"]}, {"name": "b", "namespaces": ["b"]}],
        }
    )
    nodes = [k8s_node("n0", gpus=2)]
    arrivals = [PodArrival(k8s_pod(f"a{i}", "a", gpus="1"), 0.0, 1000.0) for i in range(2)]
    arrivals.append(PodArrival(k8s_pod("b0", "b", gpus="1"), 10.0, 100.0))
    result = Simulation(Workload("t", nodes, arrivals), Engine(tenancy=config)).run()
    return {r.pod.name: r.start for r in result.records if r.start is not None}


def test_reclaim_waits_for_the_minimum_run_then_happens_at_once() -> None:
    starts = _late_tenant({"reclaimMinRuntimeSeconds": 60})
    # Nothing happens between 10 s and 1 000 s but the minimum run ending at 60 s.
    assert starts["b0"] == 60.0


def test_without_the_rule_reclaim_is_immediate() -> None:
    assert _late_tenant({"reclaimMinRuntimeSeconds": 0})["b0"] == 10.0
