"""The auditor's check that a pod group confined to one domain (``fairgpu.io/topology-
required``) runs in one: it catches a group split over two racks, and only that."""

from __future__ import annotations

from typing import Any

from fairgpu.model.gang_topology import ANN_TOPOLOGY_REQUIRED
from fairgpu.tenancy.resolve import LABEL_POD_GROUP
from tests.live.auditor import _confined_violations

RACK = "example.com/rack"
NODES = {
    name: {"metadata": {"name": name, "labels": {RACK: rack}}}
    for name, rack in (("a1", "rack-a"), ("a2", "rack-a"), ("b1", "rack-b"))
}


def member(name: str, node: str, group: str = "g", confined: bool = True) -> dict[str, Any]:
    notes = {ANN_TOPOLOGY_REQUIRED: RACK} if confined else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {LABEL_POD_GROUP: group},
            "annotations": notes,
        },
        "spec": {"nodeName": node},
    }


def test_a_group_in_one_rack_passes() -> None:
    assert _confined_violations(NODES, [member("g-0", "a1"), member("g-1", "a2")]) == []


def test_a_group_split_over_racks_is_a_violation() -> None:
    found = _confined_violations(NODES, [member("g-0", "a1"), member("g-1", "b1")])
    assert found == [f"pod group ns/g must share one {RACK} domain, runs in ['rack-a', 'rack-b']"]


def test_groups_without_the_annotation_and_other_groups_are_not_mixed() -> None:
    pods = [
        member("g-0", "a1"),
        member("h-0", "b1", group="h"),
        member("u-0", "a1", group="u", confined=False),
        member("u-1", "b1", group="u", confined=False),
    ]
    assert _confined_violations(NODES, pods) == []
