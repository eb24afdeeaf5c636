"""The scheduler's slim view of Dynamic Resource Allocation objects.

Decoded once from :mod:`fairgpu.api.dra` structs. Attribute names are kept fully qualified
(``gpu.nvidia.com/productName``: a name without a domain belongs to the slice's driver), device
capacities and counters are integers (quantities rounded as ``Quantity.Value()`` does), and
every CEL selector is compiled when its object is read, so a bad expression is reported once,
naming the object and field, not at every scheduling attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from fairgpu.api import dra as api
from fairgpu.api.errors import InvalidObjectError
from fairgpu.api.objects import PodResourceClaim, PodResourceClaimStatus, decode
from fairgpu.api.quantity import QuantityError, to_int
from fairgpu.model.dra_cel import Selector, compile_selector
from fairgpu.model.dra_pins import NodePin, pin_from_k8s
from fairgpu.model.dra_semver import semver_key
from fairgpu.model.selectors import NodeSelectorTerm, compile_node_term

MODE_EXACT = "ExactCount"
MODE_ALL = "All"
# resource.k8s.io/v1 limits kube-scheduler relies on.
RESERVED_FOR_MAX = 256
RESULTS_MAX = 32

AttrValue = int | bool | str


def _quantity(value: object, obj: str, where: str) -> int:
    try:
        return to_int(value)
    except QuantityError as error:
        raise InvalidObjectError(obj, where, str(error)) from None


def _attr_value(attr: api.DeviceAttribute) -> AttrValue | None:
    """The attribute's value as CEL sees it; a version as its sortable semver key (the API
    server admits only valid versions; an invalid one stays text, costing no device)."""
    for value in (attr.int_value, attr.bool_value, attr.string_value):
        if value is not None:
            return value
    if attr.version_value is not None:
        try:
            return semver_key(attr.version_value)
        except ValueError:
            return attr.version_value
    return None


def qualify(name: str, driver: str) -> str:
    """``name`` with the driver's domain when it has none (how CEL and constraints see it)."""
    return name if "/" in name else f"{driver}/{name}"


def _selectors(items: list[api.DeviceSelector], obj: str, where: str) -> tuple[Selector, ...]:
    out = []
    for i, sel in enumerate(items):
        at = f"{where}[{i}].cel.expression"
        if sel.cel is None or not sel.cel.expression:
            raise InvalidObjectError(obj, at, "a CEL expression is required")
        try:
            program = compile_selector(sel.cel.expression)
        except ValueError as error:
            raise InvalidObjectError(obj, at, f"invalid CEL: {error}") from None
        out.append(Selector(sel.cel.expression, f"{obj}: {at}", program))
    return tuple(out)


# ---- devices and slices -------------------------------------------------------------------
@dataclass(eq=False, slots=True)
class DeviceInfo:
    """One device of a ResourceSlice. Identity (not value) equality: caches key on it."""

    driver: str
    pool: str
    name: str
    attributes: dict[str, AttrValue] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    # counter set name -> counter name -> amount consumed while allocated.
    consumes: dict[str, dict[str, int]] = field(default_factory=dict)
    _cel: dict[str, Any] | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """(driver, pool, device): the identity an allocation result records."""
        return (self.driver, self.pool, self.name)

    def cel_input(self) -> dict[str, Any]:
        """The ``device`` variable of a CEL selector: driver, attributes and capacity by
        domain (built once per device)."""
        if self._cel is None:
            attrs: dict[str, dict[str, Any]] = {}
            for qname, value in self.attributes.items():
                domain, _, ident = qname.rpartition("/")
                attrs.setdefault(domain, {})[ident] = value
            caps: dict[str, dict[str, Any]] = {}
            # The driver's own domain always exists (empty maps for a device without any).
            attrs.setdefault(self.driver, {})
            caps.setdefault(self.driver, {})
            for qname, amount in self.capacity.items():
                domain, _, ident = qname.rpartition("/")
                caps.setdefault(domain, {})[ident] = amount
            self._cel = {"driver": self.driver, "attributes": attrs, "capacity": caps}
        return self._cel


@dataclass(slots=True)
class SliceInfo:
    """A ResourceSlice: its pool, where its devices are reachable, devices and counters."""

    name: str
    driver: str
    pool: str
    generation: int = 0
    slice_count: int = 1
    node_name: str = ""
    all_nodes: bool = False
    node_terms: tuple[NodeSelectorTerm, ...] | None = None
    # The nodeSelector's single term as JSON (what an allocation from this slice copies).
    selector_doc: dict[str, Any] | None = None
    devices: tuple[DeviceInfo, ...] = ()
    counters: dict[str, dict[str, int]] = field(default_factory=dict)

    def reaches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """Whether the slice's devices are usable from the node."""
        if self.node_name:
            return self.node_name == node_name
        if self.all_nodes:
            return True
        if self.node_terms is not None:
            return any(t.matches(node_name, labels) for t in self.node_terms)
        return False


