"""The fragmentation scores' incremental deltas against recomputing each placement outright,
and the online shape learning's refresh rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgpu.cluster.state import COL_CPU, ClusterState
from fairgpu.engine.framework import CycleState
from fairgpu.engine.plugins.capacity_measure import capacity_fragmentation
from fairgpu.engine.plugins.fgd_measure import fragmentation
from fairgpu.engine.plugins.fgd_score import FgdScore
from fairgpu.engine.plugins.fragmentation import FragmentationScore
from fairgpu.engine.plugins.shape_learning import ShapeLearner, TypicalPods
from fairgpu.model.pod import PodInfo
from tests.builders import cluster, node_info, pod_info
from tests.gpu.placement import scheduler

SHAPES = [
    {"cpu": 4000, "milli": 1000, "count": 1, "weight": 5},
    {"cpu": 8000, "milli": 470, "count": 1, "weight": 3},
    {"cpu": 2000, "milli": 320, "count": 1, "weight": 2},
    {"cpu": 16000, "milli": 1000, "count": 2, "weight": 1},
    {"cpu": 6000, "weight": 1},
]
SIZES = (100, 230, 320, 470, 650, 810)


def _cluster(fills: list[list[int]], cpus: list[int]) -> ClusterState:
    """Nodes of four GPUs; ``fills[n]`` lists (device-wise) pods already placed on node n."""
    state = cluster(*(node_info(f"n{i}", gpus=4, cpu=cpu) for i, cpu in enumerate(cpus)))
    for n, sizes in enumerate(fills):
        for k, milli in enumerate(sizes):
            device = k % 4
            if state.device_milli_free[n, device] >= milli:
                pod = pod_info(f"r{n}-{k}", milli=milli, cpu=500)
                state.assign(pod, n, (device,))
    return state


def _expected(
    measure: str, pod: PodInfo, state: ClusterState, node: int, typical: TypicalPods
) -> np.ndarray:
    """Per device (sharing) or per node (other pods): F before minus F after, recomputed."""
    measure_of = fragmentation if measure == "fgd" else capacity_fragmentation
    free = np.where(state.device_exists[node], state.device_milli_free[node], 0).astype(np.int64)
    cpu = int(state.allocatable[node, COL_CPU] - state.requested[node, COL_CPU])
    cpu_after = np.array([cpu - pod.requests["cpu"]])
    acc = np.array([[t > 0 for t in typical.count]])
    before = measure_of(free[None], np.array([cpu]), acc, typical)[0]
    gpu = pod.gpu
    if gpu.count == 0 or not gpu.is_shared:
        after_free = free.copy()
        idle = np.flatnonzero(free >= 1000)[: gpu.count]
        after_free[idle] = 0
        return np.array([before - measure_of(after_free[None], cpu_after, acc, typical)[0]])
    out = np.full(free.size, np.nan)
    for d in range(free.size):
        if free[d] >= gpu.milli:
            after_free = free.copy()
            after_free[d] -= gpu.milli
            out[d] = before - measure_of(after_free[None], cpu_after, acc, typical)[0]
    return out


@settings(max_examples=60, deadline=None)
@given(
    fills=st.lists(st.lists(st.sampled_from(SIZES), max_size=7), min_size=3, max_size=3),
    cpus=st.lists(st.integers(8_000, 96_000), min_size=3, max_size=3),
    ask=st.sampled_from([(1, 100), (1, 320), (1, 470), (1, 1000), (2, 1000), (0, 0)]),
    measure=st.sampled_from(["fgd", "capacity"]),
)
def test_incremental_deltas_equal_recomputed_placements(
    fills: list[list[int]], cpus: list[int], ask: tuple[int, int], measure: str
) -> None:
    state = _cluster(fills, cpus)
    plugin = FragmentationScore(typical_pods=SHAPES, measure=measure)
    typical = plugin.typical
    assert typical is not None
    count, milli = ask
    pod = pod_info("p", gpus=count, milli=milli or 1000, cpu=4000)
    nodes = np.arange(3)
    plugin.score(CycleState(), pod, state, nodes)  # binds the plugin to this cluster
    # One node first, then all: terms cached from one batch must serve the other unchanged.
    single, _ = plugin.deltas(pod, state, nodes[1:2])
    batch, _ = plugin.deltas(pod, state, nodes)
    np.testing.assert_array_equal(single[0], batch[1])
    for node in nodes:
        expected = _expected(measure, pod, state, int(node), typical)
        np.testing.assert_allclose(batch[node][: expected.size], expected, atol=1e-6)


def test_deltas_follow_a_node_after_it_changes() -> None:
    state = _cluster([[470], [], []], [64_000] * 3)
    plugin = FragmentationScore(typical_pods=SHAPES)
    pod = pod_info("p", milli=320, cpu=2000)
    nodes = np.arange(3)
    plugin.score(CycleState(), pod, state, nodes)
    state.assign(pod_info("q", milli=650, cpu=500), 1, (2,))
    got, _ = plugin.deltas(pod, state, nodes)
    typical = plugin.typical
    assert typical is not None
    np.testing.assert_allclose(got[1], _expected("capacity", pod, state, 1, typical), atol=1e-6)


def _learner() -> FgdScore:
    return FgdScore(learn_every=16, relearn_threshold=0.1)


def test_learned_shapes_are_kept_while_the_mix_holds() -> None:
    plugin = _learner()
    resets = []
    original = plugin.reset

    def counting_reset() -> None:
        resets.append(len(plugin.learner.seen_uids))
        original()

    plugin.reset = counting_reset  # type: ignore[method-assign]
    for i in range(400):
        plugin.observe(pod_info(f"p{i}", milli=(470, 320, 470, 1000)[i % 4]))
    # Re-estimated after 1, 2, 4, 8 pods, then every 16; replaced only while the mix settles.
    assert resets and max(resets) < 64
    typical = plugin.typical
    assert typical is not None
    # The shapes in use stay within the threshold of the mix seen.
    seen = TypicalPods.from_counts(plugin.learner.seen, 1.0)
    assert sorted(typical.milli.tolist()) == [320, 470, 1000]
    assert 0 < typical.distance(seen) <= 0.1


def test_learned_shapes_follow_a_changed_mix() -> None:
    plugin = _learner()
    for i in range(200):
        plugin.observe(pod_info(f"a{i}", milli=470))
    for i in range(400):
        plugin.observe(pod_info(f"b{i}", milli=230))
    typical = plugin.typical
    assert typical is not None
    weights = dict(zip(typical.milli.tolist(), typical.weight.tolist(), strict=True))
    assert weights[230] > 0.55


def test_relearn_threshold_is_validated() -> None:
    with pytest.raises(ValueError, match="relearn_threshold"):
        FgdScore(relearn_threshold=3.0)


def test_distance_between_shape_mixes() -> None:
    a = TypicalPods.from_args([{"cpu": 1, "milli": 500, "count": 1, "weight": 1}])
    b = TypicalPods.from_args(
        [
            {"cpu": 1, "milli": 500, "count": 1, "weight": 1},
            {"cpu": 1, "milli": 250, "count": 1, "weight": 1},
        ]
    )
    assert a.distance(a) == 0
    assert a.distance(b) == pytest.approx(1.0)
    assert b.distance(a) == pytest.approx(1.0)


def test_memory_counting_scores_are_cached_per_memory_request() -> None:
    # With memory in the capacity measure, two pods alike but for memory score differently;
    # the second must not be served the first one's cached scores.
    shapes = [{"cpu": 1000, "milli": 1000, "count": 1, "weight": 1, "memory": 100 * 2**30}]
    state = _cluster([[], []], [64_000, 64_000])
    plugin = FragmentationScore(typical_pods=shapes, use_memory=True)
    nodes = np.arange(2)
    small, big = pod_info("s", gpus=0, cpu=1000), pod_info("b", gpus=0, cpu=1000)
    big.requests["memory"] = 400 * 2**30
    first = plugin.score(CycleState(), small, state, nodes)
    second = plugin.score(CycleState(), big, state, nodes)
    fresh = FragmentationScore(typical_pods=shapes, use_memory=True)
    np.testing.assert_array_equal(second, fresh.score(CycleState(), big, state, nodes))
    assert not np.array_equal(first, second)


def test_scoring_reads_the_learned_shapes_and_only_observe_learns() -> None:
    state = cluster(*(node_info(f"n{i}", gpus=2) for i in range(3)))
    plugin = _learner()
    for i in range(20):
        plugin.observe(pod_info(f"p{i}", milli=470))
    seen, typical = dict(plugin.learner.seen), plugin.typical
    plugin.score(CycleState(), pod_info("x", milli=230), state, np.arange(3))
    assert dict(plugin.learner.seen) == seen and plugin.typical is typical
    with pytest.raises(RuntimeError, match="observe"):
        _learner().score(CycleState(), pod_info("y", milli=230), state, np.arange(3))


def test_the_scheduler_lets_each_score_observe_the_pod_it_scores() -> None:
    state = cluster(*(node_info(f"n{i}", gpus=2) for i in range(3)))
    sched = scheduler("fgd")
    for i in range(5):
        assert sched.schedule(pod_info(f"p{i}", milli=230, uid=f"p{i}"), state).node is not None
    (plugin, _), *_ = sched.scores
    assert isinstance(plugin, FgdScore) and set(plugin.learner.seen_uids) == {
        f"p{i}" for i in range(5)
    }


_SHAPES_SCRIPT = """
import json
from fairgpu.engine.plugins.shape_learning import TypicalPods
counts = {(1000 * (i % 5 + 1), 100 + 37 * i, 1, frozenset({f"M{i % 4}", f"N{i % 3}"})): 1 / (i + 3)
          for i in range(24)}
typical = TypicalPods.from_counts(counts, coverage=0.5)
other = TypicalPods.from_counts(dict(list(counts.items())[:20]), coverage=1.0)
print(json.dumps([typical.to_args(), typical.distance(other)]))
"""


def test_shape_arguments_and_distances_are_the_same_in_every_process() -> None:
    # Shapes hold frozensets of model names, whose set order follows the per-process string
    # hash seed; sums over them must not, or a replay differs from one run to the next.
    import os
    import subprocess
    import sys

    outputs = set()
    for seed in range(3):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        run = subprocess.run(
            [sys.executable, "-c", _SHAPES_SCRIPT], env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        outputs.add(run.stdout)
    assert len(outputs) == 1


def test_the_learner_remembers_only_the_latest_uids_and_counts_each_of_them_once() -> None:
    learner = ShapeLearner("test", remember=3)
    pods = [pod_info(f"p{i}", milli=230, uid=f"p{i}") for i in range(5)]
    for pod in pods:
        learner.observe(pod)
    assert list(learner.seen_uids) == ["p2", "p3", "p4"]
    counted = sum(learner.seen.values())
    learner.observe(pods[4])  # scored again while it waits: not counted again
    assert sum(learner.seen.values()) == counted == 5
