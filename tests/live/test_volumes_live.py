"""Volumes on the real API server: the scheduler watches claims, volumes, classes, CSI nodes,
CSI drivers and storage capacities, places a pod where its local volume is (or where its
claim's driver has room to provision it), and binds the claim (or selects the node for
provisioning) before it binds the pod, as kube-scheduler's VolumeBinding PreBind does."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from live_helpers import bound, condition, create, pod, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration

NODE = "lv-training-t4"


def _rv(obj: dict[str, Any]) -> int:
    # All objects share etcd's revision counter, so resourceVersions order writes across kinds
    # (opaque to clients in general; exact on this single-etcd test cluster).
    return int(obj["metadata"]["resourceVersion"])


class Recorder:
    """Watch one collection from now on, keeping each event's object."""

    def __init__(self, client: KubeClient, path: str) -> None:
        rv = client.get(path)["metadata"]["resourceVersion"]
        self.stream = client.watch(path, {"resourceVersion": rv}, timeout_seconds=60)
        self.objects: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for event in self.stream:
            if event.get("type") in ("ADDED", "MODIFIED"):
                self.objects.append(event["object"])

    def first(self, name: str, pred: Any) -> dict[str, Any] | None:
        return next(
            (o for o in list(self.objects) if o["metadata"]["name"] == name and pred(o)), None
        )


@pytest.fixture
def storage(admin: KubeClient, ns: str) -> Iterator[dict[str, str]]:
    """A local WaitForFirstConsumer class with one available volume on NODE, and a class with
    a (never running) external provisioner; all removed afterwards."""
    names = {"local": f"{ns}-local", "csi": f"{ns}-csi", "pv": f"{ns}-pv"}
    sc = "/apis/storage.k8s.io/v1/storageclasses"
    for key, provisioner in (("local", "kubernetes.io/no-provisioner"), ("csi", "example.com/x")):
        admin.post(
            sc,
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": names[key]},
                "provisioner": provisioner,
                "volumeBindingMode": "WaitForFirstConsumer",
            },
        )
    term = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]
    }
    admin.post(
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": names["pv"]},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": names["local"],
                "local": {"path": "/mnt/disk0"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
            },
        },
    )
    # No PV controller here: mark the volume Available as it would.
    admin.patch(
        f"/api/v1/persistentvolumes/{names['pv']}/status", {"status": {"phase": "Available"}}
    )
    try:
        yield names
    finally:
        admin.request("DELETE", f"/api/v1/persistentvolumes/{names['pv']}")
        for key in ("local", "csi"):
            admin.request("DELETE", f"{sc}/{names[key]}")