def _device(d: api.Device, driver: str, pool: str, obj: str, where: str) -> DeviceInfo:
    if not d.name:
        raise InvalidObjectError(obj, f"{where}.name", "is required")
    attrs: dict[str, AttrValue] = {}
    for name, attr in d.attributes.items():
        value = _attr_value(attr)
        if value is None:
            raise InvalidObjectError(obj, f"{where}.attributes[{name}]", "no value set")
        attrs[qualify(name, driver)] = value
    caps = {
        qualify(name, driver): _quantity(c.value, obj, f"{where}.capacity[{name}].value")
        for name, c in d.capacity.items()
    }
    consumes: dict[str, dict[str, int]] = {}
    for i, cc in enumerate(d.consumes_counters):
        at = f"{where}.consumesCounters[{i}]"
        if not cc.counter_set:
            raise InvalidObjectError(obj, f"{at}.counterSet", "is required")
        counters = consumes.setdefault(cc.counter_set, {})
        for cname, c in cc.counters.items():
            counters[cname] = _quantity(c.value, obj, f"{at}.counters[{cname}].value")
    return DeviceInfo(driver, pool, d.name, attrs, caps, consumes)


def slice_from_k8s(s: api.ResourceSlice) -> SliceInfo:
    """Decode a ResourceSlice; raises :class:`InvalidObjectError` naming the field."""
    obj = f"ResourceSlice {s.metadata.name or '<unnamed>'}"
    spec = s.spec
    if not spec.driver:
        raise InvalidObjectError(obj, "spec.driver", "is required")
    if not spec.pool.name:
        raise InvalidObjectError(obj, "spec.pool.name", "is required")
    where = [bool(spec.node_name), bool(spec.all_nodes), spec.node_selector is not None]
    if sum(where) != 1 and spec.devices:
        raise InvalidObjectError(
            obj, "spec", "exactly one of nodeName, nodeSelector and allNodes must be set"
        )
    terms = None
    doc = None
    if spec.node_selector is not None:
        terms = tuple(
            compile_node_term(t, f"spec.nodeSelector.nodeSelectorTerms[{i}]")
            for i, t in enumerate(spec.node_selector.node_selector_terms)
        )
        if len(terms) != 1:
            raise InvalidObjectError(
                obj, "spec.nodeSelector.nodeSelectorTerms", "must have exactly one term"
            )
        doc = msgspec.to_builtins(spec.node_selector.node_selector_terms[0])
    devices = tuple(
        _device(d, spec.driver, spec.pool.name, obj, f"spec.devices[{i}]")
        for i, d in enumerate(spec.devices)
    )
    counters = {
        cs.name: {
            n: _quantity(c.value, obj, f"spec.sharedCounters[{i}].counters[{n}].value")
            for n, c in cs.counters.items()
        }
        for i, cs in enumerate(spec.shared_counters)
    }
    return SliceInfo(
        name=s.metadata.name,
        driver=spec.driver,
        pool=spec.pool.name,
        generation=spec.pool.generation,
        slice_count=max(1, spec.pool.resource_slice_count),
        node_name=spec.node_name or "",
        all_nodes=bool(spec.all_nodes),
        node_terms=terms,
        selector_doc=doc,
        devices=devices,
        counters=counters,
    )


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    """A DeviceClass: the selectors every request naming it adds."""

    name: str
    selectors: tuple[Selector, ...] = ()


def class_from_k8s(c: api.DeviceClass) -> DeviceClassInfo:
    """Decode a DeviceClass, compiling its selectors."""
    obj = f"DeviceClass {c.metadata.name or '<unnamed>'}"
    return DeviceClassInfo(c.metadata.name, _selectors(c.spec.selectors, obj, "spec.selectors"))


