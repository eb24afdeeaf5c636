"""Hard caps: a queue's ``limit`` and a department's, which caps its queues together
(fairgpu.tenancy.book.QueueBook.admit / never_fits)."""

from __future__ import annotations

from typing import Any

import pytest

from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.engine.policies import policy
from fairgpu.model.gang_topology import ANN_TOPOLOGY_REQUIRED
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info

DEPARTMENT = {
    "queues": [
        {"name": "research", "limit": {"gpu": 4}},
        {"name": "team-a", "parent": "research", "namespaces": ["team-a"]},
        {"name": "team-b", "parent": "research", "namespaces": ["team-b"]},
        {"name": "product"},
        {"name": "team-c", "parent": "product", "namespaces": ["team-c"]},
    ]
}


def cycle(
    config: dict[str, Any], placed: list[tuple[PodInfo, str, float]], pending: list[PodInfo]
) -> CycleResult:
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8), placed=placed)
    return Engine(tenancy=parse_config(config)).cycle(state, pending, 100.0)


def bound(res: CycleResult) -> list[str]:
    return sorted(b.pod.name for b in res.binds)


def reasons(res: CycleResult) -> dict[str, str]:
    return {u.pod.name: u.reason for u in res.unschedulable}


def test_a_queue_limit_caps_a_queue_without_a_quota() -> None:
    config = {"queues": [{"name": "a", "namespaces": ["a"], "limit": {"gpu": 3}}]}
    res = cycle(config, [], [pod_info(f"p{j}", "a") for j in range(5)])
    assert bound(res) == ["p0", "p1", "p2"]
    assert "queue 'a' would hold 4 GPU, above its limit of 3 GPU" in reasons(res)["p3"]


def test_a_limit_below_quota_and_borrowing_is_the_cap_named() -> None:
    config = {
        "queues": [{"name": "a", "namespaces": ["a"], "quota": {"gpu": 2}, "limit": {"gpu": 3}}]
    }
    res = cycle(config, [], [pod_info(f"p{j}", "a") for j in range(5)])
    assert bound(res) == ["p0", "p1", "p2"]
    assert "above its limit of 3 GPU" in reasons(res)["p3"]


def test_a_department_limit_caps_its_queues_together_and_no_other() -> None:
    # team-a's pods started 30 s ago: too young to give back (the next test).
    placed = [(pod_info(f"a{j}", "team-a"), "n1", 70.0) for j in range(3)]
    pending = [pod_info(f"b{j}", "team-b") for j in range(3)]
    pending += [pod_info(f"c{j}", "team-c") for j in range(6)]
    res = cycle(DEPARTMENT, placed, pending)
    names = bound(res)
    assert [n for n in names if n.startswith("b")] == ["b0"]  # 3 + 1 = the limit of 4
    assert [n for n in names if n.startswith("c")] == [f"c{j}" for j in range(6)]
    assert reasons(res)["b1"] == (
        "department 'research' would hold 5 GPU, above its limit of 4 GPU (its queues together)"
    )


def test_without_the_department_limit_its_queues_take_what_is_free() -> None:
    config = {"queues": [dict(q) for q in DEPARTMENT["queues"]]}
    del config["queues"][0]["limit"]
    placed = [(pod_info(f"a{j}", "team-a"), "n1", 0.0) for j in range(3)]
    res = cycle(config, placed, [pod_info(f"b{j}", "team-b") for j in range(3)])
    assert bound(res) == ["b0", "b1", "b2"]


def test_a_pod_larger_than_its_departments_limit_never_fits() -> None:
    res = cycle(DEPARTMENT, [], [pod_info("big", "team-a", gpus=8)])
    [refusal] = res.unschedulable
    assert not refusal.resolvable
    assert refusal.reason == (
        "pod asks 8 GPU but department 'research' may never hold more than 4 GPU (its limit)"
    )


def test_priority_at_the_department_limit_evicts_in_its_own_queue_only() -> None:
    placed = [(pod_info(f"a{j}", "team-a", priority=0), "n1", 0.0) for j in range(2)]
    placed += [(pod_info(f"b{j}", "team-b", priority=0), "n1", 0.0) for j in range(2)]
    res = cycle(DEPARTMENT, placed, [pod_info("urgent", "team-a", priority=100)])
    assert bound(res) == ["urgent"]
    [eviction] = res.evictions
    assert eviction.pod.namespace == "team-a" and eviction.kind == "priority"


CAPPED_A = {
    "queues": [
        {"name": "a", "namespaces": ["a"], "limit": {"gpu": 4}},
        {"name": "b", "namespaces": ["b"]},
        {"name": "c", "namespaces": ["c"]},
    ]
}


def test_a_capped_queues_share_goes_to_the_others_and_reclaim_follows_it() -> None:
    # 16 GPUs; a, asking more, may hold 4, so b and c are owed 6 each (not 16/3): c,
    # holding 5 with b at 7, takes one back from b. Shares that ignored the limit (5.33 each)
    # refused it, as c would end above 5.33.
    placed = [(pod_info(f"a{j}", "a"), "n1", -1000.0) for j in range(4)]
    placed += [(pod_info(f"b{j}", "b"), "n1" if j < 4 else "n2", -1000.0) for j in range(7)]
    placed += [(pod_info(f"c{j}", "c"), "n2", -1000.0) for j in range(5)]
    pending = [pod_info(f"a-more{j}", "a") for j in range(4)] + [pod_info("c-more", "c")]
    res = cycle(CAPPED_A, placed, pending)
    assert [e.pod.namespace for e in res.evictions] == ["b"]
    assert res.evictions[0].kind == "reclaim"
    assert bound(res) == ["c-more"]
    assert "above its limit of 4 GPU" in reasons(res)["a-more0"]


