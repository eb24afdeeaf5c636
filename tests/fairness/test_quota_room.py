"""Priority at the quota cap: a job its queue's quota refuses now takes the place of
lower-priority pods of its own queue (fairgpu.engine.actions.quota_room)."""

from __future__ import annotations

from typing import Any

import pytest

from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info

STATIC = {"mode": "static", "queues": [{"name": "a", "quota": {"gpu": 4}}]}
BORROW_CAP = {
    "queues": [
        {"name": "a", "quota": {"gpu": 4}, "borrowingLimit": {"gpu": 0}},
        {"name": "b", "quota": {"gpu": 4}},
    ]
}


def cycle(
    config: dict[str, Any],
    placed: list[tuple[PodInfo, str, float]],
    pending: list[PodInfo],
    gpus: int = 8,
) -> CycleResult:
    state = cluster(node_info("n1", gpus=gpus), placed=placed)
    return Engine(tenancy=parse_config(config)).cycle(state, pending, 100.0)


def evicted(res: CycleResult) -> list[str]:
    return sorted(e.pod.name for e in res.evictions)


@pytest.mark.parametrize("config", [STATIC, BORROW_CAP], ids=["static", "borrowing-limit"])
def test_a_higher_priority_pod_takes_a_lower_priority_pods_place_in_a_full_quota(
    config: dict[str, Any],
) -> None:
    placed = [(pod_info(f"low{j}", "a", priority=0), "n1", 0.0) for j in range(4)]
    res = cycle(config, placed, [pod_info("high", "a", priority=100)])
    assert [b.pod.name for b in res.binds] == ["high"]
    assert len(res.evictions) == 1 and res.evictions[0].kind == "priority"
    assert res.binds[0].wait_for == (res.evictions[0].pod.uid,)
    assert "quota" in res.evictions[0].reason


def test_equal_priority_waits_with_the_quotas_reason() -> None:
    placed = [(pod_info(f"low{j}", "a", priority=0), "n1", 0.0) for j in range(4)]
    res = cycle(STATIC, placed, [pod_info("same", "a", priority=0)])
    assert not res.evictions and not res.binds
    assert "above its nominal quota" in res.unschedulable[0].reason


def test_the_fewest_lowest_priority_victims_that_make_room() -> None:
    placed = [
        (pod_info("vip", "a", priority=5), "n1", 0.0),
        (pod_info("one", "a", priority=1), "n1", 0.0),
        (pod_info("two", "a", priority=1, gpus=2), "n1", 0.0),
    ]
    res = cycle(STATIC, placed, [pod_info("big", "a", priority=10, gpus=2)])
    # Room for 2 GPUs: "two" alone makes it; "vip" (higher priority) and "one" are spared.
    assert evicted(res) == ["two"]
    assert [b.pod.name for b in res.binds] == ["big"]


def test_other_queues_are_never_victims_of_the_quota_step() -> None:
    config = {"mode": "static", "queues": [{"name": "a", "quota": {"gpu": 2}}]}
    placed = [
        (pod_info("a0", "a", priority=5), "n1", 0.0),
        (pod_info("a1", "a", priority=5), "n1", 0.0),
        (pod_info("b0", "b", priority=0), "n1", 0.0),
    ]
    res = cycle(config, placed, [pod_info("high", "a", priority=10)])
    assert evicted(res) == ["a0"] or evicted(res) == ["a1"]
    assert all(e.pod.namespace == "a" for e in res.evictions)


def test_within_queue_never_keeps_the_quota_closed() -> None:
    config = {
        "mode": "static",
        "queues": [{"name": "a", "quota": {"gpu": 4}, "preemption": {"withinQueue": "Never"}}],
    }
    placed = [(pod_info(f"low{j}", "a", priority=0), "n1", 0.0) for j in range(4)]
    res = cycle(config, placed, [pod_info("high", "a", priority=100)])
    assert not res.evictions and not res.binds


def test_nothing_is_evicted_when_the_job_would_not_fit_on_any_node_anyway() -> None:
    placed = [(pod_info(f"low{j}", "a", priority=0), "n1", 0.0) for j in range(4)]
    picky = pod_info("high", "a", priority=100, node_selector=(("zone", "nowhere"),))
    res = cycle(STATIC, placed, [picky])
    assert not res.evictions and not res.binds
    assert res.unschedulable and res.unschedulable[0].pod.name == "high"


def test_a_rigid_group_goes_whole_and_is_spared_for_a_cheaper_pod() -> None:
    members = [(pod_info(f"g{j}", "a", group="g", min_member=2), "n1", 0.0) for j in range(2)]
    alone = (pod_info("solo", "a", priority=0), "n1", 50.0)
    filler = (pod_info("keep", "a", priority=3), "n1", 0.0)
    # One GPU to free: the lone pod (50 s run) loses less than breaking the 2-pod group.
    res = cycle(STATIC, [*members, alone, filler], [pod_info("high", "a", priority=9)])
    assert evicted(res) == ["solo"]
    # Two GPUs to free and no lone pod: the whole group goes, not one member of it.
    res = cycle(STATIC, [*members, filler], [pod_info("wide", "a", priority=9, gpus=3)])
    assert evicted(res) == ["g0", "g1"]


def test_a_user_above_its_share_may_not_take_another_users_place() -> None:
    config = {"mode": "static", "queues": [{"name": "a", "quota": {"gpu": 4}}]}
    placed = [(pod_info(f"u1-{j}", "a", priority=0, user="u1"), "n1", 0.0) for j in range(2)] + [
        (pod_info(f"u2-{j}", "a", priority=0, user="u2"), "n1", 0.0) for j in range(2)
    ]
    # u2 holds half of the queue already: a third GPU would take it above its share.
    res = cycle(config, placed, [pod_info("u2-high", "a", priority=9, user="u2")])
    assert evicted(res) in (["u2-0"], ["u2-1"])
    # Only u1's pods are of lower priority: u2 waits, told which rule kept them.
    mine = [(pod_info(f"u2-{j}", "a", priority=9, user="u2"), "n1", 0.0) for j in range(2)]
    res = cycle(config, placed[:2] + mine, [pod_info("u2-more", "a", priority=9, user="u2")])
    assert not res.evictions
    reason = res.unschedulable[0].reason
    assert "above its nominal quota" in reason and "priority preemption refused" in reason


def test_pods_of_the_queue_already_terminating_count_as_gone() -> None:
    """A terminating pod of the queue (deleted by its owner, or a victim put back when its
    preemptor gave up) holds its place in the book until it is gone: a high-priority pod
    evicts only what that pod's leaving does not free -- one more pod, not two -- and when
    the terminating pods alone make room, it waits for them and evicts nobody."""
    placed = [(pod_info(f"low{j}", "a", priority=0), "n1", 0.0) for j in range(4)]
    took = (pod_info("high1", "a", priority=100), "n1", 90.0)
    state = cluster(node_info("n1", gpus=8), placed=[*placed, took])
    state.mark_terminating("a/low3", True)
    engine = Engine(tenancy=parse_config(STATIC))
    res = engine.cycle(state, [pod_info("high2", "a", priority=100)], 100.0)
    assert [b.pod.name for b in res.binds] == ["high2"] and len(res.evictions) == 1
    state = cluster(node_info("n1", gpus=8), placed=placed)
    state.mark_terminating("a/low3", True)
    res = Engine(tenancy=parse_config(STATIC)).cycle(
        state, [pod_info("high", "a", priority=9)], 100.0
    )
    assert not res.evictions and not res.binds
    assert "above its nominal quota" in res.unschedulable[0].reason