# ---- claims -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RequestInfo:
    """A device request (or one ``firstAvailable`` alternative: ``parent`` names its request).

    ``alternatives`` is non-empty for a prioritized list; the request itself then allocates
    nothing and exactly one alternative is used, the first that fits.
    """

    name: str
    class_name: str = ""
    selectors: tuple[Selector, ...] = ()
    mode: str = MODE_EXACT
    count: int = 1
    admin: bool = False
    parent: str = ""
    alternatives: tuple[RequestInfo, ...] = ()

    @property
    def result_name(self) -> str:
        """The name an allocation result records (``request/subrequest`` for alternatives)."""
        return f"{self.parent}/{self.name}" if self.parent else self.name


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One allocated device, exactly as ``status.allocation.devices.results[]`` records it."""

    request: str
    driver: str
    pool: str
    device: str
    admin: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        """(driver, pool, device)."""
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """What a claim (or a template's claim) asks for."""

    requests: tuple[RequestInfo, ...] = ()
    # (request names it applies to, empty: all; fully qualified attribute name)
    constraints: tuple[tuple[tuple[str, ...], str], ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """A ResourceClaim: spec, and its allocation (devices and the node it is bound to)."""

    namespace: str
    name: str
    uid: str = ""
    spec: ClaimSpec = ClaimSpec()
    allocation: tuple[DeviceResult, ...] | None = None
    # The node the allocation's nodeSelector names ('' when it admits every node), or the
    # selector itself when it is more than a node name.
    node: str = ""
    pin: NodePin | None = None
    reserved_for: tuple[str, ...] = ()  # pod UIDs
    deleting: bool = False
    # UID of the claim's controller (its ownerReference with ``controller: true``): for a
    # claim generated from a template, the pod it was made for.
    owner_pod: str = ""

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ClaimTemplateInfo:
    """A ResourceClaimTemplate: the spec of the claims made from it."""

    namespace: str
    name: str
    spec: ClaimSpec = ClaimSpec()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


def _request(r: api.DeviceRequest, obj: str, where: str) -> RequestInfo:
    if not r.name:
        raise InvalidObjectError(obj, f"{where}.name", "is required")
    if (r.exactly is None) == (not r.first_available):
        raise InvalidObjectError(obj, where, "exactly one of exactly and firstAvailable is set")
    if r.exactly is not None:
        e = r.exactly
        return _one(
            r.name,
            "",
            e.device_class_name,
            e.selectors,
            e.allocation_mode,
            e.count,
            bool(e.admin_access),
            obj,
            f"{where}.exactly",
        )
    subs = tuple(
        _one(
            s.name,
            r.name,
            s.device_class_name,
            s.selectors,
            s.allocation_mode,
            s.count,
            False,
            obj,
            f"{where}.firstAvailable[{i}]",
        )
        for i, s in enumerate(r.first_available)
    )
    return RequestInfo(r.name, alternatives=subs)


def _one(
    name: str,
    parent: str,
    class_name: str,
    selectors: list[api.DeviceSelector],
    mode: str,
    count: int,
    admin: bool,
    obj: str,
    where: str,
) -> RequestInfo:
    if not name:
        raise InvalidObjectError(obj, f"{where}.name", "is required")
    if not class_name:
        raise InvalidObjectError(obj, f"{where}.deviceClassName", "is required")
    if mode not in (MODE_EXACT, MODE_ALL):
        raise InvalidObjectError(obj, f"{where}.allocationMode", f"unknown {mode!r}")
    if mode == MODE_EXACT and not 1 <= count <= RESULTS_MAX:
        raise InvalidObjectError(obj, f"{where}.count", f"must be in 1..{RESULTS_MAX}")
    sels = _selectors(selectors, obj, f"{where}.selectors")
    return RequestInfo(
        name, class_name, sels, mode, count if mode == MODE_EXACT else 0, admin, parent
    )


def spec_from_k8s(spec: api.ResourceClaimSpec, obj: str, where: str = "spec") -> ClaimSpec:
    """Decode a claim spec (of a claim or a template)."""
    reqs = tuple(
        _request(r, obj, f"{where}.devices.requests[{i}]")
        for i, r in enumerate(spec.devices.requests)
    )
    names = {r.name for r in reqs} | {f"{r.name}/{a.name}" for r in reqs for a in r.alternatives}
    constraints = []
    for i, c in enumerate(spec.devices.constraints):
        at = f"{where}.devices.constraints[{i}]"
        if c.distinct_attribute is not None:
            raise InvalidObjectError(obj, f"{at}.distinctAttribute", "not supported (alpha)")
        if not c.match_attribute or "/" not in c.match_attribute:
            raise InvalidObjectError(obj, f"{at}.matchAttribute", "a qualified name is required")
        unknown = [n for n in c.requests if n not in names]
        if unknown:
            raise InvalidObjectError(obj, f"{at}.requests", f"unknown request {unknown[0]!r}")
        constraints.append((tuple(c.requests), c.match_attribute))
    return ClaimSpec(reqs, tuple(constraints))


def claim_from_k8s(c: api.ResourceClaim) -> ClaimInfo:
    """Decode a ResourceClaim, with its allocation and reservations."""
    meta = c.metadata
    ns = meta.namespace or "default"
    obj = f"ResourceClaim {ns}/{meta.name or '<unnamed>'}"
    if not meta.name:
        raise InvalidObjectError(obj, "metadata.name", "is required")
    allocation = None
    node = ""
    pin = None
    alloc = c.status.allocation
    if alloc is not None:
        allocation = tuple(
            DeviceResult(r.request, r.driver, r.pool, r.device, bool(r.admin_access))
            for r in alloc.devices.results
        )
        node = _selector_node(alloc.node_selector)
        if not node and alloc.node_selector is not None:
            pin = pin_from_k8s(alloc.node_selector, obj)
    # metav1.GetControllerOf: the first controller reference, of any kind (IsForPod compares
    # only its UID with the pod's).
    owner = next((o.uid for o in meta.owner_references if o.controller), "")
    return ClaimInfo(
        namespace=ns,
        name=meta.name,
        uid=meta.uid,
        spec=spec_from_k8s(c.spec, obj),
        allocation=allocation,
        node=node,
        pin=pin,
        reserved_for=tuple(r.uid for r in c.status.reserved_for if r.resource == "pods"),
        deleting=meta.deletion_timestamp is not None,
        owner_pod=owner,
    )


def _selector_node(selector: Any) -> str:
    """The node name kube-scheduler's allocation nodeSelector pins (matchFields
    ``metadata.name In [node]``), '' for none."""
    if selector is None:
        return ""
    for term in selector.node_selector_terms:
        for req in term.match_fields:
            if req.key == "metadata.name" and req.operator == "In" and len(req.values) == 1:
                return str(req.values[0])
    return ""


def template_from_k8s(t: api.ResourceClaimTemplate) -> ClaimTemplateInfo:
    """Decode a ResourceClaimTemplate."""
    ns = t.metadata.namespace or "default"
    obj = f"ResourceClaimTemplate {ns}/{t.metadata.name or '<unnamed>'}"
    if not t.metadata.name:
        raise InvalidObjectError(obj, "metadata.name", "is required")
    return ClaimTemplateInfo(ns, t.metadata.name, spec_from_k8s(t.spec.spec, obj, "spec.spec"))


DraObject = SliceInfo | DeviceClassInfo | ClaimInfo | ClaimTemplateInfo
_DECODERS: dict[str, Any] = {
    "DeviceClass": class_from_k8s,
    "ResourceSlice": slice_from_k8s,
    "ResourceClaim": claim_from_k8s,
    "ResourceClaimTemplate": template_from_k8s,
}


def decode_dra(raw: Mapping[str, Any]) -> DraObject:
    """Decode a DRA object given as parsed JSON/YAML (its ``kind`` picks the type)."""
    kind = str(raw.get("kind", ""))
    if kind not in api.DRA_KINDS:
        raise InvalidObjectError(kind or "<object>", "kind", "not a resource.k8s.io kind")
    struct: Any = decode(dict(raw), api.DRA_KINDS[kind])  # names the object and field
    result: DraObject = _DECODERS[kind](struct)
    return result


# ---- a pod's claims ------------------------------------------------------------------------
#: One ``spec.resourceClaims`` entry: (name, resourceClaimName, resourceClaimTemplateName),
#: exactly one of the last two non-empty.
ClaimRef = tuple[str, str, str]


def claim_not_found(name: str) -> str:
    """kube-scheduler's reason for a claim its lister does not have."""
    return f'resourceclaim.resource.k8s.io "{name}" not found'


def from_template(ref: ClaimRef) -> str:
    """What a reason about a template entry's claim adds: the pod's entry and template (a
    generated claim's name alone does not say which entry of the pod waits); '' for an entry
    naming its claim."""
    entry, _claim, template = ref
    return f' (pod claim "{entry}" from template "{template}")' if template else ""


def being_deleted(claim: ClaimInfo, ref: ClaimRef) -> str:
    """kube-scheduler's reason for a claim with a deletionTimestamp."""
    return f'resourceclaim "{claim.name}" is being deleted' + from_template(ref)


def pod_claim_refs(claims: list[PodResourceClaim], obj: str) -> tuple[ClaimRef, ...]:
    """A pod's ``spec.resourceClaims`` as (name, claim name, template name) triples."""
    out = []
    for i, c in enumerate(claims):
        at = f"spec.resourceClaims[{i}]"
        if not c.name:
            raise InvalidObjectError(obj, f"{at}.name", "is required")
        if bool(c.resource_claim_name) == bool(c.resource_claim_template_name):
            raise InvalidObjectError(
                obj, at, "exactly one of resourceClaimName and resourceClaimTemplateName"
            )
        out.append((c.name, c.resource_claim_name or "", c.resource_claim_template_name or ""))
    return tuple(out)


def pod_claim_statuses(
    statuses: list[PodResourceClaimStatus],
) -> tuple[tuple[str, str | None], ...]:
    """A pod's ``status.resourceClaimStatuses`` as (entry name, claim name or None) pairs:
    which claim the resourceclaim controller made for each template entry (None: none was
    needed). The API server validates the entries; they are kept as written."""
    return tuple((s.name, s.resource_claim_name) for s in statuses)
