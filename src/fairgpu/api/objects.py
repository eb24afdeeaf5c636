"""Lean decoders for the parts of Kubernetes objects a scheduler reads.

Objects enter as the JSON (or YAML) the API returns and are decoded once with msgspec into these
structs; everything the scheduler never reads is skipped at decode time. This is an order of
magnitude faster than the official client's typed models on a watch of thousands of pods.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from fairgpu.api.errors import InvalidObjectError

T = TypeVar("T")
Quantity = str | int | float
ResourceList = dict[str, Quantity]


class _Base(msgspec.Struct, rename="camel", omit_defaults=True):
    pass


class OwnerReference(_Base):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class ObjectMeta(_Base):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generate_name: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    owner_references: list[OwnerReference] = []


class LabelSelectorRequirement(_Base):
    key: str
    operator: str
    values: list[str] = []


class LabelSelector(_Base):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []


class NodeSelectorRequirement(_Base):
    key: str
    operator: str
    values: list[str] = []


class NodeSelectorTerm(_Base):
    match_expressions: list[NodeSelectorRequirement] = []
    match_fields: list[NodeSelectorRequirement] = []


class NodeSelector(_Base):
    node_selector_terms: list[NodeSelectorTerm] = []


class PreferredSchedulingTerm(_Base):
    weight: int
    preference: NodeSelectorTerm


class NodeAffinity(_Base):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = []


class PodAffinityTerm(_Base):
    topology_key: str
    label_selector: LabelSelector | None = None
    namespaces: list[str] = []
    namespace_selector: LabelSelector | None = None
    match_label_keys: list[str] = []
    mismatch_label_keys: list[str] = []


class WeightedPodAffinityTerm(_Base):
    weight: int
    pod_affinity_term: PodAffinityTerm


class PodAffinity(_Base):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = []
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = []


class Affinity(_Base):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class Toleration(_Base):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class ResourceRequirements(_Base):
    requests: ResourceList = {}
    limits: ResourceList = {}


class ContainerPort(_Base):
    container_port: int = 0
    host_port: int = 0
    protocol: str = ""
    host_ip: str = msgspec.field(default="", name="hostIP")


class Container(_Base):
    name: str = ""
    image: str = ""
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    restart_policy: str | None = None
    ports: list[ContainerPort] = []


class PodSchedulingGate(_Base):
    name: str = ""


class TopologySpreadConstraint(_Base):
    topology_key: str = ""
    max_skew: int = 0
    when_unsatisfiable: str = ""
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str | None = None
    node_taints_policy: str | None = None
    match_label_keys: list[str] = []


class PersistentVolumeClaimVolumeSource(_Base):
    claim_name: str = ""
    read_only: bool = False


class GCEPersistentDiskVolumeSource(_Base):
    pd_name: str = ""
    read_only: bool = False


class VolumeIDSource(_Base):
    """An in-tree volume source named by its ``volumeID``: AWS EBS, Cinder, Portworx (the
    fields the scheduler reads are the same)."""

    volume_id: str = msgspec.field(default="", name="volumeID")
    read_only: bool = False


class AzureDiskVolumeSource(_Base):
    """In-tree Azure disk. The API defaults ``kind`` to ``Shared``; only ``Managed`` disks
    translate to the CSI driver."""

    disk_name: str = ""
    disk_uri: str = msgspec.field(default="", name="diskURI")
    kind: str = "Shared"
    read_only: bool = False


class ISCSIVolumeSource(_Base):
    iqn: str = ""
    lun: int = 0
    target_portal: str = ""
    read_only: bool = False


class RBDVolumeSource(_Base):
    monitors: list[str] = []
    pool: str = "rbd"
    image: str = ""
    read_only: bool = False


class CSIPersistentVolumeSource(_Base):
    driver: str = ""
    volume_handle: str = ""
    read_only: bool = False


class Volume(_Base):
    """A pod volume; only the sources the scheduler's volume plugins read are decoded."""

    name: str = ""
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    ephemeral: dict[str, Any] | None = None
    gce_persistent_disk: GCEPersistentDiskVolumeSource | None = None
    aws_elastic_block_store: VolumeIDSource | None = None
    azure_disk: AzureDiskVolumeSource | None = None
    cinder: VolumeIDSource | None = None
    portworx_volume: VolumeIDSource | None = None
    iscsi: ISCSIVolumeSource | None = None
    rbd: RBDVolumeSource | None = None


