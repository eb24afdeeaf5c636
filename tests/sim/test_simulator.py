"""The simulator replays workloads deterministically and accounts capacity correctly."""

from __future__ import annotations

import numpy as np

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import policy
from fairgpu.model.pod import invalid_pod
from fairgpu.sim.simulator import Simulation, time_average, unusable_gpu_milli
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.sim.workloads.synthetic import SyntheticSpec, generate
from tests.builders import k8s_node, k8s_pod


def _small_synthetic(seed: int) -> Workload:
    return generate(SyntheticSpec(jobs=60, mean_interarrival_s=30.0), seed=seed)


def _fingerprint(result) -> list[tuple[str, str, float | None, tuple[int, ...]]]:
    return sorted((r.pod.uid, r.node, r.start, r.devices) for r in result.records)


def test_same_seed_same_replay() -> None:
    first = Simulation(_small_synthetic(3), Engine(seed=3), seed=3).run()
    second = Simulation(_small_synthetic(3), Engine(seed=3), seed=3).run()
    assert _fingerprint(first) == _fingerprint(second)
    assert first.timeline.gpu_allocated_milli == second.timeline.gpu_allocated_milli


def test_different_seed_changes_the_workload() -> None:
    a = _small_synthetic(1)
    b = _small_synthetic(2)
    assert [x.arrival for x in a.arrivals] != [x.arrival for x in b.arrivals]


def test_completion_frees_capacity_for_the_next_pod() -> None:
    node = k8s_node("n0", gpus=2)
    first = PodArrival(k8s_pod("first", gpus=2, cpu="1"), arrival=0.0, duration=100.0)
    second = PodArrival(k8s_pod("second", gpus=2, cpu="1"), arrival=10.0, duration=50.0)
    result = Simulation(Workload("t", [node], [first, second]), Engine()).run()
    recs = {r.pod.name: r for r in result.records}
    assert recs["first"].start == 0.0 and recs["first"].end == 100.0
    assert recs["second"].start == 100.0 and recs["second"].end == 150.0
    assert recs["second"].wait == 90.0
    assert result.timeline.gpu_allocated_milli[-1] == 0


def test_allocation_never_exceeds_capacity_and_devices_never_overcommitted() -> None:
    workload = _small_synthetic(5)
    sim = Simulation(workload, Engine(policy("spread"), seed=5), seed=5)
    result = sim.run()
    assert max(result.timeline.gpu_allocated_milli) <= result.gpu_capacity_milli
    cluster = sim.cluster
    n = cluster.size
    assert (cluster.device_milli_free[:n] >= 0).all()
    assert (cluster.device_memory_free[:n] >= 0).all()
    assert (cluster.requested[:n] <= cluster.allocatable[:n]).all()


def test_invalid_pod_is_reported_and_the_rest_continue() -> None:
    node = k8s_node("n0", gpus=1)
    bad = invalid_pod(
        {"metadata": {"name": "broken", "namespace": "x"}},
        ValueError("Pod x/broken: field spec.containers[0].resources.requests.cpu: bad"),
    )
    good = k8s_pod("fine", gpus=1, cpu="1")
    workload = Workload("t", [node], [PodArrival(bad, 0.0, None), PodArrival(good, 1.0, 5.0)])
    result = Simulation(workload, Engine()).run()
    recs = {r.pod.name: r for r in result.records}
    assert recs["broken"].start is None
    assert "spec.containers[0].resources.requests.cpu" in recs["broken"].reason
    assert recs["fine"].start == 1.0


def test_unschedulable_reason_names_the_shortage() -> None:
    node = k8s_node("n0", gpus=2)
    too_big = PodArrival(k8s_pod("big", gpus=2, cpu="64"), 0.0, None)
    result = Simulation(Workload("t", [node], [too_big]), Engine()).run()
    assert result.records[0].start is None
    assert "Insufficient cpu" in result.records[0].reason
    assert result.records[0].reason.startswith("0/1 nodes are available")


def test_until_stops_the_clock() -> None:
    node = k8s_node("n0", gpus=1)
    arrivals = [
        PodArrival(k8s_pod(f"p{i}", gpus=1, cpu="1"), float(i * 10), 5.0) for i in range(10)
    ]
    result = Simulation(Workload("t", [node], arrivals), Engine(), until=35.0).run()
    started = [r for r in result.records if r.start is not None]
    assert len(started) == 4  # arrivals at 0, 10, 20, 30
    assert result.end_time == 35.0


