"""Storage objects as the scheduler sees them: claims, volumes, classes, CSI node limits, CSI
drivers and their storage capacity, and volume attachments.

Each is decoded once from the API's JSON (see :mod:`fairgpu.api.objects`) into a slim frozen
struct holding only what kube-scheduler's volume plugins read (VolumeBinding, VolumeZone,
VolumeRestrictions, NodeVolumeLimits). Decoders raise :class:`InvalidObjectError` naming the
object and the field at fault.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fairgpu.api import objects as k8s
from fairgpu.api.errors import InvalidObjectError
from fairgpu.api.quantity import QuantityError, parse_quantity
from fairgpu.model.selectors import (
    LabelSelector,
    NodeSelectorTerm,
    compile_label_selector,
    compile_node_term,
)

STORAGE = "storage"
RWOP = "ReadWriteOncePod"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
PHASE_AVAILABLE = "Available"
#: What kube-scheduler's PreBind and the PV controller write.
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
#: On a CSINode: in-tree plugins whose volumes the node's CSI drivers handle.
ANN_MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"
#: In-tree volume plugins whose persistent volumes are decoded (``VolumeInfo.in_tree``).
GCE_PD = "kubernetes.io/gce-pd"
AWS_EBS = "kubernetes.io/aws-ebs"
AZURE_DISK = "kubernetes.io/azure-disk"
CINDER = "kubernetes.io/cinder"
PORTWORX = "kubernetes.io/portworx-volume"


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """A PersistentVolumeClaim. ``storage_class`` None: not set (the default class applies);
    ``volume_name`` empty: not bound yet."""

    namespace: str
    name: str
    uid: str = ""
    storage_class: str | None = None
    volume_name: str = ""
    access_modes: frozenset[str] = frozenset()
    request: int = 0
    selector: LabelSelector | None = None
    volume_mode: str = "Filesystem"
    deleting: bool = False
    selected_node: str = ""
    # False when the claim requests no storage at all: kube-scheduler then skips the storage
    # capacity check (a request of 0 is checked like any other size).
    storage_requested: bool = True
    lost: bool = False  # status.phase Lost: its volume is gone
    controller_uid: str = ""  # uid of the controlling owner (a generic ephemeral volume's pod)

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class VolumeInfo:
    """A PersistentVolume. ``claim`` is the ``namespace/name`` its claimRef points to (with
    ``claim_uid`` when set); ``node_terms`` None: usable from every node."""

    name: str
    capacity: int = 0
    access_modes: frozenset[str] = frozenset()
    storage_class: str = ""
    claim: str = ""
    claim_uid: str = ""
    node_terms: tuple[NodeSelectorTerm, ...] | None = None
    phase: str = ""
    volume_mode: str = "Filesystem"
    labels: tuple[tuple[str, str], ...] = ()
    csi_driver: str = ""
    csi_handle: str = ""
    # (in-tree plugin, disk name, volume ID or disk URI); "" for an Azure disk whose kind is
    # not Managed, which the CSI translation refuses.
    in_tree: tuple[str, str] | tuple[()] = ()
    deleting: bool = False
    resource_version: str = ""

    def bound_to(self, claim: ClaimInfo) -> bool:
        """True if the claimRef names ``claim`` (and its uid, when the ref carries one)."""
        return self.claim == claim.key and (not self.claim_uid or self.claim_uid == claim.uid)


@dataclass(frozen=True, slots=True)
class ClassInfo:
    """A StorageClass. ``allowed_topologies``: OR of terms, each an AND of (key, values)."""

    name: str
    provisioner: str = ""
    wait_for_first_consumer: bool = False
    allowed_topologies: tuple[tuple[tuple[str, frozenset[str]], ...], ...] = ()
    default: bool = False

    def allows(self, labels: dict[str, str]) -> bool:
        """kube-scheduler's topology check for dynamic provisioning on a node."""
        if not self.allowed_topologies:
            return True
        return any(
            all(labels.get(key) in values for key, values in term)
            for term in self.allowed_topologies
        )


