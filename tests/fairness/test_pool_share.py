"""Pool-aware fair shares on hand-computed cases."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.policies import policy
from fairgpu.engine.scheduler import Scheduler
from fairgpu.sim.results import pool_eligibility
from fairgpu.tenancy.fairshare import hierarchical_fair_shares
from fairgpu.tenancy.pool_share import (
    PoolDemand,
    hierarchical_pool_shares,
    node_pools,
    pool_fair_shares,
)
from tests.sim.helpers import gpu_node, gpu_pod

A, B = frozenset({"A"}), frozenset({"B"})


def test_a_tenant_confined_to_one_pool_gets_no_share_of_the_other() -> None:
    # Pools A and B of 8 GPUs each. x can use only A; z wants 2 of B. Whole-cluster max-min
    # would promise x 14 of the 16 GPUs; no scheduler can give it more than A.
    assert pool_fair_shares({"A": 8, "B": 8}, [PoolDemand("x", A, 16), PoolDemand("z", B, 2)]) == {
        "x": 8,
        "z": 2,
    }
    # y can use both: y takes B's spare 6, and x and y split A's 8 so both reach 7 in total
    # (x 7 on A; y 1 on A and 6 on B).
    demands = [PoolDemand("x", A, 16), PoolDemand("y", A | B, 16), PoolDemand("z", B, 2)]
    assert pool_fair_shares({"A": 8, "B": 8}, demands) == {"x": 7, "y": 7, "z": 2}


def test_weights_stop_at_the_pools_a_tenant_can_use() -> None:
    # x weighs 3: whole-cluster sharing of 14 after y would say x 10.5, z 3.5, but x only
    # fits A (8): x gets A, z the rest of B.
    demands = [PoolDemand("x", A, 16), PoolDemand("z", A | B, 16), PoolDemand("y", B, 2)]
    shares = pool_fair_shares({"A": 8, "B": 8}, demands, {"x": 3.0})
    assert shares == {"x": 8, "y": 2, "z": 6}


def test_uncontended_demand_is_met_and_spare_goes_to_who_can_use_it() -> None:
    assert pool_fair_shares({"A": 8, "B": 8}, [PoolDemand("x", A, 5)]) == {"x": 5}
    # B is idle for x: x is held to A; z gets all of B (it only wants B).
    demands = [PoolDemand("x", A, 20), PoolDemand("z", B, 3)]
    assert pool_fair_shares({"A": 8, "B": 8}, demands) == {"x": 8, "z": 3}


def test_nodes_split_into_pools_by_which_pods_may_use_them() -> None:
    masks = [np.array([True, True, False]), np.array([True, False, True])]
    pools, usable = node_pools(masks, np.array([8, 8, 4]))
    assert [p.tolist() for p in pools] == [[0], [1], [2]]
    assert usable == {0: frozenset({"p0", "p1"}), 1: frozenset({"p0", "p2"})}


def test_eligibility_leaves_out_nodes_with_fewer_gpus_than_a_pod_asks() -> None:
    cluster = ClusterState(max_devices=8)
    cluster.add_node(gpu_node("big", gpus=8))
    cluster.add_node(gpu_node("small", gpus=2))
    pods = [gpu_pod("wide", gpus="4"), gpu_pod("narrow", gpus="1"), gpu_pod("cpu", gpus="0")]
    capacity, eligible = pool_eligibility(cluster, Scheduler(policy("binpack")), pods)
    assert capacity == {"p0": 8000, "p1": 2000}
    assert eligible == {
        "default/wide": frozenset({"p0"}),
        "default/narrow": frozenset({"p0", "p1"}),
    }


def test_tenants_sharing_a_full_pool_do_not_stop_those_with_room_elsewhere() -> None:
    # y and w share P0 (17 000) and fill it; x and z may use all three pools. At the level
    # where P0 is full, y and w could each still take the unit rounding left there alone,
    # so neither counted as stopped -- and the solver used to stop everyone there, leaving
    # x and z at 4 857 with 19 287 units free on P1 and P2.
    every = frozenset({"P0", "P1", "P2"})
    p0 = frozenset({"P0"})
    capacity = {"P0": 17_000, "P1": 14_000, "P2": 15_000}
    demands = [
        PoolDemand("x", every, 117_000),
        PoolDemand("y", p0, 37_000),
        PoolDemand("z", every, 20_000),
        PoolDemand("w", p0, 33_000),
    ]
    shares = pool_fair_shares(capacity, demands, {"x": 2.0, "y": 4.0, "z": 2.0, "w": 3.0})
    assert shares == {"w": 7_285, "y": 9_714, "x": 14_500, "z": 14_500}


# ---- departments ------------------------------------------------------------------------------
def test_departments_share_first_then_their_tenants() -> None:
    # 4 000 units, departments d0 (q1, s0) and d1 (q0, s1) of equal weight; s0 and s1 ask a
    # quarter each beside a flooder. Each department is owed 2 000, so each flooder 1 750.
    # Leaf weights (d1's weight split 1:2) would give q1 2 100 and q0 1 400: what s1 leaves
    # of its two thirds of d1 going to q1 too.
    one = frozenset({"P"})
    demands = [
        PoolDemand("q0", one, 4_000),
        PoolDemand("q1", one, 4_250),
        PoolDemand("s0", one, 250),
        PoolDemand("s1", one, 250),
    ]
    weight = {"q0": 1.0, "q1": 1.0, "s0": 1.0, "s1": 2.0, "d0": 1.0, "d1": 1.0}
    parent = {"q1": "d0", "s0": "d0", "q0": "d1", "s1": "d1"}
    shares = hierarchical_pool_shares({"P": 4_000}, demands, weight, parent)
    assert shares == {"q0": 1_750, "q1": 1_750, "s0": 250, "s1": 250}
    assert pool_fair_shares(
        {"P": 4_000}, demands, {"q1": 0.5, "s0": 0.5, "q0": 1 / 3, "s1": 2 / 3}
    ) == {
        "q0": 1_400,
        "q1": 2_100,
        "s0": 250,
        "s1": 250,
    }


def test_a_department_splits_its_amount_over_its_tenants_pools() -> None:
    # d holds x (pool A only) and y (B only); z, alone, may use both. d and z are owed 8 each;
    # inside d, x and y 4 each -- z's 8 then fits as 4 on A and 4 on B.
    demands = [PoolDemand("x", A, 16), PoolDemand("y", B, 16), PoolDemand("z", A | B, 16)]
    shares = hierarchical_pool_shares({"A": 8, "B": 8}, demands, {}, {"x": "d", "y": "d"})
    assert shares == {"x": 4, "y": 4, "z": 8}


def test_a_tenant_held_fixed_keeps_its_amount_and_the_rest_share_around_it() -> None:
    demands = [PoolDemand("x", A, 16), PoolDemand("y", A, 16), PoolDemand("z", A, 16)]
    assert pool_fair_shares({"A": 12}, demands, fixed={"z": 2}) == {"x": 5, "y": 5, "z": 2}


@settings(max_examples=200, deadline=None)
@given(
    wants=st.lists(st.integers(0, 40), min_size=1, max_size=6),
    parents=st.lists(st.sampled_from(["", "d0", "d1"]), min_size=6, max_size=6),
    weights=st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=8, max_size=8),
    capacity=st.integers(1, 60),
)
def test_on_one_pool_departments_share_as_the_two_level_reference(
    wants: list[int], parents: list[str], weights: list[float], capacity: int
) -> None:
    """One pool: the same shares as :func:`~fairgpu.tenancy.fairshare.hierarchical_fair_shares`
    (two-level water-filling without pools), within the solver's unit rounding."""
    tenants = [f"t{i}" for i in range(len(wants))]
    parent = {t: p for t, p in zip(tenants, parents, strict=False) if p}
    weight = dict(zip(tenants, weights, strict=False))
    weight.update({"d0": weights[6], "d1": weights[7]})
    scale = 1_000  # units per GPU, as the engine's milli-GPU
    demands = [PoolDemand(t, A, w * scale) for t, w in zip(tenants, wants, strict=True)]
    got = hierarchical_pool_shares({"A": capacity * scale}, demands, weight, parent)
    want = hierarchical_fair_shares(
        capacity * scale,
        {t: float(w * scale) for t, w in zip(tenants, wants, strict=True) if w},
        lambda q: weight.get(q, 1.0),
        lambda q: parent.get(q, ""),
        lambda d: weight.get(d, 1.0),
    )
    for t, v in want.items():
        assert abs(got.get(t, 0) - v) <= 2 * len(tenants), (t, got, want)
