"""NodeVolumeLimits (kube-scheduler 1.34) beyond CSI persistent volumes: generic ephemeral
volumes count as their claim, CSI ephemeral inline volumes not at all, in-tree volumes
migrated to CSI (inline or persistent, or claims of an in-tree provisioner's class) as their
CSI driver's, with the volume handles of the CSI translation library, and VolumeAttachments.
Also how generic ephemeral (and lost) claims are checked before any node is looked at."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fairgpu.api import objects as k8s
from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.engine.framework import Code
from fairgpu.engine.plugins.node_volume_limits import NodeVolumeLimits
from fairgpu.engine.profile import Profile
from fairgpu.model.pod import PodInfo, pod_from_k8s
from tests.builders import cluster, k8s_node, k8s_pod, pod_manifest
from tests.engine.test_volumes import (
    VOLUME_FILTERS,
    feasible,
    reason,
    scheduler,
    three_nodes,
    user,
)
from tests.engine.volume_builders import csinode_doc, load, pv_doc, pvc_doc, sc_doc

LIMITED = "csi.example.com"
GCE = "pd.csi.storage.gke.io"
EBS = "ebs.csi.aws.com"


def gce(pd: str, read_only: bool = True) -> dict[str, Any]:
    return {"name": f"disk-{pd}", "gcePersistentDisk": {"pdName": pd, "readOnly": read_only}}


def ebs(volume_id: str) -> dict[str, Any]:
    return {"name": "disk", "awsElasticBlockStore": {"volumeID": volume_id}}


def limited(driver: str, count: int, *placed: tuple[dict[str, Any], str]) -> ClusterState:
    """Nodes a, b (zone us-central1-a) and c (us-central1-b); a's CSINode allows ``count``
    volumes of ``driver``, b's none; c has no CSINode. ``placed``: (inline volume, node) of
    pods already running."""
    zones = {"a": "us-central1-a", "b": "us-central1-a", "c": "us-central1-b"}
    nodes = [k8s_node(n, labels={"topology.kubernetes.io/zone": z}) for n, z in zones.items()]
    state = load(cluster(*nodes), csinode_doc("a", driver, count), csinode_doc("b", driver, 0))
    for i, (vol, node) in enumerate(placed):
        state.assign(k8s_pod(f"holder{i}", volumes=[vol]), state.node_index[node])
    return state


def test_inline_csi_volumes_are_not_counted_against_the_attach_limit() -> None:
    # kube-scheduler 1.34 counts PVC-backed volumes (and in-tree inline volumes migrated to
    # CSI), never CSI ephemeral inline volumes (volumes[].csi): they pass a full CSINode.
    state = load(three_nodes(), csinode_doc("a", LIMITED, 0))
    inline = [{"name": "scratch", "csi": {"driver": LIMITED, "volumeAttributes": {"size": "1"}}}]
    assert feasible(k8s_pod("inline", volumes=inline), state) == ["a", "b", "c"]


def test_generic_ephemeral_volume_counts_as_its_claim() -> None:
    state = load(
        three_nodes(),
        sc_doc("csi", wffc=False, provisioner=LIMITED),
        pv_doc("pv-old", sc="csi", csi=(LIMITED, "h-old"), claim="default/old"),
        pvc_doc("old", sc="csi", volume="pv-old"),
        # The claim the ephemeral controller creates for pod "app", volume "scratch".
        pv_doc("pv-eph", sc="csi", csi=(LIMITED, "h-eph"), claim="default/app-scratch"),
        pvc_doc("app-scratch", sc="csi", volume="pv-eph"),
        csinode_doc("a", LIMITED, 1),
    )
    state.assign(user("holder", "old"), state.node_index["a"])
    template = {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}
    app = k8s_pod("app", volumes=[{"name": "scratch", "ephemeral": template}])
    assert app.claims == ("app-scratch",)
    assert feasible(app, state) == ["b", "c"]
    assert reason(app, state) == "0/3 nodes are available: 1 node(s) exceed max volume count."


def test_inline_gce_disks_count_as_the_pd_drivers() -> None:
    state = limited(GCE, 1, (gce("d1"), "a"))
    # A second disk exceeds a's limit of 1 and b's 0; the same disk is not counted again.
    assert feasible(k8s_pod("new", volumes=[gce("d2")]), state) == ["c"]
    assert feasible(k8s_pod("same", volumes=[gce("d1")]), state) == ["a", "c"]
    assert reason(k8s_pod("new", volumes=[gce("d2")]), state) == (
        "0/3 nodes are available: 2 node(s) exceed max volume count."
    )


def test_inline_ebs_volume_ids_are_normalised() -> None:
    state = limited(EBS, 1, (ebs("aws://us-east-1a/vol-1"), "a"))
    # The same volume whatever the form of its ID.
    assert feasible(k8s_pod("same", volumes=[ebs("vol-1")]), state) == ["a", "c"]
    assert feasible(k8s_pod("other", volumes=[ebs("vol-2")]), state) == ["c"]


def attempt(p: PodInfo, state: ClusterState) -> tuple[Code, str, str | None]:
    """A whole attempt with the node selector before the volume filters (as in the default
    profile): what kube-scheduler's filters see."""
    result = scheduler(["NodeAffinity", *VOLUME_FILTERS]).schedule(p, state)
    return result.code, result.reason(), result.node_name or None