@dataclass(frozen=True, slots=True)
class CSINodeInfo:
    """A CSINode: per CSI driver, how many volumes the node can attach (None: no limit)."""

    name: str
    limits: tuple[tuple[str, int], ...] = ()
    migrated: frozenset[str] = frozenset()  # plugins the migrated-plugins annotation lists


@dataclass(frozen=True, slots=True)
class CSIDriverInfo:
    """A CSIDriver; ``storage_capacity``: the driver publishes CSIStorageCapacity objects and
    wants provisioning checked against them (``spec.storageCapacity: true``)."""

    name: str
    storage_capacity: bool = False


@dataclass(frozen=True, slots=True)
class CapacityInfo:
    """A CSIStorageCapacity: what one storage pool of a class can still provision for the
    nodes ``topology`` selects (None: no node). ``limit`` is the largest volume it can create,
    in bytes: ``maximumVolumeSize`` if set, else ``capacity`` (None: neither is set)."""

    namespace: str
    name: str
    storage_class: str
    topology: LabelSelector | None = None
    limit: int | None = None

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class AttachmentInfo:
    """A VolumeAttachment: ``attacher`` (a CSI driver) attaches PersistentVolume ``volume`` to
    node ``node`` ('' when the attachment is of an inline volume)."""

    name: str
    node: str = ""
    attacher: str = ""
    volume: str = ""


def _bytes(value: k8s.Quantity, obj: str, field: str) -> int:
    """A storage quantity in whole bytes, rounded up as ``resource.Quantity.Value()`` does; a
    clear error naming ``obj`` and ``field`` if it is malformed or negative."""
    try:
        exact = parse_quantity(value)
        if exact < 0:
            raise QuantityError(f"{value!r} is negative")
    except QuantityError as error:
        raise InvalidObjectError(obj, field, str(error)) from None
    return math.ceil(exact)


def _storage(quantities: k8s.ResourceList, obj: str, field: str) -> int:
    """The ``storage`` quantity in whole bytes (0 if absent)."""
    value = quantities.get(STORAGE)
    return 0 if value is None else _bytes(value, obj, field)


def _obj(kind: str, meta: k8s.ObjectMeta) -> str:
    name = meta.name or "<unnamed>"
    return f"{kind} {meta.namespace}/{name}" if meta.namespace else f"{kind} {name}"


def _named(kind: str, meta: k8s.ObjectMeta) -> str:
    """The object's description for errors; an error if it has no name."""
    obj = _obj(kind, meta)
    if not meta.name:
        raise InvalidObjectError(obj, "metadata.name", "is required")
    return obj


def claim_from_k8s(pvc: k8s.PersistentVolumeClaim) -> ClaimInfo:
    """Decode a v1 PersistentVolumeClaim."""
    meta, spec = pvc.metadata, pvc.spec
    obj = _named("PersistentVolumeClaim", meta)
    request = _storage(spec.resources.requests, obj, "spec.resources.requests.storage")
    try:
        selector = compile_label_selector(spec.selector, "spec.selector")
    except ValueError as error:
        field, _, problem = str(error).partition(": ")
        raise InvalidObjectError(obj, field, problem) from None
    return ClaimInfo(
        namespace=meta.namespace or "default",
        name=meta.name,
        uid=meta.uid,
        storage_class=spec.storage_class_name,
        volume_name=spec.volume_name,
        access_modes=frozenset(spec.access_modes),
        request=request,
        selector=selector,
        volume_mode=spec.volume_mode or "Filesystem",
        deleting=meta.deletion_timestamp is not None,
        selected_node=meta.annotations.get(ANN_SELECTED_NODE, ""),
        storage_requested=STORAGE in spec.resources.requests,
        lost=pvc.status.phase == "Lost",
        controller_uid=next((o.uid for o in meta.owner_references if o.controller), ""),
    )


