"""The pods, nodes and clusters tests are built from, in two forms.

- ``pod_manifest`` / ``node_manifest``: v1 Pod and Node objects as plain dicts, for tests of
  decoding and for anything that wants the Kubernetes form; ``k8s_pod`` / ``k8s_node`` decode
  them exactly as production does (``pod_from_k8s`` / ``node_from_k8s``), so every field the
  tests exercise goes through the real parser.
- ``pod_info`` / ``node_info``: the decoded ``PodInfo`` / ``NodeInfo`` built directly, for
  engine, fairness and GPU-placement tests that only care about amounts; ``cluster`` puts nodes
  and already running pods into a ``ClusterState``.

Units follow the form: manifests take Kubernetes quantities (``cpu="500m"``,
``memory="1Gi"``); the direct builders take scheduler units (milli-CPU, bytes, milli-GPU,
MiB). Keyword arguments that both forms share (``gpus``, ``labels``, ``annotations``,
``priority``, ``duration``, ``group``, ``min_member``, ``queue``, ``user``) give the same
``PodInfo`` fields either way (tests/test_builders.py checks that); ``created`` is the
``PodInfo.created`` value itself for ``pod_info`` but seconds after ``EPOCH`` in a manifest,
whose creationTimestamp is a date.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from fairgpu.api.objects import Node, Pod, decode
from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.model.gpu import WHOLE, GpuRequest
from fairgpu.model.node import NodeInfo, node_from_k8s
from fairgpu.model.pod import (
    ANN_DURATION,
    CPU,
    LABEL_QUEUE,
    LABEL_USER,
    MEMORY,
    PODS,
    QOS_BEST_EFFORT,
    PodInfo,
    pod_from_k8s,
)
from fairgpu.model.pod_requests import overcommit_allowed
from fairgpu.model.selectors import Taint
from fairgpu.tenancy.resolve import LABEL_POD_GROUP
from fairgpu.tenancy.runtimes import MIN_RUNS

GI = 1 << 30
USAGE_KEY = "example.com/node.usage"  # the node-pool label and taint key
GPU = "nvidia.com/gpu"
GPU_PRODUCT = "nvidia.com/gpu.product"
HOSTNAME = "kubernetes.io/hostname"
MIN_MEMBER = "fairgpu.io/min-member"
# ``created`` is seconds after this instant in manifests (creationTimestamp has whole seconds).
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _tenancy(
    labels: dict[str, str] | None,
    annotations: dict[str, str] | None,
    group: str | None,
    min_member: int | None,
    queue: str | None,
    user: str | None,
    duration: float | None,
) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations with the fairgpu tenancy keys the keyword arguments name."""
    out_labels = dict(labels or {})
    out_notes = dict(annotations or {})
    for key, value in ((LABEL_POD_GROUP, group), (LABEL_QUEUE, queue), (LABEL_USER, user)):
        if value is not None:
            out_labels[key] = value
    if min_member is not None:
        out_notes[MIN_MEMBER] = str(min_member)
    if duration is not None:
        out_notes[ANN_DURATION] = str(duration)
    return out_labels, out_notes


