"""Small builders for engine tests: v1 objects as dicts, decoded the way production decodes them."""

from __future__ import annotations

from typing import Any

import numpy as np

from fairgpu.api.objects import Node, Pod, decode
from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState, FilterPlugin, FilterResult
from fairgpu.engine.profile import Profile, ScoreRef
from fairgpu.engine.scheduler import Scheduler
from fairgpu.model.node import NodeInfo, node_from_k8s
from fairgpu.model.pod import PodInfo, pod_from_k8s


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
    """A Node decoded from its v1 form."""
    allocatable: dict[str, Any] = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    if gpus:
        allocatable["nvidia.com/gpu"] = gpus
    raw = {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": allocatable},
    }
    return node_from_k8s(decode(raw, Node))


def pod(
    name: str = "p",
    namespace: str = "default",
    requests: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> PodInfo:
    """A Pod decoded from its v1 form; ``spec`` keys are v1 PodSpec fields (camelCase)."""
    raw = {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "containers": [{"name": "main", "resources": {"requests": requests or {}}}],
            **spec,
        },
    }
    return pod_from_k8s(decode(raw, Pod))


def cluster(*nodes: NodeInfo, placed: list[tuple[PodInfo, str]] | None = None) -> ClusterState:
    """A ClusterState with ``nodes`` and the given pods already assigned by node name."""
    state = ClusterState()
    for n in nodes:
        state.add_node(n)
    for p, node_name in placed or []:
        state.assign(p, state.node_index[node_name])
    return state


def profile(filters: list[str], scores: dict[str, int] | None = None, **kw: Any) -> Profile:
    """A profile with only the named filters and weighted scores."""
    refs = [ScoreRef(name=n, weight=w) for n, w in (scores or {}).items()]
    return Profile(pre_filters=[], filters=filters, scores=refs, **kw)


def feasible(filters: list[str], p: PodInfo, state: ClusterState) -> list[str]:
    """Names of the nodes that pass ``filters`` for pod ``p``."""
    mask, _ = Scheduler(profile(filters)).filter(p, state)
    return sorted(state.node(int(i)).name for i in np.flatnonzero(mask))


def run_filter(plugin: FilterPlugin, p: PodInfo, state: ClusterState) -> FilterResult:
    """One filter's FilterResult (a bare mask is wrapped)."""
    result = plugin.filter(CycleState(), p, state)
    return result if isinstance(result, FilterResult) else FilterResult(np.asarray(result))


def node_affinity(*terms: list[dict[str, Any]], fields: list[dict] | None = None) -> dict:
    """``affinity`` with required node affinity: one term per ``terms`` list of expressions."""
    out = [{"matchExpressions": t} for t in terms]
    if fields is not None:
        out.append({"matchFields": fields})
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": out}
        }
    }


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    """A node selector requirement."""
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out