BAD_EBS = (
    'running "NodeVolumeLimits" filter plugin: converting volume(disk) from inline to csi: '
    "failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume "
    "(aws://zone/not-a-volume)"
)


def test_a_malformed_inline_ebs_id_fails_the_attempt_where_a_csinode_is_feasible() -> None:
    # kube-scheduler translates the pod's inline volumes on every node with a CSINode, and a
    # translation error there ends the whole attempt with an error (no node, no preemption).
    state = limited(EBS, 1)
    bad = ebs("aws://zone/not-a-volume")
    assert k8s_pod("bad", volumes=[bad]).inline_errors == (BAD_EBS.partition(": ")[2],)
    assert attempt(k8s_pod("bad", volumes=[bad]), state) == (Code.ERROR, BAD_EBS, None)
    # Only where a node with a CSINode passes the filters before it: c has none.
    on_c = k8s_pod("bad", volumes=[bad], nodeSelector={"kubernetes.io/hostname": "c"})
    assert attempt(on_c, state) == (Code.SUCCESS, "", "c")


def test_a_placed_pods_untranslatable_volume_fails_attempts_counted_on_its_node() -> None:
    # A pod on a (limits) mounts an Azure disk of the API's default kind, Shared: a new pod
    # with a volume counted on a fails with that pod's error, one with no counted volume or
    # kept off a does not.
    state = limited(AZURE, 1, (azure("d1", kind="Shared"), "a"))
    code, why, _ = attempt(k8s_pod("new", volumes=[azure("d2")]), state)
    assert (code, why) == (
        Code.ERROR,
        'running "NodeVolumeLimits" filter plugin: converting volume(az-d1) from inline to '
        "csi: kind(Shared) is not supported in csi migration",
    )
    assert attempt(k8s_pod("plain"), state)[0] == Code.SUCCESS
    elsewhere = {"kubernetes.io/hostname": "b"}
    assert attempt(k8s_pod("new", volumes=[azure("d2")], nodeSelector=elsewhere), state)[:2] == (
        Code.UNSCHEDULABLE,
        "0/3 nodes are available: 1 node(s) exceed max volume count, "
        "2 node(s) didn't match Pod's node affinity/selector.",
    )
    assert (
        attempt(
            k8s_pod("c", volumes=[azure("d2")], nodeSelector={"kubernetes.io/hostname": "c"}),
            state,
        )[0]
        == Code.SUCCESS
    )


AZURE = "disk.csi.azure.com"
CINDER = "cinder.csi.openstack.org"
PX = "pxd.portworx.com"
AZ_URI = "/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/disks/"


def azure(disk: str, kind: str = "Managed") -> dict[str, Any]:
    return {
        "name": f"az-{disk}",
        "azureDisk": {"diskName": disk, "diskURI": AZ_URI + disk, "kind": kind},
    }


def cinder(volume_id: str) -> dict[str, Any]:
    return {"name": f"cinder-{volume_id}", "cinder": {"volumeID": volume_id}}


def portworx(volume_id: str) -> dict[str, Any]:
    return {"name": f"px-{volume_id}", "portworxVolume": {"volumeID": volume_id}}


