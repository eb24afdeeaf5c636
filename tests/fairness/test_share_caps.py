"""Fair shares never above what a queue or a department may hold (its ``limit``, or its
quota and borrowing limit): the capped part goes to the others."""

from __future__ import annotations

from fairgpu.tenancy.fairshare import hierarchical_fair_shares
from fairgpu.tenancy.pool_share import PoolDemand, hierarchical_pool_shares, pool_fair_shares

POOL = frozenset({"p"})


def test_a_capped_tenant_leaves_the_rest_to_the_others() -> None:
    demands = [PoolDemand(t, POOL, 16_000) for t in "abc"]
    assert pool_fair_shares({"p": 16_000}, demands, caps={"a": 4_000}) == {
        "a": 4_000,
        "b": 6_000,
        "c": 6_000,
    }


def test_a_capped_department_is_split_by_weight_within_its_cap() -> None:
    demands = [PoolDemand(t, POOL, 16_000) for t in ("team-a", "team-b", "team-c")]
    parent = {"team-a": "research", "team-b": "research", "team-c": "product"}
    weight = {"team-a": 2.0, "team-b": 1.0, "research": 1.0, "product": 1.0}
    got = hierarchical_pool_shares({"p": 16_000}, demands, weight, parent, {"research": 3_000})
    assert got["team-c"] == 13_000
    assert abs(got["team-a"] - 2_000) <= 1 and abs(got["team-b"] - 1_000) <= 1
    assert got["team-a"] + got["team-b"] <= 3_000


def test_a_capped_queue_inside_a_department_leaves_its_part_to_its_sibling() -> None:
    demands = [PoolDemand(t, POOL, 16_000) for t in ("team-a", "team-b", "team-c")]
    parent = {"team-a": "research", "team-b": "research", "team-c": "product"}
    got = hierarchical_pool_shares({"p": 16_000}, demands, None, parent, {"team-a": 1_000})
    assert got == {"team-a": 1_000, "team-b": 7_000, "team-c": 8_000}


def test_the_two_level_shares_respect_queue_and_department_caps() -> None:
    parents = {"team-a": "research", "team-b": "research", "team-c": "product"}
    got = hierarchical_fair_shares(
        16.0,
        {"team-a": 16.0, "team-b": 16.0, "team-c": 16.0},
        lambda q: 1.0,
        lambda q: parents[q],
        lambda d: 1.0,
        {"research": 4.0, "team-c": 10.0},
    )
    assert got == {"team-a": 2.0, "team-b": 2.0, "team-c": 10.0}
