"""A gang whose members must share a rack (required pod affinity to its own pods) is placed
one rack at a time: in a rack that holds it whole, the tightest that does, evicting no one
when some rack holds it without -- never stuck on the rack its first member happened to
land in."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgpu.api.errors import InvalidObjectError
from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import policy
from fairgpu.model.gang_topology import (
    ANN_TOPOLOGY_PREFERRED,
    ANN_TOPOLOGY_REQUIRED,
    GangTopology,
)
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy import parse_config
from fairgpu.tenancy.resolve import LABEL_POD_GROUP
from tests.builders import cluster, k8s_pod, node_info, pod_info

RACK = "example.com/rack"
BLOCK = "example.com/block"
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
    assert reasons["g-0"] == (
        "pod group q/g: no example.com/rack domain has room for its 2 members together, "
        "even with every pod it may preempt evicted"
    )


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


def annotated_gang(group: str, members: int, annotation: str, min_member: int = 0) -> list[PodInfo]:
    """``members`` 4-GPU pods of pod group ``group`` with ``annotation`` = the rack label."""
    return [
        pod_info(
            f"{group}-{i}",
            "q",
            gpus=4,
            group=group,
            min_member=min_member or members,
            annotations={annotation: RACK},
            gang_topology=GangTopology(**{annotation.rpartition("-")[2]: RACK}),
        )
        for i in range(members)
    ]


def half_full_racks() -> list[tuple[PodInfo, str, float]]:
    """4-GPU pods on a1 and b1: each of racks ``a`` and ``b`` has one node with 4 GPUs free."""
    return [(pod_info(f"half-{n}", "q", gpus=4), n, 0.0) for n in ("a1", "b1")]


def test_the_required_annotation_keeps_a_gang_in_one_rack() -> None:
    """Racks ``a`` and ``b`` have 4 GPUs free each, rack ``c`` 8: two 4-GPU members fit in
    ``a`` and ``b`` apart, or both in ``c``."""
    state = cluster(
        rack_node("a1", "rack-a"),
        rack_node("b1", "rack-b"),
        rack_node("c1", "rack-c"),
        placed=half_full_racks(),
    )
    engine = Engine(policy("binpack"), tenancy=parse_config(TENANCY))
    result = engine.cycle(state, annotated_gang("g", 2, ANN_TOPOLOGY_REQUIRED), now=10.0)
    assert bound(result) == {"g-0": "c1", "g-1": "c1"}


def test_a_preferred_gang_goes_anywhere_when_no_rack_holds_it() -> None:
    state = cluster(rack_node("a1", "rack-a"), rack_node("b1", "rack-b"), placed=half_full_racks())
    engine = Engine(tenancy=parse_config(TENANCY))
    preferred = engine.cycle(state, annotated_gang("p", 2, ANN_TOPOLOGY_PREFERRED), now=10.0)
    assert sorted(bound(preferred).values()) == ["a1", "b1"]
    state = cluster(rack_node("a1", "rack-a"), rack_node("b1", "rack-b"), placed=half_full_racks())
    required = engine.cycle(state, annotated_gang("r", 2, ANN_TOPOLOGY_REQUIRED), now=10.0)
    assert not required.binds
    assert "no example.com/rack domain has room" in required.unschedulable[0].reason


def two_in_rack_a(min_member: int) -> tuple[list[PodInfo], ClusterState]:
    """Three 8-GPU members of group ``g`` confined to a rack, two of them running in rack
    ``a`` (a1, a2); rack ``b`` (b1) empty."""
    members = annotated_gang("g", 3, ANN_TOPOLOGY_REQUIRED, min_member=min_member)
    for m in members:
        m.gpu = pod_info("x", gpus=8).gpu
    state = cluster(
        rack_node("a1", "rack-a"),
        rack_node("a2", "rack-a"),
        rack_node("b1", "rack-b"),
        placed=[(members[0], "a1", 0.0), (members[1], "a2", 0.0)],
    )
    return members, state


def test_members_of_a_running_group_join_its_rack() -> None:
    """Two of three members (minMember 2) run in rack ``a``; the third waits for room there,
    though rack ``b`` is empty."""
    members, state = two_in_rack_a(min_member=2)
    engine = Engine(tenancy=parse_config(TENANCY))
    result = engine.cycle(state, [members[2]], now=10.0)
    assert not result.binds
    state.release(members[1].uid)  # a2 frees
    assert bound(engine.cycle(state, [members[2]], now=20.0)) == {"g-2": "a2"}


def test_members_that_are_terminating_do_not_fix_the_rack() -> None:
    """The two members in rack ``a`` are being deleted (their group torn down): the third
    starts where it fits now, in rack ``b``."""
    members, state = two_in_rack_a(min_member=1)
    for m in members[:2]:
        state.mark_terminating(m.uid, True)
    engine = Engine(tenancy=parse_config(TENANCY))
    assert bound(engine.cycle(state, [members[2]], now=10.0)) == {"g-2": "b1"}


def test_a_bad_topology_annotation_names_the_field() -> None:
    field = f"field metadata.annotations[{ANN_TOPOLOGY_REQUIRED}]: 'rack label' is not a label key"
    with pytest.raises(InvalidObjectError, match=re.escape(f"Pod q/g-0: {field}")):
        k8s_pod("g-0", "q", gpus=1, annotations={ANN_TOPOLOGY_REQUIRED: "rack label"})
    same = {ANN_TOPOLOGY_REQUIRED: RACK, ANN_TOPOLOGY_PREFERRED: RACK}
    with pytest.raises(InvalidObjectError, match="already requires; name a finer one"):
        k8s_pod("g-0", "q", gpus=1, annotations=same)
    both = {ANN_TOPOLOGY_REQUIRED: BLOCK, ANN_TOPOLOGY_PREFERRED: RACK}
    nested = k8s_pod("g-0", "q", gpus=1, annotations=both)
    assert nested.gang_topology == GangTopology(required=BLOCK, preferred=RACK)
    good = k8s_pod("g-0", "q", gpus=1, annotations={ANN_TOPOLOGY_PREFERRED: RACK})
    assert good.error is None and good.gang_topology == GangTopology(preferred=RACK)


def test_a_rack_inside_a_block_goes_first_when_one_holds_the_gang() -> None:
    """Required: one block; preferred: one rack. Block 1 holds the gang only across its two
    racks (r1 has one free node, r2 one node); block 2's rack r3 holds it whole."""
    layout = [("n1", "b1", "r1"), ("n2", "b1", "r1"), ("n3", "b1", "r2")]
    layout += [("n4", "b2", "r3"), ("n5", "b2", "r3"), ("n6", "b2", "r4")]
    state = cluster(
        *(node_info(n, gpus=8, labels={BLOCK: b, RACK: r}) for n, b, r in layout),
        placed=[(small("busy"), "n2", 0.0), (small("busy-2"), "n6", 0.0)],
    )
    engine = Engine(tenancy=parse_config(TENANCY))
    topology = GangTopology(required=BLOCK, preferred=RACK)
    pods = [
        pod_info(f"g-{i}", "q", gpus=8, group="g", min_member=2, gang_topology=topology)
        for i in range(2)
    ]
    assert sorted(bound(engine.cycle(state, pods, now=10.0)).values()) == ["n4", "n5"]


