"""The PodGroup watches: one reflector per PodGroup API the cluster serves, found at start and
then periodically (a CRD installed after the start is picked up), and the book the loop
thread applies their events to (:class:`~fairgpu.kube.podgroups.PodGroupBook`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from fairgpu.kube.client import CONNECTION_ERRORS, RestClient
from fairgpu.kube.podgroups import (
    POD_GROUP_APIS,
    PodGroupBook,
    decode_pod_group,
    served_pod_group_paths,
)
from fairgpu.kube.reflector import Reflector, stop_all

__all__ = ["PodGroupWatch"]

log = logging.getLogger("fairgpu.kube")

#: ``sink(path, event_type, payload)``: an event of the reflector of API ``path``.
PodGroupSink = Callable[[str, str, Any], None]


class PodGroupWatch:
    """Reflectors of the served PodGroup APIs (``reflectors``) and their ``book``."""

    def __init__(self, client: RestClient, sink: PodGroupSink, stop: threading.Event) -> None:
        self.client = client
        self.sink = sink
        self._stop = stop
        self.reflectors: list[Reflector] = []
        self.book = PodGroupBook()

    def start(self, every: float) -> None:
        """Discover now, then every ``every`` seconds (0: never again) until stopped."""
        self.discover()
        threading.Thread(
            target=self._rediscover, args=(every,), name="podgroup-discovery", daemon=True
        ).start()

    def discover(self) -> None:
        """Watch the PodGroup kinds whose CRDs are installed (coscheduling, Volcano) and not
        watched yet."""
        try:
            paths = served_pod_group_paths(self.client)
        except CONNECTION_ERRORS as error:
            log.warning("cannot discover PodGroup APIs yet", extra={"error": str(error)})
            return
        watched = {r.path for r in self.reflectors}
        paths = [p for p in paths if p not in watched]
        if not paths or self._stop.is_set():
            return
        for path in paths:

            def sink(etype: str, obj: Any, path: str = path) -> None:
                self.sink(path, etype, obj)

            reflector = Reflector(
                self.client, path, decode_pod_group, sink, name=path.rsplit("/", 2)[0]
            )
            self.reflectors.append(reflector.start())
        log.info("watching PodGroups", extra={"paths": paths})

    def _rediscover(self, every: float) -> None:
        while every > 0 and not self._stop.wait(every):
            if len(self.reflectors) < len(POD_GROUP_APIS):
                self.discover()

    def synced(self) -> bool:
        """True once every PodGroup reflector has listed."""
        return all(r.synced.is_set() for r in self.reflectors)

    def stop(self) -> None:
        """Stop the reflectors (discovery ends with the ``stop`` event)."""
        stop_all(self.reflectors)
