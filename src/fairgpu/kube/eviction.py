"""Eviction I/O: ``policy/v1`` Evictions of the engine's victims on a small thread pool, and
the loop-side handling of each result (HTTP 429: a PodDisruptionBudget refused it)."""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable

from fairgpu.engine.engine import Evict
from fairgpu.kube.cache import CacheChanges, SchedulerCache
from fairgpu.kube.client import CONNECTION_ERRORS, RestClient
from fairgpu.kube.events import EvictResult, LoopEvent
from fairgpu.kube.loop_calls import LoopCalls
from fairgpu.kube.metrics import Metrics
from fairgpu.kube.preemption_hold import PreemptionHolds
from fairgpu.model.pod import PodInfo

__all__ = ["Evictor"]

log = logging.getLogger("fairgpu.kube")


class Evictor(LoopCalls):
    """Posts the engine's evictions; :meth:`done` applies a result on the loop thread.

    Args:
        client: the API client (rate-limited).
        events: the loop's queue, where each eviction's :class:`EvictResult` goes.
        cache: the loop's cache (only bound pods are evicted).
        metrics: preemption and eviction counters.
        holds: the preemptors waiting for their victims.
        pdb_backoff: seconds a victim whose eviction a PodDisruptionBudget refused is spared.
        on_evicted: called (loop thread) with each eviction the API server accepted.
    """

    def __init__(
        self,
        client: RestClient,
        events: queue.Queue[LoopEvent],
        cache: SchedulerCache,
        metrics: Metrics,
        holds: PreemptionHolds,
        pdb_backoff: float,
        on_evicted: Callable[[Evict], None] | None = None,
    ) -> None:
        super().__init__(client, events, cache, metrics, 4, "evict")
        self.holds = holds
        self.pdb_backoff = pdb_backoff
        self.on_evicted = on_evicted
        self._posted: dict[str, Evict] = {}  # victim uid -> its eviction, until the result

    def evict(self, ev: Evict) -> None:
        """Post the eviction of one victim the engine chose (loop thread)."""
        victim = ev.pod
        if victim.uid not in self.cache.bound:
            # An Eviction of an unbound pod deletes it outright: never send one. (The engine
            # does not choose such victims; a gang timeout may release a member not bound yet.)
            self.metrics.evictions.labels("skipped_unbound").inc()
            log.warning("not evicting a pod that is not bound", extra={"pod": victim.key})
            return
        self.metrics.preemptions.labels(ev.kind or "unknown").inc()
        self.holds.evicting(victim, ev.preemptor.uid if ev.preemptor is not None else None)
        self._posted[victim.uid] = ev
        log.info(
            "evicting",
            extra={
                "pod": victim.key,
                "kind": ev.kind,
                "reason": ev.reason,
                "preemptor": ev.preemptor.key if ev.preemptor is not None else None,
            },
        )
        self.pool.submit(self._evict_call, victim)

    def _evict_call(self, victim: PodInfo) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": victim.name, "namespace": victim.namespace},
            "deleteOptions": {"preconditions": {"uid": victim.uid}},
        }
        path = f"/api/v1/namespaces/{victim.namespace}/pods/{victim.name}/eviction"
        status, message = 0, ""
        for attempt in range(5):
            try:
                r = self.client.request("POST", path, body)
                status, message = r.status, r.message
                break
            except CONNECTION_ERRORS as error:
                message = str(error)
                time.sleep(0.2 * 2**attempt)
        self.events.put(EvictResult(status, message, victim))

    def done(self, result: EvictResult, now: float, out: CacheChanges) -> None:
        """Apply an eviction's result (loop thread)."""
        status, message, victim = result.status, result.message, result.victim
        m = self.metrics
        ev = self._posted.pop(victim.uid, None)
        # 404: already gone; 409: the uid precondition failed, i.e. a new pod of that name.
        if 200 <= status < 300 or status in (404, 409):
            m.evictions.labels("ok").inc()
            if 200 <= status < 300 and ev is not None and self.on_evicted is not None:
                self.on_evicted(ev)
            return
        blocked = status == 429
        m.evictions.labels("blocked" if blocked else "error").inc()
        log.warning(
            "eviction refused; choosing again" if blocked else "eviction failed",
            extra={"pod": victim.key, "status": status, "error": message},
        )
        # The victim keeps running: put it back, spared for a while (a victim "started" in the
        # future is not old enough to be preempted again until then); its preemptor gives up.
        if self.holds.refused(victim, now, now + self.pdb_backoff):
            out.dirty = True
