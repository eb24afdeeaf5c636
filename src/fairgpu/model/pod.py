"""PodInfo: what the scheduler knows about one pod, decoded once from a v1 Pod."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fairgpu.api import objects as k8s
from fairgpu.api.errors import InvalidObjectError, RefusedObjectError
from fairgpu.api.quantity import QuantityError
from fairgpu.model.dra import ClaimRef, pod_claim_refs, pod_claim_statuses
from fairgpu.model.gang_topology import GangTopology, gang_topology
from fairgpu.model.gpu import DEFAULT_NAMES, NO_GPU, GpuRequest, GpuResourceNames, gpu_request_from
from fairgpu.model.pod_constraints import (
    HostPort,
    SpreadConstraint,
    compile_spread,
    gate_names,
    host_ports,
    merge_label_keys,
)

# Re-exported: the resource names and units every layer counts in.
from fairgpu.model.pod_requests import CPU as CPU
from fairgpu.model.pod_requests import DEFAULT_MEMORY as DEFAULT_MEMORY
from fairgpu.model.pod_requests import DEFAULT_MILLI_CPU as DEFAULT_MILLI_CPU
from fairgpu.model.pod_requests import MEMORY as MEMORY
from fairgpu.model.pod_requests import ParsedRequests
from fairgpu.model.pod_requests import parse_resource as parse_resource
from fairgpu.model.priority import PREEMPT_LOWER, PriorityClasses
from fairgpu.model.selectors import (
    NodeSelectorTerm,
    PodAffinityTerm,
    Requirement,
    Toleration,
    compile_label_selector,
    compile_node_term,
)
from fairgpu.model.volumes import pod_volume_refs

DOMAIN = "fairgpu.io"
ANN_ARRIVAL = f"{DOMAIN}/arrival-seconds"
ANN_DURATION = f"{DOMAIN}/duration-seconds"
# Simulation and fake-kubelet only: how long a pod really runs when that differs from the run
# time it declares (the scheduler never reads it).
ANN_ACTUAL_RUN = f"{DOMAIN}/actual-run-seconds"
ANN_GPU_MODELS = f"{DOMAIN}/gpu-models"
ANN_GPU_DEVICES = f"{DOMAIN}/gpu-devices"
LABEL_QUEUE = f"{DOMAIN}/queue"
LABEL_USER = f"{DOMAIN}/user"
LABEL_WORKLOAD = f"{DOMAIN}/workload-type"

QOS_BEST_EFFORT = "BestEffort"
QOS_BURSTABLE = "Burstable"
QOS_GUARANTEED = "Guaranteed"

PODS = "pods"
EPHEMERAL = "ephemeral-storage"


def qos_class(spec: k8s.PodSpec, pod_level: dict[str, int] | None = None) -> str:
    """The pod's QoS class (Guaranteed, Burstable or BestEffort), as the kubelet computes it.

    Only positive cpu and memory amounts count (extended resources such as GPUs never do); a
    missing request defaults to the limit, as the API server does. Guaranteed needs cpu and
    memory limits on every container and pod-level request sums equal to the limit sums.
    With ``spec.resources`` set, the pod-level requests (``pod_level``, as the API server
    defaulted them: :class:`~fairgpu.model.pod_requests.ParsedRequests`) and limits decide
    instead of the containers', as they do for the kubelet.
    """
    if spec.resources is not None:
        return _pod_level_qos(spec.resources, pod_level or {})
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for c in list(spec.containers) + list(spec.init_containers):
        res = c.resources
        merged = dict(res.limits)
        merged.update(res.requests)
        for into, source in ((requests, merged), (limits, res.limits)):
            for name in (CPU, MEMORY):
                amount = _qos_amount(name, source.get(name))
                if amount > 0:
                    into[name] = into.get(name, 0) + amount
        if not all(_qos_amount(name, res.limits.get(name)) > 0 for name in (CPU, MEMORY)):
            guaranteed = False
    return _qos(requests, limits, guaranteed)


def _pod_level_qos(res: k8s.ResourceRequirements, pod_level: dict[str, int]) -> str:
    requests = {n: pod_level[n] for n in (CPU, MEMORY) if pod_level.get(n, 0) > 0}
    limits = {n: a for n in (CPU, MEMORY) if (a := _qos_amount(n, res.limits.get(n))) > 0}
    return _qos(requests, limits, not res.limits or len(limits) == 2)


def _qos(requests: dict[str, int], limits: dict[str, int], guaranteed: bool) -> str:
    if not requests and not limits:
        return QOS_BEST_EFFORT
    if guaranteed and requests == limits:
        return QOS_GUARANTEED
    return QOS_BURSTABLE


def _qos_amount(name: str, value: object) -> int:
    # Compared in scheduler units (milli-CPU, bytes); quantities were validated already.
    if value is None:
        return 0
    try:
        return parse_resource(name, value)
    except QuantityError:
        return 0


def _timestamp(text: str | None) -> float:
    if not text:
        return 0.0
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


@dataclass(slots=True, eq=False)
class PodInfo:
    """The scheduler's slim, decoded view of one pod.

    ``requests`` holds the effective request in scheduler units (milli-CPU, bytes, counts),
    excluding GPU names, which are folded into ``gpu``. ``error`` is set (and the pod never
    placed) when the pod object is invalid; it names the field at fault.
    """

    name: str
    namespace: str = "default"
    uid: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    # (milli-CPU, memory bytes) kube-scheduler's resource scores count for this pod when it
    # is placed: each container that requests no CPU (memory) counts 100m (200 MiB). None:
    # derived from ``requests``.
    scoring_requests: tuple[int, int] | None = None
    # The same, as the pod adds to its node's load once placed (they differ only for a pod
    # with pod-level requests, see fairgpu.model.pod_requests). None: ``scoring_requests``.
    nonzero_requests: tuple[int, int] | None = None
    gpu: GpuRequest = NO_GPU
    node_name: str = ""
    node_selector: tuple[tuple[str, str], ...] = ()
    required_terms: tuple[NodeSelectorTerm, ...] | None = None
    preferred_terms: tuple[tuple[int, NodeSelectorTerm], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    affinity_terms: tuple[PodAffinityTerm, ...] = ()
    anti_affinity_terms: tuple[PodAffinityTerm, ...] = ()
    preferred_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    # PersistentVolumeClaim names (pod namespace) and in-tree disks (kind, identity,
    # read-only): what the volume plugins read; empty for most pods, which they then skip.
    claims: tuple[str, ...] = ()
    disks: tuple[tuple[str, str, bool], ...] = ()
    # Why the CSI translation refuses inline in-tree volumes (a malformed EBS ID, an Azure
    # disk not Managed): kube-scheduler's NodeVolumeLimits then fails the whole attempt.
    inline_errors: tuple[str, ...] = ()
    # spec.resourceClaims (DRA) as (name, resourceClaimName, resourceClaimTemplateName).
    resource_claims: tuple[ClaimRef, ...] = ()
    # status.resourceClaimStatuses as (entry name, claim name or None): the claim made for
    # each template entry, written by the resourceclaim controller (the simulator's
    # DraStore.create_pod_claims in a simulation). Status, not spec: it changes while the
    # pod is pending.
    claim_statuses: tuple[tuple[str, str | None], ...] = ()
    priority: int = 0
    priority_class: str = ""
    preemption_policy: str = "PreemptLowerPriority"
    qos: str = QOS_BEST_EFFORT
    scheduler_name: str = "default-scheduler"
    created: float = 0.0
    owner: str = ""
    source: k8s.Pod | None = None
    error: str | None = None
    # The error is one the API server refuses the pod for (it would never be created).
    refused: bool = False
    _static_key: tuple[Any, ...] | None = None
    # Non-empty: the pod waits for these spec.schedulingGates and is not scheduled.
    scheduling_gates: tuple[str, ...] = ()
    spread_constraints: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    owner_kind: str = ""
    # The rack, block or node its pod group's members must or should share (annotations,
    # :mod:`fairgpu.model.gang_topology`); None: none asked.
    gang_topology: GangTopology | None = None
    # spec.activeDeadlineSeconds: the kubelet fails the pod this long after it started, so
    # it runs at most this long (None: no deadline).
    active_deadline: float | None = None
    # Its containers' images (init containers first), each named as kube-scheduler's image
    # locality looks it up (normalized_image_name); one entry per container.
    images: tuple[str, ...] = ()
    # The declared run time, parsed once (engine.gang.declared_runtime); not an init field, so
    # a copy made with other annotations (dataclasses.replace) parses its own.
    _declared: tuple[float | None] | None = field(default=None, init=False, repr=False)

    @property
    def key(self) -> str:
        """``namespace/name``, the identity used in logs and results."""
        return f"{self.namespace}/{self.name}"

    @property
    def scoring_cpu_memory(self) -> tuple[int, int]:
        """(milli-CPU, memory bytes) as kube-scheduler's resource scores count them; for a
        pod built without its containers, a missing or zero request counts the default."""
        if self.scoring_requests is not None:
            return self.scoring_requests
        return (
            self.requests.get(CPU) or DEFAULT_MILLI_CPU,
            self.requests.get(MEMORY) or DEFAULT_MEMORY,
        )

    @property
    def node_cpu_memory(self) -> tuple[int, int]:
        """(milli-CPU, memory bytes) this pod adds to its node's load in kube-scheduler's
        resource scores."""
        if self.nonzero_requests is not None:
            return self.nonzero_requests
        return self.scoring_cpu_memory

    @property
    def has_pod_affinity(self) -> bool:
        """True if any inter-pod (anti-)affinity term is present."""
        return bool(
            self.affinity_terms
            or self.anti_affinity_terms
            or self.preferred_affinity
            or self.preferred_anti_affinity
        )

    def static_key(self) -> tuple[Any, ...]:
        """A hashable key of everything that decides node eligibility independent of load.

        Pods that share it share the cached static node mask (selectors, affinity, taints).
        The workload type is part of it too: pool precedence rules decide by it whom a pod
        may preempt (:mod:`fairgpu.engine.actions.pool_precedence`), and the memos of failed
        asks and searches are keyed by this key.
        """
        if self._static_key is None:
            self._static_key = (
                self.node_name,
                self.node_selector,
                self.required_terms,
                self.tolerations,
                self.gpu.models,
                self.claims,
                self.disks,
                self.resource_claims,
                self.labels.get(LABEL_WORKLOAD, ""),
            )
        return self._static_key


def normalized_image_name(name: str) -> str:
    """An image name as kube-scheduler's image locality looks it up on nodes: ``:latest``
    added when it names no tag (no ``:`` after the last ``/``); a digest or tag is kept."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


