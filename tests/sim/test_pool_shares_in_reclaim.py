"""Reclaim judges pool-aware fair shares: a queue's share counts only the pools its work can
use, as the simulator's report does."""

from __future__ import annotations

from fairgpu.engine.engine import Engine
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy import parse_config
from tests.builders import k8s_node, k8s_pod

LONG = 10_000.0


def _pods(ns: str, pool: str, count: int, at: float) -> list[PodArrival]:
    return [
        PodArrival(
            k8s_pod(f"{ns}{i}", ns, gpus=1, cpu="1", created=at, nodeSelector={"pool": pool}),
            at,
            LONG,
        )
        for i in range(count)
    ]


def test_reclaim_gives_a_queue_its_share_of_the_pool_it_can_use() -> None:
    # Pool a: 12 GPUs (3 nodes), pool b: 4 GPUs (1 node). x can use only b, y and z only a.
    # y fills a and x fills b at t=0, both with more pending; z arrives at t=100.
    # Whole-cluster shares (16 / 3 = 5.3 GPUs each) held z to 5 GPUs, though x can never
    # use a: pool-aware, x's share is b's 4 and y and z split a, 6 each.
    nodes = [k8s_node(f"a{i}", {"pool": "a"}, gpus=4) for i in range(3)]
    nodes.append(k8s_node("b0", {"pool": "b"}, gpus=4))
    arrivals = _pods("y", "a", 16, 0.0) + _pods("x", "b", 8, 0.0) + _pods("z", "a", 12, 100.0)
    config = parse_config({"preemption": {"reclaimMinRuntimeSeconds": 0}})
    engine = Engine(tenancy=config)
    until = 2000.0
    result = Simulation(Workload("pools", nodes, arrivals), engine, until=until).run()
    running: dict[str, int] = {}
    for r in result.records:
        if r.start is not None and (r.end is None or r.end > until):
            running[r.tenant] = running.get(r.tenant, 0) + 1
    assert running == {"x": 4, "y": 6, "z": 6}
