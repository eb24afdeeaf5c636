"""Storage for the live scheduler: watch claims, volumes, classes, CSI nodes, CSI drivers, CSI
storage capacities and volume attachments, and the pre-bind step that writes the volume
binding decision before the pod is bound.

:class:`VolumeWatch` runs seven reflectors whose events the scheduler's main loop applies to the
cluster's :class:`~fairgpu.cluster.volumes.VolumeStore` (the engine reads it there).

:func:`prebind` does what kube-scheduler's VolumeBinding PreBind does, then finishes the bind
the way the PV controller would, so a cluster without one (or a slow one) sees a complete
binding before the pod lands:

* a claim bound to a chosen volume: the PersistentVolume's ``spec.claimRef`` names the claim
  (with the annotation ``pv.kubernetes.io/bound-by-controller: "yes"``), written with the
  volume's resourceVersion, so a volume taken meanwhile fails the bind instead of being shared;
  then the claim's ``spec.volumeName`` (with ``pv.kubernetes.io/bind-completed``), which the PV
  controller accepts as the finished binding;
* a claim to provision: the annotation ``volume.kubernetes.io/selected-node: <node>`` on the
  claim, which tells the external provisioner where to create the volume (the kubelet waits
  for it; unlike kube-scheduler the pod's bind does not).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fairgpu.api import objects as k8s
from fairgpu.cluster.state import ClusterState
from fairgpu.kube.client import CONNECTION_ERRORS, MERGE_PATCH, RestClient
from fairgpu.kube.decode import Invalid, or_invalid
from fairgpu.kube.reflector import Reflector, stop_all
from fairgpu.model.volumes import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    AttachmentInfo,
    CapacityInfo,
    ClaimInfo,
    ClassInfo,
    CSIDriverInfo,
    CSINodeInfo,
    VolumeInfo,
    attachment_from_k8s,
    capacity_from_k8s,
    claim_from_k8s,
    class_from_k8s,
    csidriver_from_k8s,
    csinode_from_k8s,
    volume_from_k8s,
)

log = logging.getLogger("fairgpu.kube.volumes")

# kind -> (collection path, struct, slim decoder, store kind)
_RESOURCES: dict[str, tuple[str, type, Callable[[Any], Any], str]] = {
    "PersistentVolumeClaim": (
        "/api/v1/persistentvolumeclaims",
        k8s.PersistentVolumeClaim,
        claim_from_k8s,
        "claim",
    ),
    "PersistentVolume": (
        "/api/v1/persistentvolumes",
        k8s.PersistentVolume,
        volume_from_k8s,
        "volume",
    ),
    "StorageClass": (
        "/apis/storage.k8s.io/v1/storageclasses",
        k8s.StorageClass,
        class_from_k8s,
        "class",
    ),
    "CSINode": ("/apis/storage.k8s.io/v1/csinodes", k8s.CSINode, csinode_from_k8s, "csinode"),
    "CSIDriver": (
        "/apis/storage.k8s.io/v1/csidrivers",
        k8s.CSIDriver,
        csidriver_from_k8s,
        "csidriver",
    ),
    "CSIStorageCapacity": (
        "/apis/storage.k8s.io/v1/csistoragecapacities",
        k8s.CSIStorageCapacity,
        capacity_from_k8s,
        "capacity",
    ),
    "VolumeAttachment": (
        "/apis/storage.k8s.io/v1/volumeattachments",
        k8s.VolumeAttachment,
        attachment_from_k8s,
        "attachment",
    ),
}


def _key(
    obj: ClaimInfo
    | VolumeInfo
    | ClassInfo
    | CSINodeInfo
    | CSIDriverInfo
    | CapacityInfo
    | AttachmentInfo,
) -> str:
    return obj.key if isinstance(obj, ClaimInfo | CapacityInfo) else obj.name


class VolumeWatch:
    """The storage reflectors; ``sink(event_type, (kind, object))`` receives their events
    (on reflector threads) for :meth:`apply` on the scheduler's thread."""

    def __init__(self, client: RestClient, sink: Callable[[str, Any], None]) -> None:
        self.reflectors: list[Reflector] = []
        for kind, (path, struct, slim, _) in _RESOURCES.items():

            def forward(etype: str, obj: Any, kind: str = kind) -> None:
                sink(etype, (kind, obj))

            self.reflectors.append(
                Reflector(
                    client, path, or_invalid(kind, struct, slim), forward, name=_RESOURCES[kind][3]
                )
            )

    def start(self) -> None:
        """Start every reflector."""
        for r in self.reflectors:
            r.start()

    def stop(self) -> None:
        """Stop every reflector."""
        stop_all(self.reflectors)

    def synced(self) -> bool:
        """True once every collection has been listed."""
        return all(r.synced.is_set() for r in self.reflectors)

    @staticmethod
    def apply(cluster: ClusterState, etype: str, payload: tuple[str, Any]) -> bool:
        """Apply one reflector event to ``cluster.volumes``; True if anything changed.

        A change may make a pending pod schedulable (a new volume, a bound claim), so the
        engine's cached failures are invalidated as after a release.
        """
        kind, obj = payload
        store = cluster.volumes
        table_kind = _RESOURCES[kind][3]
        before = store.version
        if etype == "SYNC":
            store.clear(table_kind)
            for item in obj:
                _put(store, item)
        elif etype == "DELETED":
            if isinstance(obj, Invalid):
                store.remove(table_kind, obj.key)
            else:
                store.remove(table_kind, _key(obj))
        else:
            _put(store, obj)
        if store.version == before:
            return False
        if table_kind == "claim":
            store.prune_bound()
        cluster.release_version += 1
        return True


