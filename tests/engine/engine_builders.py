"""Former engine-test builders, kept for test files that still import them: the old
signatures over ``tests.builders`` and ``tests.engine.profiles``."""

from __future__ import annotations

from typing import Any

from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import PodInfo
from tests.builders import cluster, expr, k8s_node, k8s_pod, node_affinity
from tests.engine.profiles import feasible, profile, run_filter

__all__ = [
    "cluster",
    "expr",
    "feasible",
    "node",
    "node_affinity",
    "pod",
    "profile",
    "run_filter",
]


def node(
    name: str,
    cpu: str | int = "8",
    memory: str = "32Gi",
    pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    gpus: int = 0,
    extra: dict[str, Any] | None = None,
) -> NodeInfo:
    """``k8s_node`` with the old positional order."""
    return k8s_node(
        name,
        labels,
        cpu=cpu,
        memory=memory,
        pods=pods,
        taints=taints,
        unschedulable=unschedulable,
        gpus=gpus,
        extra=extra,
    )


def pod(
    name: str = "p",
    namespace: str = "default",
    requests: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> PodInfo:
    """``k8s_pod`` with the old positional order."""
    return k8s_pod(name, namespace, requests=requests, labels=labels, **spec)