@pytest.mark.parametrize(
    ("driver", "volume", "always"),
    [(AZURE, azure, True), (CINDER, cinder, True), (PX, portworx, False)],
)
def test_inline_azure_cinder_and_portworx_volumes_count_as_their_drivers(
    driver: str, volume: Any, always: bool
) -> None:
    state = limited(driver, 1, (volume("d1"), "a"))
    if not always:  # Portworx: only where the CSINode lists the plugin as migrated
        assert feasible(k8s_pod("new", volumes=[volume("d2")]), state) == ["a", "b", "c"]
        for node in ("a", "b"):
            doc = csinode_doc(node, driver, 1 if node == "a" else 0)
            doc["metadata"]["annotations"] = {
                "storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/portworx-volume"
            }
            load(state, doc)
    # a holds d1 at its limit of one, b allows none, c has no CSINode.
    assert feasible(k8s_pod("new", volumes=[volume("d2")]), state) == ["c"]
    assert feasible(k8s_pod("same", volumes=[volume("d1")]), state) == ["a", "c"]


def test_azure_disks_translate_only_when_managed() -> None:
    # The CSI translation refuses any kind but Managed: the pod's attempt fails with an error
    # wherever a node with a CSINode could take it (a and b here, limited or not).
    state = limited(AZURE, 1)
    code, why, _ = attempt(k8s_pod("shared", volumes=[azure("d3", kind="Dedicated")]), state)
    assert code == Code.ERROR and why.endswith("kind(Dedicated) is not supported in csi migration")
    assert k8s_pod("managed", volumes=[azure("d3")]).inline_errors == ()


def test_only_gce_ebs_iscsi_and_rbd_disks_conflict() -> None:
    # kube-scheduler's VolumeRestrictions compares those four kinds; two pods may mount the same
    # Azure disk, Cinder or Portworx volume as far as the scheduler is concerned.
    state = cluster(k8s_node("a"))
    for i, vol in enumerate((azure("d1"), cinder("c1"), portworx("p1"), gce("g1", False))):
        state.assign(k8s_pod(f"holder{i}", volumes=[vol]), 0)
    assert feasible(k8s_pod("az", volumes=[azure("d1")]), state) == ["a"]
    assert feasible(k8s_pod("ci", volumes=[cinder("c1")]), state) == ["a"]
    assert feasible(k8s_pod("px", volumes=[portworx("p1")]), state) == ["a"]
    assert feasible(k8s_pod("pd", volumes=[gce("g1", False)]), state) == []


@pytest.mark.parametrize(
    ("source", "driver"),
    [
        (
            {"azureDisk": {"diskName": "d1", "diskURI": AZ_URI + "d1", "kind": "Managed"}},
            AZURE,
        ),
        ({"cinder": {"volumeID": "c1"}}, CINDER),
    ],
)
def test_persistent_azure_and_cinder_volumes_count_by_their_handles(
    source: dict[str, Any], driver: str
) -> None:
    # The bound volume is the disk a pod on a already mounts inline (the same handle: the
    # disk URI, the volume ID), so it is counted once there; another disk is one too many.
    inline = azure("d1") if driver == AZURE else cinder("c1")
    pv = pv_doc("pv", sc="", claim="default/data")
    del pv["spec"]["hostPath"]
    pv["spec"].update(source)
    state = limited(driver, 1, (inline, "a"))
    load(state, pv, pvc_doc("data", sc="", volume="pv"))
    assert feasible(user("app", "data"), state) == ["a", "c"]
    pv["spec"]["azureDisk" if driver == AZURE else "cinder"] = (
        {"diskName": "d9", "diskURI": AZ_URI + "d9", "kind": "Managed"}
        if driver == AZURE
        else {"volumeID": "c9"}
    )
    load(state, pv)
    assert feasible(user("app", "data"), state) == ["c"]


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        # No zone label: the inline handle (zones/UNSPECIFIED), so a counts the disk once.
        ({}, ["a", "c"]),
        # zones/us-central1-a: another volume on a; c is outside the volume's zone.
        ({"failure-domain.beta.kubernetes.io/zone": "us-central1-a"}, []),
        # regions/us-central1: another volume on a; c has no limit.
        ({"topology.kubernetes.io/zone": "us-central1-a__us-central1-b"}, ["c"]),
    ],
)
def test_persistent_gce_disk_handles_follow_the_zone_label(
    labels: dict[str, str], expected: list[str]
) -> None:
    pv = pv_doc("pv", sc="", claim="default/data", labels=labels)
    del pv["spec"]["hostPath"]
    pv["spec"]["gcePersistentDisk"] = {"pdName": "d1"}
    state = limited(GCE, 1, (gce("d1"), "a"))
    load(state, pv, pvc_doc("data", sc="", volume="pv"))
    assert feasible(user("app", "data"), state) == expected


