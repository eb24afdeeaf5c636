"""A container's resources the API server refuses are refused when a pod is read from a file
(a simulated workload, a what-if pod) too, naming the field; what it accepts is read as
before. Each case is sent to a real kube-apiserver and decoded by fairgpu: both must agree."""

from __future__ import annotations

from typing import Any

import pytest

from fairgpu.api.errors import InvalidObjectError
from fairgpu.api.objects import Pod, decode
from fairgpu.devcluster import KubeClient
from fairgpu.model.pod import pod_from_k8s

GPU = "nvidia.com/gpu"


def resources(requests: dict[str, Any] | None, limits: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}


# (id, init container?, requests, limits, field refused -- None when the pod is valid)
CASES: list[tuple[str, bool, dict[str, Any] | None, dict[str, Any] | None, str | None]] = [
    ("gpu-request-without-limit", False, {GPU: "2"}, None, f"limits.{GPU}"),
    ("gpu-request-below-limit", False, {GPU: "1"}, {GPU: "2"}, f"requests.{GPU}"),
    ("half-a-gpu", False, None, {GPU: "500m"}, f"limits.{GPU}"),
    ("fractional-extended", False, None, {"example.com/fpga": "1500m"}, "limits.example.com/fpga"),
    (
        "share-request-without-limit",
        False,
        {"nvidia.com/gpucores": "30"},
        None,
        "limits.nvidia.com/gpucores",
    ),
    (
        "hugepages-without-limit",
        False,
        {"hugepages-2Mi": "4Mi", "memory": "1Gi"},
        None,
        "limits.hugepages-2Mi",
    ),
    ("memory-request-above-limit", False, {"memory": "2Gi"}, {"memory": "1Gi"}, "requests.memory"),
    ("init-gpu-request-without-limit", True, {GPU: "1"}, None, f"limits.{GPU}"),
    ("gpu-limit-alone", False, None, {GPU: "2"}, None),
    ("gpu-request-equal-limit", False, {GPU: 1}, {GPU: "1"}, None),
    ("cpu-below-limit-memory-without", False, {"cpu": "500m", "memory": "1Gi"}, {"cpu": "2"}, None),
    (
        "share-as-limits",
        False,
        None,
        {GPU: "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "4096"},
        None,
    ),
]


def manifest(name: str, init: bool, requests: Any, limits: Any) -> dict[str, Any]:
    odd = {"name": "c", "image": "x", "resources": resources(requests, limits)}
    spec: dict[str, Any] = {"schedulerName": "nobody", "containers": [odd]}
    if init:
        spec = {**spec, "initContainers": [odd], "containers": [{"name": "m", "image": "x"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("case", "init", "requests", "limits", "field"), CASES, ids=[c[0] for c in CASES]
)
def test_fairgpu_refuses_what_the_api_server_refuses(
    admin: KubeClient,
    ns: str,
    case: str,
    init: bool,
    requests: Any,
    limits: Any,
    field: str | None,
) -> None:
    doc = manifest(case, init, requests, limits)
    created = admin.request("POST", f"/api/v1/namespaces/{ns}/pods", doc)
    doc["metadata"]["namespace"] = ns
    if field is None:
        assert created.ok, created.body
        pod_from_k8s(decode(doc, Pod))
        return
    assert created.status == 422, (created.status, created.body)
    with pytest.raises(InvalidObjectError) as refused:
        pod_from_k8s(decode(doc, Pod))
    where = "initContainers" if init else "containers"
    assert refused.value.field == f"spec.{where}[0].resources.{field}"
    assert refused.value.obj == f"Pod {ns}/{case}"
