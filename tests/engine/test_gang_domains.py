"""A gang whose members must share a rack (required pod affinity to its own pods) is placed
one rack at a time: in a rack that holds it whole, the tightest that does, evicting no one
when some rack holds it without -- never stuck on the rack its first member happened to
land in."""

from __future__ import annotations

from typing import Any

from fairgpu.engine.engine import Engine
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy import parse_config
from fairgpu.tenancy.resolve import LABEL_POD_GROUP
from tests.builders import cluster, k8s_pod, node_info, pod_info

RACK = "example.com/rack"
TENANCY = {"queues": [{"name": "q", "namespaces": ["q"]}], "preemption": {"enabled": True}}


def rack_node(name: str, rack: str) -> NodeInfo:
    """An 8-GPU node in ``rack``."""
    return node_info(name, gpus=8, labels={RACK: rack, "kubernetes.io/hostname": name})


def same_rack(group: str) -> dict[str, Any]:
    """Required pod affinity to the pods of pod group ``group``, per rack."""
    term = {
        "labelSelector": {"matchLabels": {LABEL_POD_GROUP: group}},
        "topologyKey": RACK,
    }
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def gang(group: str, members: int, priority: int = 0, created: float = 0.0) -> list[PodInfo]:
    """``members`` 8-GPU pods of pod group ``group`` that must share a rack."""
    return [
        k8s_pod(
            f"{group}-{i}",
            "q",
            gpus=8,
            cpu="4",
            memory="16Gi",
            group=group,
            min_member=members,
            affinity=same_rack(group),
            priority=priority,
            created=created,
        )
        for i in range(members)
    ]


def small(name: str) -> PodInfo:
    """A 1-GPU pod of the same queue, priority 0."""
    return pod_info(name, "q", gpus=1)


def bound(result: Any) -> dict[str, str]:
    return {b.pod.name: b.node_name for b in result.binds}


def test_a_gang_is_not_stuck_on_a_rack_too_small_for_it() -> None:
    """Racks: ``a`` (a1 empty, a2 with a GPU taken), ``c`` (one node), ``b`` (two empty
    nodes). Only rack ``b`` holds two 8-GPU members; a member placed first in ``a`` or ``c``
    leaves its sibling nowhere to go, every cycle."""
    state = cluster(
        rack_node("a1", "rack-a"),
        rack_node("a2", "rack-a"),
        rack_node("c1", "rack-c"),
        rack_node("b1", "rack-b"),
        rack_node("b2", "rack-b"),
        placed=[(small("busy"), "a2")],
    )
    engine = Engine(tenancy=parse_config(TENANCY))
    result = engine.cycle(state, gang("g", 2), now=10.0)
    assert sorted(bound(result).values()) == ["b1", "b2"]
    assert not result.evictions


def test_the_tightest_rack_that_holds_a_gang_is_used_so_a_larger_one_stays_whole() -> None:
    """Rack ``a`` has two empty nodes, rack ``b`` three: the 2-member gang takes ``a``, and
    the 3-member gang of the same cycle still finds ``b`` whole."""
    state = cluster(
        rack_node("b1", "rack-b"),
        rack_node("b2", "rack-b"),
        rack_node("b3", "rack-b"),
        rack_node("a1", "rack-a"),
        rack_node("a2", "rack-a"),
    )
    engine = Engine(tenancy=parse_config(TENANCY))
    pods = gang("pair", 2) + gang("trio", 3, created=1.0)
    nodes = bound(engine.cycle(state, pods, now=10.0))
    assert sorted(nodes[f"pair-{i}"] for i in range(2)) == ["a1", "a2"]
    assert sorted(nodes[f"trio-{i}"] for i in range(3)) == ["b1", "b2", "b3"]


def test_a_rack_that_holds_the_gang_without_evictions_goes_first() -> None:
    """Rack ``a``: a1 empty, a2 with a low-priority pod the gang may preempt; rack ``b``:
    two empty nodes. The gang starts in ``b`` and evicts no one."""
    state = cluster(
        rack_node("a1", "rack-a"),
        rack_node("a2", "rack-a"),
        rack_node("b1", "rack-b"),
        rack_node("b2", "rack-b"),
        placed=[(small("low"), "a2", 0.0)],
    )
    engine = Engine(tenancy=parse_config(TENANCY))
    result = engine.cycle(state, gang("g", 2, priority=1000), now=600.0)
    assert sorted(bound(result).values()) == ["b1", "b2"]
    assert not result.evictions


def test_when_every_rack_needs_evictions_they_all_come_from_one_rack() -> None:
    """Every node holds a low-priority 1-GPU pod; the 2-member gang of priority 1 000
    evicts the two pods of one rack and starts there."""
    names = [("a1", "rack-a"), ("a2", "rack-a"), ("b1", "rack-b"), ("b2", "rack-b")]
    state = cluster(
        *(rack_node(n, r) for n, r in names),
        placed=[(small(f"low-{n}"), n, 0.0) for n, _ in names],
    )
    engine = Engine(tenancy=parse_config(TENANCY))
    result = engine.cycle(state, gang("g", 2, priority=1000), now=600.0)
    racks = dict(names)
    assert len({racks[n] for n in bound(result).values()}) == 1
    assert len(bound(result)) == 2
    evicted = {racks[e.pod.name.removeprefix("low-")] for e in result.evictions}
    assert len(result.evictions) == 2 and len(evicted) == 1


def test_a_gang_no_rack_can_hold_waits_and_says_why() -> None:
    """Two racks of one node each: no rack holds two 8-GPU members."""
    state = cluster(rack_node("a1", "rack-a"), rack_node("b1", "rack-b"))
    engine = Engine(tenancy=parse_config(TENANCY))
    result = engine.cycle(state, gang("g", 2), now=10.0)
    assert not result.binds
    reasons = {u.pod.name: u.reason for u in result.unschedulable}
    assert set(reasons) == {"g-0", "g-1"}
    assert "pod group q/g: only 1 of 2 needed members fit together" in reasons["g-0"]


def test_a_reservation_for_a_gang_holds_nodes_of_one_rack() -> None:
    """Every node is busy with another queue's 8-GPU pod: a1 until 100 s, b1 200 s, b2
    300 s, a2 5 000 s. The earliest two nodes (a1, b1) are in different racks and could
    never hold the gang together; rack ``b`` drains by 300 s, so its nodes are held."""
    ends = {"a1": 100.0, "a2": 5000.0, "b1": 200.0, "b2": 300.0}
    state = cluster(
        *(rack_node(n, f"rack-{n[0]}") for n in ends),
        placed=[
            (pod_info(f"busy-{n}", "other", gpus=8, duration=d), n, 0.0) for n, d in ends.items()
        ],
    )
    config = {**TENANCY, "preemption": {"enabled": False}}
    engine = Engine(tenancy=parse_config({**config, "starvation": {"reserveAfterSeconds": 0}}))
    result = engine.cycle(state, gang("g", 2), now=10.0)
    assert {k: sorted(v) for k, v in result.reserved.items()} == {"q/g": ["b1", "b2"]}
