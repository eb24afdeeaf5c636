"""ResourceClaims in live tests: the objects (claims, pods that use them) and the invariants
of the API server's own claim state -- no device allocated to two claims, no GPU's shared
counters (its memory slices, memory, multiprocessors) consumed beyond what its slice offers,
and every bound pod's claims allocated on its node and reserved for it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from live_helpers import pod

from fairgpu.api.quantity import parse_quantity
from fairgpu.devcluster import KubeClient
from fairgpu.devcluster.dra import DRA_API
from fairgpu.sim.workloads.nvidia_dra import claim_spec

TERMINAL = ("Succeeded", "Failed")


#: The key under which :func:`slice_devices` keeps a pool's shared counters.
SHARED = "\x00shared-counters"


def claim(name: str, gpus: int = 0, mig: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": claim_spec(gpus=gpus, mig_profile=mig),
    }


def dra_pod(
    name: str,
    *refs: tuple[str, str],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """A training pod with ``spec.resourceClaims`` from (entry name, claim name) pairs; a
    claim name ``template:<t>`` refers to ResourceClaimTemplate ``t`` (``kw``: more of
    :func:`~live_helpers.pod`'s arguments)."""
    m = pod(name, model=None, labels=labels, annotations=annotations, **kw)
    entries = []
    for entry, target in refs:
        if target.startswith("template:"):
            entries.append({"name": entry, "resourceClaimTemplateName": target[9:]})
        else:
            entries.append({"name": entry, "resourceClaimName": target})
    m["spec"]["resourceClaims"] = entries
    m["spec"]["containers"][0]["resources"]["claims"] = [{"name": e} for e, _ in refs]
    return m


def make_claims(admin: KubeClient, ns: str, *bodies: dict[str, Any]) -> None:
    for body in bodies:
        admin.post(f"{DRA_API}/namespaces/{ns}/resourceclaims", body)


def claims(admin: KubeClient, ns: str | None = None) -> list[dict[str, Any]]:
    path = f"{DRA_API}/namespaces/{ns}/resourceclaims" if ns else f"{DRA_API}/resourceclaims"
    items: list[dict[str, Any]] = admin.get(path)["items"]
    return items


def slice_devices(admin: KubeClient) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every published device by (driver, pool, name); per pool an entry named
    :data:`SHARED` holds the slice's ``sharedCounters``."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for s in admin.get(f"{DRA_API}/resourceslices")["items"]:
        spec = s["spec"]
        pool = spec["pool"]["name"]
        for d in spec["devices"]:
            out[(spec["driver"], pool, d["name"])] = d
        if spec.get("sharedCounters"):
            out[(spec["driver"], pool, SHARED)] = {"sharedCounters": spec["sharedCounters"]}
    return out


def allocated(claim_obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The device results of a claim's allocation ([] when it is not allocated)."""
    status = claim_obj.get("status") or {}
    results: list[dict[str, Any]] = ((status.get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    return results


def double_bookings(
    all_claims: list[dict[str, Any]], devices: dict[tuple[str, str, str], dict[str, Any]]
) -> list[str]:
    """Devices allocated to more than one claim, and shared counters consumed beyond their
    capacity (``devices``: every device by (driver, pool, name) with its ``consumesCounters``;
    capacities from ``counter_capacity``), as sentences naming them."""
    taken: dict[tuple[str, str, str], list[str]] = {}
    used: Counter[tuple[str, str, str]] = Counter()
    for c in all_claims:
        name = f"{c['metadata']['namespace']}/{c['metadata']['name']}"
        for r in allocated(c):
            key = (r["driver"], r["pool"], r["device"])
            taken.setdefault(key, []).append(name)
            for use in (devices.get(key) or {}).get("consumesCounters", []):
                for counter, amount in use["counters"].items():
                    used[(r["pool"], use["counterSet"], counter)] += int(
                        parse_quantity(amount["value"])
                    )
    found = [f"device {k} allocated to {v}" for k, v in taken.items() if len(v) > 1]
    unknown = [k for k in taken if k not in devices]
    found += [f"device {k} allocated but published by no slice ever seen" for k in unknown]
    capacity = counter_capacity(devices)
    found += [
        f"counter {k} consumed {n} of {capacity[k]}"
        for k, n in used.items()
        if k in capacity and n > capacity[k]
    ]
    return found


def counter_capacity(
    devices: dict[tuple[str, str, str], dict[str, Any]],
) -> dict[tuple[str, str, str], int]:
    """(pool, counter set, counter) -> capacity, from the :data:`SHARED` entries
    :func:`slice_devices` keeps per pool."""
    out: dict[tuple[str, str, str], int] = {}
    for (_, pool, name), d in devices.items():
        if name != SHARED:
            continue
        for counter_set in d["sharedCounters"]:
            for counter, amount in counter_set["counters"].items():
                out[(pool, counter_set["name"], counter)] = int(parse_quantity(amount["value"]))
    return out


def unreserved_pods(pods: list[dict[str, Any]], all_claims: list[dict[str, Any]]) -> list[str]:
    """Bound pods, not finished, one of whose claims is missing, not allocated on the pod's
    node or not reserved for it (``pods`` and ``all_claims`` read at one resourceVersion)."""
    by_name = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in all_claims}
    found = []
    for p in pods:
        node = p["spec"].get("nodeName")
        if not node or (p.get("status") or {}).get("phase") in TERMINAL:
            continue
        ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
        generated = {
            s["name"]: s.get("resourceClaimName")
            for s in (p.get("status") or {}).get("resourceClaimStatuses") or []
        }
        for ref in p["spec"].get("resourceClaims", []):
            claim_name = ref.get("resourceClaimName") or generated.get(ref["name"])
            c = by_name.get((ns, claim_name or ""))
            if c is None:
                found.append(f"pod {ns}/{name} on {node}: claim {claim_name} missing")
                continue
            pools = {r["pool"] for r in allocated(c)}
            reserved = {e.get("uid") for e in (c.get("status") or {}).get("reservedFor") or []}
            if pools != {node}:
                found.append(f"pod {ns}/{name} on {node}: claim {claim_name} allocated on {pools}")
            if p["metadata"]["uid"] not in reserved:
                found.append(f"pod {ns}/{name} on {node}: claim {claim_name} not reserved for it")
    return found
