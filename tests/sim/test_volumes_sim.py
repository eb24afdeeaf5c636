"""Storage in the simulator: PVs, PVCs, StorageClasses, CSINodes, CSIDrivers and
CSIStorageCapacities read from YAML, pods placed where their volumes are (or where capacity
lets them be provisioned), and the binding decision applied (claim bound, volume provisioned)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairgpu.engine.engine import Engine
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workloads.kube_yaml import WorkloadError, load_kube_yaml

NODES = "\n---\n".join(
    f"""apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels: {{kubernetes.io/hostname: {name}, topology.kubernetes.io/zone: {zone}}}
status: {{allocatable: {{cpu: "8", memory: 32Gi, pods: "10"}}}}"""
    for name, zone in (("n0", "z1"), ("n1", "z1"), ("n2", "z2"))
)

NO_PROVISIONER = "kubernetes.io/no-provisioner"


def storage_class(
    name: str, provisioner: str, mode: str = "WaitForFirstConsumer", zone: str = ""
) -> str:
    """A StorageClass (``mode`` "": no volumeBindingMode, i.e. Immediate; ``zone``: its only
    allowed topology)."""
    text = f"""
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: {name}}}
provisioner: {provisioner}
"""
    if mode:
        text += f"volumeBindingMode: {mode}\n"
    if zone:
        text += "allowedTopologies:\n"
        text += (
            f"- matchLabelExpressions: [{{key: topology.kubernetes.io/zone, values: [{zone}]}}]\n"
        )
    return text


def local_volume(name: str, sc: str, node: str, phase: str = "") -> str:
    """A 10Gi local PersistentVolume on ``node`` (no status unless ``phase``)."""
    text = f"""
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {name}}}
spec:
  capacity: {{storage: 10Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: {sc}
  local: {{path: /mnt/disk}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{node}]}}]
"""
    return text + (f"status: {{phase: {phase}}}\n" if phase else "")


STORAGE = (
    storage_class("local", NO_PROVISIONER)
    + storage_class("zonal", "csi.example.com", zone="z2")
    + local_volume("local-n1", "local", "n1", phase="Available")
)


def claim(name: str, sc: str) -> str:
    return f"""
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: default}}
spec:
  storageClassName: {sc}
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
"""


def user(name: str, claim_name: str, arrival: int = 0, duration: int = 100) -> str:
    return f"""
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  annotations:
    fairgpu.io/arrival-seconds: "{arrival}"
    fairgpu.io/duration-seconds: "{duration}"
spec:
  containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]
  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim_name}}}}}]
