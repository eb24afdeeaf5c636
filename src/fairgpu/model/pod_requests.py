"""A pod's resource requests as kube-scheduler counts them.

kube-scheduler 1.34 (``k8s.io/component-helpers/resource.PodRequests``) adds up a pod's
requests in four steps, and so does :meth:`ParsedRequests.effective`:

1. **Containers.** ``max(sum(app containers) + sum(sidecars), max over init containers of
   (init + sidecars started before it))``; sidecars are init containers with
   ``restartPolicy: Always``. A container's request defaults to its limit, as the API server
   defaults it.
2. **In-place resize** (``InPlacePodVerticalScaling``, on by default since 1.33). A running
   pod whose resize is not finished holds what the kubelet admitted or configured, not only
   what its spec now asks: for each app container and sidecar with resources in its status,
   the larger of its spec request, its configured request (``status.containerStatuses[].
   resources.requests``) and its admitted one (``allocatedResources``) -- without the spec
   when the resize is infeasible (a ``PodResizePending`` condition with reason
   ``Infeasible``: the kubelet will never actuate it). A pod resized down therefore keeps
   its old size on its node until the kubelet has applied the change; counting the spec
   alone would let another pod onto room that is not free.
3. **Pod-level resources** (``PodLevelResources``, on by default since 1.34). A pod-level
   request of cpu, memory or hugepages stands for the containers' sum of that resource. A
   pod created with pod-level limits has its missing pod-level requests defaulted by the API
   server (cpu and memory to the containers' sum when some container asks, else to the
   limit); a pod read from a file is defaulted here the same way.
4. **Overhead** (``spec.overhead``) is added.

Resource scores count a container that asks no cpu (memory) as asking 100m (200 MiB), and
kube-scheduler 1.34 adds them up in two ways:

- for the pod being placed, NodeResourcesFit's score (LeastAllocated, MostAllocated,
  RequestedToCapacityRatio) counts the containers with those defaults and the overhead, and
  *not* the pod-level requests (:meth:`ParsedRequests.scoring`): its scorer is built without
  the pod-level switch that the filter, the balanced-allocation score and the node's load
  honour (``nodeResourceStrategyTypeMap`` in ``noderesources/fit.go``), so a pod-level
  request changes where the pod fits and how balanced a node gets, but not its least- or
  most-allocated score (seen against kube-scheduler 1.34 in the differential test);
- for the pods on a node (``NonZeroRequested``), the four steps above, the defaults filling
  in for containers only where neither the pod level, the overhead nor any container names
  the resource (:meth:`ParsedRequests.node_nonzero`, ``getNonMissingContainerRequests``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from fairgpu.api import objects as k8s
from fairgpu.api.errors import InvalidObjectError, RefusedObjectError
from fairgpu.api.quantity import QuantityError, parse_quantity

CPU = "cpu"
MEMORY = "memory"
# kube-scheduler's defaults for a container without a cpu / memory request, in scores.
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024
SCORING_DEFAULTS = {CPU: DEFAULT_MILLI_CPU, MEMORY: DEFAULT_MEMORY}
HUGEPAGES_PREFIX = "hugepages-"
# The PodResizePending condition's reason when the kubelet will never actuate the resize.
RESIZE_PENDING = "PodResizePending"
RESIZE_INFEASIBLE = "Infeasible"

# Node and pod arrays are int64: anything larger cannot be counted exactly.
_MAX_AMOUNT = 2**63 - 1


def parse_resource(name: str, value: object) -> int:
    """One resource quantity in the unit the scheduler counts: milli-CPU, bytes, or units.

    Negative amounts are refused on the exact value (``-1m`` of memory is negative even though
    it rounds up to 0), as are amounts that do not fit the int64 node arrays.
    """
    if isinstance(value, str):
        return _parse_text_resource(name == CPU, value)
    return _to_units(name == CPU, value)


@lru_cache(maxsize=8192)
def _parse_text_resource(milli: bool, value: str) -> int:
    # Manifests repeat the same few quantity strings; Fraction arithmetic is the slow part.
    return _to_units(milli, value)


def _to_units(milli: bool, value: object) -> int:
    exact = parse_quantity(value)
    if exact < 0:
        raise QuantityError(f"{value!r} is negative")
    amount = math.ceil(exact * 1000) if milli else math.ceil(exact)
    if amount > _MAX_AMOUNT:
        raise QuantityError(f"{value!r} is too large")
    return amount


def _add(into: dict[str, int], other: dict[str, int]) -> None:
    for key, value in other.items():
        into[key] = into.get(key, 0) + value


def _max(into: dict[str, int], other: dict[str, int]) -> None:
    # As kube's maxResourceList: a resource ``into`` does not name is added, even at 0 (a
    # named resource, even a zero one, is not "missing" to the scoring defaults).
    for key, value in other.items():
        if key not in into or value > into[key]:
            into[key] = value


def _resource_list(values: k8s.ResourceList, where: str, obj: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in values.items():
        try:
            out[name] = parse_resource(name, value)
        except QuantityError as error:
            raise InvalidObjectError(obj, f"{where}.{name}", str(error)) from None
    return out


def container_requests(container: k8s.Container, where: str, obj: str) -> dict[str, int]:
    """A container's requests, defaulting each request to its limit as the API server does.

    What the API server refuses in a container's resources is refused here too
    (:func:`_check_requirements`): a simulated workload or a what-if pod then fails where its
    file would fail ``kubectl apply``, instead of being placed as asked.
    """
    res = container.resources
    merged: dict[str, object] = dict(res.limits)
    merged.update(res.requests)
    out: dict[str, int] = {}
    for name, value in merged.items():
        section = "requests" if name in res.requests else "limits"
        try:
            out[name] = parse_resource(name, value)
        except QuantityError as error:
            raise InvalidObjectError(
                obj, f"{where}.resources.{section}.{name}", str(error)
            ) from None
    _check_requirements(res, f"{where}.resources", obj)
    return out


def overcommit_allowed(name: str) -> bool:
    """May a request of ``name`` be below its limit, or stand without one (kube's
    ``IsOvercommitAllowed``)? Only for resources of the kubernetes.io namespace (cpu,
    memory, ephemeral-storage), hugepages excepted; a GPU or any other extended resource
    is asked as a limit, its request equal to it."""
    native = "/" not in name or "kubernetes.io/" in name
    return native and not name.startswith(HUGEPAGES_PREFIX)


def integer_resource(name: str) -> bool:
    """Must amounts of ``name`` be whole numbers (kube's ``IsIntegerResourceName``: the
    extended resources, those outside the kubernetes.io namespace)?"""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _check_requirements(res: k8s.ResourceRequirements, where: str, obj: str) -> None:
    """Refuse, naming the field, what the API server's validation of a container's
    resources refuses: a fractional amount of an extended resource, a request of a resource
    that cannot be overcommitted without a limit or other than it, a request above its
    limit. (Amounts were parsed already, so each parses.)"""
    for section, values in (("limits", res.limits), ("requests", res.requests)):
        for name, value in values.items():
            if integer_resource(name) and parse_quantity(value).denominator != 1:
                raise RefusedObjectError(
                    obj, f"{where}.{section}.{name}", f"must be a whole number (got {value})"
                )
    for name, value in res.requests.items():
        if name not in res.limits:
            if not overcommit_allowed(name):
                raise RefusedObjectError(
                    obj,
                    f"{where}.limits.{name}",
                    f"required: {name} cannot be overcommitted, so its request needs a limit "
                    "equal to it",
                )
            continue
        asked, limit = parse_quantity(value), parse_quantity(res.limits[name])
        if asked != limit and not overcommit_allowed(name):
            raise RefusedObjectError(
                obj,
                f"{where}.requests.{name}",
                f"{value} must equal the limit {res.limits[name]} ({name} cannot be overcommitted)",
            )
        if asked > limit:
            raise RefusedObjectError(
                obj,
                f"{where}.requests.{name}",
                f"{value} must be at most the limit {res.limits[name]}",
            )


def pod_level_resource(name: str) -> bool:
    """May ``name`` be requested at pod level (kube's ``IsSupportedPodLevelResource``)?"""
    return name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)