def _pod_terms(
    terms: list[k8s.PodAffinityTerm],
    namespace: str,
    where: str,
    weights: list[int] | None = None,
    labels: dict[str, str] | None = None,
) -> tuple[PodAffinityTerm, ...]:
    out = []
    for i, term in enumerate(terms):
        if not term.topology_key:
            raise ValueError(f"{where}[{i}].topologyKey: must be set")
        selector = compile_label_selector(term.label_selector, f"{where}[{i}].labelSelector")
        # matchLabelKeys / mismatchLabelKeys: key In / NotIn the incoming pod's own value.
        selector = merge_label_keys(
            selector, labels or {}, term.match_label_keys, term.mismatch_label_keys
        )
        ns_sel = term.namespace_selector
        all_ns = ns_sel is not None and not (ns_sel.match_labels or ns_sel.match_expressions)
        by_labels = None
        if ns_sel is not None and not all_ns:
            by_labels = compile_label_selector(ns_sel, f"{where}[{i}].namespaceSelector")
        # The pod's own namespace only when neither a list nor a selector names any.
        namespaces = frozenset(term.namespaces) or (
            frozenset() if all_ns or by_labels is not None else frozenset({namespace})
        )
        out.append(
            PodAffinityTerm(
                selector,
                term.topology_key,
                namespaces,
                all_ns,
                weights[i] if weights else 1,
                by_labels,
            )
        )
    return tuple(out)


