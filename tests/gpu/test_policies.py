"""Placement policies on tiny hand-made clusters: each chooses as its contract says."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fairgpu.engine.framework import MAX_NODE_SCORE, CycleState
from fairgpu.engine.plugins.capacity_measure import capacity_fragmentation
from fairgpu.engine.plugins.fgd_measure import fragmentation
from fairgpu.engine.plugins.fgd_score import FgdScore
from fairgpu.engine.plugins.fragmentation import FragmentationScore
from fairgpu.engine.plugins.gap_balance import GapCounts, gap_balance
from fairgpu.engine.plugins.shape_learning import TypicalPods
from fairgpu.engine.policies import DEFAULT_POLICY, GPU_SHARING_POLICIES, policy
from fairgpu.engine.scheduler import Scheduler
from tests.builders import GI, cluster, node_info, pod_info
from tests.gpu.placement import place, scheduler

WHOLE_ONLY = [{"cpu": 1000, "milli": 1000, "count": 1, "weight": 1}]
HALVES = [{"cpu": 1000, "milli": 500, "count": 1, "weight": 1}]


def _busy(state, node: str, device: int, milli: int, name: str) -> None:  # type: ignore[no-untyped-def]
    state.assign(pod_info(name, milli=milli), state.node_index[node], (device,))


def test_device_best_fit_takes_tightest_device_lowest_index_on_ties() -> None:
    state = cluster(node_info("a", gpus=4))
    _busy(state, "a", 1, 500, "x")
    _busy(state, "a", 2, 600, "y")
    _busy(state, "a", 3, 600, "z")
    assert place(scheduler("best-fit"), state, pod_info("p", milli=300)) == ("a", (2,))


def test_best_fit_prefers_the_fullest_node() -> None:
    state = cluster(node_info("a"), node_info("b"), node_info("c"))
    state.assign(pod_info("w", gpus=2), state.node_index["b"], (0, 1))
    assert place(scheduler("best-fit"), state, pod_info("p"))[0] == "b"


def test_gpu_packing_prefers_a_partly_used_device() -> None:
    state = cluster(node_info("a"), node_info("b"))
    state.assign(pod_info("w", gpus=1), state.node_index["a"], (0,))
    _busy(state, "b", 2, 400, "s")
    assert place(scheduler("gpu-packing"), state, pod_info("p", milli=500)) == ("b", (2,))
    # A whole GPU goes to the node already in use rather than opening an idle one.
    fresh = cluster(node_info("idle"), node_info("used"))
    fresh.assign(pod_info("w2"), fresh.node_index["used"], (0,))
    assert place(scheduler("gpu-packing"), fresh, pod_info("q"))[0] == "used"


def test_gpu_clustering_keeps_shapes_together() -> None:
    state = cluster(node_info("whole"), node_info("shared"), node_info("empty"))
    state.assign(pod_info("w"), state.node_index["whole"], (0,))
    _busy(state, "shared", 0, 300, "s")
    assert place(scheduler("gpu-clustering"), state, pod_info("p", milli=200))[0] == "shared"
    assert place(scheduler("gpu-clustering"), state, pod_info("q"))[0] == "whole"


@pytest.mark.parametrize("name", ["fgd", "fairgpu-frag", "fairgpu-frag-lex"])
def test_fragmentation_policies_fill_the_partly_used_device(name: str) -> None:
    # Typical pods want whole GPUs: a share should go where a device is already broken.
    state = cluster(node_info("a", gpus=2), node_info("b", gpus=2))
    _busy(state, "b", 1, 600, "s")
    assert place(scheduler(name, WHOLE_ONLY), state, pod_info("p", milli=400)) == ("b", (1,))


def test_ours_packs_to_typical_sizes_where_best_fit_does_not() -> None:
    def fresh():  # type: ignore[no-untyped-def]
        state = cluster(node_info("a", gpus=2), node_info("b", gpus=2))
        _busy(state, "a", 0, 500, "x")
        _busy(state, "b", 0, 300, "y")
        return state

    # Best fit: least GPU left -> node a. Ours: 700 - 200 leaves exactly a typical 500 on b.
    assert place(scheduler("best-fit"), fresh(), pod_info("p", milli=200)) == ("a", (0,))
    assert place(scheduler("fairgpu-frag", HALVES), fresh(), pod_info("p", milli=200)) == (
        "b",
        (0,),
    )


def _tied_for_fgd():  # type: ignore[no-untyped-def]
    # Typical pods ask 500. A 200 pod on a's 700-free device, or on any idle device, keeps
    # every device able to host a 500 (FGD delta 0: a tie at 50); on b's 500-free device it
    # breaks one (FGD 42). Capacity: 700 -> 500 keeps one copy (fragment -200), while an idle
    # device loses a copy (1000 -> 800 fits one 500: fragment +300).
    state = cluster(node_info("a", gpus=2), node_info("b", gpus=2))
    _busy(state, "a", 0, 300, "x")
    _busy(state, "b", 0, 500, "y")
    return state


def _lex(sharing_ties: str, seed: int, typical: list[dict] = HALVES) -> Scheduler:
    """The default policy with the given order of a sharing pod's FGD ties."""
    sched = scheduler("fairgpu-frag-lex", typical, seed)
    prof = sched.profile.model_copy(deep=True)
    for args in (prof.plugin_args[FragmentationScore.name], prof.device_policy_args):
        args["sharing_ties"] = sharing_ties
    return Scheduler(prof, seed)