def test_time_average_weights_by_duration() -> None:
    assert time_average([0.0, 10.0], [100.0, 0.0], 40.0) == 25.0
    assert time_average([], [], 10.0) == 0.0


def test_unusable_gpu_milli_counts_free_compute_no_pending_shape_fits() -> None:
    sim = Simulation(Workload("t", [k8s_node("n0", gpus=2)], []), Engine())
    cluster = sim.cluster
    shared = k8s_pod("s", gpus=1, cpu="1", requests={"nvidia.com/gpucores": "70"})
    cluster.assign(shared, 0, (0,))
    whole = k8s_pod("w", gpus=1, cpu="1")
    # Device 0 has 300 milli free: a whole-GPU shape cannot use it, device 1 is idle.
    assert unusable_gpu_milli(cluster, [whole]) == 300
    small = k8s_pod("small", gpus=1, cpu="1", requests={"nvidia.com/gpucores": "20"})
    assert unusable_gpu_milli(cluster, [small]) == 0
    assert unusable_gpu_milli(cluster, []) == 0


def test_tenant_series_sum_to_allocated() -> None:
    result = Simulation(_small_synthetic(7), Engine(seed=7), seed=7).run()
    tl = result.timeline
    total = np.sum([np.asarray(v) for v in tl.tenant_gpu_milli.values()], axis=0)
    assert np.array_equal(total, np.asarray(tl.gpu_allocated_milli))


def test_the_end_a_preempted_run_would_have_had_is_no_instant_of_the_replay() -> None:
    """``low`` is preempted at 10 s; the end its first run would have had (100 s) must not
    move the clock nor run a cycle: nothing happens then. (A forecast started from a
    snapshot has no such event, and must predict what the replay does.)"""
    node = k8s_node("n0", gpus=2)
    arrivals = [
        PodArrival(k8s_pod("low", gpus=2, cpu="1"), arrival=0.0, duration=100.0),
        PodArrival(k8s_pod("high", gpus=2, cpu="1", priority=1000), arrival=10.0, duration=50.0),
        PodArrival(k8s_pod("wait", gpus=2, cpu="1"), arrival=20.0, duration=10.0),
    ]
    engine = Engine(ordering="kube-default")
    result = Simulation(Workload("t", [node], arrivals), engine).run()
    recs = {r.pod.name: r for r in result.records}
    assert recs["low"].preempted == 1 and recs["low"].start == 60.0
    assert recs["wait"].start == 160.0
    assert 100.0 not in result.timeline.time
    assert result.cycles == 5  # arrivals at 0, 10, 20; the ends at 60 and 160


def test_a_replay_with_nothing_left_to_happen_ends_where_it_last_changed() -> None:
    """Queue a's pod holds the only node and runs to the end (no run time); queue b's waits
    from 100 s. Nothing but the scheduler's wake-ups is left, and they change nothing: the
    replay ends, at 100 s, instead of waking forever."""
    a = k8s_pod("a", "a", gpus="8", cpu="1")
    b = k8s_pod("b", "b", gpus="8", cpu="1")
    workload = Workload(
        "stall", [k8s_node("n0", gpus=8)], [PodArrival(a, 0.0, None), PodArrival(b, 100.0, None)]
    )
    calls = [0]

    def bounded(_done: int, _total: int) -> None:  # without the rule, it never ends
        calls[0] += 1
        assert calls[0] < 10_000, "the replay wakes forever"

    sim = Simulation(workload, Engine(policy("fairgpu-frag-plan"), 0), on_progress=bounded)
    result = sim.run()
    assert result.stalled_at == 100.0 and result.end_time == 100.0
    assert max(result.timeline.time) == 100.0
    assert [r.outcome for r in result.runs] == ["running"]


def test_a_replay_that_ends_by_itself_is_not_stalled() -> None:
    a = k8s_pod("a", "a", gpus="8", cpu="1")
    workload = Workload("done", [k8s_node("n0", gpus=8)], [PodArrival(a, 0.0, 50.0)])
    result = Simulation(workload, Engine(policy("fairgpu-frag-plan"), 0)).run()
    assert result.stalled_at is None and result.end_time == 50.0