def resize_infeasible(status: k8s.PodStatus) -> bool:
    """Has the kubelet marked the pod's resize infeasible (kube's
    ``IsPodResizeInfeasible``: the first ``PodResizePending`` condition says so)?"""
    for condition in status.conditions:
        if condition.type == RESIZE_PENDING:
            return condition.reason == RESIZE_INFEASIBLE
    return False


def _resized(
    spec_request: dict[str, int],
    status: k8s.ContainerStatus | None,
    infeasible: bool,
    where: str,
    obj: str,
) -> dict[str, int]:
    """A running container's request while a resize may be under way (kube's
    ``determineContainerReqs``): the largest of spec, configured and admitted requests,
    without the spec when the resize is infeasible."""
    if status is None or status.resources is None:
        return spec_request
    configured = _resource_list(status.resources.requests, f"{where}.resources.requests", obj)
    admitted = _resource_list(status.allocated_resources, f"{where}.allocatedResources", obj)
    out = {} if infeasible else dict(spec_request)
    _max(out, configured)
    _max(out, admitted)
    return out


@dataclass(frozen=True, slots=True)
class ParsedRequests:
    """A pod's requests, parsed once: per app container and per init container (with whether
    it is a sidecar) -- running containers' resize status folded in --, the pod-level
    requests (empty when none is set) and the overhead."""

    app: tuple[dict[str, int], ...]
    init: tuple[tuple[dict[str, int], bool], ...]
    overhead: dict[str, int]
    pod_level: dict[str, int]

    @classmethod
    def of(cls, spec: k8s.PodSpec, obj: str, status: k8s.PodStatus | None = None) -> ParsedRequests:
        """Parse ``spec`` (and the containers' resources in ``status``, of a running pod);
        errors name ``obj`` and the field."""
        app = [
            container_requests(c, f"spec.containers[{i}]", obj)
            for i, c in enumerate(spec.containers)
        ]
        init = [
            (
                container_requests(c, f"spec.initContainers[{i}]", obj),
                c.restart_policy == "Always",
            )
            for i, c in enumerate(spec.init_containers)
        ]
        overhead = _resource_list(spec.overhead, "spec.overhead", obj)
        # The pod level is defaulted from the spec alone, as the API server does at creation.
        pod_level = {}
        if spec.resources is not None:
            pod_level = _pod_level(spec.resources, aggregate(app, init), obj)
        if status is not None and not _status_as_spec(spec, status):
            app, init = _fold_status(spec, status, app, init, obj)
        return cls(tuple(app), tuple(init), overhead, pod_level)

    def containers(self, missing: dict[str, int] | None = None) -> dict[str, int]:
        """The containers' aggregate (step 1, :func:`aggregate`)."""
        return aggregate(self.app, self.init, missing)

    def _total(self, missing: dict[str, int] | None = None) -> dict[str, int]:
        total = self.containers(missing)
        total.update(self.pod_level)
        _add(total, self.overhead)
        return total

    def effective(self, missing: dict[str, int] | None = None) -> dict[str, int]:
        """The pod's request as kube-scheduler's filters count it (the module docstring's
        four steps), positive amounts only. ``missing``: amounts a container that does not
        request a resource counts instead."""
        return {k: v for k, v in self._total(missing).items() if v > 0}

    def scoring(self) -> tuple[int, int]:
        """(milli-CPU, memory bytes) of the pod being placed, as kube-scheduler's
        NodeResourcesFit score counts it: each container without a cpu (memory) request
        counts 100m (200 MiB), plus the overhead; pod-level requests are not counted there
        (see the module docstring)."""
        total = self.containers(SCORING_DEFAULTS)
        _add(total, self.overhead)
        return total.get(CPU, 0), total.get(MEMORY, 0)

    def node_nonzero(self) -> tuple[int, int]:
        """(milli-CPU, memory bytes) the pod adds to its node's load in kube-scheduler's
        resource scores (``NonZeroRequested``): its requests, each container without a cpu
        (memory) request counting 100m (200 MiB) -- with pod-level requests, only for a
        resource that neither the pod level, the overhead nor any container names."""
        if self.pod_level:
            named = self._total()
            missing = {k: v for k, v in SCORING_DEFAULTS.items() if k not in named}
        else:
            missing = SCORING_DEFAULTS
        total = self._total(missing)
        return total.get(CPU, 0), total.get(MEMORY, 0)