def _refuse_zero_gpu_share(
    spec: k8s.PodSpec, parsed: ParsedRequests, names: GpuResourceNames, obj: str
) -> None:
    """A container that asks ``nvidia.com/gpu: 0`` together with a share (``gpucores``,
    ``gpumem``...) would be given a device share it never receives: the device plugin hands a
    container devices only for its ``nvidia.com/gpu`` units. Refuse it, naming the field."""
    shares = (names.cores_percent, names.memory_mib, names.memory_percent, names.milli)
    sections = (
        ("spec.containers", spec.containers, parsed.app),
        ("spec.initContainers", spec.init_containers, [r for r, _ in parsed.init]),
    )
    for where, containers, requests in sections:
        for i, (container, req) in enumerate(zip(containers, requests, strict=True)):
            if names.gpu not in req or req[names.gpu] != 0:
                continue
            asked = [s for s in shares if req.get(s, 0) > 0]
            if asked:
                section = "requests" if names.gpu in container.resources.requests else "limits"
                raise InvalidObjectError(
                    obj,
                    f"{where}[{i}].resources.{section}.{names.gpu}",
                    f"0 devices asked together with {asked[0]} {req[asked[0]]}: the container "
                    f"would get no GPU; ask {names.gpu}: 1 (or leave it out) to get the share",
                )