def test_lexicographic_policy_orders_fgd_ties_by_packing_capacity() -> None:
    fgd_choices = set()
    for seed in range(8):
        lex = place(_lex("capacity", seed), _tied_for_fgd(), pod_info("p", milli=200))
        assert lex == ("a", (0,))
        fgd_choices.add(
            place(scheduler("fgd", HALVES, seed), _tied_for_fgd(), pod_info("p", milli=200))
        )
    # FGD leaves the tie to the node order (b's idle device when b ranks first).
    assert ("b", (1,)) in fgd_choices and ("b", (0,)) not in fgd_choices


def test_gaps_policy_orders_sharing_ties_by_gap_balance() -> None:
    # The same FGD tie: a's 700 gap would become a second 500 gap (the sum of squares of gap
    # counts grows by 2), an idle device a new 800 gap (grows by 1), so an idle device wins.
    for seed in range(8):
        name, devices = place(_lex("gap-balance", seed), _tied_for_fgd(), pod_info("p", milli=200))
        assert (name, devices) in {("a", (1,)), ("b", (1,))}
    gaps = scheduler("fairgpu-frag-gaps", HALVES)
    assert place(gaps, _tied_for_fgd(), pod_info("p", milli=200)) in {("a", (1,)), ("b", (1,))}
    assert "gap-balance" not in str(policy("fairgpu-frag-lex").plugin_args)


def test_gap_counts_follow_assignments_and_releases() -> None:
    state = cluster(node_info("a", gpus=4), node_info("b", gpus=2))
    counter = GapCounts()

    def fresh() -> np.ndarray:
        return GapCounts().counts(state).copy()

    assert counter.counts(state).sum() == 0
    _busy(state, "a", 0, 700, "x")
    _busy(state, "b", 1, 700, "y")
    assert counter.counts(state)[300] == 2
    _busy(state, "a", 0, 100, "z")
    state.release("default/y")
    counts = counter.counts(state)
    assert counts[300] == 0 and counts[200] == 1 and counts.sum() == 1
    assert np.array_equal(counts, fresh())


def test_gap_balance_counts_the_cluster_gaps() -> None:
    state = cluster(node_info("a", gpus=4), node_info("b", gpus=2))
    for device in range(3):
        _busy(state, "a", device, 700, f"x{device}")
    _busy(state, "b", 0, 400, "y")
    balance = gap_balance(state, np.array([0, 1]), 300)
    # Filling one of three 300 gaps: N(300) 3 -> 2, sum of squares -5.
    assert balance[0, 0] == 5
    # a's idle device leaves a new 700 gap: +1.
    assert balance[0, 3] == -1
    # b's 600 gap (alone) becomes a fourth 300 gap: -1 + 7 = +6.
    assert balance[1, 0] == -6


def test_lexicographic_score_keeps_fgd_order_and_stays_below_preference_steps() -> None:
    state = _tied_for_fgd()
    plugin = FragmentationScore(typical_pods=HALVES, lead="fgd")
    fgd = FgdScore(typical_pods=HALVES)
    nodes = np.array([0, 1])
    pod = pod_info("p", milli=200)
    ours = plugin.score(CycleState(), pod, state, nodes)
    theirs = fgd.score(CycleState(), pod, state, nodes)
    assert np.array_equal(np.floor(ours + 0.5), theirs)
    assert ours[0] > ours[1] and np.all((ours >= 0) & (ours <= MAX_NODE_SCORE + 1))
    with pytest.raises(ValueError, match="lead"):
        FragmentationScore(typical_pods=HALVES, lead="nope")


