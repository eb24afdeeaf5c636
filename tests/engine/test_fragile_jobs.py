"""A Job one more eviction fails is one victim: evicting a pod of it costs all of its
running pods' work, and they all go together."""

from __future__ import annotations

from fairgpu.engine.engine import Engine
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info

TENANCY = {"queues": [{"name": "q", "namespaces": ["q"]}], "preemption": {"enabled": True}}


def job_pod(i: int) -> object:
    """Pod ``i`` of Job ``sweep`` (1 GPU, owned by the Job of uid ``job-uid``)."""
    return pod_info(f"sweep-{i}", "q", gpus=1, owner="job-uid", owner_kind="Job")


def scene(fragile: bool) -> list[tuple[str, str]]:
    """One 8-GPU node: Job ``sweep``'s four 1-GPU pods ran 500 s (2 000 GPU-s in all), pod
    ``solo`` (4 GPUs) ran 300 s (1 200 GPU-s); an urgent 1-GPU pod of the same queue needs
    a GPU. Alone, a pod of the Job is the cheapest victim (500 GPU-s); if the Job fails with
    it, all four go -- and ``solo`` is cheaper."""
    placed = [(job_pod(i), "n1", 0.0) for i in range(4)]
    placed.append((pod_info("solo", "q", gpus=4), "n1", 200.0))
    state = cluster(node_info("n1", gpus=8), placed=placed)
    engine = Engine(tenancy=parse_config(TENANCY))
    if fragile:
        engine.fragile_jobs = frozenset({"job-uid"})
    urgent = pod_info("urgent", "q", gpus=1, priority=1000)
    result = engine.cycle(state, [urgent], now=500.0)
    assert [b.pod.name for b in result.binds] == ["urgent"]
    return sorted((e.pod.name, e.kind) for e in result.evictions)


def test_a_pod_of_a_job_that_tolerates_the_eviction_is_the_cheapest_victim() -> None:
    [(name, kind)] = scene(fragile=False)
    assert name.startswith("sweep-") and kind == "priority"


def test_a_fragile_job_costs_all_its_running_pods() -> None:
    assert scene(fragile=True) == [("solo", "priority")]


def test_a_fragile_job_goes_whole_when_it_must_go() -> None:
    """Only the Job runs: its pods all go, the one the preemptor needs and the rest (which
    the Job controller would delete) as collateral."""
    state = cluster(node_info("n1", gpus=4), placed=[(job_pod(i), "n1", 0.0) for i in range(4)])
    engine = Engine(tenancy=parse_config(TENANCY))
    engine.fragile_jobs = frozenset({"job-uid"})
    result = engine.cycle(state, [pod_info("urgent", "q", gpus=1, priority=1000)], now=500.0)
    kinds = sorted(e.kind for e in result.evictions)
    assert kinds == ["gang-restart", "gang-restart", "gang-restart", "priority"]
