"""Builders for volume tests: v1 storage objects as dicts, decoded as production decodes them."""

from __future__ import annotations

from typing import Any

from fairgpu.api import objects as k8s
from fairgpu.cluster.state import ClusterState
from fairgpu.model.volumes import (
    claim_from_k8s,
    class_from_k8s,
    csinode_from_k8s,
    decode_storage,
    volume_from_k8s,
)


def pvc_doc(
    name: str,
    sc: str | None = "local",
    size: str = "1Gi",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    volume: str = "",
    namespace: str = "default",
) -> dict[str, Any]:
    """A v1 PersistentVolumeClaim."""
    spec: dict[str, Any] = {
        "accessModes": list(modes),
        "resources": {"requests": {"storage": size}},
    }
    if sc is not None:
        spec["storageClassName"] = sc
    if volume:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def pv_doc(
    name: str,
    sc: str = "local",
    size: str = "1Gi",
    node: str | None = None,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    labels: dict[str, str] | None = None,
    claim: str = "",
    csi: tuple[str, str] | None = None,
    phase: str = "Available",
) -> dict[str, Any]:
    """A v1 PersistentVolume, local to ``node`` if given (hostname node affinity)."""
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": list(modes),
        "storageClassName": sc,
        "persistentVolumeReclaimPolicy": "Retain",
    }
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    else:
        spec["hostPath"] = {"path": f"/tmp/{name}"}
    if node is not None:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                        ]
                    }
                ]
            }
        }
    if claim:
        ns, _, cname = claim.partition("/")
        spec["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": ns, "name": cname}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"phase": phase},
    }


def sc_doc(
    name: str,
    wffc: bool = True,
    provisioner: str = "kubernetes.io/no-provisioner",
    zones: list[str] | None = None,
) -> dict[str, Any]:
    """A storage.k8s.io/v1 StorageClass (``zones``: allowedTopologies on the zone label)."""
    doc: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer" if wffc else "Immediate",
    }
    if zones is not None:
        doc["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": zones}]}
        ]
    return doc


def csinode_doc(node: str, driver: str, count: int) -> dict[str, Any]:
    """A storage.k8s.io/v1 CSINode with one driver limited to ``count`` volumes."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": node},
        "spec": {"drivers": [{"name": driver, "nodeID": node, "allocatable": {"count": count}}]},
    }


def csidriver_doc(name: str, storage_capacity: bool | None = True) -> dict[str, Any]:
    """A storage.k8s.io/v1 CSIDriver (``storage_capacity`` None: the field unset)."""
    spec: dict[str, Any] = {}
    if storage_capacity is not None:
        spec["storageCapacity"] = storage_capacity
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": name},
        "spec": spec,
    }


def capacity_doc(
    name: str,
    sc: str,
    capacity: str | None = None,
    maximum: str | None = None,
    topology: dict[str, Any] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A storage.k8s.io/v1 CSIStorageCapacity; ``topology`` is its ``nodeTopology`` label
    selector (None: unset)."""
    doc: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {"name": name, "namespace": namespace},
        "storageClassName": sc,
    }
    if capacity is not None:
        doc["capacity"] = capacity
    if maximum is not None:
        doc["maximumVolumeSize"] = maximum
    if topology is not None:
        doc["nodeTopology"] = topology
    return doc


def on_host(node: str) -> dict[str, Any]:
    """A ``nodeTopology`` selecting one node by hostname, as node-local drivers publish."""
    return {"matchLabels": {"kubernetes.io/hostname": node}}


def load(cluster: ClusterState, *docs: dict[str, Any]) -> ClusterState:
    """Put storage objects into ``cluster.volumes``."""
    store = cluster.volumes
    for doc in docs:
        kind = doc["kind"]
        if kind == "PersistentVolumeClaim":
            store.set_claim(claim_from_k8s(k8s.decode(doc, k8s.PersistentVolumeClaim)))
        elif kind == "PersistentVolume":
            store.set_volume(volume_from_k8s(k8s.decode(doc, k8s.PersistentVolume)))
        elif kind == "StorageClass":
            store.set_class(class_from_k8s(k8s.decode(doc, k8s.StorageClass)))
        elif kind == "CSINode":
            store.set_csi_node(csinode_from_k8s(k8s.decode(doc, k8s.CSINode)))
        else:
            store.add(decode_storage(doc))
    return cluster


def claims(*names: str) -> list[dict[str, Any]]:
    """Pod ``volumes`` entries mounting the named claims."""
    return [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": n}} for i, n in enumerate(names)
    ]
