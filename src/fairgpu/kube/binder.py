"""Binding I/O: ``POST pods/{name}/binding`` on a small thread pool, the volumes' pre-bind
call before it, the nomination of a preemptor waiting for its victims, and the loop-side
handling of each bind's result.

Binding is I/O bound, so a few calls in flight at once is where throughput comes from. A call's
outcome goes back to the loop as a :class:`~fairgpu.kube.events.BindResult`, so a failed bind is
*forgotten* (its capacity released) by the loop thread, never concurrently with a cycle.

The GPU device annotation travels *in the Binding*: kube-apiserver copies a Binding's
annotations onto the pod in the same write that sets ``spec.nodeName``, so the node agent can
never see the pod bound without its devices, and a crash between two requests cannot leave a
stale annotation behind.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from fairgpu.engine.engine import Bind
from fairgpu.kube import dra_binding, engine_notes
from fairgpu.kube import volumes as storage
from fairgpu.kube.cache import CacheChanges, SchedulerCache
from fairgpu.kube.client import CONNECTION_ERRORS, STRATEGIC_MERGE_PATCH, RestClient
from fairgpu.kube.decode import PodRecord
from fairgpu.kube.events import BindResult, LoopEvent
from fairgpu.kube.loop_calls import LoopCalls
from fairgpu.kube.metrics import Metrics
from fairgpu.kube.reporter import Reporter
from fairgpu.model.gpu import ANN_GPU_DEVICES, WHOLE, encode_gpu_devices
from fairgpu.model.pod import PodInfo

__all__ = ["ANN_SCHEDULED_BY", "Binder"]

log = logging.getLogger("fairgpu.kube")

#: Annotation naming the scheduler replica that bound the pod (written with the binding).
ANN_SCHEDULED_BY = "fairgpu.io/scheduled-by"


class Binder(LoopCalls):
    """Posts binds and nominations; :meth:`done` applies a result on the loop thread.

    Args:
        client: the API client (rate-limited).
        events: the loop's queue, where each bind's :class:`BindResult` goes.
        cache: the loop's cache (read for placements; a failed bind is forgotten in it).
        metrics, reporter: bind counters and latencies; pending reports dropped once bound.
        identity: this replica's id, written to ``fairgpu.io/scheduled-by``.
        workers: concurrent bind calls.
        stop: set when the scheduler stops (ends the wait for a lost reply's outcome).
        decode: the pod watch's decoder, for a pod a 409 says is bound already.
    """

    def __init__(
        self,
        client: RestClient,
        events: queue.Queue[LoopEvent],
        cache: SchedulerCache,
        metrics: Metrics,
        reporter: Reporter,
        identity: str,
        workers: int,
        stop: threading.Event,
        decode: Callable[[bytes], PodRecord],
    ) -> None:
        super().__init__(client, events, cache, metrics, workers, "bind")
        self.reporter = reporter
        self.decode = decode
        self.identity = identity
        self.stop = stop
        self.inflight = 0  # binds posted whose result the loop has not applied yet
        self.bound_count = 0
        self.dra = dra_binding.DraBinder(client, self.pool, cache.scheduler_name)  # claims

    def nominate(
        self, pod: PodInfo, node_name: str | None, notes: dict[str, str] | None = None
    ) -> None:
        """Post ``status.nominatedNodeName`` of a preemptor waiting for its victims (as
        kube-scheduler does: the pod's status names the node it waits for); ``None`` clears
        a nomination that no longer holds. ``notes``: the engine notes of its placement
        (:func:`~fairgpu.kube.engine_notes.binding_annotations`), written in the same patch
        -- a scheduler that stops before the victims are gone has not bound it, and the one
        after it binds the pod into free room, a placement of its own that reclaimed
        nothing: without them it would not know of the reclaim its predecessor made."""
        self.pool.submit(self._nominate_call, pod, node_name, notes or {})

    def _nominate_call(self, pod: PodInfo, node_name: str | None, notes: dict[str, str]) -> None:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        body: dict[str, Any] = {"status": {"nominatedNodeName": node_name}}
        if notes:  # the status subresource keeps a pod's annotations, not its spec
            body["metadata"] = {"annotations": notes}
        try:
            r = self.client.request("PATCH", path, body, content_type=STRATEGIC_MERGE_PATCH)
        except CONNECTION_ERRORS as error:
            log.warning("could not nominate", extra={"pod": pod.key, "error": str(error)})
            return
        if not r.ok and r.status != 404:
            log.warning(
                "could not nominate",
                extra={"pod": pod.key, "status": r.status, "error": r.message},
            )

    def submit(self, b: Bind) -> None:
        """Post the bind of a pod the engine placed (and assumed in the cache)."""
        cluster = self.cache.cluster
        annotations = {ANN_SCHEDULED_BY: self.identity}
        pl = cluster.placements.get(b.pod.uid)
        if b.devices:
            milli = pl.device_milli if pl is not None else WHOLE
            gpu = b.pod.gpu
            mem = 0
            if pl is not None and not gpu.is_whole and (gpu.memory_mib or gpu.memory_percent):
                mem = pl.device_memory
            annotations[ANN_GPU_DEVICES] = encode_gpu_devices(b.devices, milli, mem)
        annotations.update(engine_notes.binding_annotations(b))  # time rules outlive this process
        self.inflight += 1
        self.cache.bind_sent(b.pod.uid, b.node_name, b.devices or None)
        plan = storage.plan_for(cluster, b.pod.uid, b.node_name)  # volumes first, as PreBind does
        claims = self.dra.plan(cluster, b.pod, b.node_name)
        self.pool.submit(self._bind_call, b, annotations, plan, claims)

    def _bind_call(
        self,
        b: Bind,
        annotations: dict[str, str],
        plan: storage.PreBindPlan | None = None,
        claims: dra_binding.DraPlan | None = None,
    ) -> None:
        pod = b.pod
        if plan is not None:
            status, message = storage.prebind(self.client, plan)
            if not 200 <= status < 300:
                self.events.put(BindResult(status, message, b))
                return
        if claims is not None:  # ResourceClaims after volumes, as kube-scheduler's PreBind
            status, message = dra_binding.prebind(self.client, claims)  # released if it fails
            if not 200 <= status < 300:
                self.events.put(BindResult(status, message, b))
                return
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
                "annotations": annotations,
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": b.node_name},
        }
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        t0 = time.perf_counter()
        status, message = 0, ""
        try:
            r = self.client.request("POST", path, body)
            status, message = r.status, r.message
        except CONNECTION_ERRORS as error:
            # The outcome is unknown: ask the API before deciding (never forget a pod that
            # may be bound, or its GPUs could be handed out twice).
            message = str(error)
            status = self._bound_where(pod.namespace, pod.name, pod.uid, b.node_name)
        self.metrics.bind_seconds.observe(time.perf_counter() - t0)
        if claims is not None and not 200 <= status < 300:
            dra_binding.release(self.client, claims)
        gone, current = status == 404, None
        if status == 409:  # bound already -- or the name is another pod's now
            gone, current = self._read(pod)
        self.events.put(BindResult(status, message, b, pod_gone=gone, current=current))

    def _read(self, pod: PodInfo) -> tuple[bool, PodRecord | None]:
        """After a 409: (gone, the pod as the API has it now, decoded as the watch decodes
        it). Gone when no pod of that name exists or the one there has another uid (deleted
        and created again under its name: the uid precondition fails with 409 too); the pod
        when it is the same one; (False, None) when it cannot be read."""
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        try:
            r = self.client.request("GET", path, limited=False, raw=True)
        except CONNECTION_ERRORS:
            return False, None
        if r.status == 404:
            return True, None
        if not r.ok or not isinstance(r.body, bytes | bytearray):
            return False, None
        rec = self.decode(bytes(r.body))
        return (False, rec) if rec.uid == pod.uid else (True, None)

    def _bound_where(self, ns: str, name: str, uid: str, node: str) -> int:
        """After a lost reply: 201 if the pod is bound to ``node``, 409 if bound elsewhere,
        404 if gone, 0 if the API stayed unreachable (treated as a failed bind)."""
        delay = 0.2
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.stop.is_set():
            try:
                r = self.client.request(
                    "GET", f"/api/v1/namespaces/{ns}/pods/{name}", limited=False
                )
            except CONNECTION_ERRORS:
                time.sleep(delay)
                delay = min(5.0, delay * 2)
                continue
            if r.status == 404 or not isinstance(r.body, dict):
                return 404
            meta = r.body.get("metadata") or {}
            if meta.get("uid") != uid:
                return 404
            where = (r.body.get("spec") or {}).get("nodeName") or ""
            if not where:
                return 0
            return 201 if where == node else 409
        return 0

    def done(self, result: BindResult, out: CacheChanges, now: float) -> None:
        """Apply a bind's result (loop thread): count it, or forget the failed placement."""
        status, message, b = result.status, result.message, result.bind
        self.inflight -= 1
        uid = b.pod.uid
        m = self.metrics
        if 200 <= status < 300:
            m.binds.labels("ok").inc()
            self.bound_count += 1
            first = self.cache.first_seen.get(uid)
            if first is not None:
                m.e2e_seconds.observe(max(0.0, time.time() - first))
            self.reporter.forget(uid)
            log.debug("bound", extra={"pod": b.pod.key, "node": b.node_name})
            return
        # Deleted before its bind (watch lag; perhaps created again under its name):
        # expected, not a fault.
        gone = status == 404 or result.pod_gone
        m.binds.labels("gone" if gone else "conflict" if status == 409 else "error").inc()
        (log.info if gone else log.warning)(
            "bind failed; forgetting the assumed placement",
            extra={"pod": b.pod.key, "node": b.node_name, "status": status, "error": message},
        )
        self.dra.failed(uid)
        if result.pod_gone:
            # Gone for sure: not pending again until a lagging watch says so (each cycle in
            # between would place it, bind it and fail again).
            self.cache.gone_before_bound(uid, out)
            return
        if self.cache.forget(uid):
            out.dirty = True
        if result.current is not None:
            self._bound_elsewhere(result.current, uid, now, out)

    def _bound_elsewhere(self, rec: PodRecord, uid: str, now: float, out: CacheChanges) -> None:
        """A 409: the pod is bound already -- by an earlier run of this scheduler, another
        replica, or a bind whose reply was lost. Where it is, as read after the 409, is
        applied at once, as the watch will apply it: until the watch does, its GPUs there
        would look free. A pod is never unbound, so this is never staler than the pending
        pod the cache holds; a pod the cache no longer holds pending (the watch showed it
        bound, or gone, meanwhile) is left to the watch."""
        if rec.node_name and uid in self.cache.pending:
            self.cache.apply_pod("MODIFIED", rec, now, out)