def volume_from_k8s(pv: k8s.PersistentVolume) -> VolumeInfo:
    """Decode a v1 PersistentVolume."""
    meta, spec = pv.metadata, pv.spec
    obj = _named("PersistentVolume", meta)
    capacity = _storage(spec.capacity, obj, "spec.capacity.storage")
    terms = None
    affinity = spec.node_affinity
    if affinity is not None and affinity.required is not None:
        where = "spec.nodeAffinity.required.nodeSelectorTerms"
        try:
            terms = tuple(
                compile_node_term(t, f"{where}[{i}]")
                for i, t in enumerate(affinity.required.node_selector_terms)
            )
        except ValueError as error:
            field, _, problem = str(error).partition(": ")
            raise InvalidObjectError(obj, field, problem) from None
    ref = spec.claim_ref
    claim = f"{ref.namespace or 'default'}/{ref.name}" if ref is not None and ref.name else ""
    csi = spec.csi
    return VolumeInfo(
        name=meta.name,
        capacity=capacity,
        access_modes=frozenset(spec.access_modes),
        storage_class=spec.storage_class_name,
        claim=claim,
        claim_uid=ref.uid if ref is not None and claim else "",
        node_terms=terms,
        phase=pv.status.phase,
        volume_mode=spec.volume_mode or "Filesystem",
        labels=tuple(sorted(meta.labels.items())),
        csi_driver=csi.driver if csi is not None else "",
        csi_handle=csi.volume_handle if csi is not None else "",
        in_tree=_in_tree(spec),
        deleting=meta.deletion_timestamp is not None,
        resource_version=meta.resource_version,
    )


def class_from_k8s(sc: k8s.StorageClass) -> ClassInfo:
    """Decode a storage.k8s.io/v1 StorageClass."""
    meta = sc.metadata
    obj = _named("StorageClass", meta)
    mode = sc.volume_binding_mode or "Immediate"
    if mode not in ("Immediate", WAIT_FOR_FIRST_CONSUMER):
        raise InvalidObjectError(obj, "volumeBindingMode", f"unknown {mode!r}")
    topologies = tuple(
        tuple((req.key, frozenset(req.values)) for req in term.match_label_expressions)
        for term in sc.allowed_topologies
    )
    return ClassInfo(
        name=meta.name,
        provisioner=sc.provisioner,
        wait_for_first_consumer=mode == WAIT_FOR_FIRST_CONSUMER,
        allowed_topologies=topologies,
        default=meta.annotations.get(DEFAULT_CLASS_ANNOTATION) == "true",
    )


def csinode_from_k8s(node: k8s.CSINode) -> CSINodeInfo:
    """Decode a storage.k8s.io/v1 CSINode."""
    meta = node.metadata
    obj = _named("CSINode", meta)
    limits = []
    for i, driver in enumerate(node.spec.drivers):
        count = driver.allocatable.count if driver.allocatable is not None else None
        if count is None:
            continue
        if count < 0:
            raise InvalidObjectError(obj, f"spec.drivers[{i}].allocatable.count", "is negative")
        limits.append((driver.name, count))
    listed = meta.annotations.get(ANN_MIGRATED_PLUGINS, "")
    return CSINodeInfo(meta.name, tuple(limits), frozenset(listed.split(",")) - {""})


def csidriver_from_k8s(driver: k8s.CSIDriver) -> CSIDriverInfo:
    """Decode a storage.k8s.io/v1 CSIDriver."""
    meta = driver.metadata
    _named("CSIDriver", meta)
    return CSIDriverInfo(meta.name, bool(driver.spec.storage_capacity))


