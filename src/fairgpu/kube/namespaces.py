"""Namespace labels for inter-pod affinity's ``namespaceSelector``, watched live.

A :class:`~fairgpu.kube.reflector.Reflector` on ``/api/v1/namespaces`` decodes each Namespace
to ``(name, labels)``; :class:`NamespaceStore` applies those events on the scheduler loop's
thread and publishes the result as ``ClusterState.namespace_labels``. The published mapping is
replaced, never mutated, so plugins that cache per mapping see every change.
"""

from __future__ import annotations

from typing import Any

from fairgpu.api import objects as k8s
from fairgpu.api.errors import InvalidObjectError
from fairgpu.cluster.state import ClusterState
from fairgpu.kube.client import RestClient
from fairgpu.kube.reflector import Reflector, Sink

PATH = "/api/v1/namespaces"

NamespaceRecord = tuple[str, dict[str, str]]


def decode_namespace(raw: bytes) -> NamespaceRecord:
    """``(name, labels)`` of one Namespace's JSON; a malformed one keeps no labels."""
    try:
        ns = k8s.decode_json(raw, k8s.Namespace)
    except InvalidObjectError:
        return ("", {})
    return ns.metadata.name, dict(ns.metadata.labels)


class NamespaceStore:
    """The labels of every Namespace, kept in step with the reflector's events."""

    def __init__(self) -> None:
        self.labels: dict[str, dict[str, str]] = {}

    def apply(self, etype: str, payload: Any, cluster: ClusterState) -> bool:
        """Apply one reflector event (``SYNC`` with a list, or one record); publish the
        labels to ``cluster`` and return True if anything changed."""
        if etype == "SYNC":
            new = {name: labels for name, labels in payload if name}
        else:
            name, labels = payload
            if not name:
                return False
            new = dict(self.labels)
            if etype == "DELETED":
                new.pop(name, None)
            else:
                new[name] = labels
        if new == self.labels:
            return False
        self.labels = new
        cluster.namespace_labels = new
        return True


def namespace_reflector(client: RestClient, sink: Sink) -> Reflector:
    """A reflector over all Namespaces feeding ``sink`` with :data:`NamespaceRecord` items."""
    return Reflector(client, PATH, decode_namespace, sink, name="namespaces")
