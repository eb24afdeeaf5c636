"""The packing plan: an optimal fractional packing of share sizes, and the tier it gives."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from fairgpu.engine.plugins.fragmentation import FragmentationScore
from fairgpu.engine.plugins.packing_plan import (
    FOLLOWS_PLAN,
    OFF_PLAN,
    OPENS_PATTERN,
    DeviceContents,
    PackingPlan,
    solve_patterns,
)
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from tests.builders import cluster, node_info, pod_info
from tests.gpu.placement import place, scheduler


def _all_patterns(sizes: list[int]) -> list[tuple[int, ...]]:
    out = []
    for counts in itertools.product(*(range(1000 // s + 1) for s in sizes)):
        pattern = tuple(s for s, k in zip(sizes, counts, strict=True) for _ in range(k))
        if pattern and sum(pattern) <= 1000:
            out.append(pattern)
    return out


def _enumerated_optimum(weights: dict[int, float]) -> float:
    sizes = sorted(weights)
    patterns = _all_patterns(sizes)
    a = np.array([[p.count(s) for p in patterns] for s in sizes], dtype=float)
    b = np.array([weights[s] for s in sizes])
    res = linprog(np.ones(len(patterns)), A_eq=a, b_eq=b, bounds=(0, None), method="highs")
    return float(res.fun)


def test_complementary_sizes_are_planned_together() -> None:
    patterns = solve_patterns({650: 10, 350: 10, 500: 4})
    assert patterns == pytest.approx({(350, 650): 10, (500, 500): 2})


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([150, 220, 230, 320, 350, 470, 500, 550, 650, 810]),
        st.integers(1, 60),
        min_size=1,
        max_size=4,
    )
)
def test_column_generation_reaches_the_enumerated_lp_optimum(weights: dict[int, int]) -> None:
    patterns = solve_patterns(weights)
    # Every pattern fits one GPU, and the plan packs exactly the given shares ...
    assert all(sum(p) <= 1000 for p in patterns)
    for size, weight in weights.items():
        assert sum(p.count(size) * x for p, x in patterns.items()) == pytest.approx(weight)
    # ... on as few GPUs as the LP over every possible pattern.
    used = sum(patterns.values())
    assert used == pytest.approx(_enumerated_optimum(weights), rel=1e-7, abs=1e-7)


def test_tiers_follow_the_plan() -> None:
    plan = PackingPlan({650: 10, 320: 10, 470: 10})
    contents = DeviceContents()
    idle = contents.code(())
    with_650 = contents.code((650,))
    with_470 = contents.code((470,))
    codes = np.array([[with_650, with_470, idle]])
    assert plan.tiers(320, codes, contents).tolist() == [[FOLLOWS_PLAN, OFF_PLAN, OPENS_PATTERN]]
    assert plan.tiers(470, codes, contents).tolist() == [[OFF_PLAN, FOLLOWS_PLAN, OPENS_PATTERN]]
    # A size the plan does not know: no preference at all.
    assert plan.tiers(100, codes, contents).tolist() == [[OFF_PLAN, OFF_PLAN, OFF_PLAN]]
    # Contents seen after the tables were built still get a tier.
    late = np.array([contents.code((320,))])
    assert plan.tiers(650, late, contents).tolist() == [FOLLOWS_PLAN]
    # Another interner (a new node set) numbers contents differently.
    other = DeviceContents()
    codes = np.array([other.code((470,)), other.code((650,))])
    assert plan.tiers(320, codes, other).tolist() == [OFF_PLAN, FOLLOWS_PLAN]


def test_device_contents_follow_the_nodes() -> None:
    state = cluster(node_info("a", gpus=2), node_info("b", gpus=1))
    a = state.node_index["a"]
    state.assign(pod_info("x", milli=300), a, (1,))
    state.assign(pod_info("y", milli=200), a, (1,))
    contents = DeviceContents()
    nodes = np.array([a, state.node_index["b"]])
    codes = contents.of(state, nodes)
    assert [[contents.contents[c] for c in row[:2]] for row in codes] == [
        [(), (200, 300)],
        [(), ()],
    ]
    state.release("default/x")
    assert contents.contents[contents.of(state, nodes)[0, 1]] == (200,)


def test_plan_distance_compares_normalised_share_distributions() -> None:
    plan = PackingPlan({300: 1, 700: 1})
    assert plan.distance({300: 2, 700: 2}) == 0.0
    assert plan.distance({300: 1}) == pytest.approx(1.0)
    assert plan.distance({300: 1, 1000: 5}) == pytest.approx(1.0)  # whole GPUs are no shares


def test_plan_lower_bound_on_waste() -> None:
    assert PackingPlan({810: 1}).waste_fraction() == pytest.approx(0.19)
    assert PackingPlan({650: 1, 350: 1}).waste_fraction() == pytest.approx(0.0)


def test_bad_sizes_are_refused_with_the_field() -> None:
    with pytest.raises(ValueError, match="share sizes"):
        solve_patterns({1000: 1})
    # PackingPlan itself ignores what is not a share (whole GPUs, zero or negative weights).
    assert PackingPlan({1000: 5, 0: 3, 300: 0}).patterns == {}
    assert PackingPlan({300: float("inf"), 400: float("nan")}).patterns == {}


# Share sizes as often as in the openb traces: the plan is 650+320 and 550+220+230 (and a
# few 320+320+320, 230*4, 550+320).
SHARES = [
    {"cpu": 1000, "milli": m, "count": 1, "weight": w}
    for m, w in ((650, 250), (320, 330), (550, 70), (220, 60), (230, 140))
]


def _two_holes():  # type: ignore[no-untyped-def]
    # A 650 share (350 free) on one node, a 550 (450 free) on another.
    state = cluster(node_info("a", gpus=1), node_info("b", gpus=1), node_info("c", gpus=1))
    state.assign(pod_info("x", milli=650), state.node_index["a"], (0,))
    state.assign(pod_info("y", milli=550), state.node_index["b"], (0,))
    return state


def test_plan_policy_completes_the_planned_pattern() -> None:
    # One step ahead, a 230 fits the 350 hole better (FGD: its fragmentation falls by 12
    # milli, the 450 hole's grows by 35) -- the gap-balance policy takes it. The plan packs
    # 650+320 and 550+220+230: the 230 belongs next to the 550, leaving the 350 hole to a 320.
    for seed in range(4):
        assert place(
            scheduler("fairgpu-frag-gaps", SHARES, seed), _two_holes(), pod_info("p", milli=230)
        ) == ("a", (0,))
        plan = scheduler("fairgpu-frag-plan", SHARES, seed)
        assert place(plan, _two_holes(), pod_info("p", milli=230)) == ("b", (0,))
        assert place(plan, _two_holes(), pod_info("q", milli=320)) == ("a", (0,))


def test_plan_policy_opens_an_idle_gpu_before_breaking_the_plan() -> None:
    def fresh():  # type: ignore[no-untyped-def]
        state = cluster(node_info("a", gpus=1), node_info("b", gpus=1))
        state.assign(pod_info("x", milli=470), state.node_index["a"], (0,))
        return state

    typical = [{"cpu": 1000, "milli": 1000, "count": 1, "weight": 5}] + [
        {"cpu": 1000, "milli": m, "count": 1, "weight": 1} for m in (470, 650, 320)
    ]
    # Whole GPUs are most of the demand: FGD keeps the idle GPU whole and puts the 320 in
    # the 530 hole. The plan packs 650+320 and 470+470, so the 320 starts a GPU for a 650
    # and the hole is left to a 470.
    assert place(scheduler("fairgpu-frag-gaps", typical), fresh(), pod_info("p", milli=320)) == (
        "a",
        (0,),
    )
    assert place(scheduler("fairgpu-frag-plan", typical), fresh(), pod_info("p", milli=320)) == (
        "b",
        (0,),
    )


def test_default_policy_plans_and_the_plan_needs_gap_balance() -> None:
    assert policy(DEFAULT_POLICY).plugin_args[FragmentationScore.name]["packing_plan"] is True
    with pytest.raises(ValueError, match="packing_plan"):
        FragmentationScore(lead="fgd", packing_plan=True)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from([230, 320, 470, 550, 650, 1000]), min_size=5, max_size=25))
def test_skipping_the_pinned_capacity_without_pinned_shapes_changes_no_placement(
    sizes: list[int],
) -> None:
    # With no model-pinned shape the pinned capacity only adds the pod's own milli to every
    # device: computing it or not must place every pod the same.
    def run(force: bool) -> list[tuple[str, tuple[int, ...]]]:
        state = cluster(*(node_info(f"n{i}", gpus=2) for i in range(4)))
        sched = scheduler("fairgpu-frag-plan", SHARES)
        if force:
            for plugin, _ in sched.scores:
                if isinstance(plugin, FragmentationScore):
                    plugin._any_pinned_shape = lambda: True  # type: ignore[method-assign]
        out = []
        for i, milli in enumerate(sizes):
            result = sched.schedule(pod_info(f"p{i}", milli=milli), state)
            if result.node is None:
                out.append(("", ()))
                continue
            state.assign(pod_info(f"p{i}", milli=milli), result.node, result.devices)
            out.append((state.node(result.node).name, tuple(result.devices)))
        return out

    assert run(force=False) == run(force=True)
