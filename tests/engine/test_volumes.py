"""Volume plugins: VolumeRestrictions, VolumeBinding, VolumeZone, NodeVolumeLimits, each with
kube-scheduler 1.34's rules and reasons."""

from __future__ import annotations

import numpy as np
import pytest

from fairgpu.api import objects as k8s
from fairgpu.api.errors import InvalidObjectError
from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.engine.plugins.volume_restrictions import DISK_CONFLICT
from fairgpu.engine.profile import Profile
from fairgpu.engine.scheduler import Scheduler
from fairgpu.model.pod import PodInfo
from fairgpu.model.volumes import claim_from_k8s, volume_from_k8s
from tests.builders import cluster, k8s_node, k8s_pod
from tests.engine.volume_builders import claims, csinode_doc, load, pv_doc, pvc_doc, sc_doc

VOLUME_PRE = ["VolumeRestrictions", "VolumeBinding"]
VOLUME_FILTERS = ["VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone"]


def scheduler(filters: list[str] | None = None) -> Scheduler:
    return Scheduler(Profile(pre_filters=VOLUME_PRE, filters=filters or VOLUME_FILTERS))


def feasible(p: PodInfo, state: ClusterState) -> list[str]:
    mask, _ = scheduler().filter(p, state)
    return sorted(state.node(int(i)).name for i in np.flatnonzero(mask))


def reason(p: PodInfo, state: ClusterState) -> str:
    """The pending reason; for a pod that fits somewhere, what the other nodes failed on."""
    sched = scheduler()
    result = sched.schedule(p, state)
    if not result.ok:
        return result.reason()
    _, results = sched.filter(p, state)
    return sched.diagnose(state, results, None).message()


def three_nodes(**placed: list[tuple[PodInfo, str]]) -> ClusterState:
    zones = {"a": "z1", "b": "z1", "c": "z2"}
    nodes = [k8s_node(n, labels={"topology.kubernetes.io/zone": z}) for n, z in zones.items()]
    return cluster(*nodes, placed=placed.get("placed"))


def user(name: str = "app", *names: str, **kw: object) -> PodInfo:
    return k8s_pod(name, volumes=claims(*names), **kw)


# ---- VolumeBinding ---------------------------------------------------------------------------
def test_pod_without_claims_passes_everywhere() -> None:
    state = three_nodes()
    assert feasible(k8s_pod("plain"), state) == ["a", "b", "c"]


def test_bound_claim_follows_its_volumes_node_affinity() -> None:
    state = load(
        three_nodes(),
        sc_doc("local"),
        pv_doc("pv-b", node="b", claim="default/data"),
        pvc_doc("data", volume="pv-b"),
    )
    assert feasible(user("app", "data"), state) == ["b"]
    assert reason(user("app", "data"), state) == (
        "0/3 nodes are available: 2 node(s) didn't match PersistentVolume's node affinity."
    )


def test_claim_bound_to_a_missing_volume() -> None:
    state = load(three_nodes(), sc_doc("local"), pvc_doc("data", volume="gone"))
    assert reason(user("app", "data"), state) == (
        "0/3 nodes are available: 3 node(s) unavailable due to one or more pvc(s) bound to "
        "non-existent pv(s)."
    )


def test_missing_claim_is_reported_as_kube_scheduler_does() -> None:
    state = three_nodes()
    result = scheduler().schedule(user("app", "nope"), state)
    assert result.reason() == 'persistentvolumeclaim "nope" not found'
    assert result.code.name == "UNRESOLVABLE"


def test_unbound_immediate_claim_makes_the_pod_unschedulable() -> None:
    state = load(three_nodes(), sc_doc("fast", wffc=False, provisioner="csi.example.com"))
    load(state, pvc_doc("data", sc="fast"))
    assert reason(user("app", "data"), state) == "pod has unbound immediate PersistentVolumeClaims"
    # A claim without any class waits for the PV controller too.
    load(state, pvc_doc("plain", sc=""))
    assert reason(user("app", "plain"), state) == "pod has unbound immediate PersistentVolumeClaims"


def test_wait_for_first_consumer_needs_a_matching_local_volume() -> None:
    state = load(
        three_nodes(),
        sc_doc("local"),
        pvc_doc("data", size="5Gi"),
        pv_doc("small-a", node="a", size="1Gi"),  # too small
        pv_doc("big-b", node="b", size="10Gi"),
        pv_doc("rwx-c", node="c", size="10Gi", modes=("ReadWriteMany",)),  # wrong access mode
        pv_doc("other-c", sc="other", node="c", size="10Gi"),  # other class
    )
    assert feasible(user("app", "data"), state) == ["b"]
    assert reason(user("app", "data"), state) == (
        "0/3 nodes are available: 2 node(s) didn't find available persistent volumes to bind."
    )