def test_claims_of_in_tree_provisioners_count_as_their_drivers() -> None:
    state = limited(GCE, 0)
    load(
        state,
        sc_doc("pd", provisioner="kubernetes.io/gce-pd"),
        sc_doc("afs", provisioner="kubernetes.io/azure-file"),
        sc_doc("px", provisioner="kubernetes.io/portworx-volume"),
        pvc_doc("pd-claim", sc="pd"),
        pvc_doc("afs-claim", sc="afs"),
        pvc_doc("px-claim", sc="px"),
    )
    assert feasible(user("p1", "pd-claim"), state) == ["c"]
    # Azure File is never migrated for the count.
    load(state, csinode_doc("a", "file.csi.azure.com", 0))
    assert feasible(user("p2", "afs-claim"), state) == ["a", "b", "c"]
    # Portworx only where the CSINode's annotation lists it as migrated.
    px = csinode_doc("a", "pxd.portworx.com", 0)
    load(state, px)
    assert feasible(user("p3", "px-claim"), state) == ["a", "b", "c"]
    px["metadata"]["annotations"] = {
        "storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/portworx-volume"
    }
    load(state, px)
    assert feasible(user("p3", "px-claim"), state) == ["b", "c"]


def test_claim_bound_to_a_missing_volume_counts_by_its_class() -> None:
    state = limited(LIMITED, 1)
    load(state, sc_doc("csi", provisioner=LIMITED), pvc_doc("data", sc="csi", volume="gone"))
    # VolumeBinding rejects the pod too; NodeVolumeLimits alone counts it under the class.
    result = NodeVolumeLimits().filter(None, user("app", "data"), state)  # type: ignore[arg-type]
    assert [state.node(int(i)).name for i in result.mask.nonzero()[0]] == ["a", "c"]


def attachment(name: str, node: str, pv: str, attacher: str = LIMITED) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {"attacher": attacher, "nodeName": node, "source": {"persistentVolumeName": pv}},
    }


def test_volume_attachments_count_against_the_limit() -> None:
    state = limited(LIMITED, 1)
    load(
        state,
        sc_doc("csi", wffc=False, provisioner=LIMITED),
        *[pv_doc(f"pv-{x}", sc="csi", csi=(LIMITED, f"h-{x}"), claim=f"default/{x}") for x in "mn"],
        *[pvc_doc(x, sc="csi", volume=f"pv-{x}") for x in "mn"],
        # Ignored: no attacher, a volume that does not exist, an attachment to another node.
        attachment("no-attacher", "a", "pv-m", attacher=""),
        attachment("no-volume", "a", "pv-gone"),
        attachment("elsewhere", "c", "pv-m"),
    )
    assert feasible(user("p", "n"), state) == ["a", "c"]
    # A volume left attached to a (its pod gone) fills a's one slot.
    load(state, attachment("left", "a", "pv-m"))
    assert feasible(user("p", "n"), state) == ["c"]
    # The attached volume itself is new to a pod using it: counted twice, as kube-scheduler does.
    assert feasible(user("q", "m"), state) == ["c"]
    # Used by a pod on a, it is one attached volume, and not new to another pod using it.
    state.assign(user("holder", "m"), state.node_index["a"])
    assert feasible(user("q", "m"), state) == ["a", "c"]
    assert feasible(user("p", "n"), state) == ["c"]


# ---- generic ephemeral volumes: VolumeRestrictions leaves them to VolumeBinding -------------
def ephemeral_pod(uid: str = "") -> PodInfo:
    """Pod ``app`` with a generic ephemeral volume ``scratch`` (claim ``app-scratch``)."""
    template = {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}
    manifest = pod_manifest("app", volumes=[{"name": "scratch", "ephemeral": template}])
    if uid:
        manifest["metadata"]["uid"] = uid
    return pod_from_k8s(k8s.decode(manifest, k8s.Pod))