@settings(max_examples=150, deadline=None)
@given(
    racks=st.lists(st.integers(1, 3), min_size=2, max_size=4),
    busy=st.lists(st.integers(0, 8), min_size=12, max_size=12),
    members=st.integers(2, 4),
    gpus=st.sampled_from([2, 4, 8]),
    how=st.sampled_from(["annotation", "affinity"]),
)
def test_a_confined_gang_starts_whenever_a_rack_holds_it_and_never_across_racks(
    racks: list[int], busy: list[int], members: int, gpus: int, how: str
) -> None:
    """Random racks of 8-GPU nodes, each node with some GPUs taken by pods the gang may not
    preempt (same priority): the gang binds in one rack, and binds whenever some rack has
    room for all its members now."""
    nodes, placed, rack_of = [], [], {}
    for r, size in enumerate(racks):
        for i in range(size):
            name = f"r{r}n{i}"
            rack_of[name] = f"rack-{r}"
            nodes.append(rack_node(name, f"rack-{r}"))
            taken = busy[len(nodes) - 1]
            if taken:
                placed.append((pod_info(f"busy-{name}", "q", gpus=taken), name, 0.0))
    state = cluster(*nodes, placed=placed)
    room: dict[str, int] = {}
    for name, rack in rack_of.items():
        free = 8 - next((p.gpu.count for p, n, _ in placed if n == name), 0)
        room[rack] = room.get(rack, 0) + free // gpus
    if how == "annotation":
        pods = annotated_gang("g", members, ANN_TOPOLOGY_REQUIRED)
        for p in pods:
            p.gpu = pod_info("x", gpus=gpus).gpu
    else:
        pods = [
            k8s_pod(
                f"g-{i}", "q", gpus=gpus, group="g", min_member=members, affinity=same_rack("g")
            )
            for i in range(members)
        ]
    nodes_of = bound(Engine(tenancy=parse_config(TENANCY)).cycle(state, pods, now=10.0))
    assert len({rack_of[n] for n in nodes_of.values()}) <= 1
    if any(r >= members for r in room.values()):
        assert len(nodes_of) == members, (room, nodes_of)