def _put(store: Any, obj: Any) -> None:
    if isinstance(obj, Invalid):
        log.warning("invalid storage object ignored", extra={"kind": obj.kind, "error": obj.error})
        return
    store.add(obj)


@dataclass(frozen=True, slots=True)
class PreBindPlan:
    """The API writes for one pod's volumes: (claim namespace, claim name, claim uid, volume
    name, volume resourceVersion) per binding, (namespace, name) per claim to provision."""

    node: str
    bind: tuple[tuple[str, str, str, str, str], ...] = ()
    provision: tuple[tuple[str, str], ...] = ()


def plan_for(cluster: ClusterState, uid: str, node_name: str) -> PreBindPlan | None:
    """The pre-bind writes for pod ``uid`` placed on ``node_name`` (None: nothing to write)."""
    store = cluster.volumes
    slot = cluster.node_index.get(node_name)
    if uid not in store.choices or slot is None:
        return None
    decision = store.decision(uid, slot, node_name)
    if not decision:
        return None
    bind = []
    for key, vol_name in decision.bind:
        claim, vol = store.claims.get(key), store.volumes.get(vol_name)
        if claim is None or vol is None:
            continue
        bind.append((claim.namespace, claim.name, claim.uid, vol_name, vol.resource_version))
    provision = []
    for key in decision.provision:
        claim = store.claims.get(key)
        if claim is not None and claim.selected_node != node_name:
            provision.append((claim.namespace, claim.name))
    return PreBindPlan(node_name, tuple(bind), tuple(provision))


def prebind(client: RestClient, plan: PreBindPlan) -> tuple[int, str]:
    """Write the plan (see the module docstring); returns (HTTP status, message) of the first
    failed write, or (200, "") when all succeeded. Connection errors count as status 0."""
    try:
        for namespace, name, uid, vol_name, version in plan.bind:
            status, message = _bind_volume(client, namespace, name, uid, vol_name, version)
            if not 200 <= status < 300:
                return status, f"binding volume {vol_name} to claim {namespace}/{name}: {message}"
        for namespace, name in plan.provision:
            body = {"metadata": {"annotations": {ANN_SELECTED_NODE: plan.node}}}
            path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"
            r = client.request("PATCH", path, body, content_type=MERGE_PATCH)
            if not r.ok:
                return r.status, f"selecting node for claim {namespace}/{name}: {r.message}"
    except CONNECTION_ERRORS as error:
        return 0, f"volume pre-bind: {error}"
    return 200, ""


def _bind_volume(
    client: RestClient, namespace: str, name: str, uid: str, vol_name: str, version: str
) -> tuple[int, str]:
    ref = {
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "namespace": namespace,
        "name": name,
        "uid": uid,
    }
    meta: dict[str, Any] = {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}}
    if version:
        meta["resourceVersion"] = version  # fails with 409 if the volume changed meanwhile
    r = client.request(
        "PATCH",
        f"/api/v1/persistentvolumes/{vol_name}",
        {"metadata": meta, "spec": {"claimRef": ref}},
        content_type=MERGE_PATCH,
    )
    if not r.ok:
        return r.status, r.message
    path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"
    patch = {
        "metadata": {"annotations": {ANN_BIND_COMPLETED: "yes", ANN_BOUND_BY_CONTROLLER: "yes"}},
        "spec": {"volumeName": vol_name},
    }
    r = client.request("PATCH", path, patch, content_type=MERGE_PATCH)
    if r.ok:
        return r.status, ""
    # The PV controller may have finished the claim first: that is success if it agrees.
    current = client.request("GET", path, limited=False)
    body = current.body if current.ok and isinstance(current.body, dict) else {}
    if (body.get("spec") or {}).get("volumeName") == vol_name:
        return 200, ""
    return r.status, r.message
