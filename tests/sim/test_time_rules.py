"""Time rules of reclaim in a replay: a pod held back only by time is tried when it ends."""

from __future__ import annotations

from fairgpu.engine.decisions import CycleResult
from fairgpu.engine.engine import Engine
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy import parse_config
from tests.builders import cluster, k8s_node, k8s_pod, node_info


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


# ---- when a held-back victim is worth a cycle -----------------------------------------------


def _blocked_gang(members: int) -> CycleResult:
    """Queue a fills two 4-GPU nodes with one-GPU pods, five of them younger than the 60 s
    reclaim minimum at 100 s (n0: one coming of age at 140 s; n1: all four, at 110, 130, 150,
    155 s). Queue b's gang of ``members`` x 2 GPUs arrives: one cycle at 100 s. (No
    starvation reservations: a large gang would also ask for the cycle its reservation falls
    due in.)"""
    config = parse_config(
        {
            "mode": "dynamic",
            "preemption": {"enabled": True, "minRuntimeSeconds": 0, "reclaimMinRuntimeSeconds": 60},
            "starvation": {"enabled": False},
            "queues": [{"name": "a", "namespaces": ["a"]}, {"name": "b", "namespaces": ["b"]}],
        }
    )
    state = cluster(node_info("n0", gpus=4), node_info("n1", gpus=4))
    for node, starts in enumerate(([0.0, 0.0, 0.0, 80.0], [50.0, 70.0, 90.0, 95.0])):
        for d, started in enumerate(starts):
            state.assign(k8s_pod(f"a{node}{d}", "a", gpus="1", cpu="1"), node, (d,), started)
    gang = [
        k8s_pod(f"g{i}", "b", gpus="2", cpu="1", group="g", min_member=members)
        for i in range(members)
    ]
    return Engine(tenancy=config).cycle(state, gang, 100.0)


def test_a_blocked_gang_asks_for_a_cycle_when_enough_victims_come_of_age() -> None:
    """Now only n0's three old pods may go (room for one member). At 110 s one more GPU of
    n1 would come free -- still one member --; at 130 s n1 has two: then the screen lets a
    gang of two through, and that is the cycle asked for."""
    res = _blocked_gang(2)
    assert not res.binds and not res.evictions
    assert res.retry_at == 130.0


def test_a_gang_that_cannot_fit_even_when_all_come_of_age_asks_for_no_cycle() -> None:
    """Five members of two GPUs: the two nodes hold four at most, even with every pod of a
    gone -- no moment helps, so no cycle is asked for."""
    res = _blocked_gang(5)
    assert not res.binds and not res.evictions
    assert res.retry_at is None


# ---- time rules of reservations and pod groups ----------------------------------------------


def test_a_blocked_large_job_asks_for_the_cycle_its_reservation_falls_due_in() -> None:
    """Queue a holds the 8-GPU node until 1 000 s; queue b's 8-GPU pod (large) arrives at
    100 s and may not reclaim: nothing happens before 1 000 s but its reservation falling
    due at 100 + 300 s, which the cycle at 100 s asks for, and which that cycle makes; the
    reservation then asks for the cycle just after it ends (drain at 1 000 s + 120 s grace)."""
    config = parse_config(
        {"queues": [{"name": "a"}, {"name": "b", "preemption": {"reclaim": False}}]}
    )
    engine = Engine(tenancy=config)
    state = cluster(node_info("n0", gpus=8))
    state.assign(k8s_pod("a0", "a", gpus="8", cpu="1", duration=1000.0), 0, tuple(range(8)), 0.0)
    big = k8s_pod("b0", "b", gpus="8", cpu="1", duration=600.0)
    first = engine.cycle(state, [big], 100.0)
    assert not first.binds and first.retry_at == 400.0
    due = engine.cycle(state, [big], 400.0)
    assert due.reserved == {"b/b0": ["n0"]}
    assert due.retry_at is not None and 1120.0 < due.retry_at < 1120.001


def test_a_pod_group_below_min_member_asks_for_the_cycle_it_times_out_in() -> None:
    """A group of two with minMember 2 runs one member at 100 s (its sibling ended): it
    releases it after ``gang.timeoutSeconds`` (600 s), and asks for the cycle then."""
    engine = Engine(tenancy=parse_config({"gang": {"timeoutSeconds": 600}}))
    engine.register_pod_groups({"a/g": 2})
    state = cluster(node_info("n0", gpus=8))
    state.assign(k8s_pod("g0", "a", gpus="1", cpu="1", group="g", min_member=2), 0, (0,), 0.0)
    first = engine.cycle(state, [], 100.0)
    assert not first.evictions and first.retry_at == 700.0
    late = engine.cycle(state, [], 700.0)
    assert [e.pod.name for e in late.evictions] == ["g0"]