def aggregate(
    app: Iterable[dict[str, int]],
    init: Iterable[tuple[dict[str, int], bool]],
    missing: dict[str, int] | None = None,
) -> dict[str, int]:
    """The containers' aggregate (kube's ``AggregateContainerRequests``): app containers and
    sidecars summed, at least each plain init container on top of the sidecars started
    before it; each container counts ``missing`` for a resource it does not name; zero
    amounts kept."""

    def counted(req: dict[str, int]) -> dict[str, int]:
        return {**missing, **req} if missing else req

    total: dict[str, int] = {}
    for req in app:
        _add(total, counted(req))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for req, sidecar in init:
        if sidecar:
            _add(sidecars, counted(req))
            _max(init_peak, sidecars)
        else:
            running = dict(counted(req))
            _add(running, sidecars)
            _max(init_peak, running)
    _add(total, sidecars)
    _max(total, init_peak)
    return total


def _pod_level(res: k8s.ResourceRequirements, summed: dict[str, int], obj: str) -> dict[str, int]:
    """The pod-level requests kube-scheduler counts (empty when none of cpu, memory or
    hugepages is requested at pod level), defaulted as the API server defaults a new pod:
    with pod-level limits, a missing cpu or memory request becomes the containers' sum
    when some container names it, and any other missing request the limit. (The API
    server also defaults a pod-level hugepages limit from the containers'; the request
    that follows from it equals the containers' sum, which is counted anyway.) ``summed``:
    the containers' aggregate of the spec (:func:`aggregate`)."""
    requests = _resource_list(res.requests, "spec.resources.requests", obj)
    limits = _resource_list(res.limits, "spec.resources.limits", obj)
    if limits:
        for name in (CPU, MEMORY):
            if name in summed and name not in requests:
                requests[name] = summed[name]
        for name, value in limits.items():
            if name not in requests and pod_level_resource(name):
                requests[name] = value
    return {k: v for k, v in requests.items() if pod_level_resource(k)}


