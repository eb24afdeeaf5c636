"""Decoding v1 Pods and Nodes: effective requests, QoS class, and errors naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from fairgpu.api.errors import InvalidObjectError
from fairgpu.api.objects import Node, Pod, decode, decode_json
from fairgpu.model.node import node_from_k8s
from fairgpu.model.pod import (
    QOS_BEST_EFFORT,
    QOS_BURSTABLE,
    QOS_GUARANTEED,
    PodInfo,
    pod_from_k8s,
)

Gi = 2**30
Mi = 2**20


def res(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> dict:
    out: dict[str, Any] = {}
    if requests is not None:
        out["requests"] = requests
    if limits is not None:
        out["limits"] = limits
    return out


def ctr(name: str, requests: dict | None = None, limits: dict | None = None, **kw: Any) -> dict:
    return {"name": name, "image": "busybox", "resources": res(requests, limits), **kw}


def sidecar(name: str, requests: dict) -> dict:
    return ctr(name, requests, restartPolicy="Always")


def pod_info(spec: dict[str, Any], name: str = "p", namespace: str = "team-a") -> PodInfo:
    raw = {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
    return pod_from_k8s(decode(raw, Pod))


# ---- effective requests ----------------------------------------------------------------------
# Expected values follow k8s.io/component-helpers resource.PodRequests: app containers and
# sidecars (init containers with restartPolicy Always) sum; each plain init container needs
# itself plus the sidecars started before it; the pod needs the max of both, plus overhead.
REQUEST_CASES = [
    pytest.param(
        {"containers": [ctr("a", {"cpu": "100m", "memory": "1Gi"})]},
        {"cpu": 100, "memory": Gi},
        id="single-container",
    ),
    pytest.param(
        {"containers": [ctr("a", {"cpu": "1"}), ctr("b", {"cpu": "500m", "memory": "1Gi"})]},
        {"cpu": 1500, "memory": Gi},
        id="app-containers-sum",
    ),
    pytest.param(
        {
            "initContainers": [ctr("i1", {"cpu": "2"}), ctr("i2", {"cpu": "3", "memory": "1Mi"})],
            "containers": [ctr("a", {"cpu": "1", "memory": "1Gi"})],
        },
        {"cpu": 3000, "memory": Gi},
        id="largest-init-wins-per-resource",
    ),
    pytest.param(
        {
            "initContainers": [ctr("i", {"cpu": "500m"})],
            "containers": [ctr("a", {"cpu": "1"})],
        },
        {"cpu": 1000},
        id="small-init-ignored",
    ),
    pytest.param(
        {
            "initContainers": [sidecar("s", {"cpu": "500m"})],
            "containers": [ctr("a", {"cpu": "1"})],
        },
        {"cpu": 1500},
        id="sidecar-adds-to-app",
    ),
    pytest.param(
        {
            "initContainers": [sidecar("s", {"cpu": "1"}), ctr("i", {"cpu": "2"})],
            "containers": [ctr("a", {"cpu": "1"})],
        },
        {"cpu": 3000},
        id="init-after-sidecar-runs-on-top-of-it",
    ),
    pytest.param(
        {
            "initContainers": [ctr("i", {"cpu": "2"}), sidecar("s", {"cpu": "1"})],
            "containers": [ctr("a", {"cpu": "500m"})],
        },
        {"cpu": 2000},
        id="init-before-sidecar-runs-alone",
    ),
    pytest.param(
        {
            "initContainers": [
                sidecar("s1", {"cpu": "1"}),
                ctr("i1", {"cpu": "1"}),
                sidecar("s2", {"cpu": "1"}),
                ctr("i2", {"cpu": "2500m"}),
            ],
            "containers": [ctr("a", {"cpu": "100m"})],
        },
        # app+sidecars = 2100; i1 = 1+1 = 2000; i2 = 2500+2000 = 4500
        {"cpu": 4500},
        id="each-init-sees-only-earlier-sidecars",
    ),
    pytest.param(
        {
            "initContainers": [ctr("i", {"memory": "4Gi"}), sidecar("s", {"cpu": "1"})],
            "containers": [ctr("a", {"cpu": "1", "memory": "1Gi"})],
        },
        {"cpu": 2000, "memory": 4 * Gi},
        id="max-taken-per-resource-independently",
    ),
    pytest.param(
        {
            "initContainers": [ctr("i", {"cpu": "1"}, restartPolicy="OnFailure")],
            "containers": [ctr("a", {"cpu": "1"})],
        },
        {"cpu": 1000},
        id="non-always-restart-policy-is-plain-init",
    ),
    pytest.param(
        {
            "containers": [ctr("a", {"cpu": "1"})],
            "overhead": {"cpu": "250m", "memory": "120Mi"},
        },
        {"cpu": 1250, "memory": 120 * Mi},
        id="overhead-added",
    ),
    pytest.param(
        {
            "initContainers": [ctr("i", {"cpu": "4"})],
            "containers": [ctr("a", {"cpu": "1"})],
            "overhead": {"cpu": "100m"},
        },
        {"cpu": 4100},
        id="overhead-added-after-init-max",
    ),
    pytest.param(
        {"containers": [ctr("a", None, {"cpu": "2", "memory": "1Gi"})]},
        {"cpu": 2000, "memory": Gi},
        id="limits-default-requests",
    ),
    pytest.param(
        {"containers": [ctr("a", {"cpu": "500m"}, {"cpu": "2", "memory": "1Gi"})]},
        {"cpu": 500, "memory": Gi},
        id="explicit-request-beats-limit",
    ),
    pytest.param(
        {"containers": [ctr("a", {"ephemeral-storage": "1Gi"}, {"example.com/fpga": "2"})]},
        {"example.com/fpga": 2, "ephemeral-storage": Gi},
        id="extended-and-ephemeral",
    ),
    pytest.param(
        {"containers": [ctr("a", {"cpu": "0", "memory": "0"})]},
        {},
        id="zero-requests-dropped",
    ),
    pytest.param({"containers": [{"name": "a"}]}, {}, id="best-effort-requests-nothing"),
]


@pytest.mark.parametrize(("spec", "expected"), REQUEST_CASES)
def test_effective_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    info = pod_info(spec)
    assert info.requests == {**expected, "pods": 1}


def test_gpu_requests_fold_into_gpu_not_plain_requests() -> None:
    info = pod_info(
        {
            "initContainers": [ctr("i", None, {"nvidia.com/gpu": 2})],
            "containers": [ctr("a", {"cpu": "1"}, {"nvidia.com/gpu": 1})],
        }
    )
    assert info.gpu.count == 2  # the init container's two GPUs dominate the app's one
    assert "nvidia.com/gpu" not in info.requests


# ---- QoS class ---------------------------------------------------------------------------------
QOS_CASES = [
    pytest.param([ctr("a")], QOS_BEST_EFFORT, id="nothing-set"),
    pytest.param(
        [ctr("a", None, {"nvidia.com/gpu": 1})], QOS_BEST_EFFORT, id="only-extended-resources"
    ),
    pytest.param([ctr("a", {"cpu": "0"})], QOS_BEST_EFFORT, id="zero-request-does-not-count"),
    pytest.param([ctr("a", {"cpu": "100m"})], QOS_BURSTABLE, id="request-only"),
    pytest.param(
        [ctr("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
        QOS_GUARANTEED,
        id="requests-equal-limits",
    ),
    pytest.param([ctr("a", None, {"cpu": "1", "memory": "1Gi"})], QOS_GUARANTEED, id="limits-only"),
    pytest.param(
        [ctr("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1000m", "memory": "1024Mi"})],
        QOS_GUARANTEED,
        id="equal-values-in-different-units",
    ),
    pytest.param(
        [ctr("a", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
        QOS_BURSTABLE,
        id="request-below-limit",
    ),
    pytest.param(
        [ctr("a", None, {"cpu": "1"})], QOS_BURSTABLE, id="cpu-limit-without-memory-limit"
    ),
    pytest.param(
        [ctr("a", None, {"cpu": "1", "memory": "1Gi"}), ctr("b", {"cpu": "1"})],
        QOS_BURSTABLE,
        id="one-container-without-limits",
    ),
    pytest.param(
        [
            ctr("a", None, {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1}),
            ctr("b", None, {"cpu": "2", "memory": "2Gi"}),
        ],
        QOS_GUARANTEED,
        id="gpu-limit-ignored-for-guaranteed",
    ),
]


@pytest.mark.parametrize(("containers", "expected"), QOS_CASES)
def test_qos_class(containers: list[dict], expected: str) -> None:
    assert pod_info({"containers": containers}).qos == expected


def test_init_container_without_limits_makes_pod_burstable() -> None:
    guaranteed = ctr("a", None, {"cpu": "1", "memory": "1Gi"})
    info = pod_info({"initContainers": [ctr("i", {"cpu": "100m"})], "containers": [guaranteed]})
    assert info.qos == QOS_BURSTABLE


# ---- errors name the object and the field --------------------------------------------------------
ERROR_CASES = [
    pytest.param(
        {"containers": [ctr("a", {"cpu": "1.2.3"})]},
        "spec.containers[0].resources.requests.cpu",
        id="bad-cpu-request",
    ),
    pytest.param(
        {"containers": [ctr("a"), ctr("b", None, {"memory": "10X"})]},
        "spec.containers[1].resources.limits.memory",
        id="bad-limit-second-container",
    ),
    pytest.param(
        {"containers": [ctr("a", {"memory": "-1Gi"})]},
        "spec.containers[0].resources.requests.memory",
        id="negative-request",
    ),
    pytest.param(
        {"initContainers": [ctr("i", {"cpu": "NaN"})], "containers": [ctr("a")]},
        "spec.initContainers[0].resources.requests.cpu",
        id="bad-init-request",
    ),
    pytest.param(
        {"containers": [ctr("a")], "overhead": {"cpu": "lots"}},
        "spec.overhead.cpu",
        id="bad-overhead",
    ),
    pytest.param({"containers": []}, "spec.containers", id="no-containers"),
    pytest.param(
        {"containers": [ctr("a")], "tolerations": [{"key": "k", "operator": "Equals"}]},
        "spec.tolerations[0].operator",
        id="unknown-toleration-operator",
    ),
    pytest.param(
        {"containers": [ctr("a")], "tolerations": [{"operator": "Equal", "value": "v"}]},
        "spec.tolerations[0].operator",
        id="empty-key-needs-exists",
    ),
    pytest.param(
        {
            "containers": [ctr("a")],
            "tolerations": [{"key": "k", "operator": "Exists", "value": "v"}],
        },
        "spec.tolerations[0].value",
        id="exists-with-value",
    ),
    pytest.param(
        {"containers": [ctr("a")], "tolerations": [{"key": "k", "effect": "NoWay"}]},
        "spec.tolerations[0].effect",
        id="unknown-toleration-effect",
    ),
    pytest.param(
        {
            "containers": [ctr("a")],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}]},
                            {"matchExpressions": [{"key": "b", "operator": "Near"}]},
                        ]
                    }
                }
            },
        },
        "spec.affinity.nodeAffinity.required.nodeSelectorTerms[1].matchExpressions[0].operator",
        id="unknown-node-selector-operator",
    ),
    pytest.param(
        {
            "containers": [ctr("a")],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": []}]}
                        ]
                    }
                }
            },
        },
        "spec.affinity.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values",
        id="gt-without-value",
    ),
    pytest.param(
        {
            "containers": [ctr("a")],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}
                        ]
                    }
                }
            },
        },
        "spec.affinity.nodeAffinity.required.nodeSelectorTerms[0].matchFields[0].operator",
        id="match-fields-operator",
    ),
    pytest.param(
        {
            "containers": [ctr("a")],
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 0, "preference": {"matchExpressions": []}}
                    ]
                }
            },
        },
        "spec.affinity.nodeAffinity.preferred[0].weight",
        id="preferred-weight-zero",
    ),
    pytest.param(
        {
            "containers": [ctr("a")],
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": ""}
                    ]
                }
            },
        },
        "spec.affinity.podAntiAffinity[0].topologyKey",
        id="pod-anti-affinity-without-topology-key",
    ),
]


@pytest.mark.parametrize(("spec", "field"), ERROR_CASES)
def test_bad_pods_name_object_and_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        pod_info(spec, name="web-1", namespace="team-a")
    assert caught.value.field == field
    assert caught.value.obj == "Pod team-a/web-1"
    assert str(caught.value).startswith(f"Pod team-a/web-1: field {field}: ")


def test_missing_name_is_reported() -> None:
    with pytest.raises(InvalidObjectError) as caught:
        pod_from_k8s(decode({"metadata": {"generateName": "job-"}, "spec": {}}, Pod))
    assert caught.value.field == "metadata.name"
    assert "job-" in caught.value.obj


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"metadata": {"name": "p"}, "spec": {"priority": "high"}}, "spec.priority"),
        ({"metadata": {"name": "p"}, "spec": {"containers": "nginx"}}, "spec.containers"),
        ({"metadata": {"name": "p", "labels": ["a"]}}, "metadata.labels"),
        (
            {"metadata": {"name": "p"}, "spec": {"tolerations": [{"key": "k", "effect": 3}]}},
            "spec.tolerations[0].effect",
        ),
    ],
    ids=["priority-not-int", "containers-not-list", "labels-not-map", "effect-not-string"],
)
def test_decode_type_errors_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        decode(raw, Pod)
    assert caught.value.field == field
    assert caught.value.obj == "Pod p"


def test_decode_refuses_non_mappings() -> None:
    with pytest.raises(InvalidObjectError, match="expected a mapping"):
        decode(["not", "a", "pod"], Pod)


POD_YAML = """
apiVersion: v1
kind: Pod
metadata:
  name: trainer-0
  namespace: ml
  labels: {app: trainer}
  creationTimestamp: "2024-05-01T10:00:00Z"
