"""Succeeded pods as the pod group members they were (:mod:`fairgpu.kube.completed`)."""

from __future__ import annotations

import msgspec

from fairgpu.cluster.state import ClusterState
from fairgpu.kube.completed import apply_completed, decode_completed


def raw(name: str, labels: dict[str, str] | None = None, **annotations: str) -> bytes:
    meta = {"name": name, "namespace": "ns", "uid": f"u-{name}", "labels": labels or {}}
    return msgspec.json.encode({"metadata": {**meta, "annotations": annotations}})


def test_only_members_of_pod_groups_are_kept_and_bad_input_is_dropped() -> None:
    member = decode_completed(raw("a", {"fairgpu.io/pod-group": "g"}))
    assert member is not None and (member.uid, member.labels) == (
        "u-a",
        {"fairgpu.io/pod-group": "g"},
    )
    volcano = decode_completed(raw("v", None, **{"scheduling.k8s.io/group-name": "pg"}))
    assert volcano is not None and volcano.namespace == "ns"
    assert decode_completed(raw("alone")) is None
    assert decode_completed(b"{not json") is None
    assert decode_completed(b'{"metadata": {"labels": 3}}') is None


def test_events_keep_the_cluster_in_step() -> None:
    cluster = ClusterState()
    a = decode_completed(raw("a", {"fairgpu.io/pod-group": "g"}))
    b = decode_completed(raw("b", {"fairgpu.io/pod-group": "g"}))
    assert apply_completed(cluster, "SYNC", [a, None, b])
    assert set(cluster.completed) == {"u-a", "u-b"}
    assert not apply_completed(cluster, "MODIFIED", a)  # already known
    assert apply_completed(cluster, "DELETED", a) and set(cluster.completed) == {"u-b"}
    assert not apply_completed(cluster, "DELETED", None)
    assert apply_completed(cluster, "SYNC", [a]) and set(cluster.completed) == {"u-a"}
