"""Volumes, differentially: generated PV/PVC/StorageClass/CSINode/CSIDriver/CSIStorageCapacity
cases (and VolumeAttachments, pods with inline CSI volumes, inline and persistent GCE disks
migrated to CSI)
decided by the real kube-scheduler 1.34 and by fairgpu's engine on the same objects.

Each case has its own three nodes (selected by a ``case`` label), storage class, volumes,
claims and one pod. kube-scheduler runs without a PV controller, so a pod whose claims need
binding stops in PreBind after writing its decision: the chosen volume's ``claimRef``, or the
claim's ``volume.kubernetes.io/selected-node``. That decision (or the binding, for pods whose
claims are all bound already) names kube-scheduler's node; a pod it cannot place gets
``PodScheduled=False`` with its reasons. fairgpu's engine, given the same objects as listed from
the API, must place exactly the pods kube-scheduler places, each onto a node it finds feasible
(the node kube-scheduler chose is among them), and give the pending ones the same reasons.
A second test lets several pods compete for a few local volumes in one scheduling pass: both
place the same number of pods per group and leave the rest pending for the same reasons.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fairgpu.api import objects as k8s
from fairgpu.cluster.state import ClusterState
from fairgpu.devcluster import ControlPlane, KubeClient, NodeSpec, create_nodes, ensure_namespace
from fairgpu.engine.framework import AttemptError
from fairgpu.engine.profile import Profile
from fairgpu.engine.scheduler import Scheduler
from fairgpu.model.node import node_from_k8s
from fairgpu.model.pod import pod_from_k8s
from fairgpu.model.volumes import (
    attachment_from_k8s,
    capacity_from_k8s,
    claim_from_k8s,
    class_from_k8s,
    csidriver_from_k8s,
    csinode_from_k8s,
    volume_from_k8s,
)
from tests import polling
from tests.engine.volume_builders import csinode_doc, pvc_doc, sc_doc

pytestmark = pytest.mark.integration

NS = "vol-diff"
# More cases or another seed: FAIRGPU_VOLUME_CASES=300 FAIRGPU_VOLUME_SEED=7.
CASES = int(os.environ.get("FAIRGPU_VOLUME_CASES", "96"))
SEED = int(os.environ.get("FAIRGPU_VOLUME_SEED", "16"))
KINDS = (
    "local",
    "local",
    "local-two",
    "bound-local",
    "zonal",
    "dynamic",
    "immediate",
    "missing",
    "csi-limit",
    "rwop",
    "capacity",
    "inline-csi",
    "migrated",
    "migrated-more",
    "selected",
    "attached",
    "untranslatable",
)
GCE_DRIVER = "pd.csi.storage.gke.io"
PX_DRIVER = "pxd.portworx.com"
DRIVER = "csi.example.com"
ZONE = "topology.kubernetes.io/zone"


@dataclass
class Case:
    """Objects of one case, created in order; ``pod`` is the one both schedulers place."""

    index: int
    kind: str
    nodes: list[NodeSpec] = field(default_factory=list)
    objects: list[dict[str, Any]] = field(default_factory=list)  # storage + existing pods
    bindings: list[tuple[str, str]] = field(default_factory=list)  # (pvc, pv) bound up front
    available: list[str] = field(default_factory=list)  # PVs to mark Available
    volume_node: dict[str, str] = field(default_factory=dict)  # local PV -> node
    preselected: set[str] = field(default_factory=set)  # claims created with a selected node
    lost: list[str] = field(default_factory=list)  # claims whose status says Lost
    pod: dict[str, Any] = field(default_factory=dict)

    def name(self, suffix: str) -> str:
        return f"c{self.index}-{suffix}"


def _pv(
    name: str,
    sc: str,
    size: str = "5Gi",
    modes: list[str] | None = None,
    node: str | None = None,
    labels: dict[str, str] | None = None,
    csi: str | None = None,
) -> dict:
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": modes or ["ReadWriteOnce"],
        "storageClassName": sc,
    }
    if csi:
        spec["csi"] = {"driver": DRIVER, "volumeHandle": csi}
    else:
        spec["local"] = {"path": f"/mnt/{name}"}
        host = node or "nowhere"
        term = {
            "matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}
            ]
        }
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def _pvc(name: str, sc: str, size: str = "1Gi", modes: list[str] | None = None) -> dict:
    return pvc_doc(name, sc, size, tuple(modes or ["ReadWriteOnce"]), namespace=NS)


def _pod(
    name: str,
    case: int,
    claims: list[str],
    node: str = "",
    inline: list[str] | None = None,
    disks: list[str] | None = None,
    sources: list[dict[str, Any]] | None = None,
) -> dict:
    """A pod mounting ``claims``, for each driver in ``inline`` a CSI ephemeral volume, the
    GCE persistent ``disks`` (read-only) and the in-tree volume ``sources``."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "c",
                "image": "registry.invalid/x:1",
                "resources": {"requests": {"cpu": "100m"}},
            }
        ],
        "nodeSelector": {"case": str(case)},
        "volumes": [
            {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
            for i, c in enumerate(claims)
        ]
        + [{"name": f"inline{i}", "csi": {"driver": d}} for i, d in enumerate(inline or ())]
        + [
            {"name": f"disk{i}", "gcePersistentDisk": {"pdName": d, "readOnly": True}}
            for i, d in enumerate(disks or ())
        ]
        + [{"name": f"src{i}", **src} for i, src in enumerate(sources or ())],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def _local(case: Case, rng: random.Random, claims: int) -> None:
    sc = case.name("local")
    case.objects.append(sc_doc(sc))
    for k in range(rng.randint(claims - 1, 2 + 2 * claims)):
        pv = case.name(f"pv{k}")
        node = rng.choice(
            [*[n.name for n in case.nodes], None]
            if rng.random() < 0.3
            else [case.nodes[0].name, case.nodes[1].name]
        )
        modes = rng.choice(
            [["ReadWriteOnce"], ["ReadWriteMany"], ["ReadWriteOnce", "ReadWriteMany"]]
        )
        case.objects.append(_pv(pv, sc, rng.choice(["1Gi", "5Gi"]), modes, node))
        case.volume_node[pv] = node or "nowhere"
        if rng.random() < 0.85:
            case.available.append(pv)
    names = []
    for k in range(claims):
        pvc = case.name(f"data{k}")
        modes = rng.choice([["ReadWriteOnce"], ["ReadWriteMany"]])
        case.objects.append(_pvc(pvc, sc, rng.choice(["1Gi", "3Gi"]), modes))
        names.append(pvc)
    case.pod = _pod(case.name("pod"), case.index, names)


def _bound(case: Case, sc: str, pv: dict[str, Any], modes: list[str] | None = None) -> str:
    pvc = case.name("bound")
    case.objects.append(_pvc(pvc, sc, "1Gi", modes))
    case.objects.append(pv)
    case.bindings.append((pvc, pv["metadata"]["name"]))
    return pvc


def build_case(index: int, rng: random.Random) -> Case:
    kind = KINDS[index % len(KINDS)]
    case = Case(index, kind)
    zones = ["z0", "z1", rng.choice(["z1", "z2"])]
    for j in range(3):
        labels = {"case": str(index), ZONE: zones[j]}
        case.nodes.append(NodeSpec(case.name(f"n{j}"), cpu="4", memory="8Gi", labels=labels))
    nodes = [n.name for n in case.nodes]
    if kind in ("local", "local-two"):
        _local(case, rng, 1 if kind == "local" else 2)
    elif kind == "bound-local":
        sc = case.name("local")
        case.objects.append(sc_doc(sc))
        pvc = _bound(case, sc, _pv(case.name("pv"), sc, node=rng.choice([*nodes, "gone"])))
        case.pod = _pod(case.name("pod"), index, [pvc])
    elif kind == "zonal":
        sc = case.name("zonal")
        case.objects.append(sc_doc(sc, wffc=False, provisioner=DRIVER))
        zone = rng.choice(["z0", "z1", "z2", "z0__z2", "z1__z0"])
        pv = _pv(case.name("pv"), sc, labels={ZONE: zone}, csi=case.name("h"))
        case.pod = _pod(case.name("pod"), index, [_bound(case, sc, pv)])
    elif kind == "dynamic":
        sc = case.name("dyn")
        allowed = rng.choice([None, ["z0"], ["z1"], ["z2"], ["z0", "z2"]])
        provisioner = rng.choice(["example.com/x", "example.com/x", "kubernetes.io/no-provisioner"])
        case.objects.append(sc_doc(sc, provisioner=provisioner, zones=allowed))
        case.objects.append(_pvc(case.name("fresh"), sc))
        case.pod = _pod(case.name("pod"), index, [case.name("fresh")])
    elif kind == "immediate":
        sc = case.name("imm")
        case.objects.append(sc_doc(sc, wffc=False, provisioner="example.com/x"))
        case.objects.append(_pvc(case.name("waiting"), sc))
        case.pod = _pod(case.name("pod"), index, [case.name("waiting")])
    elif kind == "missing":
        _missing(case, rng)
    else:
        BUILDERS[kind](case, rng, nodes)
    return case


def _csi_limit(case: Case, rng: random.Random, nodes: list[str]) -> None:
    sc = case.name("csi")
    case.objects.append(sc_doc(sc, wffc=False, provisioner=DRIVER))
    for name in nodes:
        count = rng.randint(0, 2)
        case.objects.append(csinode_doc(name, DRIVER, count))
    old = case.name("old")
    case.objects.append(_pvc(old, sc))
    case.objects.append(_pv(case.name("pv-old"), sc, csi=case.name("h-old")))
    case.bindings.append((old, case.name("pv-old")))
    case.objects.append(_pod(case.name("holder"), case.index, [old], node=rng.choice(nodes)))
    new = case.name("new")
    case.objects.append(_pvc(new, sc))
    case.objects.append(_pv(case.name("pv-new"), sc, csi=case.name("h-new")))
    case.bindings.append((new, case.name("pv-new")))
    case.pod = _pod(case.name("pod"), case.index, [new])


def _missing(case: Case, rng: random.Random) -> None:
    """A claim that does not exist, a generic ephemeral volume whose claim does not exist yet
    (no ephemeral volume controller runs here), or a claim whose volume was lost."""
    variant = rng.choice(["absent", "ephemeral", "lost"])
    if variant == "ephemeral":
        case.pod = _pod(case.name("pod"), case.index, [])
        template = {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}
        template["volumeClaimTemplate"]["spec"]["resources"] = {"requests": {"storage": "1Gi"}}
        case.pod["spec"]["volumes"] = [{"name": "scratch", "ephemeral": template}]
        return
    claim = case.name("nope")
    if variant == "lost":
        sc = case.name("local")
        case.objects.append(sc_doc(sc))
        doc = _pvc(claim, sc)
        doc["spec"]["volumeName"] = case.name("pv-gone")
        case.objects.append(doc)
        case.lost.append(claim)
    case.pod = _pod(case.name("pod"), case.index, [claim])


def _capacity(case: Case, rng: random.Random, nodes: list[str]) -> None:
    """Claims to provision by a driver of its own, which may publish storage capacity: per
    node a pool (hostname selector) of a random size, maybe a zone-wide pool with a maximum
    volume size, a pool of another class or for no node."""
    driver = f"{case.name('cap')}.example.com"
    opt_in = rng.choice([True, True, True, False, None])
    spec = {} if opt_in is None else {"storageCapacity": opt_in}
    case.objects.append(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": driver},
            "spec": spec,
        }
    )
    sc = case.name("cap")
    case.objects.append(sc_doc(sc, provisioner=driver, zones=rng.choice([None, None, ["z0"]])))
    pools: list[tuple[str, dict[str, Any] | None, dict[str, str]]] = []
    for name in nodes:
        if rng.random() < 0.75:
            size = {"capacity": rng.choice(["1Gi", "3Gi", "10Gi"])}
            pools.append((sc, {"matchLabels": {"kubernetes.io/hostname": name}}, size))
    if rng.random() < 0.4:
        size = {"capacity": "100Gi", "maximumVolumeSize": rng.choice(["2Gi", "4Gi"])}
        pools.append((sc, {"matchLabels": {ZONE: rng.choice(["z1", "z2"])}}, size))
    if rng.random() < 0.3:
        pools.append((sc, None, {"capacity": "100Gi"}))  # no nodeTopology: no node
    if rng.random() < 0.3:
        pools.append((case.name("other"), {}, {"capacity": "100Gi"}))
    for k, (cls, topology, size) in enumerate(pools):
        doc: dict[str, Any] = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIStorageCapacity",
            "metadata": {"name": case.name(f"pool{k}"), "namespace": NS},
            "storageClassName": cls,
            **size,
        }
        if topology is not None:
            doc["nodeTopology"] = topology
        case.objects.append(doc)
    names = []
    for k in range(rng.choice([1, 1, 2])):
        pvc = case.name(f"fresh{k}")
        case.objects.append(_pvc(pvc, sc, rng.choice(["1Gi", "2Gi", "5Gi"])))
        names.append(pvc)
    case.pod = _pod(case.name("pod"), case.index, names)


