"""DRA objects: decoding errors name the object and the field."""

from __future__ import annotations

import pytest

from fairgpu.api.errors import InvalidObjectError
from fairgpu.api.objects import Pod, decode
from fairgpu.model.dra import decode_dra
from fairgpu.model.pod import pod_from_k8s
from tests.engine.dra_builders import claim_doc, device_class, gpu, request, slice_doc


def _error(doc: dict) -> str:
    with pytest.raises(InvalidObjectError) as info:
        decode_dra(doc)
    return str(info.value)


def test_bad_cel_names_class_and_field() -> None:
    msg = _error(device_class("broken", "device.driver == "))
    assert msg.startswith("DeviceClass broken: field spec.selectors[0].cel.expression: invalid CEL")


def test_slice_without_driver_and_bad_capacity() -> None:
    doc = slice_doc("n1", gpu("g0"))
    doc["spec"]["driver"] = ""
    assert _error(doc) == "ResourceSlice n1-slice: field spec.driver: is required"
    doc = slice_doc("n1", gpu("g0"))
    doc["spec"]["devices"][0]["capacity"]["memory"]["value"] = "lots"
    assert "field spec.devices[0].capacity[memory].value" in _error(doc)


def test_claim_type_errors_and_counts() -> None:
    doc = claim_doc("c", request(count=0))
    assert _error(doc) == (
        "ResourceClaim default/c: field spec.devices.requests[0].exactly.count: must be in 1..32"
    )
    doc = claim_doc("c")
    doc["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    assert "spec.devices.requests[0].exactly.count" in _error(doc)
    doc = claim_doc("c", constraints=[{"requests": ["nope"], "matchAttribute": "x.io/numa"}])
    assert "spec.devices.constraints[0].requests" in _error(doc)


def test_pod_claim_reference_needs_exactly_one_source() -> None:
    raw = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c"}],
            "resourceClaims": [{"name": "gpu"}],
        },
    }
    with pytest.raises(InvalidObjectError) as info:
        pod_from_k8s(decode(raw, Pod))
    assert str(info.value).startswith("Pod default/p: field spec.resourceClaims[0]:")


def test_pod_claim_references_decoded() -> None:
    raw = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c"}],
            "resourceClaims": [
                {"name": "a", "resourceClaimName": "shared"},
                {"name": "b", "resourceClaimTemplateName": "tpl"},
            ],
        },
    }
    info = pod_from_k8s(decode(raw, Pod))
    assert info.resource_claims == (("a", "shared", ""), ("b", "", "tpl"))
