"""The claim audits of the DRA live tests find what they are there to find (no API server
needed: the objects are written as the API server returns them)."""

from __future__ import annotations

from typing import Any

from dra_audit import SHARED, double_bookings, unreserved_pods

from fairgpu.sim.workloads.nvidia_dra import DRIVER, nvidia_slice


def _devices(node: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    spec = nvidia_slice(node, gpus=1, mig=True)["spec"]
    out = {(DRIVER, node, d["name"]): d for d in spec["devices"]}
    out[(DRIVER, node, SHARED)] = {"sharedCounters": spec["sharedCounters"]}
    return out


def _claim(name: str, node: str, *devices: str, reserved: tuple[str, ...] = ()) -> dict[str, Any]:
    results = [{"request": "gpu", "driver": DRIVER, "pool": node, "device": d} for d in devices]
    return {
        "metadata": {"namespace": "ns", "name": name},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": u, "uid": u} for u in reserved],
        },
    }


def _pod(name: str, node: str, claim: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": name},
        "spec": {"nodeName": node, "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}]},
        "status": {"phase": phase},
    }


def test_a_device_in_two_claims_is_found() -> None:
    devices = _devices("n0")
    assert double_bookings([_claim("a", "n0", "gpu-0")], devices) == []
    found = double_bookings([_claim("a", "n0", "gpu-0"), _claim("b", "n0", "gpu-0")], devices)
    assert any("allocated to ['ns/a', 'ns/b']" in f for f in found)


def test_a_whole_gpu_and_a_mig_partition_of_it_overlap_through_the_counters() -> None:
    devices = _devices("n0")
    mig = next(k[2] for k in devices if k[2].startswith("gpu-0-mig-1g"))
    two = [_claim("a", "n0", "gpu-0"), _claim("b", "n0", mig)]
    found = double_bookings(two, devices)
    assert found and all(f.startswith("counter ('n0', 'gpu-0-counters'") for f in found)


def test_a_device_no_slice_published_is_found() -> None:
    found = double_bookings([_claim("a", "n9", "gpu-0")], _devices("n0"))
    assert found == [
        "device ('gpu.nvidia.com', 'n9', 'gpu-0') allocated but published by no slice ever seen"
    ]


def test_a_bound_pod_whose_claim_is_elsewhere_or_not_reserved_is_found() -> None:
    ok = _claim("c", "n0", "gpu-0", reserved=("p",))
    assert unreserved_pods([_pod("p", "n0", "c")], [ok]) == []
    assert unreserved_pods([_pod("p", "n1", "c")], [ok]) == [
        "pod ns/p on n1: claim c allocated on {'n0'}"
    ]
    loose = _claim("c", "n0", "gpu-0")
    assert unreserved_pods([_pod("p", "n0", "c")], [loose]) == [
        "pod ns/p on n0: claim c not reserved for it"
    ]
    assert unreserved_pods([_pod("p", "n0", "gone")], [ok]) == [
        "pod ns/p on n0: claim gone missing"
    ]
    # A pod that finished no longer needs its claim.
    assert unreserved_pods([_pod("p", "n0", "c", phase="Succeeded")], [loose]) == []
