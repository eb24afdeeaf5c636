"""Members of pod groups that ran to completion, watched live.

The pod watch leaves finished pods out, as kube-scheduler's does: they hold nothing. But a pod
group's member that Succeeded still counts toward its group's minMember
(:meth:`~fairgpu.cluster.state.ClusterState.complete`): when a scheduler stopped between two
binds of one group, or a bind's reply was lost with the API server, the members bound run
and may finish before the last one is bound -- it must still start, not wait for good for
siblings that will never run again. So a second reflector lists and watches the Succeeded
pods; :func:`decode_completed` keeps those that name a pod group (identity, labels and
annotations: what the resolver reads to find the group) and :func:`apply_completed` keeps
``ClusterState.completed`` in step, until each pod object is deleted.
"""

from __future__ import annotations

from typing import Any

import msgspec

from fairgpu.cluster.state import ClusterState
from fairgpu.kube.client import RestClient
from fairgpu.kube.reflector import Reflector, Sink
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.resolve import group_label

SUCCEEDED_PATH = "/api/v1/pods"
SUCCEEDED_PARAMS = {"fieldSelector": "status.phase=Succeeded"}


class _Meta(msgspec.Struct, rename="camel"):
    name: str = ""
    namespace: str = "default"
    uid: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class _Pod(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


_decoder = msgspec.json.Decoder(_Pod)


def decode_completed(raw: bytes) -> PodInfo | None:
    """A Succeeded pod's JSON as the member of a pod group it was (None: in no group, or
    unreadable -- it then counts for no group, which only delays a straggler)."""
    try:
        meta = _decoder.decode(raw).metadata
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    pod = PodInfo(
        name=meta.name,
        namespace=meta.namespace,
        uid=meta.uid or f"{meta.namespace}/{meta.name}",
        labels=meta.labels or {},
        annotations=meta.annotations or {},
    )
    return pod if group_label(pod) is not None else None


def apply_completed(cluster: ClusterState, etype: str, payload: Any) -> bool:
    """Apply one reflector event (``SYNC`` with a list, or one decoded pod) to
    ``cluster.completed``; True if it changed."""
    before = cluster.completed_version
    if etype == "SYNC":
        listed = {p.uid: p for p in payload if p is not None}
        for uid in [u for u in cluster.completed if u not in listed]:
            cluster.forget_completed(uid)
        for pod in listed.values():
            cluster.complete(pod)
    elif payload is not None:
        if etype == "DELETED":
            cluster.forget_completed(payload.uid)
        else:
            cluster.complete(payload)
    return cluster.completed_version != before


def completed_reflector(client: RestClient, sink: Sink) -> Reflector:
    """A reflector over Succeeded pods feeding ``sink`` with :func:`decode_completed`'s
    results."""
    return Reflector(
        client, SUCCEEDED_PATH, decode_completed, sink, params=SUCCEEDED_PARAMS, name="completed"
    )