def capacity_from_k8s(cap: k8s.CSIStorageCapacity) -> CapacityInfo:
    """Decode a storage.k8s.io/v1 CSIStorageCapacity."""
    meta = cap.metadata
    obj = _named("CSIStorageCapacity", meta)
    if not cap.storage_class_name:
        raise InvalidObjectError(obj, "storageClassName", "is required")
    try:
        topology = compile_label_selector(cap.node_topology, "nodeTopology")
    except ValueError as error:
        field, _, problem = str(error).partition(": ")
        raise InvalidObjectError(obj, field, problem) from None
    # Both are checked even though only one is used: a malformed object is reported whole.
    capacity = None if cap.capacity is None else _bytes(cap.capacity, obj, "capacity")
    largest = cap.maximum_volume_size
    limit = capacity if largest is None else _bytes(largest, obj, "maximumVolumeSize")
    return CapacityInfo(
        namespace=meta.namespace or "default",
        name=meta.name,
        storage_class=cap.storage_class_name,
        topology=topology,
        limit=limit,
    )


def attachment_from_k8s(va: k8s.VolumeAttachment) -> AttachmentInfo:
    """Decode a storage.k8s.io/v1 VolumeAttachment."""
    meta, spec = va.metadata, va.spec
    _named("VolumeAttachment", meta)
    return AttachmentInfo(
        meta.name, spec.node_name, spec.attacher, spec.source.persistent_volume_name or ""
    )


def _azure_uri(disk: k8s.AzureDiskVolumeSource) -> str:
    """The disk URI, or "" when the disk's kind is not Managed (no CSI translation)."""
    return disk.disk_uri if disk.kind.lower() == "managed" else ""


_EBS_ID = re.compile(r"^vol-[^/]*$")


def ebs_volume_id(kubernetes_id: str) -> str | None:
    """The bare EBS ID of ``vol-...`` or ``aws://<zone>/vol-...`` (None: malformed), as the
    CSI translation library reads an EBS volume ID."""
    if not kubernetes_id.startswith("aws://"):
        return kubernetes_id
    ident = kubernetes_id.removeprefix("aws://").partition("/")[2].strip("/")
    return ident if _EBS_ID.match(ident) else None


def _inline_translation_error(vol: k8s.Volume) -> str:
    """Why the CSI translation refuses inline volume ``vol`` ("" when it does not): an EBS
    volume ID of the ``aws://`` form that names no ``vol-`` ID, an Azure disk not Managed.
    The messages are the translation library's, which kube-scheduler's NodeVolumeLimits shows
    when it fails an attempt on them."""
    if vol.aws_elastic_block_store is not None:
        ident = vol.aws_elastic_block_store.volume_id
        if ebs_volume_id(ident) is None:
            why = f"Invalid format for AWS volume ({ident})"
            return (
                f"converting volume({vol.name}) from inline to csi: "
                f"failed to translate Kubernetes ID to EBS Volume ID {why}"
            )
    elif vol.azure_disk is not None and not _azure_uri(vol.azure_disk):
        why = f"kind({vol.azure_disk.kind}) is not supported in csi migration"
        return f"converting volume({vol.name}) from inline to csi: {why}"
    return ""


def _in_tree(spec: k8s.PersistentVolumeSpec) -> tuple[str, str] | tuple[()]:
    """The in-tree plugin of a persistent volume migrated to CSI and its identity."""
    if spec.gce_persistent_disk is not None:
        return (GCE_PD, spec.gce_persistent_disk.pd_name)
    if spec.aws_elastic_block_store is not None:
        return (AWS_EBS, spec.aws_elastic_block_store.volume_id)
    if spec.azure_disk is not None:
        return (AZURE_DISK, _azure_uri(spec.azure_disk))
    if spec.cinder is not None:
        return (CINDER, spec.cinder.volume_id)
    if spec.portworx_volume is not None:
        return (PORTWORX, spec.portworx_volume.volume_id)
    return ()