def _inline_csi(case: Case, rng: random.Random, nodes: list[str]) -> None:
    """Attach limits of 0 or 1 and a holder using one volume; the pod has CSI ephemeral
    inline volumes of the same driver (which kube-scheduler does not count), maybe with a
    claim of its own (which it does)."""
    sc = case.name("csi")
    case.objects.append(sc_doc(sc, wffc=False, provisioner=DRIVER))
    for name in nodes:
        case.objects.append(csinode_doc(name, DRIVER, rng.randint(0, 1)))
    old = case.name("old")
    case.objects.append(_pvc(old, sc))
    case.objects.append(_pv(case.name("pv-old"), sc, csi=case.name("h-old")))
    case.bindings.append((old, case.name("pv-old")))
    case.objects.append(_pod(case.name("holder"), case.index, [old], node=rng.choice(nodes)))
    claims = []
    if rng.random() < 0.5:
        new = case.name("new")
        case.objects.append(_pvc(new, sc))
        case.objects.append(_pv(case.name("pv-new"), sc, csi=case.name("h-new")))
        case.bindings.append((new, case.name("pv-new")))
        claims.append(new)
    inline = [DRIVER] * rng.randint(1, 2)
    case.pod = _pod(case.name("pod"), case.index, claims, inline=inline)