def pod_from_k8s(
    pod: k8s.Pod,
    names: GpuResourceNames = DEFAULT_NAMES,
    priority_classes: PriorityClasses | None = None,
) -> PodInfo:
    """Decode a v1 Pod into :class:`PodInfo`.

    ``priority_classes``: for a pod read from a file, the PriorityClasses its priority and
    preemption policy are admitted with (:mod:`~fairgpu.model.priority`); None for a pod the
    API server created, which carries its own. Raises :class:`InvalidObjectError` naming the
    object and field if anything is malformed.
    """
    meta, spec = pod.metadata, pod.spec
    obj = f"Pod {meta.namespace or 'default'}/{meta.name or meta.generate_name or '<unnamed>'}"
    if not meta.name:
        raise InvalidObjectError(obj, "metadata.name", "is required")
    if not spec.containers:
        raise InvalidObjectError(obj, "spec.containers", "at least one container is required")
    # A running pod's status holds its containers' resources while a resize is under way.
    parsed = ParsedRequests.of(spec, obj, pod.status if spec.node_name else None)
    requests = parsed.effective()
    scoring = parsed.scoring()
    # Without pod-level requests a node counts the pod as the fit score does.
    nonzero = parsed.node_nonzero() if parsed.pod_level else scoring
    gpu_names = names.all_request_names()
    models_text = meta.annotations.get(ANN_GPU_MODELS, "")
    models = frozenset(m for m in models_text.split("|") if m) or None
    try:
        gpu = gpu_request_from(requests, names, models)
    except ValueError as error:
        raise InvalidObjectError(obj, "spec.containers[].resources", str(error)) from None
    _refuse_zero_gpu_share(spec, parsed, names, obj)
    plain = {k: v for k, v in requests.items() if k not in gpu_names}
    plain[PODS] = 1
    try:
        required, preferred = _node_affinity(spec.affinity)
        ns = meta.namespace or "default"
        pa, ppa = _pod_affinity(spec.affinity, ns, meta.labels, anti=False)
        paa, ppaa = _pod_affinity(spec.affinity, ns, meta.labels, anti=True)
        spread = compile_spread(spec.topology_spread_constraints, meta.labels)
        ports = host_ports(spec)
        topology = gang_topology(meta.annotations)
    except ValueError as error:
        field_path, _, problem = str(error).partition(": ")
        raise InvalidObjectError(obj, field_path, problem) from None
    tolerations = _tolerations(spec, obj)
    deadline = spec.active_deadline_seconds
    if deadline is not None and deadline < 1:
        raise InvalidObjectError(obj, "spec.activeDeadlineSeconds", "must be at least 1")
    if priority_classes is None:  # admitted by the API server: its own values
        priority = spec.priority or 0
        preemption = spec.preemption_policy or PREEMPT_LOWER
    else:  # read from a file: as the API server's Priority admission would set them
        priority, preemption = priority_classes.admit(spec, obj)
    owner = next((o.uid or o.name for o in meta.owner_references if o.controller), "")
    claims, disks, inline_errors = pod_volume_refs(spec, meta.name)
    return PodInfo(
        name=meta.name,
        namespace=meta.namespace or "default",
        uid=meta.uid or f"{meta.namespace or 'default'}/{meta.name}",
        labels=dict(meta.labels),
        annotations=dict(meta.annotations),
        requests=plain,
        scoring_requests=scoring,
        nonzero_requests=nonzero if nonzero != scoring else None,
        gpu=gpu,
        node_name=spec.node_name,
        node_selector=tuple(sorted(spec.node_selector.items())),
        required_terms=required,
        preferred_terms=preferred,
        tolerations=tuple(tolerations),
        affinity_terms=pa,
        anti_affinity_terms=paa,
        preferred_affinity=ppa,
        preferred_anti_affinity=ppaa,
        claims=claims,
        disks=disks,
        inline_errors=inline_errors,
        resource_claims=pod_claim_refs(spec.resource_claims, obj),
        claim_statuses=pod_claim_statuses(pod.status.resource_claim_statuses),
        priority=priority,
        priority_class=spec.priority_class_name,
        preemption_policy=preemption,
        qos=qos_class(spec, parsed.pod_level),
        scheduler_name=spec.scheduler_name,
        created=_timestamp(meta.creation_timestamp),
        owner=owner,
        source=pod,
        scheduling_gates=gate_names(spec),
        spread_constraints=spread,
        host_ports=ports,
        owner_kind=next((o.kind for o in meta.owner_references if o.controller), ""),
        active_deadline=None if deadline is None else float(deadline),
        gang_topology=topology,
        images=tuple(
            normalized_image_name(c.image) for c in (*spec.init_containers, *spec.containers)
        ),
    )


