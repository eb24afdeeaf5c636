"""VolumeBinding's storage capacity check (kube-scheduler 1.34): a WaitForFirstConsumer claim
provisioned by a CSI driver with ``storageCapacity: true`` goes only where a CSIStorageCapacity
of its class has room; and a claim whose node was selected already is provisioned there or
nowhere."""

from __future__ import annotations

import pytest

from fairgpu.api.errors import InvalidObjectError
from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.engine.profile import Profile
from fairgpu.model.volumes import decode_storage
from tests.engine.test_volumes import feasible, reason, scheduler, three_nodes, user
from tests.engine.volume_builders import (
    capacity_doc,
    csidriver_doc,
    load,
    on_host,
    pv_doc,
    pvc_doc,
    sc_doc,
)

DRIVER = "cap.example.com"
NO_SPACE = "did not have enough free storage"


def capacity_cluster(*docs: dict) -> ClusterState:
    """Nodes a, b (zone z1) and c (z2); a class ``fast`` provisioned by DRIVER, which
    publishes capacity: 1Gi on a, 10Gi on b, volumes up to 2Gi (of 100Gi) in zone z2."""
    return load(
        three_nodes(),
        csidriver_doc(DRIVER),
        sc_doc("fast", provisioner=DRIVER),
        capacity_doc("on-a", "fast", capacity="1Gi", topology=on_host("a")),
        capacity_doc("on-b", "fast", capacity="10Gi", topology=on_host("b")),
        capacity_doc(
            "in-z2",
            "fast",
            capacity="100Gi",
            maximum="2Gi",
            topology={"matchLabels": {"topology.kubernetes.io/zone": "z2"}},
            namespace="storage",
        ),
        *docs,
    )


def test_claim_is_provisioned_only_where_capacity_has_room() -> None:
    state = capacity_cluster(
        pvc_doc("small", sc="fast", size="1Gi"),
        pvc_doc("mid", sc="fast", size="2Gi"),
        pvc_doc("big", sc="fast", size="5Gi"),
        pvc_doc("huge", sc="fast", size="50Gi"),
    )
    assert feasible(user("p1", "small"), state) == ["a", "b", "c"]
    # maximumVolumeSize, not capacity, bounds a volume in z2.
    assert feasible(user("p2", "mid"), state) == ["b", "c"]
    assert feasible(user("p3", "big"), state) == ["b"]
    assert reason(user("p3", "big"), state) == f"0/3 nodes are available: 2 node(s) {NO_SPACE}."
    assert reason(user("p4", "huge"), state) == f"0/3 nodes are available: 3 node(s) {NO_SPACE}."
    big = user("p3", "big")
    result = scheduler().schedule(big, state)
    assert result.ok and state.node(result.node).name == "b"
    decision = state.volumes.decision(big.uid, result.node, "b")
    assert decision.provision == ("default/big",)


def test_capacity_is_checked_only_for_drivers_that_ask_for_it() -> None:
    claim = pvc_doc("big", sc="fast", size="5Gi")
    for driver in (csidriver_doc(DRIVER, False), csidriver_doc(DRIVER, None)):
        state = load(three_nodes(), driver, sc_doc("fast", provisioner=DRIVER), claim)
        assert feasible(user("p", "big"), state) == ["a", "b", "c"]
    # No CSIDriver object at all (not a CSI provisioner, or one that publishes nothing).
    state = load(three_nodes(), sc_doc("fast", provisioner=DRIVER), claim)
    assert feasible(user("p", "big"), state) == ["a", "b", "c"]
    # A claim requesting no storage is not checked either; one requesting 0 bytes is.
    unsized = pvc_doc("unsized", sc="fast")
    del unsized["spec"]["resources"]
    state = load(
        three_nodes(),
        csidriver_doc(DRIVER),
        sc_doc("fast", provisioner=DRIVER),
        unsized,
        pvc_doc("zero", sc="fast", size="0"),
    )
    assert feasible(user("p", "unsized"), state) == ["a", "b", "c"]
    assert feasible(user("q", "zero"), state) == []


def test_capacity_objects_that_give_no_room() -> None:
    state = load(
        three_nodes(),
        csidriver_doc(DRIVER),
        sc_doc("fast", provisioner=DRIVER),
        sc_doc("other", provisioner=DRIVER),
        pvc_doc("data", sc="fast", size="1Gi"),
        # Another class's pool, a pool for no node, a pool of unknown size.
        capacity_doc("theirs", "other", capacity="10Gi", topology={}),
        capacity_doc("nowhere", "fast", capacity="10Gi"),
        capacity_doc("unknown", "fast", topology={}),
    )
    assert feasible(user("p", "data"), state) == []
    # An empty nodeTopology selects every node.
    load(state, capacity_doc("everywhere", "fast", capacity="1Gi", topology={}))
    assert feasible(user("p", "data"), state) == ["a", "b", "c"]
    # Expressions select as label selectors do.
    state.volumes.remove("capacity", "default/everywhere")
    assert feasible(user("p", "data"), state) == []
    z1 = {
        "matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["z2"]}
        ]
    }
    load(state, capacity_doc("not-z2", "fast", capacity="1Gi", topology=z1))
    assert feasible(user("p", "data"), state) == ["a", "b"]


