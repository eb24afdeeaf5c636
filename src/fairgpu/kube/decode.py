"""Watch objects decoded once: a Pod's JSON into a :class:`PodRecord`, a Node's into a
:class:`NodeRecord` (what :class:`~fairgpu.kube.cache.SchedulerCache` applies).

Decoding runs on the reflector threads, so the loop thread only applies ready records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from fairgpu.api import objects as k8s
from fairgpu.api.errors import InvalidObjectError
from fairgpu.model.gpu import ANN_GPU_DEVICES, DEFAULT_NAMES, GpuResourceNames
from fairgpu.model.gpu import decode_gpu_devices as _decode_devices
from fairgpu.model.node import NodeInfo, node_from_k8s
from fairgpu.model.node_pools import NodePoolConfig, derive_placement
from fairgpu.model.pod import PodInfo, bound_pod_holding, invalid_pod, pod_from_k8s

__all__ = [
    "Invalid",
    "NodeRecord",
    "PodRecord",
    "decode_node",
    "decode_pod",
    "or_invalid",
    "parse_time",
    "time_label",
]


@dataclass(frozen=True, slots=True)
class Invalid:
    """A watched object that failed to decode: left out of its store, logged naming the
    field (``error``)."""

    kind: str
    key: str
    error: str


class _NamedMeta(msgspec.Struct):
    name: str = ""
    namespace: str = ""


class _Named(msgspec.Struct):
    metadata: _NamedMeta = msgspec.field(default_factory=_NamedMeta)


_named = msgspec.json.Decoder(_Named)


def or_invalid(kind: str, struct: type, slim: Callable[[Any], Any]) -> Callable[[bytes], Any]:
    """A reflector decoder for ``kind``: ``slim`` of the object decoded as ``struct``, or an
    :class:`Invalid` keyed ``namespace/name`` (as far as the metadata can be read) when
    the object is malformed, so one bad object never stops a watch."""

    def decode(raw: bytes) -> Any:
        try:
            return slim(k8s.decode_json(raw, struct))
        except InvalidObjectError as error:
            try:
                meta = _named.decode(raw).metadata
            except msgspec.MsgspecError:
                meta = _NamedMeta()
            key = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
            return Invalid(kind, key, str(error))

    return decode


@dataclass(slots=True)
class PodRecord:
    """One pod as a watch delivered it, decoded once.

    ``info`` is None for unbound pods of other schedulers (the scheduler never reads them).
    ``devices`` comes from the ``fairgpu.io/gpu-devices`` annotation (None when absent or bad).
    """

    uid: str
    namespace: str
    name: str
    node_name: str
    scheduler_name: str
    phase: str
    deleting: bool
    info: PodInfo | None
    devices: tuple[int, ...] | None = None
    started: float | None = None
    resource_version: str = ""
    nominated: str = ""


@dataclass(slots=True)
class NodeRecord:
    """One node: ``info`` is None when the Node object is malformed (``error`` says why)."""

    name: str
    info: NodeInfo | None
    error: str = ""


def time_label(t: float) -> str:
    """``t`` (epoch seconds) as RFC 3339 UTC, to the second: how the live scheduler writes
    times into annotations and pending pods' reasons."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def time_label_ms(t: float) -> str:
    """``t`` (epoch seconds) as RFC 3339 UTC to the millisecond: :func:`time_label` for
    times a later reader compares with others of the same second (the engine's notes)."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str | None) -> float | None:
    """The epoch seconds of an RFC 3339 time, or None when absent or unreadable."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def decode_pod(
    raw: bytes,
    scheduler_name: str,
    names: GpuResourceNames = DEFAULT_NAMES,
    pools: NodePoolConfig | None = None,
) -> PodRecord:
    """Decode one Pod's JSON; malformed pods of ``scheduler_name`` become ``invalid_pod``,
    malformed bound pods (of any scheduler) what they hold (:func:`bound_pod_holding`)."""
    try:
        pod = k8s.decode_json(raw, k8s.Pod)
    except InvalidObjectError as error:
        data: Any = msgspec.json.decode(raw)
        meta = data.get("metadata", {}) if isinstance(data, dict) else {}
        spec = data.get("spec", {}) if isinstance(data, dict) else {}
        status = data.get("status", {}) if isinstance(data, dict) else {}
        info = invalid_pod(data, error)
        return PodRecord(
            info.uid,
            info.namespace,
            info.name,
            str(spec.get("nodeName") or "") if isinstance(spec, dict) else "",
            str(spec.get("schedulerName") or "default-scheduler") if isinstance(spec, dict) else "",
            str(status.get("phase") or "") if isinstance(status, dict) else "",
            bool(meta.get("deletionTimestamp")) if isinstance(meta, dict) else False,
            info,
        )
    meta, spec = pod.metadata, pod.spec
    rec = PodRecord(
        meta.uid or f"{meta.namespace}/{meta.name}",
        meta.namespace or "default",
        meta.name,
        spec.node_name,
        spec.scheduler_name,
        pod.status.phase,
        meta.deletion_timestamp is not None,
        None,
        started=parse_time(pod.status.start_time),
        resource_version=meta.resource_version,
        nominated=pod.status.nominated_node_name,
    )
    if not spec.node_name and spec.scheduler_name != scheduler_name:
        return rec
    try:
        info = pod_from_k8s(pod, names)
    except InvalidObjectError as error:
        if spec.node_name:  # it holds what it asked on its node all the same
            info = bound_pod_holding(pod, names, error)
        else:
            info = invalid_pod(msgspec.json.decode(raw), error)
    else:
        info.source = None  # keep the cache lean: the scheduler never reads the raw object
        if pools is not None:
            # Bound pods too: the nodes a pod may use are read after it is placed -- its
            # queue's pool-aware fair share counts the pools its running pods may use, and a
            # relocation asks where a victim could run instead. Without the derived affinity
            # a running training pod could run nowhere, and its queue's share dropped to
            # what it had pending (0 with nothing pending).
            info = derive_placement(info, pools)
    rec.info = info
    text = meta.annotations.get(ANN_GPU_DEVICES)
    if text:
        try:
            rec.devices = tuple(d.index for d in _decode_devices(text))
        except ValueError:
            rec.devices = None
    return rec


def decode_node(
    raw: bytes, names: GpuResourceNames = DEFAULT_NAMES, default_gpu_memory_mib: int = 16384
) -> NodeRecord:
    """Decode one Node's JSON (malformed nodes keep their name and the error)."""
    try:
        node = k8s.decode_json(raw, k8s.Node)
        return NodeRecord(node.metadata.name, node_from_k8s(node, names, default_gpu_memory_mib))
    except InvalidObjectError as error:
        data: Any = msgspec.json.decode(raw)
        meta = data.get("metadata", {}) if isinstance(data, dict) else {}
        return NodeRecord(str(meta.get("name", "")), None, str(error))