def _node_affinity(
    affinity: k8s.Affinity | None,
) -> tuple[tuple[NodeSelectorTerm, ...] | None, tuple[tuple[int, NodeSelectorTerm], ...]]:
    """The compiled required and preferred node-affinity terms (``None``: no requirement).

    Raises ``ValueError("<field path>: <problem>")`` on a malformed term or weight.
    """
    if not affinity or not affinity.node_affinity:
        return None, ()
    na = affinity.node_affinity
    base = "spec.affinity.nodeAffinity"
    required: tuple[NodeSelectorTerm, ...] | None = None
    req = na.required_during_scheduling_ignored_during_execution
    if req is not None:
        required = tuple(
            compile_node_term(t, f"{base}.required.nodeSelectorTerms[{i}]")
            for i, t in enumerate(req.node_selector_terms)
        )
    pref = []
    for i, p in enumerate(na.preferred_during_scheduling_ignored_during_execution):
        if not 1 <= p.weight <= 100:
            raise ValueError(f"{base}.preferred[{i}].weight: must be in 1..100")
        pref.append((p.weight, compile_node_term(p.preference, f"{base}.preferred[{i}]")))
    return required, tuple(pref)


def _pod_affinity(
    affinity: k8s.Affinity | None, ns: str, labels: dict[str, str], *, anti: bool
) -> tuple[tuple[PodAffinityTerm, ...], tuple[PodAffinityTerm, ...]]:
    """The required and preferred pod affinity (``anti``: anti-affinity) terms; ``labels``
    are the pod's own, for ``matchLabelKeys`` / ``mismatchLabelKeys``.

    Raises ``ValueError("<field path>: <problem>")`` on a malformed term.
    """
    a = affinity and (affinity.pod_anti_affinity if anti else affinity.pod_affinity)
    if not a:
        return (), ()
    w = "spec.affinity.podAntiAffinity" if anti else "spec.affinity.podAffinity"
    required = _pod_terms(
        a.required_during_scheduling_ignored_during_execution, ns, w, labels=labels
    )
    prefs = a.preferred_during_scheduling_ignored_during_execution
    preferred = _pod_terms(
        [p.pod_affinity_term for p in prefs], ns, w, [p.weight for p in prefs], labels
    )
    return required, preferred