def pod_volume_refs(
    spec: k8s.PodSpec, pod_name: str
) -> tuple[tuple[str, ...], tuple[tuple[str, str, bool], ...], tuple[str, ...]]:
    """A pod's claim names (generic ephemeral volumes as ``<pod>-<volume>``, the claim the
    ephemeral controller creates), its in-tree disks as (kind, identity, read-only), and why
    the CSI translation refuses its inline in-tree volumes, in volume order (see
    :func:`_inline_translation_error`)."""
    claims: list[str] = []
    disks: list[tuple[str, str, bool]] = []
    errors = tuple(e for e in map(_inline_translation_error, spec.volumes) if e)
    for vol in spec.volumes:
        if vol.persistent_volume_claim is not None:
            claims.append(vol.persistent_volume_claim.claim_name)
        elif vol.ephemeral is not None:
            claims.append(f"{pod_name}-{vol.name}")
        elif vol.gce_persistent_disk is not None:
            gce = vol.gce_persistent_disk
            disks.append(("gce-pd", gce.pd_name, gce.read_only))
        elif vol.aws_elastic_block_store is not None:
            ebs = vol.aws_elastic_block_store
            disks.append(("aws-ebs", ebs.volume_id, False))  # EBS never shares, even read-only
        elif vol.azure_disk is not None:
            uri = _azure_uri(vol.azure_disk)
            if uri:  # a disk of another kind has no CSI translation: never counted
                disks.append(("azure-disk", uri, vol.azure_disk.read_only))
        elif vol.cinder is not None:
            disks.append(("cinder", vol.cinder.volume_id, vol.cinder.read_only))
        elif vol.portworx_volume is not None:
            px = vol.portworx_volume
            disks.append(("portworx-volume", px.volume_id, px.read_only))
        elif vol.iscsi is not None:
            iscsi = vol.iscsi
            disks.append(("iscsi", iscsi.iqn, iscsi.read_only))
        elif vol.rbd is not None:
            rbd = vol.rbd
            ident = f"{','.join(sorted(rbd.monitors))}/{rbd.pool}/{rbd.image}"
            disks.append(("rbd", ident, rbd.read_only))
    return tuple(dict.fromkeys(claims)), tuple(disks), errors


def ephemeral_claims(pod: k8s.Pod | None) -> frozenset[str]:
    """The claims of the pod's generic ephemeral volumes (``<pod>-<volume>``): kube-scheduler
    checks them apart from those its ``persistentVolumeClaim`` volumes name."""
    if pod is None:
        return frozenset()
    name = pod.metadata.name
    return frozenset(f"{name}-{v.name}" for v in pod.spec.volumes if v.ephemeral is not None)


StorageObject = (
    ClaimInfo | VolumeInfo | ClassInfo | CSINodeInfo | CSIDriverInfo | CapacityInfo | AttachmentInfo
)
STORAGE_KINDS = (
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "CSINode",
    "CSIDriver",
    "CSIStorageCapacity",
    "VolumeAttachment",
)


# kind -> (API type, model builder)
_DECODERS: dict[str, tuple[type[Any], Callable[[Any], StorageObject]]] = {
    "PersistentVolumeClaim": (k8s.PersistentVolumeClaim, claim_from_k8s),
    "PersistentVolume": (k8s.PersistentVolume, volume_from_k8s),
    "StorageClass": (k8s.StorageClass, class_from_k8s),
    "CSINode": (k8s.CSINode, csinode_from_k8s),
    "CSIDriver": (k8s.CSIDriver, csidriver_from_k8s),
    "CSIStorageCapacity": (k8s.CSIStorageCapacity, capacity_from_k8s),
    "VolumeAttachment": (k8s.VolumeAttachment, attachment_from_k8s),
}


def decode_storage(doc: dict[str, object]) -> StorageObject:
    """Decode one storage object given as a parsed JSON/YAML mapping, by its ``kind``."""
    kind = doc.get("kind")
    decoder = _DECODERS.get(str(kind))
    if decoder is not None:
        api_type, build = decoder
        return build(k8s.decode(doc, api_type))
    raise InvalidObjectError(str(kind), "kind", f"not one of {', '.join(STORAGE_KINDS)}")
