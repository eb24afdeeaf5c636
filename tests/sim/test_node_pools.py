"""Derived node-pool placement keeps each kind in its pool and overflows into hybrid."""

from __future__ import annotations

from fairgpu.engine.engine import Engine
from fairgpu.model.node_pools import NodePoolConfig, derive_placement
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import PodArrival, Workload
from tests.builders import k8s_node, k8s_pod

KEY = "example.com/node.usage"


def _pool_node(name: str, usage: str) -> object:
    return k8s_node(
        name,
        {KEY: usage},
        gpus=2,
        model="A100",
        cpu="32",
        memory="256Gi",
        taints=[
            {"key": KEY, "value": usage, "effect": "NoSchedule"},
            {"key": "nvidia.com/gpu.product", "value": "A100", "effect": "NoSchedule"},
        ],
    )


def _typed_pod(name: str, kind: str) -> object:
    pod = k8s_pod(
        name,
        gpus=2,
        cpu="1",
        labels={"fairgpu.io/workload-type": kind, "fairgpu.io/gpu-model": "A100"},
    )
    return derive_placement(pod, NodePoolConfig())


def test_training_fills_its_pool_then_hybrid_and_never_inference() -> None:
    nodes = [
        _pool_node("train", "training"),
        _pool_node("serve", "inference"),
        _pool_node("hybrid", "hybrid"),
    ]
    arrivals = [PodArrival(_typed_pod(f"t{i}", "training"), float(i), None) for i in range(3)]
    result = Simulation(Workload("pools", nodes, arrivals), Engine()).run()
    placed = {r.pod.name: r.node for r in result.records}
    assert placed["t0"] == "train"
    assert placed["t1"] == "hybrid"
    assert placed["t2"] == ""  # the inference pool is off limits
    assert "untolerated taint" in next(r for r in result.records if r.pod.name == "t2").reason


def test_inference_prefers_its_pool() -> None:
    nodes = [_pool_node("hybrid", "hybrid"), _pool_node("serve", "inference")]
    arrivals = [PodArrival(_typed_pod("i0", "inference"), 0.0, None)]
    result = Simulation(Workload("pools", nodes, arrivals), Engine()).run()
    assert result.records[0].node == "serve"


def test_untyped_pod_and_explicit_affinity_are_left_alone() -> None:
    plain = k8s_pod("plain", gpus=1, cpu="1")
    assert derive_placement(plain) is plain
    typed = derive_placement(_typed_pod("x", "training"))  # already has required affinity
    again = derive_placement(typed)
    assert again is typed


def test_cpu_pod_without_tolerations_stays_off_gpu_pools() -> None:
    nodes = [_pool_node("train", "training")]
    arrivals = [PodArrival(k8s_pod("cpu-only", gpus=0, cpu="1"), 0.0, None)]
    result = Simulation(Workload("pools", nodes, arrivals), Engine()).run()
    assert result.records[0].node == ""
