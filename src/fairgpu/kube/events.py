"""The live scheduler's event bus: what the watch, bind and eviction threads hand the loop.

Every producer puts one of these frozen records on the loop's queue; the loop thread alone
applies them (to the cache, the PodGroup book, the engine), so nothing it owns is changed
concurrently with a cycle. ``etype`` is a watch event type (``ADDED``, ``MODIFIED``,
``DELETED``) or ``SYNC`` after a (re)list, when ``obj`` is the full list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairgpu.engine.engine import Bind
from fairgpu.kube.decode import PodRecord
from fairgpu.model.pod import PodInfo

__all__ = [
    "BindResult",
    "CompletedEvent",
    "DraEvent",
    "EvictResult",
    "JobEvent",
    "LoopEvent",
    "NamespaceEvent",
    "NodeEvent",
    "PodEvent",
    "PodGroupEvent",
    "ServiceEvent",
    "VolumeEvent",
    "Wake",
]


@dataclass(frozen=True, slots=True)
class PodEvent:
    """A Pod watch event: ``obj`` is a :class:`~fairgpu.kube.decode.PodRecord` (a list of
    them for ``SYNC``)."""

    etype: str
    obj: Any


@dataclass(frozen=True, slots=True)
class CompletedEvent:
    """A watch event of Succeeded pods: ``obj`` is the pod group member it was, or None
    (:func:`~fairgpu.kube.completed.decode_completed`; a list of them for ``SYNC``)."""

    etype: str
    obj: Any


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A Node watch event: ``obj`` is a :class:`~fairgpu.kube.decode.NodeRecord` (a list of
    them for ``SYNC``)."""

    etype: str
    obj: Any


@dataclass(frozen=True, slots=True)
class PodGroupEvent:
    """A PodGroup watch event from the reflector of API ``path`` (coscheduling or Volcano):
    ``obj`` is a :class:`~fairgpu.kube.podgroups.PodGroupObject` (a list for ``SYNC``)."""

    path: str
    etype: str
    obj: Any


@dataclass(frozen=True, slots=True)
class JobEvent:
    """A Job watch event: ``obj`` is a :data:`~fairgpu.kube.jobs.JobRecord` (a list of them
    for ``SYNC``), as :meth:`~fairgpu.kube.jobs.JobStore.apply` takes it."""

    etype: str
    obj: Any


@dataclass(frozen=True, slots=True)
class NamespaceEvent:
    """A Namespace watch event: ``obj`` is ``(name, labels)`` (a list of them for ``SYNC``),
    as :meth:`~fairgpu.kube.namespaces.NamespaceStore.apply` takes it."""

    etype: str
    obj: Any


@dataclass(frozen=True, slots=True)
class ServiceEvent:
    """A Service watch event: ``obj`` is ``(namespace, name, selector)`` (a list of them for
    ``SYNC``), as :meth:`~fairgpu.kube.services.ServiceStore.apply` takes it."""

    etype: str
    obj: Any


@dataclass(frozen=True, slots=True)
class VolumeEvent:
    """A storage watch event: ``obj`` is ``(kind, object)`` as
    :meth:`~fairgpu.kube.volumes.VolumeWatch.apply` takes it."""

    etype: str
    obj: tuple[str, Any]


@dataclass(frozen=True, slots=True)
class DraEvent:
    """A DeviceClass, ResourceSlice or ResourceClaim watch event: ``obj`` is ``(kind,
    object)`` as :meth:`~fairgpu.kube.dra_watch.DraWatch.apply` takes it."""

    etype: str
    obj: tuple[str, Any]


@dataclass(frozen=True, slots=True)
class BindResult:
    """The outcome of one bind: HTTP ``status`` (0: the API stayed unreachable) and message;
    ``pod_gone``: the Binding itself found no pod of that name and uid (not a volume's or
    claim's pre-bind step failing with 404); ``current``: after a 409, the pod as the API
    then had it (decoded as the pod watch decodes it), when it could be read."""

    status: int
    message: str
    bind: Bind
    pod_gone: bool = False
    current: PodRecord | None = None


@dataclass(frozen=True, slots=True)
class EvictResult:
    """The outcome of one Eviction: HTTP ``status`` (0: the API stayed unreachable)."""

    status: int
    message: str
    victim: PodInfo


@dataclass(frozen=True, slots=True)
class Wake:
    """No change: wakes the loop (a stop request, a won lease)."""


#: Everything the loop's queue carries.
LoopEvent = (
    PodEvent
    | CompletedEvent
    | NodeEvent
    | NamespaceEvent
    | JobEvent
    | ServiceEvent
    | PodGroupEvent
    | VolumeEvent
    | DraEvent
    | BindResult
    | EvictResult
    | Wake
)
