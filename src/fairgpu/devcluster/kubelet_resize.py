"""In-place pod resize as the fake kubelet carries it out (``InPlacePodVerticalScaling``).

A resize writes new container resources into a running pod's spec (the ``pods/resize``
subresource). The kubelet then decides, as kubelet 1.34 does for cpu and memory:

- **Infeasible**: the pod's new requests exceed what the node can ever give (its
  allocatable) -- condition ``PodResizePending`` with reason ``Infeasible``;
- **Deferred**: they fit the node, but not beside what the other pods on it were admitted
  with -- ``PodResizePending``, reason ``Deferred`` (retried when something changes);
- otherwise it **actuates**: each container's status shows the new ``resources`` and
  ``allocatedResources``, and the condition goes.

Until then the status keeps the old amounts, and a scheduler must count the larger of the two
(kube-scheduler does). Requests here are read independently of the scheduler's own decoding:
app containers' cpu and memory, a request defaulting to its limit.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from fairgpu.api.quantity import parse_quantity

RESIZABLE = ("cpu", "memory")
PENDING = "PodResizePending"
TERMINAL = ("Succeeded", "Failed")


def spec_resources(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A container's resources as its status reports them once actuated: requests
    (defaulting to limits) and limits."""
    res = container.get("resources") or {}
    limits = dict(res.get("limits") or {})
    requests = {**limits, **(res.get("requests") or {})}
    out: dict[str, dict[str, Any]] = {"requests": requests}
    if limits:
        out["limits"] = limits
    return out


def container_status_resources(container: dict[str, Any]) -> dict[str, Any]:
    """The ``resources`` and ``allocatedResources`` fields of a container's status when
    the kubelet runs it as its spec says."""
    res = spec_resources(container)
    return {"resources": res, "allocatedResources": dict(res["requests"])}


def _amounts(requests: dict[str, Any]) -> dict[str, Fraction]:
    return {k: parse_quantity(requests[k]) for k in RESIZABLE if k in requests}


def _sum(lists: list[dict[str, Any]]) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {}
    for req in lists:
        for k, v in _amounts(req).items():
            total[k] = total.get(k, Fraction(0)) + v
    return total


def _statuses(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod's app containers' statuses by container name."""
    return {s.get("name"): s for s in pod.get("status", {}).get("containerStatuses") or []}


def wanted(pod: dict[str, Any]) -> dict[str, Fraction]:
    """The pod's app containers' cpu and memory requests as its spec asks now."""
    containers = pod.get("spec", {}).get("containers", [])
    return _sum([spec_resources(c)["requests"] for c in containers])


def admitted(pod: dict[str, Any]) -> dict[str, Fraction]:
    """The cpu and memory the kubelet admitted the pod with (its containers'
    ``allocatedResources``; the spec where the status has none)."""
    statuses = _statuses(pod)
    lists = []
    for c in pod.get("spec", {}).get("containers", []):
        got = statuses.get(c.get("name"), {}).get("allocatedResources")
        lists.append(got if got is not None else spec_resources(c)["requests"])
    return _sum(lists)


def resize_pending(pod: dict[str, Any]) -> bool:
    """Does the pod's spec ask other cpu or memory than its containers' status shows?"""
    statuses = _statuses(pod)
    for c in pod.get("spec", {}).get("containers", []):
        status = statuses.get(c.get("name"))
        if status is None or "resources" not in status:
            continue
        shown = _amounts(status["resources"].get("requests") or {})
        if shown != _amounts(spec_resources(c)["requests"]):
            return True
    return False


def decide(pod: dict[str, Any], allocatable: dict[str, Any], others: list[dict[str, Any]]) -> str:
    """``"Infeasible"``, ``"Deferred"`` or ``"actuate"`` for ``pod``'s resize on a node with
    ``allocatable``, beside the ``others`` bound there."""
    want = wanted(pod)
    capacity = _amounts(allocatable)
    if any(v > capacity.get(k, Fraction(0)) for k, v in want.items()):
        return "Infeasible"
    used: dict[str, Fraction] = {}
    for other in others:
        if other["metadata"]["uid"] == pod["metadata"]["uid"]:
            continue
        if other.get("status", {}).get("phase") in TERMINAL:
            continue
        for k, v in admitted(other).items():
            used[k] = used.get(k, Fraction(0)) + v
    if any(used.get(k, Fraction(0)) + v > capacity.get(k, Fraction(0)) for k, v in want.items()):
        return "Deferred"
    return "actuate"


def status_patch(pod: dict[str, Any], decision: str) -> dict[str, Any]:
    """The status patch (strategic merge) for ``decision`` on ``pod``."""
    if decision != "actuate":
        return {"conditions": [{"type": PENDING, "status": "True", "reason": decision}]}
    statuses = _statuses(pod)
    containers = []
    for c in pod.get("spec", {}).get("containers", []):
        entry = dict(statuses.get(c.get("name"), {"name": c.get("name")}))
        entry.update(container_status_resources(c))
        containers.append(entry)
    return {
        "containerStatuses": containers,
        "conditions": [{"type": PENDING, "$patch": "delete"}],
    }