class PodResourceClaim(_Base):
    """One entry of a pod's ``spec.resourceClaims`` (DRA): exactly one source is set."""

    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodSpec(_Base):
    containers: list[Container] = []
    init_containers: list[Container] = []
    node_name: str = ""
    host_network: bool = False
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    tolerations: list[Toleration] = []
    scheduler_name: str = "default-scheduler"
    priority: int | None = None
    priority_class_name: str = ""
    preemption_policy: str | None = None
    overhead: ResourceList = {}
    # Pod-level requests and limits (cpu, memory, hugepages-*): when set they stand for the
    # containers' (PodLevelResources, on by default since Kubernetes 1.34).
    resources: ResourceRequirements | None = None
    volumes: list[Volume] = []
    scheduling_gates: list[PodSchedulingGate] = []
    topology_spread_constraints: list[TopologySpreadConstraint] = []
    resource_claims: list[PodResourceClaim] = []
    # Seconds the kubelet lets the pod run (from its start) before it fails it.
    active_deadline_seconds: int | None = None


class PodCondition(_Base):
    type: str
    status: str
    reason: str = ""
    message: str = ""


class PodResourceClaimStatus(_Base):
    """One entry of ``status.resourceClaimStatuses``: the ResourceClaim the resourceclaim
    controller made for the pod's ``spec.resourceClaims`` entry ``name`` (None: no claim
    was needed for it)."""

    name: str = ""
    resource_claim_name: str | None = None


class ContainerStatus(_Base):
    """What the kubelet reports of one container's resources: those it configured
    (``resources``) and those it admitted (``allocatedResources``). They differ from the spec
    while an in-place resize is pending or in progress."""

    name: str = ""
    resources: ResourceRequirements | None = None
    allocated_resources: ResourceList = {}


class PodStatus(_Base):
    phase: str = ""
    nominated_node_name: str = ""
    conditions: list[PodCondition] = []
    start_time: str | None = None
    resource_claim_statuses: list[PodResourceClaimStatus] = []
    container_statuses: list[ContainerStatus] = []
    init_container_statuses: list[ContainerStatus] = []


class Pod(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)
    kind: str = "Pod"
    api_version: str = "v1"


class Taint(_Base):
    key: str
    effect: str
    value: str = ""


class NodeSpec(_Base):
    unschedulable: bool = False
    taints: list[Taint] = []


class NodeStatus(_Base):
    capacity: ResourceList = {}
    allocatable: ResourceList = {}
    # The container images on the node (``names``, ``sizeBytes``); read only to score image
    # locality, so decoded loosely: a malformed entry costs the score, never the node.
    images: list[Any] = []


class Node(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)
    kind: str = "Node"
    api_version: str = "v1"


