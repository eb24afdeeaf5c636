"""Pool-aware fair shares on hand-computed cases."""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.policies import policy
from fairgpu.engine.scheduler import Scheduler
from fairgpu.sim.results import pool_eligibility
from fairgpu.tenancy.pool_share import PoolDemand, node_pools, pool_fair_shares
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