# ---- Kubernetes manifests ----------------------------------------------------------------------
def pod_manifest(
    name: str = "p",
    namespace: str = "default",
    *,
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    gpus: int | str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    created: float | None = None,
    duration: float | None = None,
    group: str | None = None,
    min_member: int | None = None,
    queue: str | None = None,
    user: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A v1 Pod with one container named ``main``.

    The container requests ``cpu``, ``memory`` and ``gpus`` (``nvidia.com/gpu``) when given,
    then ``requests`` on top (so ``requests`` wins); ``limits`` are those given, and for a
    resource that cannot be overcommitted (a GPU, any extended resource) its request. No
    request at all is the default, as for a pod that names none. ``created``: seconds after
    ``EPOCH`` (creationTimestamp). ``spec``: further v1 PodSpec fields, camelCase
    (``priority``, ``nodeSelector``, ``affinity``, ``tolerations``, ``schedulerName``...).
    """
    base: dict[str, Any] = {}
    for key, value in ((CPU, cpu), (MEMORY, memory), (GPU, gpus)):
        if value is not None:
            base[key] = value
    asked = {**base, **(requests or {})}
    # A GPU or any resource that cannot be overcommitted is asked as a limit too, equal to
    # its request, or the API server refuses the pod.
    fixed = {k: v for k, v in asked.items() if not overcommit_allowed(k)}
    resources: dict[str, Any] = {"requests": asked}
    if limits or fixed:
        resources["limits"] = {**fixed, **(limits or {})}
    all_labels, notes = _tenancy(labels, annotations, group, min_member, queue, user, duration)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": all_labels}
    if notes:
        meta["annotations"] = notes
    if created is not None:
        stamp = EPOCH + timedelta(seconds=created)
        meta["creationTimestamp"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "resources": resources}], **spec},
    }


def node_manifest(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    cpu: str | int = "8",
    memory: str = "32Gi",
    pods: int = 110,
    gpus: int = 0,
    model: str | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A v1 Node labelled with its hostname (as the kubelet does) and ``labels``.

    ``gpus`` whole ``nvidia.com/gpu`` devices of product ``model`` (the GPU operator's
    ``nvidia.com/gpu.product`` label); ``extra``: more allocatable resources (MIG slices,
    extended resources).
    """
    allocatable: dict[str, Any] = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    if gpus:
        allocatable[GPU] = gpus
    all_labels = {HOSTNAME: name, **(labels or {})}
    if model is not None:
        all_labels[GPU_PRODUCT] = model
    return {
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": allocatable},
    }


def k8s_pod(name: str = "p", namespace: str = "default", **kw: Any) -> PodInfo:
    """``pod_manifest(name, namespace, **kw)`` decoded by ``pod_from_k8s``."""
    return pod_from_k8s(decode(pod_manifest(name, namespace, **kw), Pod))


def k8s_node(name: str, labels: dict[str, str] | None = None, **kw: Any) -> NodeInfo:
    """``node_manifest(name, labels, **kw)`` decoded by ``node_from_k8s``."""
    return node_from_k8s(decode(node_manifest(name, labels, **kw), Node))


def node_affinity(*terms: list[dict[str, Any]], fields: list[dict[str, Any]] | None = None) -> dict:
    """A pod ``affinity`` with required node affinity: one term per list of expressions."""
    out: list[dict[str, Any]] = [{"matchExpressions": t} for t in terms]
    if fields is not None:
        out.append({"matchFields": fields})
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": out}
        }
    }


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    """A node selector requirement (``values`` omitted for Exists / DoesNotExist)."""
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def taint(key: str, value: str, effect: str) -> dict[str, str]:
    """A v1 node taint."""
    return {"key": key, "value": value, "effect": effect}


# ---- decoded structs ---------------------------------------------------------------------------
def pod_info(
    name: str,
    namespace: str = "default",
    *,
    gpus: int = 1,
    milli: int = WHOLE,
    gpu_memory_mib: int = 0,
    models: frozenset[str] | None = None,
    cpu: int = 1000,
    memory: int = GI,
    priority: int = 0,
    created: float = 0.0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    duration: float | None = None,
    group: str | None = None,
    min_member: int | None = None,
    queue: str | None = None,
    user: str | None = None,
    qos: str = QOS_BEST_EFFORT,
    uid: str | None = None,
    **fields: Any,
) -> PodInfo:
    """A ``PodInfo`` asking ``gpus`` devices of ``milli`` compute each (``gpus=0``: none),
    ``cpu`` milli-CPU and ``memory`` bytes.

    ``uid`` defaults to ``namespace/name``, as decoding a pod without one gives; ``fields``:
    any other ``PodInfo`` field (``tolerations``, ``node_selector``, ``owner``...).
    """
    gpu = GpuRequest(gpus, milli, gpu_memory_mib, 0, models) if gpus else GpuRequest()
    all_labels, notes = _tenancy(labels, annotations, group, min_member, queue, user, duration)
    return PodInfo(
        name=name,
        namespace=namespace,
        uid=uid if uid is not None else f"{namespace}/{name}",
        labels=all_labels,
        annotations=notes,
        requests={CPU: cpu, MEMORY: memory, PODS: 1},
        gpu=gpu,
        priority=priority,
        created=created,
        qos=qos,
        **fields,
    )