def claim(admin: KubeClient, ns: str, name: str, sc: str) -> None:
    admin.post(
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {
                "storageClassName": sc,
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )


def user(name: str, claim_name: str) -> dict[str, Any]:
    m = pod(name, pool="training", model="Tesla-T4")
    m["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    return m


def test_claims_are_bound_before_the_pod(
    live_cp: ControlPlane, admin: KubeClient, ns: str, storage: dict[str, str]
) -> None:
    claim(admin, ns, "data", storage["local"])
    claim(admin, ns, "fresh", storage["csi"])
    pods = Recorder(admin, f"/api/v1/namespaces/{ns}/pods")
    claims = Recorder(admin, f"/api/v1/namespaces/{ns}/persistentvolumeclaims")
    volumes = Recorder(admin, "/api/v1/persistentvolumes")
    try:
        create(admin, ns, user("local-user", "data"))
        create(admin, ns, user("csi-user", "fresh"))
        with scheduler(live_cp):
            placed = wait_for(lambda: b if len(b := bound(admin, ns)) == 2 else None)
            wait_for(lambda: pods.first("csi-user", lambda o: o["spec"].get("nodeName")))
    finally:
        for r in (pods, claims, volumes):
            r.stream.close()
    # The local volume decides the node; the provisioned claim could go to either T4 node in
    # the training pool, which is NODE here too (the only T4 node of the pool).
    assert placed == {"local-user": NODE, "csi-user": NODE}
    pv = admin.get(f"/api/v1/persistentvolumes/{storage['pv']}")
    pvc = admin.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")
    assert pv["spec"]["claimRef"]["name"] == "data"
    assert pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
    assert pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
    assert pvc["spec"]["volumeName"] == storage["pv"]
    fresh = admin.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/fresh")
    assert fresh["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == NODE

    def bind_rv(name: str) -> int:
        found = pods.first(name, lambda o: o["spec"].get("nodeName"))
        assert found is not None
        return _rv(found)

    ref_set = volumes.first(storage["pv"], lambda o: o["spec"].get("claimRef"))
    name_set = claims.first("data", lambda o: o["spec"].get("volumeName"))
    selected = claims.first(
        "fresh",
        lambda o: "volume.kubernetes.io/selected-node" in o["metadata"].get("annotations", {}),
    )
    assert ref_set is not None and name_set is not None and selected is not None
    assert _rv(ref_set) < _rv(name_set) < bind_rv("local-user")
    assert _rv(selected) < bind_rv("csi-user")


def test_missing_claim_keeps_the_pod_pending_with_kube_schedulers_reason(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    create(admin, ns, user("orphan", "nope"))
    with scheduler(live_cp):

        def reason() -> str | None:
            p = admin.get(f"/api/v1/namespaces/{ns}/pods/orphan")
            for c in p.get("status", {}).get("conditions") or []:
                if c["type"] == "PodScheduled" and c["status"] == "False":
                    return str(c.get("message", ""))
            return None

        assert wait_for(reason) == 'persistentvolumeclaim "nope" not found'
    assert bound(admin, ns) == {}


def test_watch_events_fill_the_store_and_skip_invalid_objects() -> None:
    """No server needed: the reflectors' decode and the main loop's apply, as wired."""
    import msgspec

    from fairgpu.cluster.state import ClusterState
    from fairgpu.kube.client import Connection, RestClient
    from fairgpu.kube.volumes import Invalid, VolumeWatch

    events: list[tuple[str, Any]] = []
    watch = VolumeWatch(
        RestClient(Connection("https://127.0.0.1:1", "")), lambda t, o: events.append((t, o))
    )
    decode = {r.name: r.decode for r in watch.reflectors}
    good = {"metadata": {"name": "data", "namespace": "ns"}, "spec": {"volumeName": "pv"}}
    bad = {
        "metadata": {"name": "broken", "namespace": "ns"},
        "spec": {"resources": {"requests": {"storage": "lots"}}},
    }
    claim = decode["claim"](msgspec.json.encode(good))
    broken = decode["claim"](msgspec.json.encode(bad))
    assert isinstance(broken, Invalid)
    assert broken.key == "ns/broken" and "spec.resources.requests.storage" in broken.error
    state = ClusterState()
    before = state.release_version
    assert VolumeWatch.apply(state, "SYNC", ("PersistentVolumeClaim", [claim, broken]))
    assert list(state.volumes.claims) == ["ns/data"]
    assert state.release_version > before  # pending pods are tried again
    assert VolumeWatch.apply(state, "DELETED", ("PersistentVolumeClaim", claim))
    assert not state.volumes.claims
    assert not VolumeWatch.apply(state, "DELETED", ("PersistentVolumeClaim", broken))


STORAGE_API = "/apis/storage.k8s.io/v1"
CAP_DRIVER = "capacity.example.com"
A100_NODE = "lv-training-a100"


def any_gpu_user(name: str, claim_name: str) -> dict[str, Any]:
    """A training pod that may go to either training node (A100 or T4)."""
    m = user(name, claim_name)
    del m["spec"]["nodeSelector"]["nvidia.com/gpu.product"]
    m["spec"]["tolerations"] = [
        t for t in m["spec"]["tolerations"] if t["key"] != "nvidia.com/gpu.product"
    ] + [{"key": "nvidia.com/gpu.product", "operator": "Exists"}]
    return m


@pytest.fixture
def capacity(admin: KubeClient, ns: str) -> Iterator[str]:
    """A WaitForFirstConsumer class of a CSI driver publishing storage capacity: 1Gi on the
    training A100 node, 10Gi on the training T4 node (NODE). Yields the class name."""
    sc = f"{ns}-fast"
    admin.post(
        f"{STORAGE_API}/csidrivers",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": CAP_DRIVER},
            "spec": {"storageCapacity": True},
        },
    )
    admin.post(
        f"{STORAGE_API}/storageclasses",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": sc},
            "provisioner": CAP_DRIVER,
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    )
    for node, size in ((A100_NODE, "1Gi"), (NODE, "10Gi")):
        admin.post(
            f"{STORAGE_API}/namespaces/{ns}/csistoragecapacities",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSIStorageCapacity",
                "metadata": {"name": f"pool-{node}"},
                "storageClassName": sc,
                "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": node}},
                "capacity": size,
            },
        )
    try:
        yield sc
    finally:
        admin.request("DELETE", f"{STORAGE_API}/storageclasses/{sc}")
        admin.request("DELETE", f"{STORAGE_API}/csidrivers/{CAP_DRIVER}")