def test_the_smallest_fitting_volume_is_chosen_and_then_taken() -> None:
    state = load(
        three_nodes(),
        sc_doc("local"),
        pvc_doc("one", size="1Gi"),
        pvc_doc("two", size="1Gi"),
        pv_doc("a-big", node="a", size="8Gi"),
        pv_doc("a-small", node="a", size="2Gi"),
    )
    engine = Engine(
        Profile(pre_filters=VOLUME_PRE, filters=VOLUME_FILTERS), ordering="kube-default"
    )
    first, second = user("first", "one"), user("second", "two")
    second.created = 1.0
    out = engine.cycle(state, [first, second], now=0.0)
    assert [(b.pod.name, b.node_name) for b in out.binds] == [("first", "a"), ("second", "a")]
    store = state.volumes
    got = {
        b.pod.name: store.decision(b.pod.uid, state.node_index["a"], "a").bind for b in out.binds
    }
    assert got == {"first": (("default/one", "a-small"),), "second": (("default/two", "a-big"),)}
    # Both volumes on a are now taken by placed pods: a third claim finds none.
    load(state, pvc_doc("three", size="1Gi"))
    assert reason(user("third", "three"), state).endswith(
        "3 node(s) didn't find available persistent volumes to bind."
    )


def test_two_claims_of_one_pod_never_share_a_volume() -> None:
    state = load(
        three_nodes(),
        sc_doc("local"),
        pvc_doc("x"),
        pvc_doc("y"),
        pv_doc("a1", node="a"),
        pv_doc("b1", node="b"),
        pv_doc("b2", node="b"),
    )
    assert feasible(user("app", "x", "y"), state) == ["b"]


def test_prebound_volume_is_used_and_others_are_not_bound_to_it() -> None:
    state = load(
        three_nodes(),
        sc_doc("local"),
        pvc_doc("mine"),
        pvc_doc("theirs"),
        pv_doc("reserved", node="c", claim="default/mine", phase="Available"),
        pv_doc("free", node="a"),
    )
    assert feasible(user("app", "mine"), state) == ["c"]
    assert feasible(user("other", "theirs"), state) == ["a"]


def test_dynamic_provisioning_follows_allowed_topologies() -> None:
    state = load(
        three_nodes(),
        sc_doc("zonal", provisioner="csi.example.com", zones=["z2"]),
        sc_doc("anywhere", provisioner="csi.example.com"),
        pvc_doc("z", sc="zonal"),
        pvc_doc("any", sc="anywhere"),
    )
    assert feasible(user("app", "z"), state) == ["c"]
    assert feasible(user("app2", "any"), state) == ["a", "b", "c"]
    store = state.volumes
    scheduler().schedule(user("app3", "z"), state)
    assert store.decision("default/app3", state.node_index["c"], "c").provision == ("default/z",)


def test_unset_class_means_the_default_class() -> None:
    default = sc_doc("std", provisioner="csi.example.com", zones=["z1"])
    default["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    state = load(three_nodes(), default, pvc_doc("data", sc=None))
    assert feasible(user("app", "data"), state) == ["a", "b"]


# ---- VolumeZone ------------------------------------------------------------------------------
def test_zonal_volume_keeps_the_pod_in_its_zone() -> None:
    state = load(
        three_nodes(),
        sc_doc("zonal", wffc=False, provisioner="csi.example.com"),
        pv_doc("pv-z2", sc="zonal", labels={"topology.kubernetes.io/zone": "z2"}),
        pvc_doc("data", sc="zonal", volume="pv-z2"),
    )
    assert feasible(user("app", "data"), state) == ["c"]
    assert reason(user("app", "data"), state) == (
        "0/3 nodes are available: 2 node(s) had no available volume zone."
    )


def test_volume_zone_lists_and_nodes_without_zone_labels() -> None:
    nodes = [
        k8s_node("a", labels={"topology.kubernetes.io/zone": "z1"}),
        k8s_node("b", labels={"failure-domain.beta.kubernetes.io/zone": "z3"}),
        k8s_node("bare"),
    ]
    state = load(
        cluster(*nodes),
        sc_doc("zonal", wffc=False, provisioner="csi.example.com"),
        pv_doc("pv", sc="zonal", labels={"topology.kubernetes.io/zone": "z2__z3"}),
        pvc_doc("data", sc="zonal", volume="pv"),
    )
    # The GA label is not checked against a node carrying only the beta key; "bare" has none.
    assert feasible(user("app", "data"), state) == ["bare"]
    beta = pv_doc("pvb", sc="zonal", labels={"failure-domain.beta.kubernetes.io/zone": "z1__z3"})
    load(state, beta, pvc_doc("beta", sc="zonal", volume="pvb"))
    assert feasible(user("app2", "beta"), state) == ["a", "b", "bare"]


# ---- VolumeRestrictions -----------------------------------------------------------------------
def test_read_write_once_pod_claim_is_used_by_one_pod_only() -> None:
    holder = user("holder", "solo")
    state = load(
        three_nodes(placed=[(holder, "a")]),
        sc_doc("local"),
        pv_doc("pv", claim="default/solo", modes=("ReadWriteOncePod",)),
        pvc_doc("solo", volume="pv", modes=("ReadWriteOncePod",)),
    )
    assert reason(user("second", "solo"), state) == (
        "0/3 nodes are available: 3 node(s) unavailable due to PersistentVolumeClaim with "
        "ReadWriteOncePod access mode already in-use by another pod."
    )
    state.release(holder.uid)
    assert feasible(user("second", "solo"), state) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("mine", "theirs", "expected"),
    [
        (
            {"gcePersistentDisk": {"pdName": "d"}},
            {"gcePersistentDisk": {"pdName": "d"}},
            ["b", "c"],
        ),
        (
            {"gcePersistentDisk": {"pdName": "d", "readOnly": True}},
            {"gcePersistentDisk": {"pdName": "d", "readOnly": True}},
            ["a", "b", "c"],
        ),
        (
            {"awsElasticBlockStore": {"volumeID": "v", "readOnly": True}},
            {"awsElasticBlockStore": {"volumeID": "v", "readOnly": True}},
            ["b", "c"],
        ),
        (
            {"gcePersistentDisk": {"pdName": "d"}},
            {"gcePersistentDisk": {"pdName": "e"}},
            ["a", "b", "c"],
        ),
    ],
)
def test_conflicting_disks(mine: dict, theirs: dict, expected: list[str]) -> None:
    holder = k8s_pod("holder", volumes=[{"name": "d", **theirs}])
    state = three_nodes(placed=[(holder, "a")])
    new = k8s_pod("new", volumes=[{"name": "d", **mine}])
    assert feasible(new, state) == expected
    if expected != ["a", "b", "c"]:
        _, results = scheduler().filter(new, state)
        failing = dict(results)["VolumeRestrictions"].reasons[DISK_CONFLICT]
        assert np.flatnonzero(failing).tolist() == [state.node_index["a"]]