def _migrated(case: Case, rng: random.Random, nodes: list[str]) -> None:
    """In-tree volumes migrated to CSI: inline GCE disks under GCE PD limits; a GCE persistent
    volume (zone label of one zone, a region, the beta key, or none; maybe a zone affinity)
    whose affinity VolumeBinding translates on nodes whose CSINode lists kubernetes.io/gce-pd
    (checked against their topology.gke.io/zone label, which some nodes lack or set to another
    zone); claims of gce-pd and portworx classes (Portworx counted only where listed)."""
    zones = ["us-central1-a", "us-central1-b", rng.choice(["us-central1-b", "us-central1-c"])]
    for spec, zone in zip(case.nodes, zones, strict=True):
        spec.labels[ZONE] = zone
        gke = rng.choice([zone, zone, "us-central1-c", None])
        if gke is not None:
            spec.labels["topology.gke.io/zone"] = gke
    for name in nodes:
        doc = csinode_doc(name, GCE_DRIVER, rng.randint(0, 2))
        doc["spec"]["drivers"].append(
            {"name": PX_DRIVER, "nodeID": name, "allocatable": {"count": rng.randint(0, 1)}}
        )
        plugins = rng.choice(["", "portworx-volume", "gce-pd", "gce-pd,portworx-volume"])
        if plugins:
            listed = ",".join(f"kubernetes.io/{p}" for p in plugins.split(","))
            doc["metadata"]["annotations"] = {
                "storage.alpha.kubernetes.io/migrated-plugins": listed
            }
        case.objects.append(doc)
    disks = [case.name(f"d{k}") for k in range(3)]
    case.objects.append(
        _pod(case.name("holder"), case.index, [], node=rng.choice(nodes), disks=[disks[0]])
    )
    claims = []
    if rng.random() < 0.6:
        claims.append(_gce_volume(case, rng, disks, zones))
    for provisioner in ("kubernetes.io/gce-pd", "kubernetes.io/portworx-volume"):
        if rng.random() < 0.4:
            sc = case.name(provisioner.rpartition("/")[2])
            case.objects.append(sc_doc(sc, provisioner=provisioner))
            case.objects.append(_pvc(case.name(f"{sc}-fresh"), sc))
            claims.append(case.name(f"{sc}-fresh"))
    mine = rng.sample(disks, rng.randint(0, 2))
    case.pod = _pod(case.name("pod"), case.index, claims, disks=mine)