def test_a_matching_volume_needs_no_capacity() -> None:
    state = capacity_cluster(
        pv_doc("disk-c", sc="fast", size="20Gi", node="c"),
        pvc_doc("big", sc="fast", size="5Gi"),
    )
    # c binds the existing volume; b can provision; a has no room.
    assert feasible(user("p", "big"), state) == ["b", "c"]


def test_the_first_claim_that_cannot_be_provisioned_gives_the_reason() -> None:
    state = capacity_cluster(
        sc_doc("z2-only", provisioner="example.com/x", zones=["z2"]),
        pvc_doc("small", sc="z2-only", size="1Gi"),
        pvc_doc("big", sc="fast", size="5Gi"),
    )
    # Smallest first: on a and b the zonal claim fails, on c the big one finds no room.
    assert reason(user("p", "small", "big"), state) == (
        f"0/3 nodes are available: 1 node(s) {NO_SPACE}, "
        "2 node(s) didn't find available persistent volumes to bind."
    )


def test_assumed_provisions_do_not_use_up_capacity() -> None:
    # As in kube-scheduler, only the driver's next CSIStorageCapacity reflects a new volume:
    # two 6Gi claims both go to b's 10Gi pool in one cycle.
    state = capacity_cluster(
        pvc_doc("one", sc="fast", size="6Gi"), pvc_doc("two", sc="fast", size="6Gi")
    )
    pods = [user("p1", "one"), user("p2", "two")]
    decided = Engine(Profile(), ordering="kube-default").cycle(state, pods, now=0.0)
    assert sorted((b.pod.name, b.node_name) for b in decided.binds) == [
        ("p1", "b"),
        ("p2", "b"),
    ]


def test_capacity_changes_are_seen() -> None:
    state = capacity_cluster(pvc_doc("big", sc="fast", size="5Gi"))
    assert feasible(user("p", "big"), state) == ["b"]
    load(state, capacity_doc("on-b", "fast", capacity="4Gi", topology=on_host("b")))
    assert feasible(user("p", "big"), state) == []
    load(state, csidriver_doc(DRIVER, False))
    assert feasible(user("p", "big"), state) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (capacity_doc("c", "fast", capacity="lots"), "capacity"),
        (capacity_doc("c", "fast", capacity="1Gi", maximum="-1"), "maximumVolumeSize"),
        (capacity_doc("c", "", capacity="1Gi"), "storageClassName"),
        (
            capacity_doc(
                "c",
                "fast",
                topology={"matchExpressions": [{"key": "k", "operator": "Near"}]},
            ),
            r"nodeTopology.matchExpressions\[0\].operator",
        ),
    ],
)
def test_bad_capacity_objects_name_object_and_field(doc: dict, field: str) -> None:
    with pytest.raises(InvalidObjectError, match=rf"CSIStorageCapacity default/c.*{field}"):
        decode_storage(doc)


def test_bad_csidriver_names_the_field() -> None:
    bad = csidriver_doc(DRIVER)
    bad["spec"]["storageCapacity"] = "sometimes"
    with pytest.raises(InvalidObjectError, match=r"CSIDriver cap.example.com.*storageCapacity"):
        decode_storage(bad)


def selected(doc: dict, node: str) -> dict:
    """``doc`` (a claim) with the selected-node annotation PreBind writes."""
    doc["metadata"]["annotations"] = {"volume.kubernetes.io/selected-node": node}
    return doc


def test_a_claim_whose_node_was_selected_is_provisioned_there_or_nowhere() -> None:
    state = capacity_cluster(
        sc_doc("local", provisioner="example.com/x"),
        pv_doc("disk-a", sc="local", size="5Gi", node="a"),
        selected(pvc_doc("picked", sc="local"), "b"),
        selected(pvc_doc("gone", sc="local"), "nowhere"),
        selected(pvc_doc("big", sc="fast", size="5Gi"), "a"),
    )
    # No volume is matched for it (disk-a would fit): only b, the selected node.
    assert feasible(user("p1", "picked"), state) == ["b"]
    assert reason(user("p1", "picked"), state) == (
        "0/3 nodes are available: 2 node(s) didn't find available persistent volumes to bind."
    )
    assert feasible(user("p2", "gone"), state) == []
    # On the selected node the claim is still checked for provisioning: no room on a.
    assert reason(user("p3", "big"), state) == (
        f"0/3 nodes are available: 1 node(s) {NO_SPACE}, "
        "2 node(s) didn't find available persistent volumes to bind."
    )
    decided = Engine(Profile(), ordering="kube-default").cycle(state, [user("p1", "picked")], 0.0)
    assert [b.node_name for b in decided.binds] == ["b"]
    decision = state.volumes.decision("default/p1", state.node_index["b"], "b")
    assert decision.bind == () and decision.provision == ("default/picked",)