"""


def run(tmp_path: Path, text: str) -> Simulation:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    sim = Simulation(load_kube_yaml([path]), Engine(seed=1))
    sim.run()
    return sim


def test_local_volume_binds_and_later_pods_follow_it(tmp_path: Path) -> None:
    text = NODES + STORAGE + claim("data", "local")
    text += user("first", "data", arrival=0) + user("again", "data", arrival=200)
    sim = run(tmp_path, text)
    recs = {r.pod.name: r for r in sim.records.values()}
    assert recs["first"].node == "n1"
    store = sim.cluster.volumes
    assert store.claims["default/data"].volume_name == "local-n1"
    assert store.volumes["local-n1"].claim == "default/data"
    # Bound now: the second pod goes where the volume is, through the bound claim's PV.
    assert recs["again"].node == "n1" and recs["again"].start == 200.0


def test_second_claim_finds_no_local_volume_left(tmp_path: Path) -> None:
    text = NODES + STORAGE + claim("one", "local") + claim("two", "local")
    text += user("a", "one") + user("b", "two")
    sim = run(tmp_path, text)
    recs = {r.pod.name: r for r in sim.records.values()}
    placed = [r for r in recs.values() if r.node]
    waiting = [r for r in recs.values() if not r.node]
    assert [r.node for r in placed] == ["n1"] and len(waiting) == 1
    assert waiting[0].reason == (
        "0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind."
    )


def test_dynamic_provisioning_in_the_allowed_zone(tmp_path: Path) -> None:
    text = NODES + STORAGE + claim("z", "zonal") + user("p", "z", duration=10)
    text += user("later", "z", arrival=50)
    sim = run(tmp_path, text)
    recs = {r.pod.name: r for r in sim.records.values()}
    assert recs["p"].node == "n2" and recs["later"].node == "n2"
    store = sim.cluster.volumes
    provisioned = store.volumes[store.claims["default/z"].volume_name]
    assert provisioned.claim == "default/z"
    assert store.claims["default/z"].selected_node == "n2"


def test_bad_storage_object_names_file_and_field(tmp_path: Path) -> None:
    bad = claim("x", "local").replace("1Gi", "plenty")
    path = tmp_path / "bad.yaml"
    path.write_text(NODES + bad)
    with pytest.raises(WorkloadError, match=r"PersistentVolumeClaim default/x.*storage"):
        load_kube_yaml([path])


# Immediate binding: a local volume (no status, as written by hand) and a zonal provisioner.
IMMEDIATE = (
    storage_class("now", NO_PROVISIONER, mode="Immediate")
    + storage_class("now-z2", "csi.example.com", mode="", zone="z2")
    + local_volume("disk-n2", "now", "n2")
)


def test_immediate_claims_are_bound_up_front_as_the_pv_controller_does(tmp_path: Path) -> None:
    # The volume has no status (as written by hand): it is Available, and the Immediate claim
    # is bound to it before any pod asks, whatever its node; the pod then follows the volume.
    text = NODES + IMMEDIATE + claim("data", "now") + claim("zonal", "now-z2")
    text += user("p", "data") + user("q", "zonal")
    sim = run(tmp_path, text)
    recs = {r.pod.name: r for r in sim.records.values()}
    store = sim.cluster.volumes
    assert store.claims["default/data"].volume_name == "disk-n2"
    assert recs["p"].node == "n2"
    # Provisioned in the class's allowed zone: the only z2 node.
    assert store.claims["default/zonal"].volume_name
    assert recs["q"].node == "n2"


def test_immediate_claim_without_a_volume_or_provisioner_keeps_its_pod_pending(
    tmp_path: Path,
) -> None:
    text = NODES + IMMEDIATE + claim("a", "now") + claim("b", "now") + user("p", "a")
    text += user("q", "b")
    sim = run(tmp_path, text)
    recs = {r.pod.name: r for r in sim.records.values()}
    assert sorted(bool(r.node) for r in recs.values()) == [False, True]
    waiting = next(r for r in recs.values() if not r.node)
    assert waiting.reason == "pod has unbound immediate PersistentVolumeClaims"


# Storage capacity: a driver that publishes it provisions only where a pool has room.
CAPACITY = (
    storage_class("fast", "cap.example.com")
    + """
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: cap.example.com}
spec: {storageCapacity: true}
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: n0-pool, namespace: kube-system}
storageClassName: fast
nodeTopology: {matchLabels: {kubernetes.io/hostname: n0}}
capacity: 2Gi
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: n1-pool, namespace: kube-system}
storageClassName: fast
nodeTopology: {matchLabels: {kubernetes.io/hostname: n1}}
capacity: 100Gi
maximumVolumeSize: 8Gi
"""
)


def sized_claim(name: str, sc: str, size: str) -> str:
    return claim(name, sc).replace("storage: 1Gi", f"storage: {size}")


def test_provisioning_goes_where_storage_capacity_has_room(tmp_path: Path) -> None:
    text = NODES + CAPACITY + sized_claim("mid", "fast", "5Gi") + sized_claim("big", "fast", "9Gi")
    text += sized_claim("small", "fast", "1Gi")
    text += user("m", "mid") + user("b", "big") + user("s", "small")
    sim = run(tmp_path, text)
    recs = {r.pod.name: r for r in sim.records.values()}
    assert recs["m"].node == "n1"
    assert recs["s"].node in ("n0", "n1")  # n2 publishes no capacity
    assert not recs["b"].node
    assert recs["b"].reason == (
        "0/3 nodes are available: 3 node(s) did not have enough free storage."
    )
    assert sim.cluster.volumes.claims["default/mid"].selected_node == "n1"


def test_bad_storage_capacity_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(NODES + CAPACITY.replace("capacity: 2Gi", "capacity: roomy"))
    with pytest.raises(WorkloadError, match=r"CSIStorageCapacity kube-system/n0-pool.*capacity"):
        load_kube_yaml([path])


def test_volume_attachments_count_against_csinode_limits(tmp_path: Path) -> None:
    # n0 attaches one volume of the driver; a volume left attached there takes that slot.
    attached = """
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: n0}
spec: {drivers: [{name: csi.example.com, nodeID: n0, allocatable: {count: 1}}]}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: left}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  csi: {driver: csi.example.com, volumeHandle: h-left}
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {name: left-on-n0}
spec: {attacher: csi.example.com, nodeName: n0, source: {persistentVolumeName: left}}
"""
    pod = user("p", "z").replace(
        "spec:\n", "spec:\n  nodeSelector: {kubernetes.io/hostname: n0}\n", 1
    )
    text = NODES + storage_class("csi", "csi.example.com") + claim("z", "csi") + pod
    recs = {r.pod.name: r for r in run(tmp_path, text).records.values()}
    assert recs["p"].node == "n0"
    recs = {r.pod.name: r for r in run(tmp_path, text + attached).records.values()}
    assert not recs["p"].node
    assert "1 node(s) exceed max volume count" in recs["p"].reason