# ---- NodeVolumeLimits ------------------------------------------------------------------------
def test_csi_attach_limit_counts_unique_volumes_on_the_node() -> None:
    driver = "csi.example.com"
    state = three_nodes()
    load(
        state,
        sc_doc("csi", wffc=False, provisioner=driver),
        *[
            pv_doc(f"pv{i}", sc="csi", csi=(driver, f"h{i}"), claim=f"default/c{i}")
            for i in range(3)
        ],
        *[pvc_doc(f"c{i}", sc="csi", volume=f"pv{i}") for i in range(3)],
        csinode_doc("a", driver, 2),
        csinode_doc("b", driver, 1),
    )
    state.assign(user("old", "c0"), state.node_index["a"])
    # a: c0 attached + c1 = 2 <= 2; b: 1 new > limit 1? no, 1 <= 1; c: no CSINode, no limit.
    assert feasible(user("one", "c1"), state) == ["a", "b", "c"]
    # Two new volumes: a has 1 + 2 > 2, b has 0 + 2 > 1.
    assert feasible(user("two", "c1", "c2"), state) == ["c"]
    assert reason(user("two", "c1", "c2"), state) == (
        "0/3 nodes are available: 2 node(s) exceed max volume count."
    )
    # A volume already attached there is not counted again.
    assert feasible(user("same", "c0"), state) == ["a", "b", "c"]


# ---- decoding --------------------------------------------------------------------------------
def test_bad_storage_objects_name_the_field() -> None:
    bad = pvc_doc("data", size="lots")
    with pytest.raises(InvalidObjectError, match=r"PersistentVolumeClaim default/data.*storage"):
        claim_from_k8s(k8s.decode(bad, k8s.PersistentVolumeClaim))
    bad_pv = pv_doc("pv", size="-1Gi")
    with pytest.raises(InvalidObjectError, match=r"PersistentVolume pv.*spec.capacity.storage"):
        volume_from_k8s(k8s.decode(bad_pv, k8s.PersistentVolume))


def test_volumes_without_affinity_mix_with_node_local_ones() -> None:
    net = pv_doc("net", size="5Gi")  # no node affinity: usable from every node
    state = load(
        three_nodes(),
        sc_doc("local"),
        net,
        pv_doc("a-small", node="a", size="2Gi"),
        pvc_doc("x"),
        pvc_doc("y"),
    )
    single = user("single", "x")
    assert feasible(single, state) == ["a", "b", "c"]
    store = state.volumes
    picks = {n: store.decision(single.uid, state.node_index[n], n).bind for n in "abc"}
    assert picks == {
        "a": (("default/x", "a-small"),),
        "b": (("default/x", "net"),),
        "c": (("default/x", "net"),),
    }
    # Two claims need two volumes on the node: only a has them (a-small and net).
    both = user("both", "x", "y")
    assert feasible(both, state) == ["a"]
    assert store.decision(both.uid, state.node_index["a"], "a").bind == (
        ("default/x", "a-small"),
        ("default/y", "net"),
    )


def test_a_volume_whose_hostname_matches_no_node_is_never_chosen() -> None:
    state = load(three_nodes(), sc_doc("local"), pv_doc("ghost", node="gone"), pvc_doc("x"))
    assert feasible(user("app", "x"), state) == []