AZ_URI = "/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/disks/"
CINDER_ZONE = "topology.cinder.csi.openstack.org/zone"
MORE_DRIVERS = {
    "azure-disk": "disk.csi.azure.com",
    "cinder": "cinder.csi.openstack.org",
    "portworx-volume": PX_DRIVER,
}


def _in_tree_source(plugin: str, ident: str) -> dict[str, Any]:
    """An in-tree volume source (Azure disks of kind Managed: the CSI translation refuses
    others, and kube-scheduler then fails the whole attempt)."""
    if plugin == "azure-disk":
        return {"azureDisk": {"diskName": ident, "diskURI": AZ_URI + ident, "kind": "Managed"}}
    if plugin == "cinder":
        return {"cinder": {"volumeID": ident}}
    return {"portworxVolume": {"volumeID": ident}}


def _migrated_more(case: Case, rng: random.Random, nodes: list[str]) -> None:
    """Azure disk, Cinder and Portworx volumes migrated to CSI: inline volumes of a placed pod
    and of the new one counted under their drivers' limits (Azure disk and Cinder on every
    node with a CSINode, Portworx where it lists the plugin), and a bound persistent volume of
    one of them whose affinity VolumeBinding translates where its CSINode lists the plugin
    (Cinder's zone label to topology.cinder.csi.openstack.org/zone, which some nodes lack or
    set to another zone; Azure disk and Portworx untouched)."""
    for spec in case.nodes:
        cinder_zone = rng.choice([spec.labels[ZONE], spec.labels[ZONE], "z2", None])
        if cinder_zone is not None:
            spec.labels[CINDER_ZONE] = cinder_zone
    for name in nodes:
        doc = csinode_doc(name, DRIVER, 5)
        doc["spec"]["drivers"] = [
            {"name": d, "nodeID": name, "allocatable": {"count": rng.randint(0, 2)}}
            for d in MORE_DRIVERS.values()
        ]
        listed = [p for p in MORE_DRIVERS if rng.random() < 0.5]
        if listed:
            value = ",".join(f"kubernetes.io/{p}" for p in listed)
            doc["metadata"]["annotations"] = {"storage.alpha.kubernetes.io/migrated-plugins": value}
        case.objects.append(doc)
    pool = [(p, case.name(f"{p[:2]}{k}")) for p in MORE_DRIVERS for k in range(2)]
    for i in range(rng.randint(1, 2)):
        held = [_in_tree_source(*v) for v in rng.sample(pool, rng.randint(1, 3))]
        holder = _pod(case.name(f"holder{i}"), case.index, [], node=rng.choice(nodes), sources=held)
        case.objects.append(holder)
    claims = []
    if rng.random() < 0.6:
        plugin, ident = rng.choice(pool)
        sc = case.name("it")
        case.objects.append(sc_doc(sc, wffc=False, provisioner=f"kubernetes.io/{plugin}"))
        pv = _pv(case.name("pv"), sc, labels={ZONE: rng.choice(["z0", "z1", "z0__z1"])})
        del pv["spec"]["local"]
        if rng.random() < 0.3:
            term = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1"]}]}
            pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
        else:
            del pv["spec"]["nodeAffinity"]
        pv["spec"].update(_in_tree_source(plugin, ident))
        claims.append(_bound(case, sc, pv))
    mine = [_in_tree_source(*v) for v in rng.sample(pool, rng.randint(0, 2))]
    case.pod = _pod(case.name("pod"), case.index, claims, sources=mine)


EBS_DRIVER = "ebs.csi.aws.com"