def _tolerations(spec: k8s.PodSpec, obj: str) -> list[Toleration]:
    """The pod's tolerations, validated as the API server does."""
    tolerations = []
    for i, t in enumerate(spec.tolerations):
        op = t.operator or "Equal"
        at = f"spec.tolerations[{i}]"
        if op not in ("Equal", "Exists"):
            raise InvalidObjectError(obj, f"{at}.operator", f"unknown {op!r}")
        # The API server's validation: an empty key means "every taint" and needs Exists.
        if not t.key and op != "Exists":
            raise InvalidObjectError(obj, f"{at}.operator", "must be Exists when key is empty")
        if op == "Exists" and t.value:
            raise InvalidObjectError(obj, f"{at}.value", "must be empty when operator is Exists")
        if t.effect and t.effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise InvalidObjectError(obj, f"{at}.effect", f"unknown {t.effect!r}")
        tolerations.append(Toleration(t.key, op, t.value, t.effect))
    return tolerations


def bound_pod_holding(pod: k8s.Pod, names: GpuResourceNames, error: Exception) -> PodInfo:
    """What a pod bound to a node holds there, when it failed to decode (``error``).

    Annotations change on running pods -- one can make a bound pod malformed for this
    scheduler (a topology label that is no label) -- and another scheduler may have placed a
    GPU ask this one cannot read (``nvidia.com/gpucores`` above 100, a share of a MIG slice).
    Such a pod still holds its requests on its node: counting it with none would book the
    node twice. So its requests are parsed as for any pod (the API server accepted them),
    and its GPUs as decoded or, when the ask itself is what failed, as whole devices -- the
    number asked, at least one: never fewer than it holds. Only what accounting needs is
    read (no affinity, no spread); the pod carries ``error``.
    """
    meta, spec = pod.metadata, pod.spec
    ns = meta.namespace or "default"
    obj = f"Pod {ns}/{meta.name}"
    try:
        parsed = ParsedRequests.of(spec, obj, pod.status)
        requests, scoring = parsed.effective(), parsed.scoring()
    except InvalidObjectError:
        requests, scoring = {}, None  # nothing readable to count beyond the pod itself
    gpu_names = names.all_request_names()
    try:
        gpu = gpu_request_from(requests, names, None)
    except ValueError:
        gpu = GpuRequest(count=max(requests.get(names.gpu, 0), 1))
    plain = {k: v for k, v in requests.items() if k not in gpu_names}
    plain[PODS] = 1
    return PodInfo(
        name=meta.name,
        namespace=ns,
        uid=meta.uid or f"{ns}/{meta.name}",
        labels=dict(meta.labels),
        annotations=dict(meta.annotations),
        requests=plain,
        scoring_requests=scoring,
        gpu=gpu,
        node_name=spec.node_name,
        priority=spec.priority or 0,
        scheduler_name=spec.scheduler_name,
        created=_timestamp(meta.creation_timestamp),
        owner=next((o.uid or o.name for o in meta.owner_references if o.controller), ""),
        error=str(error),
    )


def invalid_pod(raw: Any, error: Exception) -> PodInfo:
    """A placeholder for a pod that failed to decode, carrying the error as its reason."""
    meta = raw.get("metadata", {}) if isinstance(raw, dict) else {}
    meta = meta if isinstance(meta, dict) else {}
    name = str(meta.get("name") or meta.get("generateName") or "<unnamed>")
    namespace = str(meta.get("namespace") or "default")
    uid = str(meta.get("uid") or f"{namespace}/{name}")
    raw_labels = meta.get("labels")
    labels = raw_labels if isinstance(raw_labels, dict) else {}
    spec = raw.get("spec", {}) if isinstance(raw, dict) else {}
    scheduler = spec.get("schedulerName") if isinstance(spec, dict) else None
    return PodInfo(
        name=name,
        namespace=namespace,
        uid=uid,
        labels={str(k): str(v) for k, v in labels.items()},
        scheduler_name=scheduler
        if isinstance(scheduler, str) and scheduler
        else "default-scheduler",
        error=str(error),
        refused=isinstance(error, RefusedObjectError),
    )


__all__ = ["PodInfo", "Requirement", "bound_pod_holding", "invalid_pod", "pod_from_k8s"]