def test_claim_is_provisioned_where_storage_capacity_has_room(
    live_cp: ControlPlane, admin: KubeClient, ns: str, capacity: str
) -> None:
    claims = f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
    for name, size in (("mid", "5Gi"), ("huge", "50Gi")):
        admin.post(
            claims,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name},
                "spec": {
                    "storageClassName": capacity,
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": size}},
                },
            },
        )
    create(admin, ns, any_gpu_user("mid-user", "mid"))
    create(admin, ns, any_gpu_user("huge-user", "huge"))
    with scheduler(live_cp):
        placed = wait_for(lambda: b if (b := bound(admin, ns)) else None)

        def pending() -> str | None:
            c = condition(admin.get(f"/api/v1/namespaces/{ns}/pods/huge-user"))
            return str(c.get("message")) if c and c["status"] == "False" else None

        message = wait_for(pending)
    # Only the T4 node's pool holds 5Gi; no pool holds 50Gi.
    assert placed == {"mid-user": NODE}
    mid = admin.get(f"{claims}/mid")
    assert mid["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == NODE
    assert "2 node(s) did not have enough free storage" in message
    assert "volume.kubernetes.io/selected-node" not in admin.get(f"{claims}/huge")["metadata"].get(
        "annotations", {}
    )


def test_inline_csi_volumes_do_not_count_against_the_csinode_limit(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # kube-scheduler 1.34 counts claims (and migrated in-tree inline volumes) against
    # CSINode limits, never CSI ephemeral inline volumes: a zero limit does not stop them.
    driver = "inline.example.com"
    admin.post(
        f"{STORAGE_API}/csinodes",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {"name": NODE},
            "spec": {"drivers": [{"name": driver, "nodeID": NODE, "allocatable": {"count": 0}}]},
        },
    )
    try:
        m = pod("inline", pool="training", model="Tesla-T4")
        m["spec"]["volumes"] = [{"name": "scratch", "csi": {"driver": driver}}]
        create(admin, ns, m)
        with scheduler(live_cp):
            placed = wait_for(lambda: b if (b := bound(admin, ns)) else None)
    finally:
        admin.request("DELETE", f"{STORAGE_API}/csinodes/{NODE}")
    assert placed == {"inline": NODE}


def test_an_untranslatable_inline_volume_is_a_scheduler_error(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # An inline EBS volume whose ID the CSI translation refuses, on a pod that a node with a
    # CSINode could take: kube-scheduler's NodeVolumeLimits fails the attempt with an error,
    # so the pod stays pending with reason SchedulerError and the translation's message.
    admin.post(
        f"{STORAGE_API}/csinodes",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {"name": NODE},
            "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": NODE}]},
        },
    )
    try:
        m = pod("bad-ebs", pool="training", model="Tesla-T4")
        m["spec"]["volumes"] = [
            {"name": "data", "awsElasticBlockStore": {"volumeID": "aws://zone-a/data"}}
        ]
        create(admin, ns, m)
        with scheduler(live_cp):

            def pending() -> dict[str, Any] | None:
                c = condition(admin.get(f"/api/v1/namespaces/{ns}/pods/bad-ebs"))
                return c if c and c["status"] == "False" else None

            cond = wait_for(pending)
    finally:
        admin.request("DELETE", f"{STORAGE_API}/csinodes/{NODE}")
    assert not bound(admin, ns)
    assert cond["reason"] == "SchedulerError"
    assert cond["message"] == (
        'running "NodeVolumeLimits" filter plugin: converting volume(data) from inline to csi: '
        "failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume "
        "(aws://zone-a/data)"
    )


def test_capacity_watch_events_fill_the_store_and_skip_invalid_objects() -> None:
    """No server needed: CSIDriver and CSIStorageCapacity decoding and apply, as wired."""
    import msgspec

    from fairgpu.cluster.state import ClusterState
    from fairgpu.kube.client import Connection, RestClient
    from fairgpu.kube.volumes import Invalid, VolumeWatch

    watch = VolumeWatch(RestClient(Connection("https://127.0.0.1:1", "")), lambda t, o: None)
    decode = {r.name: r.decode for r in watch.reflectors}
    good = {
        "metadata": {"name": "pool", "namespace": "ns"},
        "storageClassName": "fast",
        "nodeTopology": {},
        "capacity": "1Gi",
    }
    bad = {**good, "metadata": {"name": "broken", "namespace": "ns"}, "capacity": "roomy"}
    cap = decode["capacity"](msgspec.json.encode(good))
    broken = decode["capacity"](msgspec.json.encode(bad))
    assert isinstance(broken, Invalid)
    assert broken.key == "ns/broken" and "capacity" in broken.error
    driver = decode["csidriver"](
        msgspec.json.encode({"metadata": {"name": "d"}, "spec": {"storageCapacity": True}})
    )
    state = ClusterState()
    store = state.volumes
    assert VolumeWatch.apply(state, "SYNC", ("CSIStorageCapacity", [cap, broken]))
    assert VolumeWatch.apply(state, "ADDED", ("CSIDriver", driver))
    assert list(store.capacities) == ["ns/pool"] and store.csi_drivers["d"].storage_capacity
    before = store.capacity_version
    assert VolumeWatch.apply(state, "DELETED", ("CSIStorageCapacity", cap))
    assert not store.capacities and store.capacity_version > before
    assert not VolumeWatch.apply(state, "DELETED", ("CSIStorageCapacity", broken))
