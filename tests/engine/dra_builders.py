"""Builders for DRA tests: resource.k8s.io/v1 objects as dicts, decoded as production does."""

from __future__ import annotations

from typing import Any

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.profile import Profile
from fairgpu.engine.scheduler import Scheduler, ScheduleResult
from fairgpu.model.dra import decode_dra
from fairgpu.model.pod import PodInfo
from fairgpu.sim.workloads.nvidia_dra import DRIVER
from tests.engine.engine_builders import cluster, node, pod

GPU_CLASS = "gpu.example.com"


def device_class(name: str = GPU_CLASS, *exprs: str) -> dict[str, Any]:
    """A DeviceClass; by default it selects every device of driver ``DRIVER``."""
    exprs = exprs or (f"device.driver == '{DRIVER}'",)
    return {
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs]},
    }


def gpu(name: str, **attrs: Any) -> dict[str, Any]:
    """A device with attributes given as Python values (int, bool, str)."""
    typed = {
        k: {"bool": v}
        if isinstance(v, bool)
        else {"int": v}
        if isinstance(v, int)
        else {"string": v}
        for k, v in attrs.items()
    }
    return {"name": name, "attributes": typed, "capacity": {"memory": {"value": "80Gi"}}}


def slice_doc(
    node_name: str, *devices: dict[str, Any], name: str = "", **spec: Any
) -> dict[str, Any]:
    """A ResourceSlice of driver ``DRIVER`` for ``node_name`` (pool named after the node)."""
    body: dict[str, Any] = {
        "driver": DRIVER,
        "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
        "nodeName": node_name,
        "devices": list(devices),
        **spec,
    }
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node_name}-slice"},
        "spec": body,
    }


def request(
    name: str = "gpu",
    cls: str = GPU_CLASS,
    count: int = 1,
    *exprs: str,
    mode: str = "ExactCount",
    admin: bool = False,
) -> dict[str, Any]:
    """A device request (``exactly``)."""
    exactly: dict[str, Any] = {"deviceClassName": cls, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    if exprs:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in exprs]
    if admin:
        exactly["adminAccess"] = True
    return {"name": name, "exactly": exactly}


def claim_doc(
    name: str,
    *requests: dict[str, Any],
    constraints: list[dict[str, Any]] | None = None,
    namespace: str = "default",
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ResourceClaim (one GPU request by default)."""
    devices: dict[str, Any] = {"requests": list(requests) or [request()]}
    if constraints:
        devices["constraints"] = constraints
    doc: dict[str, Any] = {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }
    if status:
        doc["status"] = status
    return doc


def template_doc(
    name: str, *requests: dict[str, Any], namespace: str = "default"
) -> dict[str, Any]:
    """A ResourceClaimTemplate."""
    spec = {"devices": {"requests": list(requests) or [request()]}}
    return {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": spec},
    }


def claim_pod(name: str, *claims: str, templates: tuple[str, ...] = ()) -> PodInfo:
    """A pod using claims by name and (one entry each) claims made from templates."""
    refs = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    refs += [{"name": f"t{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    return pod(name, requests={"cpu": "100m"}, resourceClaims=refs)


def dra_cluster(nodes: list[str], *docs: dict[str, Any]) -> ClusterState:
    """A cluster of plain nodes with the DRA objects ``docs`` in its store."""
    state = cluster(*(node(n) for n in nodes))
    for doc in docs:
        state.dra.add(decode_dra(doc))
    return state


def scheduler(policy: str = "fragmentation-aware") -> Scheduler:
    """The default profile with the DynamicResources device policy ``policy``."""
    return Scheduler(Profile(plugin_args={"DynamicResources": {"policy": policy}}))


def place(sched: Scheduler, state: ClusterState, p: PodInfo) -> ScheduleResult:
    """Schedule ``p``; if it fits, assign it and apply the pre-bind step (claims allocated)."""
    if p.resource_claims:
        state.dra.create_pod_claims(p)
    result = sched.schedule(p, state)
    if result.ok and result.node is not None:
        state.assign(p, result.node, result.devices)
        state.dra.commit(p, result.node)
    return result


def devices_of(state: ClusterState, claim: str) -> list[str]:
    """Device names allocated to claim ``default/<claim>``."""
    c = state.dra.claims[f"default/{claim}"]
    return [r.device for r in c.allocation or ()]
