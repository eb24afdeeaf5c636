"""The in-use diagnostic separates how the GPUs in use were divided from how many stood idle."""

from __future__ import annotations

import pytest

from fairgpu.engine.engine import Engine
from fairgpu.sim.results import division_ratios, pool_layout, share_ratios, share_timeline
from fairgpu.sim.simulator import Simulation, SimulationResult
from fairgpu.sim.workload import PodArrival, Workload
from tests.builders import k8s_pod
from tests.sim.helpers import gpu_node, gpu_pod


def _run(arrivals: list[PodArrival], gpus: int, until: float) -> tuple[SimulationResult, dict]:
    engine = Engine()
    sim = Simulation(Workload("t", [gpu_node("n0", gpus=gpus)], arrivals), engine, until=until)
    result = sim.run()
    capacity, eligible, node_pool = pool_layout(
        sim.cluster, engine.scheduler, [r.pod for r in result.records]
    )
    tl = share_timeline(result, capacity, eligible, {})
    ratios = share_ratios(tl, result.gpu_capacity_milli)
    return ratios, division_ratios(result, tl, eligible, {}, node_pool)


def test_an_even_division_of_fewer_gpus_scores_one_in_use_and_shows_the_idle() -> None:
    """One 8-GPU node; queues a and b each keep four 3-GPU pods waiting. One pod of each runs
    at a time (6 GPUs), 2 GPUs stay idle: each is at 3/4 of its fair share (0.75), but got
    exactly half of the GPUs in use (1.0), and a quarter of the capacity stood idle while
    both were backlogged."""
    arrivals = [
        PodArrival(gpu_pod(f"{q}{i}", namespace=q, gpus="3"), 0.0, 1000.0)
        for q in "ab"
        for i in range(4)
    ]
    ratios, division = _run(arrivals, gpus=8, until=2500.0)
    assert ratios["a"]["useful_over_fair"] == pytest.approx(0.75, abs=0.01)
    assert ratios["b"]["useful_over_fair"] == pytest.approx(0.75, abs=0.01)
    assert division["ratios"] == {
        "a": pytest.approx(1.0, abs=0.01),
        "b": pytest.approx(1.0, abs=0.01),
    }
    assert division["min"] == pytest.approx(1.0, abs=0.01)
    assert division["idle_pct_while_backlogged"] == pytest.approx(25.0, abs=0.5)


def test_an_uneven_division_of_the_gpus_in_use_scores_below_one() -> None:
    """One 4-GPU node; a's four one-GPU pods start first and run 1000 s, b's 2-GPU pod arrives
    at 10 s and (no preemption of a's pods before their minimum run time) waits. While b is
    backlogged, all 4 GPUs are in use and b holds none of them: its in-use ratio is 0, and
    nothing is idle."""
    arrivals = [PodArrival(gpu_pod(f"a{i}", namespace="a"), 0.0, 1000.0) for i in range(4)]
    arrivals.append(PodArrival(gpu_pod("b0", namespace="b", gpus="2"), 10.0, 100.0))
    ratios, division = _run(arrivals, gpus=4, until=1200.0)
    assert ratios["b"]["useful_over_fair"] < 0.5
    assert division["ratios"]["b"] < 0.5
    assert division["ratios"]["b"] == pytest.approx(ratios["b"]["useful_over_fair"], abs=0.05)
    assert division["idle_pct_while_backlogged"] == pytest.approx(0.0, abs=1.0)


def test_idle_counts_only_the_pools_waiting_pods_may_use() -> None:
    """Pools x and y, one 2-GPU node each. a0 runs on x for 100 s; b0 holds y for 1000 s;
    a1 waits for y all along. Pool x stands idle from 100 s on, but no waiting pod may use
    it: nothing is idle for want of scheduling (x was a's pool too, which once counted)."""
    nodes = [
        gpu_node("nx", gpus=2, labels={"pool": "x"}),
        gpu_node("ny", gpus=2, labels={"pool": "y"}),
    ]

    def pod(name: str, pool: str):  # type: ignore[no-untyped-def]
        return k8s_pod(name, name[0], gpus="2", cpu="1", nodeSelector={"pool": pool})

    arrivals = [
        PodArrival(pod("a0", "x"), 0.0, 100.0),
        PodArrival(pod("b0", "y"), 0.0, 1000.0),
        PodArrival(pod("a1", "y"), 1.0, 100.0),
    ]
    engine = Engine()
    sim = Simulation(Workload("t", nodes, arrivals), engine, until=1000.0)
    result = sim.run()
    capacity, eligible, node_pool = pool_layout(
        sim.cluster, engine.scheduler, [r.pod for r in result.records]
    )
    assert len(capacity) == 2
    tl = share_timeline(result, capacity, eligible, {})
    division = division_ratios(result, tl, eligible, {}, node_pool)
    assert division["idle_pct_while_backlogged"] == pytest.approx(0.0, abs=1.0)
