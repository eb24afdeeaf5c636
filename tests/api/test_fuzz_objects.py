"""Property tests: malformed quantities and objects either decode or fail with a clear error.

Whatever the input, ``decode`` + ``pod_from_k8s``/``node_from_k8s`` must return a value or raise
:class:`InvalidObjectError` whose message starts with the object and names a field, never any
other exception.
"""

from __future__ import annotations

import copy
import os
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairgpu.api.errors import InvalidObjectError
from fairgpu.api.objects import Node, Pod, decode, decode_json
from fairgpu.api.quantity import QuantityError, parse_quantity
from fairgpu.model.node import node_from_k8s
from fairgpu.model.pod import parse_resource, pod_from_k8s

SETTINGS = settings(
    max_examples=int(os.environ.get("FAIRGPU_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

quantity_chars = st.sampled_from([*"0123456789.+-eEiKMGTPnumk xX_,/", "Ki", "Mi", "Gi"])
quantity_text = st.one_of(
    st.text(max_size=12),
    st.lists(quantity_chars, max_size=10).map("".join),
    st.from_regex(
        r"[+-]?[0-9]{0,4}(\.[0-9]{0,3})?([eE][+-]?[0-9]{1,3}|[KMGTPE]i?|[numk])?", fullmatch=True
    ),
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    quantity_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@SETTINGS
@given(quantity_text)
def test_quantity_text_parses_or_raises_quantity_error(text: str) -> None:
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    assert isinstance(value, Fraction)
    assert text.strip() == text and text  # accepted text is never padded or empty


@SETTINGS
@given(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), json_values)
def test_resource_amounts_are_non_negative_int64_or_refused(name: str, value: Any) -> None:
    try:
        amount = parse_resource(name, value)
    except QuantityError:
        return
    assert isinstance(amount, int)
    assert 0 <= amount < 2**63


POD_TEMPLATE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "fuzz",
        "namespace": "ns",
        "labels": {"app": "x"},
        "annotations": {"fairgpu.io/gpu-models": "A100"},
        "creationTimestamp": "2024-01-01T00:00:00Z",
        "ownerReferences": [{"kind": "Job", "name": "j", "uid": "u", "controller": True}],
    },
    "spec": {
        "priority": 10,
        "priorityClassName": "high",
        "nodeName": "",
        "nodeSelector": {"zone": "a"},
        "overhead": {"cpu": "10m"},
        "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
        "initContainers": [
            {"name": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
        ],
        "containers": [
            {
                "name": "c",
                "resources": {
                    "requests": {"cpu": "500m", "memory": "1Gi"},
                    "limits": {
                        "nvidia.com/gpu": 1,
                        "nvidia.com/gpumem": 1024,
                        "nvidia.com/gpucores": 50,
                    },
                },
            }
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [{"key": "z", "operator": "Gt", "values": ["1"]}],
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n"]}
                            ],
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 5,
                        "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                    }
                ],
            },
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "x"}}}
                ],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 3,
                        "podAffinityTerm": {
                            "topologyKey": "zone",
                            "namespaceSelector": {},
                            "labelSelector": {
                                "matchExpressions": [
                                    {"key": "app", "operator": "In", "values": ["x"]}
                                ]
                            },
                        },
                    }
                ],
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}
                ]
            },
        },
    },
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
}

NODE_TEMPLATE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "node-1",
        "labels": {"nvidia.com/gpu.memory": "40960", "nvidia.com/gpu.product": "A100"},
    },
    "spec": {
        "unschedulable": False,
        "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}],
    },
    "status": {
        "allocatable": {"cpu": "7900m", "memory": "60Gi", "pods": "110", "nvidia.com/gpu": "4"},
        "capacity": {"cpu": "8", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "4"},
    },
}


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out += _paths(value, (*prefix, i))
    return out


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


@st.composite
def mutated(draw: st.DrawFn, template: dict[str, Any]) -> dict[str, Any]:
    """The template with 1-4 fields replaced by arbitrary JSON values (or deleted)."""
    obj = copy.deepcopy(template)
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(obj)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = obj
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and draw(st.booleans()) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            _set(obj, path, draw(json_values))
    return obj


def _check_error(error: InvalidObjectError, kind: str) -> None:
    text = str(error)
    assert error.obj.startswith(kind)
    assert error.field
    assert text.startswith(f"{error.obj}: field {error.field}: ")


@SETTINGS
@given(mutated(POD_TEMPLATE))
def test_malformed_pods_decode_or_raise_invalid_object_error(raw: dict[str, Any]) -> None:
    try:
        pod_from_k8s(decode(raw, Pod))
    except InvalidObjectError as error:
        _check_error(error, "Pod")


@SETTINGS
@given(mutated(NODE_TEMPLATE))
def test_malformed_nodes_decode_or_raise_invalid_object_error(raw: dict[str, Any]) -> None:
    try:
        node_from_k8s(decode(raw, Node))
    except InvalidObjectError as error:
        _check_error(error, "Node")


@SETTINGS
@given(st.binary(max_size=64) | json_values.map(lambda v: repr(v).encode()))
def test_garbage_json_bytes_raise_invalid_object_error(data: bytes) -> None:
    try:
        pod_from_k8s(decode_json(data, Pod))
    except InvalidObjectError as error:
        _check_error(error, "Pod")


def test_templates_are_valid() -> None:
    # The mutation tests start from objects that decode cleanly.
    info = pod_from_k8s(decode(POD_TEMPLATE, Pod))
    assert info.requests["cpu"] == 1510  # sidecar 1 + app 0.5 + overhead 10m
    assert node_from_k8s(decode(NODE_TEMPLATE, Node)).gpu_count == 4