def owned_claim(owner_uid: str) -> dict[str, Any]:
    doc = pvc_doc("app-scratch", sc="local")
    doc["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "app", "uid": owner_uid, "controller": True}
    ]
    return doc


def test_generic_ephemeral_claims_as_kube_scheduler_checks_them() -> None:
    state = load(three_nodes(), sc_doc("local", provisioner="example.com/x"))
    # Right after the pod is created its claim does not exist yet.
    assert reason(ephemeral_pod("u1"), state) == (
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "app-scratch"'
    )
    # A claim of that name the pod does not control is not its volume.
    load(state, owned_claim("someone-else"))
    assert reason(ephemeral_pod("u1"), state) == (
        "PVC default/app-scratch was not created for pod default/app (pod is not owner)"
    )
    load(state, owned_claim("u1"))
    assert feasible(ephemeral_pod("u1"), state) == ["a", "b", "c"]
    # Pods without a uid (simulator YAML) are not checked for ownership.
    load(state, owned_claim("someone-else"))
    assert feasible(ephemeral_pod(), state) == ["a", "b", "c"]


def test_a_lost_claim_is_reported_as_kube_scheduler_does() -> None:
    lost = pvc_doc("data", sc="local", volume="pv-gone")
    lost["status"] = {"phase": "Lost"}
    state = load(three_nodes(), sc_doc("local"), lost)
    assert reason(user("app", "data"), state) == (
        'persistentvolumeclaim "data" bound to non-existent persistentvolume "pv-gone"'
    )


# ---- VolumeBinding: in-tree volumes on nodes where their plugin is migrated -----------------
def gce_pv(labels: dict[str, str], affinity_zone: str | None = None) -> dict[str, Any]:
    pv = pv_doc("pv", sc="", claim="default/data", labels=labels, node=None)
    del pv["spec"]["hostPath"]
    pv["spec"]["gcePersistentDisk"] = {"pdName": "d1"}
    if affinity_zone is not None:
        expr = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [affinity_zone]}
        pv["spec"]["nodeAffinity"] = {
            "required": {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}
        }
    return pv


@pytest.mark.parametrize(
    ("labels", "affinity_zone", "expected"),
    [
        # A zone label: the translated affinity asks topology.gke.io/zone for it (a is in a).
        ({"topology.kubernetes.io/zone": "us-central1-b"}, None, ["b", "c"]),
        ({"failure-domain.beta.kubernetes.io/zone": "us-central1-b"}, None, ["b", "c"]),
        ({"topology.kubernetes.io/zone": "us-central1-a__us-central1-b"}, None, ["a", "b", "c"]),
        # A zone in the affinity is renamed to the CSI key; the label is then not used.
        ({"topology.kubernetes.io/zone": "us-central1-b"}, "us-central1-a", ["a", "b", "c"]),
        # No zone at all: nothing to translate.
        ({}, None, ["a", "b", "c"]),
        # GCE zones of no one region: no translation, no node where the plugin is migrated.
        ({"topology.kubernetes.io/zone": "z1__z2"}, None, ["b", "c"]),
    ],
)
def test_bound_gce_volume_is_checked_as_translated_where_migrated(
    labels: dict[str, str], affinity_zone: str | None, expected: list[str]
) -> None:
    # Every node is in us-central1-a, but only a lists kubernetes.io/gce-pd as migrated (b's
    # CSINode does not, c has none); only VolumeBinding is checked here.
    gke = {"topology.kubernetes.io/zone": "us-central1-a", "topology.gke.io/zone": "us-central1-a"}
    nodes = [k8s_node(n, labels=gke) for n in "abc"]
    migrated = csinode_doc("a", GCE, 5)
    migrated["metadata"]["annotations"] = {
        "storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/gce-pd"
    }
    state = load(cluster(*nodes), migrated, csinode_doc("b", GCE, 5))
    load(state, gce_pv(labels, affinity_zone), pvc_doc("data", sc="", volume="pv"))
    mask, _ = scheduler(["VolumeBinding"]).filter(user("app", "data"), state)
    assert [state.node(int(i)).name for i in np.flatnonzero(mask)] == expected