def node_info(
    name: str,
    *,
    gpus: int = 4,
    model: str = "V100M16",
    gpu_memory_mib: int = 16384,
    cpu: int = 64_000,
    memory: int = 512 * GI,
    pods: int = 110,
    labels: dict[str, str] | None = None,
) -> NodeInfo:
    """A ``NodeInfo`` with ``gpus`` devices of ``model`` (``gpu_memory_mib`` each), ``cpu``
    milli-CPU, ``memory`` bytes and room for ``pods`` pods; ``model`` is also its
    ``nvidia.com/gpu.product`` label. A node without GPUs has no model."""
    all_labels = dict(labels or {})
    if gpus and model:
        all_labels[GPU_PRODUCT] = model
    return NodeInfo(
        name=name,
        labels=all_labels,
        allocatable={CPU: cpu, MEMORY: memory, PODS: pods},
        gpu_count=gpus,
        gpu_memory_mib=gpu_memory_mib,
        gpu_model=model if gpus else "",
    )


def pool_node(name: str, usage: str, *, gpus: int = 8, key: str = USAGE_KEY) -> NodeInfo:
    """A node of ``gpus`` 80 GiB A100s in node pool ``usage``: labelled and tainted
    (``NoSchedule``) with ``key`` = ``usage``, as the node-pool convention does."""
    n = node_info(name, gpus=gpus, model="A100", gpu_memory_mib=81920)
    n.labels = {**n.labels, key: usage}
    n.taints = (Taint(key, usage, "NoSchedule"),)
    return n


def cluster(
    *nodes: NodeInfo,
    placed: Iterable[tuple[PodInfo, str] | tuple[PodInfo, str, float]] | None = None,
) -> ClusterState:
    """A ``ClusterState`` of ``nodes`` (in order) with ``placed`` pods already running.

    Each placed entry is ``(pod, node name)`` or ``(pod, node name, start time)``; a pod asking
    GPUs holds the lowest-numbered devices that are still wholly free (a test that wants a
    share on a particular device calls ``state.assign`` itself).
    """
    state = ClusterState()
    for n in nodes:
        state.add_node(n)
    for entry in placed or ():
        p, where = entry[0], entry[1]
        started = entry[2] if len(entry) == 3 else 0.0
        idx = state.node_index[where]
        devices: tuple[int, ...] = ()
        if p.gpu.count:
            whole = state.device_exists[idx] & (state.device_milli_free[idx] >= WHOLE)
            devices = tuple(int(d) for d in np.flatnonzero(whole)[: p.gpu.count])
        state.assign(p, idx, devices, started=started)
    return state


def learn_run_time(eng: Engine, state: ClusterState, namespace: str, seconds: float) -> None:
    """Let ``eng`` see ``MIN_RUNS`` one-GPU pods of ``namespace`` that declare no run time
    run ``seconds`` each on node slot 0 (from t=0; a cycle then, at ``seconds`` and just
    after they are gone): it then expects that run time of the queue's pods."""
    for i in range(MIN_RUNS):
        state.assign(pod_info(f"done{i}", namespace, gpus=1), 0, (i,), started=0.0)
    eng.cycle(state, [], 0.0)
    eng.cycle(state, [], seconds)
    for i in range(MIN_RUNS):
        state.release(f"{namespace}/done{i}")
    eng.cycle(state, [], seconds + 1)
