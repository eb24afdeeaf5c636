"""Service selectors for PodTopologySpread's default constraints, watched live.

kube-scheduler gives a pod without spread constraints of its own the cluster's default ones
when a Service selects it (the selector then includes the Service's). A
:class:`~fairgpu.kube.reflector.Reflector` on ``/api/v1/services`` decodes each Service to
``(namespace, name, selector)``; :class:`ServiceStore` applies those events on the scheduler
loop's thread and publishes ``ClusterState.service_selectors`` (namespace -> selectors). The
published mapping is replaced, never mutated.
"""

from __future__ import annotations

import logging
from typing import Any

from fairgpu.api import objects as k8s
from fairgpu.api.errors import InvalidObjectError
from fairgpu.cluster.state import ClusterState
from fairgpu.kube.client import RestClient
from fairgpu.kube.reflector import Reflector, Sink

PATH = "/api/v1/services"

log = logging.getLogger("fairgpu.kube.services")

#: ``(namespace, name, selector)``; an empty selector selects no pod.
ServiceRecord = tuple[str, str, dict[str, str]]


def decode_service(raw: bytes) -> ServiceRecord:
    """``(namespace, name, selector)`` of one Service's JSON; a malformed one is logged (with
    the field) and kept without a selector, so it selects nothing."""
    try:
        svc = k8s.decode_json(raw, k8s.Service)
    except InvalidObjectError as error:
        log.warning("ignoring a Service's selector: %s", error)
        return ("", "", {})
    return svc.metadata.namespace, svc.metadata.name, dict(svc.spec.selector or {})


class ServiceStore:
    """The selector of every Service, kept in step with the reflector's events."""

    def __init__(self) -> None:
        self.selectors: dict[tuple[str, str], dict[str, str]] = {}

    def apply(self, etype: str, payload: Any, cluster: ClusterState) -> bool:
        """Apply one reflector event (``SYNC`` with a list, or one record); publish the
        selectors to ``cluster`` and return True if any changed."""
        if etype == "SYNC":
            new = {(ns, name): sel for ns, name, sel in payload if name and sel}
        else:
            ns, name, selector = payload
            if not name:
                return False
            new = dict(self.selectors)
            if etype == "DELETED" or not selector:
                new.pop((ns, name), None)
            else:
                new[(ns, name)] = selector
        if new == self.selectors:
            return False
        self.selectors = new
        published: dict[str, list[dict[str, str]]] = {}
        for (ns, _name), selector in sorted(new.items()):
            published.setdefault(ns, []).append(selector)
        cluster.service_selectors = published
        return True


def service_reflector(client: RestClient, sink: Sink) -> Reflector:
    """A reflector over all Services feeding ``sink`` with :data:`ServiceRecord` items."""
    return Reflector(client, PATH, decode_service, sink, name="services")