def test_random_policy_chooses_feasible_nodes_only_and_varies_with_seed() -> None:
    chosen = set()
    for seed in range(12):
        state = cluster(node_info("a"), node_info("b"), node_info("c"), node_info("full", gpus=1))
        state.assign(pod_info("w"), state.node_index["full"], (0,))
        chosen.add(place(scheduler("random", seed=seed), state, pod_info("p"))[0])
    assert "full" not in chosen and len(chosen) >= 2


def test_fragmentation_measures_on_a_known_node() -> None:
    typical = TypicalPods.from_args(HALVES)
    free = np.array([[300, 1000]])
    acc = np.ones((1, 1), dtype=bool)
    # FGD: the 300 device is too small for a 500 pod -> 300 fragment.
    assert fragmentation(free, np.array([64000]), acc, typical)[0] == pytest.approx(300)
    # Capacity: 300 + (1000 - 2*500) -> 300; with CPU for one copy only, 800 is unusable.
    assert capacity_fragmentation(free, np.array([64000]), acc, typical)[0] == pytest.approx(300)
    assert capacity_fragmentation(free, np.array([1000]), acc, typical)[0] == pytest.approx(800)
    cpu_only = TypicalPods.from_args([{"cpu": 1000, "weight": 1}])
    assert fragmentation(free, np.array([64000]), np.zeros((1, 1), bool), cpu_only)[0] == 1300


def test_typical_pods_cover_the_most_frequent_shapes() -> None:
    pods = [pod_info(f"a{i}", milli=500) for i in range(90)]
    pods += [pod_info(f"b{i}", gpus=2) for i in range(6)] + [
        pod_info(f"c{i}", gpus=0) for i in range(4)
    ]
    typical = TypicalPods.from_pods(pods, coverage=0.95)
    assert typical.size == 2
    assert typical.weight.sum() == pytest.approx(1.0)
    assert typical.weight[0] == pytest.approx(90 / 96)


def test_fgd_learns_shapes_online_when_none_are_configured() -> None:
    state = cluster(node_info("a", gpus=2), node_info("b", gpus=2))
    sched = scheduler("fgd")
    for i in range(5):
        place(sched, state, pod_info(f"p{i}", milli=500))
    score = next(p for p, _ in sched.scores if isinstance(p, FgdScore))
    assert score.typical is not None and score.typical.milli.tolist() == [500]
    assert np.all(state.device_milli_free[:2, :2] >= 0)


def test_scores_are_cached_until_the_node_changes() -> None:
    state = cluster(node_info("a", gpus=2), node_info("b", gpus=2))
    plugin = FragmentationScore(typical_pods=HALVES)
    nodes = np.array([0, 1])
    pod = pod_info("p", milli=200)
    calls = []
    original = plugin.compute

    def spy(p, c, n):  # type: ignore[no-untyped-def]
        calls.append(n.tolist())
        return original(p, c, n)

    plugin.compute = spy  # type: ignore[method-assign]
    first = plugin.score(CycleState(), pod, state, nodes)
    plugin.score(CycleState(), pod, state, nodes)
    _busy(state, "b", 0, 300, "x")
    second = plugin.score(CycleState(), pod, state, nodes)
    assert calls == [[0, 1], [1]]
    assert first[0] == second[0] and first[1] != second[1]


def test_invalid_asks_get_a_clear_reason() -> None:
    state = cluster(node_info("a", model="T4"))
    result = scheduler(DEFAULT_POLICY).schedule(pod_info("p", models=frozenset({"A100"})), state)
    assert not result.ok and "A100" in result.reason()
    too_big = scheduler(DEFAULT_POLICY).schedule(pod_info("q", gpus=9), state)
    assert not too_big.ok and "9 GPUs" in too_big.reason()


def test_every_sharing_policy_states_its_tie_break() -> None:
    for name in GPU_SHARING_POLICIES:
        prof = policy(name)
        assert prof.tie_break in ("fixed-rank", "random") and prof.name == name
    assert DEFAULT_POLICY in GPU_SHARING_POLICIES


WHOLE_BIG_MEMORY = [{"cpu": 1000, "milli": 1000, "count": 1, "weight": 1, "memory": 100 * GI}]


def _memory_starved():  # type: ignore[no-untyped-def]
    # a: 2 idle GPUs but memory for one more typical pod (100 GiB each); b: room for both.
    state = cluster(node_info("a", gpus=2), node_info("b", gpus=2))
    hog = pod_info("hog", gpus=0, memory=362 * GI)
    state.assign(hog, state.node_index["a"], ())
    return state


