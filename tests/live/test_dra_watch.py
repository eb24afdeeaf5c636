"""DraWatch.apply on the objects the reflectors decode (no API server needed): a relist
replaces a table, invalid objects are left out naming the field, and a placed pod's device
choice is dropped only once the watch shows all of its claims allocated."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from fairgpu.cluster.dra import ClaimAllocation, PodChoice
from fairgpu.cluster.state import ClusterState
from fairgpu.kube.dra_watch import DraWatch, Invalid, _decoder
from fairgpu.model.dra import DeviceResult
from fairgpu.sim.workloads.nvidia_dra import DRIVER, claim_spec
from tests.engine.engine_builders import node, pod


def claim_json(name: str, allocated: str = "", spec: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": spec or claim_spec(gpus=1),
    }
    if allocated:
        result = {"request": "gpu", "driver": DRIVER, "pool": "n0", "device": allocated}
        body["status"] = {"allocation": {"devices": {"results": [result]}}}
    return json.dumps(body).encode()


decode = _decoder("ResourceClaim")


def apply(cluster: ClusterState, etype: str, obj: Any) -> bool:
    return DraWatch.apply(cluster, etype, ("ResourceClaim", obj))


def test_relist_replaces_the_claims() -> None:
    cluster = ClusterState()
    apply(cluster, "SYNC", [decode(claim_json("a")), decode(claim_json("b"))])
    before = cluster.release_version
    assert apply(cluster, "SYNC", [decode(claim_json("a", allocated="gpu-0"))])
    assert set(cluster.dra.claims) == {"ns/a"}
    assert cluster.dra.claims["ns/a"].allocation is not None
    assert cluster.release_version > before  # pending pods are tried again


def test_invalid_claim_is_left_out_naming_the_field(caplog: pytest.LogCaptureFixture) -> None:
    cluster = ClusterState()
    bad = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": ""}}]}}
    obj = decode(claim_json("bad", spec=bad))
    assert isinstance(obj, Invalid) and obj.key == "ns/bad"
    assert "spec.devices.requests[0].exactly.deviceClassName" in obj.error
    with caplog.at_level(logging.WARNING, "fairgpu.kube.dra"):
        apply(cluster, "ADDED", obj)
    assert "ns/bad" not in cluster.dra.claims
    assert any(getattr(r, "object", "") == "ns/bad" for r in caplog.records)
    apply(cluster, "DELETED", obj)  # deleting what was never stored is fine


def test_choice_kept_until_every_claim_shows_its_allocation() -> None:
    cluster = ClusterState()
    cluster.add_node(node("n0"))
    p = pod("p")
    cluster.assign(p, 0)
    apply(cluster, "SYNC", [decode(claim_json("x")), decode(claim_json("y"))])
    results = {k: (DeviceResult("gpu", DRIVER, "n0", f"gpu-{i}"),) for i, k in enumerate("xy")}
    choice = PodChoice({0: tuple(ClaimAllocation(f"ns/{k}", r, "n0") for k, r in results.items())})
    cluster.dra.choices[p.uid] = choice
    apply(cluster, "MODIFIED", decode(claim_json("x", allocated="gpu-0")))
    assert p.uid in cluster.dra.choices  # y's allocation not seen yet: its device stays taken
    assert ("gpu.nvidia.com", "n0", "gpu-1") in cluster.dra.in_use(cluster).devices
    apply(cluster, "MODIFIED", decode(claim_json("y", allocated="gpu-1")))
    assert p.uid not in cluster.dra.choices
    assert ("gpu.nvidia.com", "n0", "gpu-1") in cluster.dra.in_use(cluster).devices


def test_claim_deleted_after_placement_fails_the_bind() -> None:
    from fairgpu.kube.dra_binding import plan_for, prebind

    cluster = ClusterState()
    cluster.add_node(node("n0"))
    p = pod("p", resourceClaims=[{"name": "gpu", "resourceClaimName": "gone"}])
    assert p.resource_claims == (("gpu", "gone", ""),)
    plan = plan_for(cluster, p, "n0")
    assert plan is not None and plan.missing == ("gone",)
    status, message = prebind(None, plan)  # type: ignore[arg-type]  # no request is made
    assert status == 409 and "gone" in message