def _untranslatable(case: Case, rng: random.Random, nodes: list[str]) -> None:
    """Inline volumes the CSI translation refuses (an EBS ID of the aws:// form naming no
    vol- ID, an Azure disk of the API's default kind, Shared): kube-scheduler fails the whole
    attempt with an error on a still-feasible node with a CSINode -- the new pod's anywhere
    there, a placed pod's where the node has limits and the new pod has a counted volume.
    Some nodes have no CSINode, some a CSINode without limits; the pod may be kept off some
    nodes by a selector (the error only counts where the filters before it pass)."""
    bad = [
        {"awsElasticBlockStore": {"volumeID": "aws://zone-a/not-a-volume"}},
        {"azureDisk": {"diskName": "s", "diskURI": "https://acct.blob.core.windows.net/v/s.vhd"}},
    ]
    good = [
        {"awsElasticBlockStore": {"volumeID": f"vol-c{case.index}"}},
        _in_tree_source("azure-disk", case.name("az")),
    ]
    for name in nodes:
        shape = rng.choice(["none", "no-limits", "limits", "limits"])
        if shape == "none":
            continue
        doc = csinode_doc(name, EBS_DRIVER, rng.randint(0, 2))
        if shape == "no-limits":
            doc["spec"]["drivers"] = [{"name": EBS_DRIVER, "nodeID": name}]
        else:
            doc["spec"]["drivers"].append(
                {"name": MORE_DRIVERS["azure-disk"], "nodeID": name, "allocatable": {"count": 2}}
            )
        case.objects.append(doc)
    if rng.random() < 0.6:
        holder = _pod(
            case.name("holder"), case.index, [], node=rng.choice(nodes), sources=[rng.choice(bad)]
        )
        case.objects.append(holder)
    mine = [rng.choice(good)] if rng.random() < 0.7 else []
    if rng.random() < 0.4:
        mine.append(rng.choice(bad))
    case.pod = _pod(case.name("pod"), case.index, [], sources=mine)
    if rng.random() < 0.5:
        fit = rng.sample(case.nodes, rng.randint(1, 2))
        for spec in fit:
            spec.labels["fit"] = "yes"
        case.pod["spec"]["nodeSelector"]["fit"] = "yes"


def _gce_volume(case: Case, rng: random.Random, disks: list[str], zones: list[str]) -> str:
    """A bound GCE persistent volume of one of ``disks``; returns its claim."""
    sc = case.name("pd")
    case.objects.append(sc_doc(sc, wffc=False, provisioner="kubernetes.io/gce-pd"))
    labels = rng.choice(
        [
            {},
            {ZONE: zones[0]},
            {ZONE: "us-central1-a__us-central1-b"},
            {"failure-domain.beta.kubernetes.io/zone": zones[1]},
        ]
    )
    pv = _pv(case.name("pv"), sc, labels=labels)
    del pv["spec"]["local"]
    if rng.random() < 0.3:
        term = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zones[1]]}]}
        pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    else:
        del pv["spec"]["nodeAffinity"]
    pv["spec"]["gcePersistentDisk"] = {"pdName": rng.choice(disks), "readOnly": True}
    pv["spec"]["accessModes"] = ["ReadOnlyMany"]
    return _bound(case, sc, pv, modes=["ReadOnlyMany"])


def _selected(case: Case, rng: random.Random, nodes: list[str]) -> None:
    """A claim whose provisioning was sent to a node already (selected-node annotation), next
    to a fresh claim; a local volume either could take; the class may limit zones."""
    sc = case.name("sel")
    zones = rng.choice([None, ["z0", "z1"]])
    case.objects.append(sc_doc(sc, provisioner="example.com/x", zones=zones))
    pv = case.name("pv")
    node = rng.choice(nodes)
    case.objects.append(_pv(pv, sc, "5Gi", node=node))
    case.volume_node[pv] = node
    case.available.append(pv)
    picked = _pvc(case.name("picked"), sc)
    target = rng.choice([*nodes, "gone"])
    picked["metadata"]["annotations"] = {"volume.kubernetes.io/selected-node": target}
    case.objects.append(picked)
    case.preselected.add(case.name("picked"))
    case.objects.append(_pvc(case.name("fresh"), sc))
    case.pod = _pod(case.name("pod"), case.index, [case.name("picked"), case.name("fresh")])


def _attached(case: Case, rng: random.Random, nodes: list[str]) -> None:
    """Attach limits of 0 to 2 and VolumeAttachments of bound CSI volumes (some with no pod
    using them, some of the pod's own volume, some with no attacher or volume)."""
    sc = case.name("csi")
    case.objects.append(sc_doc(sc, wffc=False, provisioner=DRIVER))
    for name in nodes:
        case.objects.append(csinode_doc(name, DRIVER, rng.randint(0, 2)))
    for k in range(3):
        pvc, pv = case.name(f"c{k}"), case.name(f"pv{k}")
        case.objects.append(_pvc(pvc, sc))
        case.objects.append(_pv(pv, sc, csi=case.name(f"h{k}")))
        case.bindings.append((pvc, pv))
    if rng.random() < 0.5:
        holder = _pod(case.name("holder"), case.index, [case.name("c0")], node=rng.choice(nodes))
        case.objects.append(holder)
    for k in range(rng.randint(1, 4)):
        attacher = rng.choice([DRIVER, DRIVER, DRIVER, ""])
        pv = rng.choice([case.name("pv0"), case.name("pv1"), case.name("pv2"), case.name("gone")])
        case.objects.append(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "VolumeAttachment",
                "metadata": {"name": case.name(f"va{k}")},
                "spec": {
                    "attacher": attacher or "attacher.example.com",
                    "nodeName": rng.choice(nodes),
                    "source": {"persistentVolumeName": pv},
                },
            }
        )
    claims = rng.sample([case.name("c1"), case.name("c2"), case.name("c0")], rng.randint(1, 2))
    case.pod = _pod(case.name("pod"), case.index, claims)