def test_capacity_measure_limits_copies_by_memory() -> None:
    typical = TypicalPods.from_args(HALVES)
    with_mem = TypicalPods.from_args([{**HALVES[0], "memory": 10 * GI}])
    free, cpu, acc = np.array([[1000, 1000]]), np.array([64000]), np.ones((1, 1), bool)
    assert capacity_fragmentation(free, cpu, acc, with_mem)[0] == pytest.approx(0)
    # Memory for one copy: three of the four 500s cannot run.
    mem = np.array([15 * GI])
    assert capacity_fragmentation(free, cpu, acc, with_mem, mem)[0] == pytest.approx(1500)
    assert capacity_fragmentation(free, cpu, acc, typical, mem)[0] == pytest.approx(0)
    assert with_mem.to_args()[0]["memory"] == pytest.approx(10 * GI)


def test_lexicographic_policy_uses_gpus_that_memory_strands() -> None:
    # A share on a's GPU costs no typical pod (a can host only one); on b it costs one.
    nodes, pod = np.array([0, 1]), pod_info("p", milli=500)
    aware = FragmentationScore(typical_pods=WHOLE_BIG_MEMORY, lead="fgd", use_memory=True)
    blind = FragmentationScore(typical_pods=WHOLE_BIG_MEMORY, lead="fgd")
    s_aware = aware.score(CycleState(), pod, _memory_starved(), nodes)
    s_blind = blind.score(CycleState(), pod, _memory_starved(), nodes)
    assert s_aware[0] > s_aware[1] and s_blind[0] == s_blind[1]
    for seed in range(6):
        lex = _lex("capacity", seed, WHOLE_BIG_MEMORY)
        assert place(lex, _memory_starved(), pod)[0] == "a"


def test_typical_pods_keep_the_rare_shapes_apart_for_the_capacity_measure() -> None:
    pods = [pod_info(f"a{i}", milli=500) for i in range(90)]
    pods += [pod_info(f"b{i}", gpus=2) for i in range(6)] + [
        pod_info(f"c{i}", milli=200) for i in range(4)
    ]
    typical = TypicalPods.from_pods(pods, coverage=0.95)
    assert typical.size == 2 and typical.full is not None and typical.full.size == 3
    args = typical.to_args()
    assert [a.get("tail", False) for a in args] == [False, False, True]
    back = TypicalPods.from_args(args)
    # The most frequent shapes are what FGD sees; the rare ones only reach ``full``.
    assert np.allclose(back.weight, typical.weight) and back.milli.tolist() == [500, 1000]
    assert back.full is not None and np.allclose(np.sort(back.full.weight), [0.04, 0.06, 0.9])
    assert FgdScore(typical_pods=args).typical.size == 2  # type: ignore[union-attr]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5)),
            st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
        ),
        min_size=1,
        max_size=4,
    )
)
@example([(8.988465674311579e307, None), (8.98846567431158e307, None)])  # sum overflows
def test_typical_pods_args_are_valid_or_refused_with_the_item(items: list) -> None:  # type: ignore[type-arg]
    args = [
        {"cpu": 1000, "milli": 100 * (i + 1), "count": 1, "weight": w}
        | ({} if mem is None else {"memory": mem})
        for i, (w, mem) in enumerate(items)
    ]
    try:
        typical = TypicalPods.from_args(args)
    except ValueError as error:
        assert str(error).startswith(("typical_pods[", "TypicalPods: no pods"))
        return
    assert np.all(np.isfinite(typical.weight)) and typical.weight.sum() == pytest.approx(1.0)


def test_scarcity_weighs_shapes_pinned_to_a_scarce_model() -> None:
    state = cluster(
        node_info("v", gpus=2, model="V100"), node_info("t1", gpus=2, model="T4"),
        node_info("t2", gpus=2, model="T4"), node_info("t3", gpus=2, model="T4"),
    )  # fmt: skip
    shapes = [
        {"cpu": 1000, "milli": 500, "count": 1, "weight": 0.8},
        {"cpu": 1000, "milli": 500, "count": 1, "models": "V100", "weight": 0.2},
    ]
    pod, nodes = pod_info("p", milli=500), np.array([0, 1])
    gaps = []
    for scarcity in (False, True):
        plugin = FragmentationScore(typical_pods=shapes, scarcity=scarcity)
        s = plugin.score(CycleState(), pod, state, nodes)
        gaps.append(s[1] - s[0])
    assert plugin._access is not None and plugin._access.scarcity.tolist() == [1.0, 4.0]
    # Both prefer a T4 for an unpinned pod; scarcity widens the margin 4-fold for the V100 term.
    assert 0 < gaps[0] < gaps[1]
