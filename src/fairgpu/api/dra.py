"""Lean decoders for Dynamic Resource Allocation objects (``resource.k8s.io/v1``).

DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates as the API returns
them, decoded once with msgspec (see :mod:`fairgpu.api.objects` for the approach); fields the
allocator never reads (device configuration, taints, binding conditions) are skipped.
"""

from __future__ import annotations

from typing import Any

import msgspec

from fairgpu.api.objects import NodeSelector, ObjectMeta, Quantity


class _Base(msgspec.Struct, rename="camel", omit_defaults=True):
    pass


class CELDeviceSelector(_Base):
    expression: str = ""


class DeviceSelector(_Base):
    cel: CELDeviceSelector | None = None


class DeviceClassSpec(_Base):
    selectors: list[DeviceSelector] = []


class DeviceClass(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeviceClassSpec = msgspec.field(default_factory=DeviceClassSpec)
    kind: str = "DeviceClass"


class DeviceAttribute(_Base):
    """Exactly one of the value fields is set (API validation)."""

    # The API's field names shadow Python's types inside the class body: renamed here.
    int_value: int | None = msgspec.field(default=None, name="int")
    bool_value: bool | None = msgspec.field(default=None, name="bool")
    string_value: str | None = msgspec.field(default=None, name="string")
    version_value: str | None = msgspec.field(default=None, name="version")


class DeviceCapacity(_Base):
    value: Quantity = 0


class Counter(_Base):
    value: Quantity = 0


class CounterSet(_Base):
    name: str = ""
    counters: dict[str, Counter] = {}


class DeviceCounterConsumption(_Base):
    counter_set: str = ""
    counters: dict[str, Counter] = {}


class Device(_Base):
    name: str = ""
    attributes: dict[str, DeviceAttribute] = {}
    capacity: dict[str, DeviceCapacity] = {}
    consumes_counters: list[DeviceCounterConsumption] = []


class ResourcePool(_Base):
    name: str = ""
    generation: int = 0
    resource_slice_count: int = 1


class ResourceSliceSpec(_Base):
    driver: str = ""
    pool: ResourcePool = msgspec.field(default_factory=ResourcePool)
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    devices: list[Device] = []
    shared_counters: list[CounterSet] = []


class ResourceSlice(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceSliceSpec = msgspec.field(default_factory=ResourceSliceSpec)
    kind: str = "ResourceSlice"


class DeviceSubRequest(_Base):
    name: str = ""
    device_class_name: str = ""
    selectors: list[DeviceSelector] = []
    allocation_mode: str = "ExactCount"
    count: int = 1


class ExactDeviceRequest(_Base):
    device_class_name: str = ""
    selectors: list[DeviceSelector] = []
    allocation_mode: str = "ExactCount"
    count: int = 1
    admin_access: bool | None = None


class DeviceRequest(_Base):
    name: str = ""
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] = []


class DeviceConstraint(_Base):
    requests: list[str] = []
    match_attribute: str | None = None
    distinct_attribute: str | None = None


class DeviceClaim(_Base):
    requests: list[DeviceRequest] = []
    constraints: list[DeviceConstraint] = []


class ResourceClaimSpec(_Base):
    devices: DeviceClaim = msgspec.field(default_factory=DeviceClaim)


class DeviceRequestAllocationResult(_Base):
    request: str = ""
    driver: str = ""
    pool: str = ""
    device: str = ""
    admin_access: bool | None = None


class DeviceAllocationResult(_Base):
    results: list[DeviceRequestAllocationResult] = []


class AllocationResult(_Base):
    devices: DeviceAllocationResult = msgspec.field(default_factory=DeviceAllocationResult)
    node_selector: NodeSelector | None = None


class ResourceClaimConsumerReference(_Base):
    resource: str = "pods"
    name: str = ""
    uid: str = ""
    api_group: str = ""


class ResourceClaimStatus(_Base):
    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] = []


class ResourceClaim(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus = msgspec.field(default_factory=ResourceClaimStatus)
    kind: str = "ResourceClaim"


class ResourceClaimTemplateSpec(_Base):
    metadata: dict[str, Any] = {}
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(_Base):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimTemplateSpec = msgspec.field(default_factory=ResourceClaimTemplateSpec)
    kind: str = "ResourceClaimTemplate"


DRA_KINDS: dict[str, type] = {
    "DeviceClass": DeviceClass,
    "ResourceSlice": ResourceSlice,
    "ResourceClaim": ResourceClaim,
    "ResourceClaimTemplate": ResourceClaimTemplate,
}