def _rwop(case: Case, rng: random.Random, nodes: list[str]) -> None:
    sc = case.name("csi")
    case.objects.append(sc_doc(sc, wffc=False, provisioner=DRIVER))
    pv = _pv(case.name("pv"), sc, modes=["ReadWriteOncePod"], csi=case.name("h"))
    pvc = _bound(case, sc, pv, modes=["ReadWriteOncePod"])
    if rng.random() < 0.7:
        case.objects.append(_pod(case.name("holder"), case.index, [pvc], node=rng.choice(nodes)))
    case.pod = _pod(case.name("pod"), case.index, [pvc])


# ---- the cluster -----------------------------------------------------------------------------
_PATHS = {
    "StorageClass": "/apis/storage.k8s.io/v1/storageclasses",
    "CSINode": "/apis/storage.k8s.io/v1/csinodes",
    "CSIDriver": "/apis/storage.k8s.io/v1/csidrivers",
    "CSIStorageCapacity": f"/apis/storage.k8s.io/v1/namespaces/{NS}/csistoragecapacities",
    "VolumeAttachment": "/apis/storage.k8s.io/v1/volumeattachments",
    "PersistentVolume": "/api/v1/persistentvolumes",
    "PersistentVolumeClaim": f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
    "Pod": f"/api/v1/namespaces/{NS}/pods",
}


# The kinds whose objects one function builds from the case's nodes.
BUILDERS = {
    "csi-limit": _csi_limit,
    "capacity": _capacity,
    "inline-csi": _inline_csi,
    "migrated": _migrated,
    "migrated-more": _migrated_more,
    "selected": _selected,
    "attached": _attached,
    "untranslatable": _untranslatable,
    "rwop": _rwop,
}


def create_case(client: KubeClient, case: Case, ns: str = NS) -> None:
    """Create the case's objects (claims in ``ns``); bind the up-front claims as a PV
    controller would."""
    paths = {**_PATHS, "PersistentVolumeClaim": f"/api/v1/namespaces/{ns}/persistentvolumeclaims"}
    for doc in case.objects:
        client.post(paths[doc["kind"]], doc)
    for pvc, pv in case.bindings:
        claim = client.get(f"{paths['PersistentVolumeClaim']}/{pvc}")
        ref = {"kind": "PersistentVolumeClaim", "namespace": ns, "name": pvc}
        ref["uid"] = claim["metadata"]["uid"]
        client.patch(f"/api/v1/persistentvolumes/{pv}", {"spec": {"claimRef": ref}})
        client.patch(f"/api/v1/persistentvolumes/{pv}/status", {"status": {"phase": "Bound"}})
        client.patch(
            f"{paths['PersistentVolumeClaim']}/{pvc}",
            {
                "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                "spec": {"volumeName": pv},
            },
        )
        client.patch(
            f"{paths['PersistentVolumeClaim']}/{pvc}/status", {"status": {"phase": "Bound"}}
        )
    for pv in case.available:
        client.patch(f"/api/v1/persistentvolumes/{pv}/status", {"status": {"phase": "Available"}})
    for pvc in case.lost:
        path = f"{paths['PersistentVolumeClaim']}/{pvc}/status"
        client.patch(path, {"status": {"phase": "Lost"}})


@contextmanager
def api_server(
    kube_bin_dir: Path, ns: str, nodes: list[NodeSpec]
) -> Iterator[tuple[ControlPlane, KubeClient]]:
    """A control plane with namespace ``ns`` and the nodes created, stopped on exit."""
    cp = ControlPlane(kube_bin_dir)
    cp.start()
    client = cp.client(maxsize=16)
    try:
        ensure_namespace(client, ns, ca_pem=Path(cp.ca_file).read_text())
        create_nodes(client, nodes)
        yield cp, client
    finally:
        client.close()
        cp.stop()


@pytest.fixture(scope="module")
def cluster_cases(kube_bin_dir: Path) -> Iterator[tuple[ControlPlane, KubeClient, list[Case]]]:
    rng = random.Random(SEED)
    cases = [build_case(i, rng) for i in range(CASES)]
    with api_server(kube_bin_dir, NS, [n for c in cases for n in c.nodes]) as (cp, client):
        for case in cases:
            create_case(client, case)
        yield cp, client, cases


# ---- fairgpu on the same objects -------------------------------------------------------------
def fairgpu_view(client: KubeClient) -> tuple[ClusterState, list[Any]]:
    """ClusterState and volume store built from what the API returns; the pending pods."""
    state = ClusterState()
    for raw in client.get("/api/v1/nodes")["items"]:
        state.add_node(node_from_k8s(k8s.decode(raw, k8s.Node)))
    store = state.volumes
    sources = (
        ("/apis/storage.k8s.io/v1/storageclasses", k8s.StorageClass, class_from_k8s),
        ("/apis/storage.k8s.io/v1/csinodes", k8s.CSINode, csinode_from_k8s),
        ("/apis/storage.k8s.io/v1/csidrivers", k8s.CSIDriver, csidriver_from_k8s),
        (
            "/apis/storage.k8s.io/v1/csistoragecapacities",
            k8s.CSIStorageCapacity,
            capacity_from_k8s,
        ),
        ("/apis/storage.k8s.io/v1/volumeattachments", k8s.VolumeAttachment, attachment_from_k8s),
        ("/api/v1/persistentvolumes", k8s.PersistentVolume, volume_from_k8s),
        ("/api/v1/persistentvolumeclaims", k8s.PersistentVolumeClaim, claim_from_k8s),
    )
    for path, kind, slim in sources:
        for raw in client.get(path)["items"]:
            store.add(slim(k8s.decode(raw, kind)))
    pending = []
    for raw in client.get(_PATHS["Pod"])["items"]:
        p = pod_from_k8s(k8s.decode(raw, k8s.Pod))
        if p.node_name:
            state.assign(p, state.node_index[p.node_name])
        else:
            pending.append(p)
    return state, pending