WEIGHTED = {
    "queues": [
        {"name": "research", "limit": {"gpu": 6}},
        {"name": "team-a", "parent": "research", "weight": 2, "namespaces": ["team-a"]},
        {"name": "team-b", "parent": "research", "namespaces": ["team-b"]},
    ]
}


def test_at_the_department_limit_a_queue_below_its_share_takes_back_from_a_sibling() -> None:
    # research may hold 6: team-a (weight 2) is owed 4, team-b 2. team-b filled the limit
    # first; team-a's pods take back from it down to team-b's share, never further, though
    # both nodes have room: four pods, each in the place of one of team-b's.
    placed = [(pod_info(f"b{j}", "team-b"), "n1", -1000.0) for j in range(6)]
    pending = [pod_info(f"a{j}", "team-a") for j in range(6)]
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8), placed=placed)
    engine = Engine(tenancy=parse_config(WEIGHTED))
    res = engine.cycle(state, pending, 100.0)
    assert bound(res) == ["a0", "a1", "a2", "a3"]
    assert len(res.evictions) == 4
    for eviction in res.evictions:
        assert eviction.pod.namespace == "team-b" and eviction.kind == "reclaim"
        assert "to make room in its department's limit" in eviction.reason
    assert "above its limit of 6 GPU" in reasons(res)["a4"]
    # Each bind carries what it reclaimed (the cooldown's record, as any reclaim's).
    for bind in res.binds:
        assert bind.reclaim is not None and bind.reclaim.flows == (("n1", "team-b"),)


def test_a_sibling_at_its_share_is_not_taken_from() -> None:
    placed = [(pod_info(f"a{j}", "team-a"), "n1", -1000.0) for j in range(4)]
    placed += [(pod_info(f"b{j}", "team-b"), "n1", -1000.0) for j in range(2)]
    res = cycle(WEIGHTED, placed, [pod_info("a-more", "team-a"), pod_info("b-more", "team-b")])
    assert not res.evictions and not res.binds
    assert "above its limit of 6 GPU" in reasons(res)["a-more"]


def test_young_sibling_pods_are_not_taken_back() -> None:
    # Placed 30 s before: younger than the reclaim minimum run time.
    placed = [(pod_info(f"b{j}", "team-b"), "n1", 70.0) for j in range(6)]
    res = cycle(WEIGHTED, placed, [pod_info("a0", "team-a")])
    assert not res.evictions and not res.binds


def test_a_queue_never_takes_back_past_its_share_in_the_department() -> None:
    # team-a holds 3 of its 4; a 2-GPU pod would take it to 5, above its share: team-b
    # (3, above its 2) keeps its pods and the pod waits.
    placed = [(pod_info(f"a{j}", "team-a"), "n1", -1000.0) for j in range(3)]
    placed += [(pod_info(f"b{j}", "team-b"), "n1", -1000.0) for j in range(3)]
    res = cycle(WEIGHTED, placed, [pod_info("a-big", "team-a", gpus=2)])
    assert not res.evictions and not res.binds
    assert reasons(res)["a-big"] == (
        "department 'research' would hold 8 GPU, above its limit of 6 GPU (its queues "
        "together); reclaim refused: queue 'team-a' would exceed its fair share after the move"
    )


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"queues": [{"name": "a", "namespaces": ["a"], "limit": {"gpu": 3}}]}, "limit"),
        (
            {"mode": "static", "queues": [{"name": "a", "namespaces": ["a"], "quota": {"gpu": 3}}]},
            "nominal quota",
        ),
    ],
    ids=["limit", "static-quota"],
)
def test_an_elastic_groups_members_beyond_min_member_stay_within_the_cap(
    config: dict[str, Any], words: str
) -> None:
    # Admission judges the members a group needs (minMember 1); the rest are placed only
    # while queue a's cap of 3 holds -- before, all five were placed.
    group = [pod_info(f"e{j}", "a", group="elastic", min_member=1) for j in range(5)]
    res = cycle(config, [], group)
    assert bound(res) == ["e0", "e1", "e2"]
    assert f"above its {words} of 3 GPU" in reasons(res)["e3"]


def test_a_gang_confined_to_one_node_stays_on_one_when_it_takes_its_queues_room() -> None:
    # Queue a (limit 3) holds one GPU of n1 and both of n2 (younger pods, cheaper to evict).
    # An urgent gang of two 1-GPU members that must share a node takes the room of n2's pods
    # in the limit: both members on n2 -- a spreading policy would otherwise put one on n1.
    config = {"queues": [{"name": "a", "namespaces": ["a"], "limit": {"gpu": 3}}]}
    placed = [(pod_info("old", "a"), "n1", -1000.0)]
    placed += [(pod_info(f"young{i}", "a"), "n2", 50.0) for i in range(2)]
    state = cluster(node_info("n1", gpus=2), node_info("n2", gpus=2), placed=placed)
    hostname = {ANN_TOPOLOGY_REQUIRED: "kubernetes.io/hostname"}
    gang = [
        pod_info(f"g{i}", "a", priority=100, group="g", min_member=2, annotations=hostname)
        for i in range(2)
    ]
    engine = Engine(policy("spread"), tenancy=parse_config(config))
    res = engine.cycle(state, gang, 100.0)
    assert bound(res) == ["g0", "g1"]
    assert {b.node_name for b in res.binds} == {"n2"}, res.binds
