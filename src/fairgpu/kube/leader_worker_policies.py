"""Which LeaderWorkerSets restart their pods alone, for the live scheduler's victim costing.

A LeaderWorkerSet group is costed as one victim because its controller, under the default
``restartPolicy``, recreates the whole group when one pod goes
(:mod:`fairgpu.engine.leader_worker_groups`). Under ``restartPolicy: None`` each pod restarts
alone, and costing the group whole spares its pods more than needed. The scheduler lists the
LeaderWorkerSets where the API is served -- at start and then every ``every`` seconds, from a
thread of its own -- and hands the ``namespace/name`` of those that restart pods alone to
``on_change``. Not served, not allowed to list, or unreachable: nothing changes (an unread
set keeps the default, never broken by surprise).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from fairgpu.kube.client import CONNECTION_ERRORS, RestClient
from fairgpu.kube.leader_worker_progress import PATH, restarting_alone
from fairgpu.kube.snapshot import list_objects

__all__ = ["LeaderWorkerPolicies"]

log = logging.getLogger("fairgpu.kube")


class LeaderWorkerPolicies:
    """Lists LeaderWorkerSets and reports the sets whose pods restart alone."""

    def __init__(
        self,
        client: RestClient,
        on_change: Callable[[frozenset[str]], None],
        stop: threading.Event,
    ) -> None:
        self.client = client
        self.on_change = on_change
        self.stop = stop
        self.loose: frozenset[str] | None = None  # the last list's answer (None: none yet)

    def poll(self) -> frozenset[str] | None:
        """The sets whose pods restart alone, or None when they cannot be listed."""
        errors: tuple[type[BaseException], ...] = (RuntimeError, *CONNECTION_ERRORS)
        try:
            keys = list_objects(self.client, PATH, restarting_alone)
        except errors as error:
            log.debug("LeaderWorkerSets not listed", extra={"error": str(error)})
            return None
        return frozenset(k for k in keys if k)

    def start(self, every: float) -> None:
        """Poll now and then every ``every`` seconds until ``stop`` is set."""
        threading.Thread(
            target=self._run, args=(every,), name="leader-worker-policies", daemon=True
        ).start()

    def _run(self, every: float) -> None:
        while True:
            loose = self.poll()
            if loose is not None and loose != self.loose:
                self.loose = loose
                self.on_change(loose)
            if self.stop.wait(max(every, 0.1)):
                return