class Namespace(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    kind: str = "Namespace"
    api_version: str = "v1"


class ServiceSpec(_Base):
    selector: dict[str, str] | None = None


class Service(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ServiceSpec = msgspec.field(default_factory=ServiceSpec)
    kind: str = "Service"
    api_version: str = "v1"


class PriorityClass(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    value: int = 0
    global_default: bool = False
    preemption_policy: str | None = None
    kind: str = "PriorityClass"


class PodTemplate(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


class DeploymentSpec(_Base):
    template: PodTemplate = msgspec.field(default_factory=PodTemplate)
    replicas: int = 1


class Deployment(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeploymentSpec = msgspec.field(default_factory=DeploymentSpec)
    kind: str = "Deployment"


class ObjectReference(_Base):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""
    api_version: str = ""
    resource_version: str = ""


class VolumeNodeAffinity(_Base):
    required: NodeSelector | None = None


class PersistentVolumeSpec(_Base):
    capacity: ResourceList = {}
    access_modes: list[str] = []
    claim_ref: ObjectReference | None = None
    storage_class_name: str = ""
    node_affinity: VolumeNodeAffinity | None = None
    volume_mode: str = "Filesystem"
    csi: CSIPersistentVolumeSource | None = None
    gce_persistent_disk: GCEPersistentDiskVolumeSource | None = None
    aws_elastic_block_store: VolumeIDSource | None = None
    azure_disk: AzureDiskVolumeSource | None = None
    cinder: VolumeIDSource | None = None
    portworx_volume: VolumeIDSource | None = None
    persistent_volume_reclaim_policy: str = ""


class PersistentVolumeStatus(_Base):
    phase: str = ""


class PersistentVolume(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PersistentVolumeSpec = msgspec.field(default_factory=PersistentVolumeSpec)
    status: PersistentVolumeStatus = msgspec.field(default_factory=PersistentVolumeStatus)
    kind: str = "PersistentVolume"


class VolumeResourceRequirements(_Base):
    requests: ResourceList = {}


class PersistentVolumeClaimSpec(_Base):
    access_modes: list[str] = []
    resources: VolumeResourceRequirements = msgspec.field(
        default_factory=VolumeResourceRequirements
    )
    storage_class_name: str | None = None
    volume_name: str = ""
    selector: LabelSelector | None = None
    volume_mode: str = "Filesystem"


class PersistentVolumeClaimStatus(_Base):
    phase: str = ""


class PersistentVolumeClaim(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PersistentVolumeClaimSpec = msgspec.field(default_factory=PersistentVolumeClaimSpec)
    status: PersistentVolumeClaimStatus = msgspec.field(default_factory=PersistentVolumeClaimStatus)
    kind: str = "PersistentVolumeClaim"


class TopologySelectorRequirement(_Base):
    key: str
    values: list[str] = []


class TopologySelectorTerm(_Base):
    match_label_expressions: list[TopologySelectorRequirement] = []


class StorageClass(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    provisioner: str = ""
    volume_binding_mode: str | None = None
    allowed_topologies: list[TopologySelectorTerm] = []
    kind: str = "StorageClass"


class VolumeNodeResources(_Base):
    count: int | None = None


class CSINodeDriver(_Base):
    name: str = ""
    node_id: str = msgspec.field(default="", name="nodeID")
    allocatable: VolumeNodeResources | None = None


class CSINodeSpec(_Base):
    drivers: list[CSINodeDriver] = []


class CSINode(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CSINodeSpec = msgspec.field(default_factory=CSINodeSpec)
    kind: str = "CSINode"


class CSIDriverSpec(_Base):
    storage_capacity: bool | None = None


class CSIDriver(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CSIDriverSpec = msgspec.field(default_factory=CSIDriverSpec)
    kind: str = "CSIDriver"


class VolumeAttachmentSource(_Base):
    persistent_volume_name: str | None = None


class VolumeAttachmentSpec(_Base):
    attacher: str = ""
    node_name: str = ""
    source: VolumeAttachmentSource = msgspec.field(default_factory=VolumeAttachmentSource)


class VolumeAttachment(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: VolumeAttachmentSpec = msgspec.field(default_factory=VolumeAttachmentSpec)
    kind: str = "VolumeAttachment"


class CSIStorageCapacity(_Base):
    """storage.k8s.io/v1 CSIStorageCapacity: its fields sit at the top level (no spec)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    storage_class_name: str = ""
    node_topology: LabelSelector | None = None
    capacity: Quantity | None = None
    maximum_volume_size: Quantity | None = None
    kind: str = "CSIStorageCapacity"


def _describe(raw: Any, kind: str) -> str:
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    namespace = meta.get("namespace")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _field(error: msgspec.ValidationError) -> tuple[str, str]:
    # msgspec reports "Expected `int`, got `str` - at `$.spec.priority`".
    text = str(error)
    if " - at `" in text:
        problem, _, path = text.partition(" - at `")
        return path.rstrip("`").removeprefix("$.") or "<root>", problem
    return "<root>", text


def decode(raw: Any, kind: type[T]) -> T:
    """Decode a parsed JSON/YAML mapping into ``kind`` (e.g. :class:`Pod`).

    Raises :class:`InvalidObjectError` naming the object and the field on a type mismatch.
    """
    if not isinstance(raw, dict):
        raise InvalidObjectError(kind.__name__, "<root>", f"expected a mapping, got {raw!r:.60}")
    try:
        return msgspec.convert(raw, type=kind, strict=False)
    except msgspec.ValidationError as error:
        field, problem = _field(error)
        raise InvalidObjectError(_describe(raw, kind.__name__), field, problem) from None


_JSON_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {}


def decode_json(data: bytes, kind: type[T]) -> T:
    """Decode raw JSON bytes (an API response or watch event object) straight into ``kind``."""
    decoder = _JSON_DECODERS.get(kind)
    if decoder is None:
        decoder = _JSON_DECODERS[kind] = msgspec.json.Decoder(kind)
    try:
        decoded: T = decoder.decode(data)
        return decoded
    except msgspec.ValidationError as error:
        field, problem = _field(error)
        raise InvalidObjectError(kind.__name__, field, problem) from None
    except msgspec.DecodeError as error:
        raise InvalidObjectError(kind.__name__, "<root>", f"not valid JSON: {error}") from None
