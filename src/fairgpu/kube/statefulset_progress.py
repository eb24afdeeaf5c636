"""What a forecast reads of a live StatefulSet: the pods its controller is still to create.

With the default ``podManagementPolicy: OrderedReady`` the StatefulSet controller creates pod
``i`` only once pods ``0 .. i-1`` run and are ready, so a StatefulSet scaled to more replicas
than it has pods has only the first few in the cluster; a forecast over those alone would
see the rest of them never come, and could not say when the last one runs.
:func:`decode_statefulset` reads one StatefulSet's JSON; :func:`sets_ahead` pairs it with
its pods in a snapshot, as :class:`~fairgpu.sim.statefulset_controller.SetAhead`: the
missing ordinals in order, each created once the one before it starts -- the first once the
lowest of its pods still waiting starts (the controller creates none past it), or at once
when none waits -- made from its template as its controller makes them
(:func:`~fairgpu.sim.workloads.statefulsets.expand_statefulset`) and decoded as the
scheduler decodes a pod. ``Parallel`` StatefulSets create their missing pods at once.

Only StatefulSets whose pods this scheduler places count; one being deleted, scaled down or
complete creates nothing. A StatefulSet that cannot be read is left out of forecasts, never
an error: the scheduler does not manage StatefulSets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from fairgpu.cluster.state import ClusterState
from fairgpu.model.pod import PodInfo
from fairgpu.sim.job_backlog import future_pod
from fairgpu.sim.statefulset_controller import SetAhead
from fairgpu.sim.workload import PodArrival
from fairgpu.sim.workloads.kube_jobs import JobError
from fairgpu.sim.workloads.statefulsets import LABEL_POD_INDEX, expand_statefulset

__all__ = [
    "PATH",
    "StatefulSetRecord",
    "decode_statefulset",
    "pod_made",
    "read_controller",
    "sets_ahead",
]

PATH = "/apis/apps/v1/statefulsets"

#: Decodes one pod's JSON as the scheduler does; None when it is not this scheduler's.
PodDecoder = Callable[[bytes], PodInfo | None]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StatefulSetRecord:
    """One StatefulSet as a forecast reads it: ``key`` (namespace/name), ``uid`` (its pods'
    controller owner), whether its pods come in order, and the pods its template makes,
    decoded, by ordinal (its ``replicas`` of them)."""

    key: str
    uid: str
    ordered: bool
    pods: tuple[PodInfo, ...]


def read_controller(
    raw: bytes, expand: Callable[[Path, dict[str, Any]], T]
) -> tuple[str, T] | None:
    """A controller object's uid and what ``expand`` makes of it (its pods' documents, as
    the simulator's workloads make them); None when it cannot be read or is being deleted."""
    try:
        doc = msgspec.json.decode(raw)
        meta = doc["metadata"]
        if meta.get("deletionTimestamp") or not meta.get("uid"):
            return None
        return meta["uid"], expand(Path("cluster"), doc)
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError, JobError):
        return None


def pod_made(pod_doc: dict[str, Any], owner: str, decode_pod: PodDecoder) -> PodInfo | None:
    """A pod the controller of uid ``owner`` makes, decoded as the scheduler decodes a pod
    (uid ``<owner>/<name>``); None when it is another scheduler's or cannot be placed."""
    pod_doc["metadata"]["uid"] = f"{owner}/{pod_doc['metadata']['name']}"
    pod = decode_pod(json.dumps(pod_doc).encode())
    return None if pod is None or pod.error else pod


def decode_statefulset(raw: bytes, decode_pod: PodDecoder) -> StatefulSetRecord | None:
    """One StatefulSet's pods as its controller makes them (None: it cannot be read, is
    being deleted, or its pods are another scheduler's or cannot be decoded)."""
    read = read_controller(raw, expand_statefulset)
    if read is None:
        return None
    uid, made = read
    pods = []
    for pod_doc in made.pods:
        pod_doc["metadata"]["ownerReferences"][0]["uid"] = uid
        pod = pod_made(pod_doc, uid, decode_pod)
        if pod is None:
            return None
        pods.append(pod)
    return StatefulSetRecord(made.key, uid, made.ordered, tuple(pods))


def sets_ahead(
    records: Iterable[StatefulSetRecord],
    cluster: ClusterState,
    pending: Iterable[PodInfo],
    now: float,
    runtime: Callable[[PodInfo], float | None],
) -> list[SetAhead]:
    """The StatefulSets of ``records`` still to create pods, as a forecast from ``now``
    continues them (see the module docstring); the pods to come run ``runtime(pod)``
    seconds."""
    waiting: dict[str, list[PodInfo]] = {}
    present: dict[str, set[int]] = {}
    for pod, is_waiting in _owned(cluster, pending):
        index = _ordinal(pod)
        if index is None:
            continue
        present.setdefault(pod.owner, set()).add(index)
        if is_waiting:
            waiting.setdefault(pod.owner, []).append(pod)
    out = []
    for rec in records:
        have = present.get(rec.uid, set())
        missing = [p for i, p in enumerate(rec.pods) if i not in have]
        if not missing:
            continue
        future = tuple(PodArrival(_copy(p, now), now, runtime(p)) for p in missing)
        gate = ""
        if rec.ordered and waiting.get(rec.uid):
            gate = min(waiting[rec.uid], key=lambda p: _ordinal(p) or 0).uid
        key = f"StatefulSet {rec.key}"
        out.append(SetAhead(key, gate, future, not rec.ordered, rec.uid, len(rec.pods)))
    return out


def _owned(cluster: ClusterState, pending: Iterable[PodInfo]) -> Iterable[tuple[PodInfo, bool]]:
    """The StatefulSets' pods: running ones (not terminating: their controller is about to
    create them again) and waiting ones, each with whether it waits."""
    for uid, pod in cluster.pods.items():
        placement = cluster.placements.get(uid)
        if pod.owner_kind == "StatefulSet" and placement is not None and not placement.terminating:
            yield pod, False
    for pod in pending:
        if pod.owner_kind == "StatefulSet":
            yield pod, True


def _ordinal(pod: PodInfo) -> int | None:
    """A StatefulSet pod's ordinal (its index label, else its name's suffix)."""
    text = pod.labels.get(LABEL_POD_INDEX) or pod.name.rpartition("-")[2]
    return int(text) if text.isdigit() else None


def _copy(pod: PodInfo, now: float) -> PodInfo:
    """The template's pod as created at ``now``."""
    return future_pod(pod, pod.name, pod.uid, now)