spec:
  priority: 100
  nodeSelector: {disktype: ssd}
  tolerations:
  - {operator: Exists}
  containers:
  - name: main
    image: pytorch
    resources:
      requests: {cpu: 1500m, memory: 4Gi}
      limits: {nvidia.com/gpu: 2}
status:
  phase: Pending
"""


def test_yaml_and_json_decode_to_the_same_pod() -> None:
    raw = yaml.safe_load(POD_YAML)
    from_yaml = pod_from_k8s(decode(raw, Pod))
    from_json = pod_from_k8s(decode_json(json.dumps(raw).encode(), Pod))
    for info in (from_yaml, from_json):
        assert info.key == "ml/trainer-0"
        assert info.requests == {"cpu": 1500, "memory": 4 * Gi, "pods": 1}
        assert info.gpu.count == 2
        assert info.priority == 100
        assert info.node_selector == (("disktype", "ssd"),)
        assert info.created == pytest.approx(1714557600.0)
        assert info.qos == QOS_BURSTABLE


def test_decode_json_reports_bad_json_and_types() -> None:
    with pytest.raises(InvalidObjectError, match="not valid JSON"):
        decode_json(b"{nope", Pod)
    with pytest.raises(InvalidObjectError) as caught:
        decode_json(b'{"spec": {"priority": "x"}}', Pod)
    assert caught.value.field == "spec.priority"


# ---- nodes ---------------------------------------------------------------------------------------
def node_raw(name: str = "n1", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": status}


def test_node_allocatable_and_gpus() -> None:
    raw = node_raw(
        allocatable={"cpu": "7800m", "memory": "30Gi", "pods": "110", "nvidia.com/gpu": "4"},
        capacity={"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"},
    )
    raw["metadata"]["labels"] = {"nvidia.com/gpu.product": "A100", "nvidia.com/gpu.memory": "40960"}
    raw["spec"] = {"taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}]}
    info = node_from_k8s(decode(raw, Node))
    assert info.allocatable == {"cpu": 7800, "memory": 30 * Gi, "pods": 110}
    assert (info.gpu_count, info.gpu_memory_mib, info.gpu_model) == (4, 40960, "A100")
    assert info.taints[0].effect == "NoSchedule"


def test_node_falls_back_to_capacity() -> None:
    info = node_from_k8s(decode(node_raw(capacity={"cpu": "4", "pods": 10}), Node))
    assert info.allocatable == {"cpu": 4000, "pods": 10}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (node_raw(allocatable={"cpu": "four"}), "status.allocatable.cpu"),
        (node_raw(capacity={"memory": "-1Gi"}), "status.capacity.memory"),
        (
            {"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "a", "effect": "Never"}]}},
            "spec.taints[0].effect",
        ),
        ({"metadata": {}}, "metadata.name"),
    ],
    ids=["bad-allocatable", "negative-capacity", "bad-taint-effect", "no-name"],
)
def test_bad_nodes_name_object_and_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        node_from_k8s(decode(raw, Node))
    assert caught.value.field == field
    assert str(caught.value).startswith("Node ")


def test_a_bad_gpu_memory_label_keeps_the_node_and_names_the_field() -> None:
    raw = {"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.memory": "40GB"}}}
    info = node_from_k8s(decode(raw, Node), default_gpu_memory_mib=1000)
    assert info.gpu_memory_mib == 1000
    assert [p.field for p in info.problems] == ["metadata.labels[nvidia.com/gpu.memory]"]
    assert info.problems[0].message.startswith("Node n1: ")


def test_node_taint_without_key_is_a_decode_error() -> None:
    with pytest.raises(InvalidObjectError) as caught:
        decode({"metadata": {"name": "n1"}, "spec": {"taints": [{"effect": "NoSchedule"}]}}, Node)
    assert caught.value.obj == "Node n1"
    assert "taints[0]" in caught.value.field