# ---- kube-scheduler's outcome ----------------------------------------------------------------
_PREFIX = re.compile(r"^0/\d+ nodes are available: ")


def reasons(message: str) -> set[str]:
    """The reasons of a pending message, without the preemption part or the node total."""
    # "0/9 nodes are available: <reasons>. <post-filter notes>, preemption: ..."
    message = _PREFIX.sub("", message.strip()).split(". ")[0].rstrip(".")
    return {part.strip() for part in message.split(", ")}


def kube_outcome(client: KubeClient, case: Case) -> tuple[str, str] | None:
    """("node", name) once kube-scheduler chose a node, ("pending", message), or None yet."""
    p = client.get(f"{_PATHS['Pod']}/{case.pod['metadata']['name']}")
    if p["spec"].get("nodeName"):
        return "node", p["spec"]["nodeName"]
    volumes = case.pod["spec"]["volumes"]
    for claim in [
        v["persistentVolumeClaim"]["claimName"]
        for v in volumes
        if "persistentVolumeClaim" in v
        and v["persistentVolumeClaim"]["claimName"] not in case.preselected
    ]:
        r = client.request("GET", f"{_PATHS['PersistentVolumeClaim']}/{claim}")
        if not r.ok:
            continue
        selected = (
            r.body["metadata"].get("annotations", {}).get("volume.kubernetes.io/selected-node")
        )
        if selected:
            return "node", selected
    for pv, node in case.volume_node.items():
        vol = client.get(f"/api/v1/persistentvolumes/{pv}")
        if vol["spec"].get("claimRef"):
            return "node", node
    for c in p.get("status", {}).get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message"):
            return "pending", c["message"]
    return None


def all_outcomes(client: KubeClient, cases: list[Case]) -> list[tuple[str, str]] | None:
    """Every case's outcome, or None while some pod is still undecided."""
    out = []
    for case in cases:
        found = kube_outcome(client, case)
        if found is None:
            return None
        out.append(found)
    return out


def chosen_volume_mismatches(
    client: KubeClient, cases: list[Case], outcomes: list[tuple[str, str]], state: ClusterState
) -> list[tuple[Any, ...]]:
    """Where kube-scheduler bound a claim to a local volume, fairgpu's decision for that node
    binds it to a volume of the same size (the smallest that fits; equal sizes tie)."""
    size = {}
    kube_pick = {}
    for raw in client.get("/api/v1/persistentvolumes")["items"]:
        size[raw["metadata"]["name"]] = raw["spec"]["capacity"]["storage"]
        ref = raw["spec"].get("claimRef")
        if ref:
            kube_pick[f"{ref['namespace']}/{ref['name']}"] = raw["metadata"]["name"]
    out = []
    for case, (what, node) in zip(cases, outcomes, strict=True):
        if what != "node" or not case.volume_node:
            continue
        uid = f"{NS}/{case.pod['metadata']['name']}"
        decision = state.volumes.decision(uid, state.node_index[node], node)
        for claim, ours in decision.bind:
            theirs = kube_pick.get(claim)
            if theirs is None or size[theirs] != size[ours] or case.volume_node[theirs] != node:
                out.append((case.index, case.kind, "volume", claim, theirs, ours))
    return out


def test_fairgpu_places_volumes_as_kube_scheduler_does(
    cluster_cases: tuple[ControlPlane, KubeClient, list[Case]],
) -> None:
    cp, client, cases = cluster_cases
    state, pending = fairgpu_view(client)
    assert not pending  # only the placed holders so far
    sched = Scheduler(Profile())
    ours = {}
    for case in cases:
        p = pod_from_k8s(k8s.decode(case.pod, k8s.Pod))
        result = sched.schedule(p, state)
        try:
            mask, _ = sched.filter(p, state)
        except AttemptError:  # the attempt fails (result says why): no node is feasible
            mask = np.zeros(state.size, dtype=bool)
        names = {state.node(int(i)).name for i in np.flatnonzero(mask)}
        ours[p.name] = (result.ok, names, result.reason())
    for case in cases:
        client.post(_PATHS["Pod"], case.pod)
    cp.start_scheduler()
    try:
        outcomes = polling.wait_for(lambda: all_outcomes(client, cases), 60, 0.5)
    finally:
        cp.stop_scheduler()
    mismatches = []
    kinds: dict[str, list[int]] = {}
    for case, (what, detail) in zip(cases, outcomes, strict=True):
        state_name = case.pod["metadata"]["name"]
        ok, feasible, reason = ours[state_name]
        kinds.setdefault(case.kind, [0, 0])[0 if what == "node" else 1] += 1
        if what == "node" and not (ok and detail in feasible):
            mismatches.append(
                (case.index, case.kind, "kube placed on", detail, sorted(feasible), reason)
            )
        if what == "pending" and (ok or reasons(detail) != reasons(reason)):
            mismatches.append(
                (case.index, case.kind, "kube pending", detail, sorted(feasible), reason)
            )
    mismatches += chosen_volume_mismatches(client, cases, outcomes, state)
    print("placed/pending per kind:", kinds)
    assert not mismatches, "\n".join(map(str, mismatches))
    # The generated cases exercise both outcomes for most kinds.
    assert sum(placed for placed, _ in kinds.values()) >= CASES // 4
    assert sum(left for _, left in kinds.values()) >= CASES // 4