def _migrated_on_a(driver: str, plugin: str) -> ClusterState:
    """Nodes a, b, c in us-central1-a (c labelled for Cinder's zone key too); only a's
    CSINode lists ``plugin`` as migrated."""
    labels = {
        "topology.kubernetes.io/zone": "us-central1-a",
        "topology.cinder.csi.openstack.org/zone": "us-central1-a",
    }
    nodes = [k8s_node(n, labels=labels) for n in "abc"]
    migrated = csinode_doc("a", driver, 5)
    migrated["metadata"]["annotations"] = {"storage.alpha.kubernetes.io/migrated-plugins": plugin}
    return load(cluster(*nodes), migrated, csinode_doc("b", driver, 5))


@pytest.mark.parametrize(
    ("zone", "expected"),
    [("us-central1-b", ["b", "c"]), ("us-central1-a", ["a", "b", "c"])],
)
def test_bound_cinder_volume_is_checked_as_translated_where_migrated(
    zone: str, expected: list[str]
) -> None:
    # The zone label becomes a requirement on topology.cinder.csi.openstack.org/zone, checked
    # only on a (b and c check the volume's own affinity: none).
    state = _migrated_on_a(CINDER, "kubernetes.io/cinder")
    pv = pv_doc("pv", sc="", claim="default/data", labels={"topology.kubernetes.io/zone": zone})
    del pv["spec"]["hostPath"]
    pv["spec"]["cinder"] = {"volumeID": "c1"}
    load(state, pv, pvc_doc("data", sc="", volume="pv"))
    mask, _ = scheduler(["VolumeBinding"]).filter(user("app", "data"), state)
    assert [state.node(int(i)).name for i in np.flatnonzero(mask)] == expected


@pytest.mark.parametrize(
    ("kind", "expected"), [("Managed", ["a", "b", "c"]), ("Shared", ["b", "c"])]
)
def test_bound_azure_disk_keeps_its_affinity_where_migrated(kind: str, expected: list[str]) -> None:
    # Azure disk's translation leaves topology alone (its zone label is not read); a disk that
    # is not Managed fails the translation, so no node listing the plugin fits.
    state = _migrated_on_a(AZURE, "kubernetes.io/azure-disk")
    labels = {"topology.kubernetes.io/zone": "us-central1-b"}
    pv = pv_doc("pv", sc="", claim="default/data", labels=labels)
    del pv["spec"]["hostPath"]
    pv["spec"]["azureDisk"] = {"diskName": "d1", "diskURI": AZ_URI + "d1", "kind": kind}
    load(state, pv, pvc_doc("data", sc="", volume="pv"))
    mask, _ = scheduler(["VolumeBinding"]).filter(user("app", "data"), state)
    assert [state.node(int(i)).name for i in np.flatnonzero(mask)] == expected


@pytest.mark.parametrize("full", [False, True])
def test_an_untranslatable_volume_neither_binds_nor_preempts(full: bool) -> None:
    # Node a (a CSINode, no limits) runs a low-priority pod. A high-priority pod with a
    # malformed EBS ID: where a has room the attempt fails with the error at once; where it
    # is full (the CPU filter rejects a first), preemption's trial on a fails with the error,
    # so nothing is evicted.
    node = k8s_node("a", cpu="2")
    low = k8s_pod("low", cpu="2" if full else "1", priority=0)
    state = load(cluster(node, placed=[(low, "a")]), csinode_doc("a", EBS, 5))
    high = k8s_pod("high", cpu="1", priority=100, volumes=[ebs("aws://zone/not-a-volume")])
    out = Engine(Profile(), ordering="kube-default").cycle(state, [high], now=100.0)
    assert not out.binds and not out.evictions
    full_reason = "0/1 nodes are available: 1 Insufficient cpu."
    assert [u.reason for u in out.unschedulable] == [full_reason if full else BAD_EBS]


def test_explain_reports_an_attempt_error_for_empty_nodes() -> None:
    # `fairgpu explain` tries the pod on the nodes as if empty: the error is its answer there.
    from fairgpu.kube.explain import fits_when_empty

    bad = k8s_pod("bad", volumes=[ebs("aws://zone/not-a-volume")])
    assert fits_when_empty(Engine(), bad, limited(EBS, 1)) == ([], BAD_EBS)