def _as_spec(status: k8s.ContainerStatus, container: k8s.Container) -> bool:
    """Does ``status`` show, quantity text for quantity text, what the container's spec
    asks (a request defaulting to its limit)? Then folding it in changes nothing."""
    requests, limits = container.resources.requests, container.resources.limits
    assert status.resources is not None
    for shown in (status.resources.requests, status.allocated_resources):
        for name, value in shown.items():
            if requests.get(name, limits.get(name)) != value:
                return False
    return True


def _status_as_spec(spec: k8s.PodSpec, status: k8s.PodStatus) -> bool:
    """Does every container's status that reports resources show what its spec asks, with
    no infeasible resize? Then folding the status in changes nothing (most running pods;
    a quick look, before the work of :func:`_fold_status`)."""
    for statuses, containers in (
        (status.container_statuses, spec.containers),
        (status.init_container_statuses, spec.init_containers),
    ):
        for cs in statuses:
            if cs.resources is None:
                continue
            container = next((c for c in containers if c.name == cs.name), None)
            if container is not None and not _as_spec(cs, container):
                return False
    return not resize_infeasible(status)


def _fold_status(
    spec: k8s.PodSpec,
    status: k8s.PodStatus,
    app: list[dict[str, int]],
    init: list[tuple[dict[str, int], bool]],
    obj: str,
) -> tuple[list[dict[str, int]], list[tuple[dict[str, int], bool]]]:
    """``app`` and ``init`` with each app container's and sidecar's resize status folded in
    (:func:`_resized`); plain init containers are not resized."""
    by_name: dict[str, tuple[str, k8s.ContainerStatus]] = {}
    for where, statuses in (
        ("status.containerStatuses", status.container_statuses),
        ("status.initContainerStatuses", status.init_container_statuses),
    ):
        for i, cs in enumerate(statuses):
            by_name[cs.name] = (f"{where}[{i}]", cs)
    infeasible = resize_infeasible(status)

    def fold(container: k8s.Container, request: dict[str, int]) -> dict[str, int]:
        found = by_name.get(container.name)
        if found is None:
            return request
        return _resized(request, found[1], infeasible, found[0], obj)

    app = [fold(c, req) for c, req in zip(spec.containers, app, strict=True)]
    init = [
        (fold(c, req) if sidecar else req, sidecar)
        for c, (req, sidecar) in zip(spec.init_containers, init, strict=True)
    ]
    return app, init