# ---- pods competing for the same volumes -----------------------------------------------------
COMPETE_GROUPS = 12
COMPETE_NS = "vol-compete"


def build_competition(index: int, rng: random.Random) -> tuple[Case, list[dict[str, Any]]]:
    """Several pods, each with its own claim, for a few equal local volumes of one class: the
    volumes chosen for pods placed earlier are taken (kube-scheduler's assume cache)."""
    case = Case(100 + index, "compete")
    for j in range(3):
        labels = {"case": str(case.index), ZONE: f"z{j}"}
        case.nodes.append(NodeSpec(case.name(f"n{j}"), cpu="4", memory="8Gi", labels=labels))
    sc = case.name("local")
    case.objects.append(sc_doc(sc))
    for k in range(rng.randint(0, 3)):
        node_name = rng.choice(case.nodes).name
        case.objects.append(_pv(case.name(f"pv{k}"), sc, "5Gi", node=node_name))
        case.volume_node[case.name(f"pv{k}")] = node_name
        case.available.append(case.name(f"pv{k}"))
    pods = []
    for k in range(rng.randint(2, 4)):
        claim = _pvc(case.name(f"data{k}"), sc)
        claim["metadata"]["namespace"] = COMPETE_NS
        case.objects.append(claim)
        manifest = _pod(case.name(f"pod{k}"), case.index, [case.name(f"data{k}")])
        manifest["metadata"]["namespace"] = COMPETE_NS
        pods.append(manifest)
    return case, pods


def test_competing_pods_get_the_volumes_kube_scheduler_gives_them(kube_bin_dir: Path) -> None:
    from fairgpu.engine.engine import Engine

    rng = random.Random(SEED + 1)
    groups = [build_competition(i, rng) for i in range(COMPETE_GROUPS)]
    nodes = [n for case, _ in groups for n in case.nodes]
    with api_server(kube_bin_dir, COMPETE_NS, nodes) as (cp, client):
        for case, _ in groups:
            create_case(client, case, COMPETE_NS)
        state, _ = fairgpu_view(client)
        pending = [pod_from_k8s(k8s.decode(m, k8s.Pod)) for _, ms in groups for m in ms]
        decided = Engine(Profile(), ordering="kube-default").cycle(state, pending, now=0.0)
        ours_placed = {b.pod.name for b in decided.binds}
        ours_reasons = {u.pod.name: reasons(u.reason) for u in decided.unschedulable}
        for _, manifests in groups:
            for m in manifests:
                client.post(f"/api/v1/namespaces/{COMPETE_NS}/pods", m)
        cp.start_scheduler()
        try:
            theirs = polling.wait_for(lambda: competition_outcomes(client, groups), 60, 0.5)
        finally:
            cp.stop_scheduler()
    for case, manifests in groups:
        names = [m["metadata"]["name"] for m in manifests]
        kube_placed = [n for n in names if theirs[n][0] == "node"]
        # Equal volumes and claims: how many pods fit is fixed, which ones is queue order.
        assert len(kube_placed) == len(ours_placed & set(names)), (case.index, theirs, ours_placed)
        kube_pending = sorted(sorted(reasons(theirs[n][1])) for n in names if n not in kube_placed)
        our_pending = sorted(sorted(ours_reasons[n]) for n in names if n not in ours_placed)
        assert kube_pending == our_pending, (case.index, kube_pending, our_pending)
        for n in kube_placed:
            assert case.volume_node and theirs[n][1] in case.volume_node.values()


def competition_outcomes(
    client: KubeClient, groups: list[tuple[Case, list[dict[str, Any]]]]
) -> dict[str, tuple[str, str]] | None:
    """Pod name -> ("node", node) from the volume kube-scheduler bound to its claim, or
    ("pending", message); None while a pod is undecided."""
    claimed = {}
    for raw in client.get("/api/v1/persistentvolumes")["items"]:
        ref = raw["spec"].get("claimRef")
        if ref:
            claimed[ref["name"]] = raw["metadata"]["name"]
    out: dict[str, tuple[str, str]] = {}
    for case, manifests in groups:
        for m in manifests:
            name = m["metadata"]["name"]
            claim = m["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
            if claim in claimed:
                out[name] = ("node", case.volume_node[claimed[claim]])
                continue
            p = client.get(f"/api/v1/namespaces/{COMPETE_NS}/pods/{name}")
            cond = [
                c
                for c in p.get("status", {}).get("conditions") or []
                if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message")
            ]
            if not cond:
                return None
            out[name] = ("pending", cond[0]["message"])
    return out
