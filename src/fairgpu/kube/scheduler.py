"""The live scheduler: watches in, engine cycles, bindings and evictions out.

Threads and who owns what:

* :class:`~fairgpu.kube.reflector.Reflector` threads (pods, nodes, and the coscheduling and
  Volcano PodGroups where their CRDs are installed) decode watch events and put them on one
  queue;
* the *loop* thread (the caller of :meth:`LiveScheduler.run`) owns the
  :class:`~fairgpu.kube.cache.SchedulerCache` and the engine: it drains the queue, applies the
  events, and — when this replica leads and something changed — runs one
  ``Engine.cycle(cluster, pending, now)`` (``now`` is read from the clock here; the engine never
  reads it). The engine *assumes* its placements in the cluster before the cycle returns;
* a small pool of bind threads posts ``pods/binding`` (:mod:`fairgpu.kube.binder`) and an
  eviction pool posts ``policy/v1`` Evictions (:mod:`fairgpu.kube.eviction`); their results
  come back on the same queue, so a failed bind is *forgotten* (its capacity released) by the
  loop thread, never concurrently with a cycle;
* a reporter sends Events and ``PodScheduled=False`` conditions, rate-limited;
* the leader elector and the HTTP server (``/metrics``, ``/healthz``, ``/readyz``).

Everything on the queue is one of the typed events of :mod:`fairgpu.kube.events`. Settings
are in :mod:`fairgpu.kube.config`, the preemption hold in :mod:`fairgpu.kube.preemption_hold`,
the gauges in :mod:`fairgpu.kube.metrics_export`.
"""

from __future__ import annotations

import gc
import logging
import queue
import signal
import socket
import threading
import time
import uuid
from dataclasses import replace
from types import FrameType
from typing import Any

from fairgpu.engine.engine import Bind, Engine, Evict
from fairgpu.engine.policies import policy as named_policy
from fairgpu.kube import engine_notes
from fairgpu.kube import volumes as storage
from fairgpu.kube.batching import batch
from fairgpu.kube.binder import ANN_SCHEDULED_BY, Binder
from fairgpu.kube.cache import CacheChanges, SchedulerCache, decode_node, decode_pod
from fairgpu.kube.client import RateLimiter, RestClient, load_connection
from fairgpu.kube.completed import apply_completed, completed_reflector
from fairgpu.kube.config import RunConfig
from fairgpu.kube.consistency import check as check_cache
from fairgpu.kube.decode import PodRecord, time_label
from fairgpu.kube.dra_watch import DraWatch
from fairgpu.kube.events import (
    BindResult,
    CompletedEvent,
    DraEvent,
    EvictResult,
    JobEvent,
    LoopEvent,
    NamespaceEvent,
    NodeEvent,
    PodEvent,
    PodGroupEvent,
    ServiceEvent,
    VolumeEvent,
    Wake,
)
from fairgpu.kube.eviction import Evictor
from fairgpu.kube.forecaster import Forecaster
from fairgpu.kube.jobs import JobStore, job_reflector
from fairgpu.kube.leader import LeaderElector
from fairgpu.kube.leader_worker_policies import LeaderWorkerPolicies
from fairgpu.kube.metrics import HealthServer, Metrics
from fairgpu.kube.metrics_export import MetricsExporter
from fairgpu.kube.namespaces import NamespaceStore, namespace_reflector
from fairgpu.kube.podgroup_watch import PodGroupWatch
from fairgpu.kube.preemption_hold import PreemptionHolds
from fairgpu.kube.published_settings import Published, publish, tenancy_text
from fairgpu.kube.reflector import Reflector, stop_all
from fairgpu.kube.reporter import Reporter, report_unschedulable
from fairgpu.kube.services import ServiceStore, service_reflector
from fairgpu.kube.sharing_check import SharingCheck
from fairgpu.model.gpu import DEFAULT_NAMES
from fairgpu.model.node_pools import NodePoolConfig

__all__ = ["ANN_SCHEDULED_BY", "LiveScheduler", "RunConfig"]

#: Upper bound of the watches one scheduler runs at once (see the pool size below).
WATCHES = 24

log = logging.getLogger("fairgpu.kube")


class LiveScheduler:
    """One replica of the live scheduler; :meth:`run` blocks until stopped.

    Raises ``ValueError`` (bad config, no cluster config) from the constructor.
    """

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        from fairgpu.tenancy import load_config

        tenancy = load_config(config.tenancy) if config.tenancy is not None else None
        # What the read-only commands are told this scheduler decides with (published once
        # it leads): the config's text as it was loaded.
        self.published = Published(
            tenancy_text(config.tenancy),
            config.policy,
            config.ordering,
            config.node_pool_label,
            config.seed,
        )
        self.engine = Engine(
            named_policy(config.policy),
            config.seed,
            tenancy=tenancy,
            ordering=config.ordering,  # type: ignore[arg-type]
            time_label=time_label,
        )
        # Evicted pods terminate gracefully and hold their room until they are gone.
        self.engine.victims_linger = True
        conn = config.connection or load_connection(config.kubeconfig, config.context)
        limiter = RateLimiter(config.qps, config.burst)
        # Connections: every watch holds one for as long as it runs (pods, finished pods,
        # nodes, namespaces, services, Jobs, seven storage kinds, three DRA kinds, PodGroups:
        # about twenty), and the binder's workers, evictions, Events and the lease need
        # theirs. The pool blocks when it is used up, so it must outnumber them all.
        pool = config.bind_workers + WATCHES + 16
        self.client = RestClient(conn, maxsize=pool, limiter=limiter)
        self.identity = config.identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        self.cache = SchedulerCache(config.scheduler_name, config.max_devices)
        self.metrics = Metrics()
        self.sharing = SharingCheck(self.metrics)
        self.events: queue.Queue[LoopEvent] = queue.Queue()
        self.pools = NodePoolConfig(usage_key=config.node_pool_label)
        self._stop = threading.Event()
        self._make_watches()
        self._make_services()
        # Preemptors waiting for their victims, and the backoff of those that gave up.
        self.holds = PreemptionHolds(self.cache, config.preemption_wait)
        self.binder = Binder(
            self.client,
            self.events,
            self.cache,
            self.metrics,
            self.reporter,
            self.identity,
            config.bind_workers,
            self._stop,
            self._decode_pod,
        )
        self.evictor = Evictor(
            self.client,
            self.events,
            self.cache,
            self.metrics,
            self.holds,
            config.pdb_backoff,
            on_evicted=self._preempted,
        )
        self.exporter = MetricsExporter(self.metrics)
        self.leader_worker_policies = LeaderWorkerPolicies(
            self.client, self._loose_leader_worker_sets, self._stop
        )
        queue_of = lambda p: self.engine.tenant(p).queue  # noqa: E731
        self.forecaster = Forecaster(
            config, self.metrics, self.reporter, queue_of, self.is_leader, self._busy
        )
        self.lost_lease = False
        self._dirty = True
        self._heartbeat = time.monotonic()
        self._notes_restored = False  # engine_notes taken back before the first cycle
        self._last_cycle = 0.0
        self._last_metrics = 0.0

    def _decode_pod(self, raw: bytes) -> PodRecord:
        """A pod's JSON as the pod watch decodes it (the binder reads a pod after a 409)."""
        return decode_pod(raw, self.config.scheduler_name, DEFAULT_NAMES, self.pools)

    def _make_watches(self) -> None:
        """The reflectors of pods, nodes and storage (PodGroups are found in :meth:`run`)."""
        names = DEFAULT_NAMES
        self.pod_reflector = Reflector(
            self.client,
            "/api/v1/pods",
            self._decode_pod,
            lambda t, obj: self.events.put(PodEvent(t, obj)),
            params={"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"},
            name="pods",
        )
        # Pod group members that ran to completion still count toward minMember.
        self.completed_reflector = completed_reflector(
            self.client, lambda t, obj: self.events.put(CompletedEvent(t, obj))
        )
        self.node_reflector = Reflector(
            self.client,
            "/api/v1/nodes",
            lambda raw: decode_node(raw, names),
            lambda t, obj: self.events.put(NodeEvent(t, obj)),
            name="nodes",
        )
        # Namespace labels, for pod affinity terms with a namespaceSelector.
        self.namespaces = NamespaceStore()
        self.namespace_reflector = namespace_reflector(
            self.client, lambda t, obj: self.events.put(NamespaceEvent(t, obj))
        )
        # Jobs one more evicted pod fails: their pods are one victim (not waited for).
        self.jobs = JobStore()
        self.job_reflector = job_reflector(
            self.client, lambda t, obj: self.events.put(JobEvent(t, obj))
        )
        # Service selectors, for PodTopologySpread's default constraints.
        self.services = ServiceStore()
        self.service_reflector = service_reflector(
            self.client, lambda t, obj: self.events.put(ServiceEvent(t, obj))
        )
        # Claims, volumes, storage classes and CSI nodes for the volume plugins.
        self.volume_watch = storage.VolumeWatch(
            self.client, lambda t, o: self.events.put(VolumeEvent(t, o))
        )
        # DeviceClasses, ResourceSlices and ResourceClaims for DynamicResources.
        self.dra_watch = DraWatch(self.client, lambda t, o: self.events.put(DraEvent(t, o)))
        # PodGroup reflectors, one per PodGroup API the cluster serves (found at start).
        self.pod_groups = PodGroupWatch(
            self.client,
            lambda path, t, obj: self.events.put(PodGroupEvent(path, t, obj)),
            self._stop,
        )

    def _make_services(self) -> None:
        """The event reporter, the leader elector and the HTTP server."""
        config = self.config
        self.reporter = Reporter(
            self.client,
            "fairgpu-scheduler",
            self._still_pending,
            qps=config.events_qps,
            burst=max(1, int(config.events_qps * 2)),
            instance=self.identity,
        )
        self.elector: LeaderElector | None = None
        if config.leader_elect:
            self.elector = LeaderElector(
                self.client,
                config.lease_namespace,
                config.lease_name,
                self.identity,
                lease_duration=config.lease_duration,
                renew_deadline=config.renew_deadline,
                retry_period=config.retry_period,
                on_started=self._won_lease,
                on_stopped=self._lost_lease,
            )
        self.health = HealthServer(
            self.metrics, self._healthy, self._ready, config.metrics_host, config.metrics_port
        )

    # ---- lifecycle ------------------------------------------------------------------------------
    @property
    def pod_group_reflectors(self) -> list[Reflector]:
        """The PodGroup reflectors started so far."""
        return self.pod_groups.reflectors

    @property
    def metrics_port(self) -> int:
        """The port the HTTP server listens on."""
        return self.health.port

    def stop(self) -> None:
        """Ask :meth:`run` to shut down gracefully (thread-safe, signal-safe)."""
        self._stop.set()
        self.events.put(Wake())

    def _won_lease(self) -> None:
        self._dirty = True  # schedule at once with the warm cache
        self.events.put(Wake())

    def _publish(self) -> None:
        """Publish the settings this scheduler decides with, for ``explain`` and the other
        read-only commands (:mod:`~fairgpu.kube.published_settings`), from a thread of its
        own: a slow API server never holds the first cycle of a new leader."""
        cfg = self.config
        mine = replace(self.published, by=self.identity)
        args = (self.client, cfg.lease_namespace, cfg.scheduler_name, mine)
        threading.Thread(target=publish, args=args, name="publish-settings", daemon=True).start()

    def _loose_leader_worker_sets(self, loose: frozenset[str]) -> None:
        """The LeaderWorkerSets whose pods restart alone changed (from the lister's thread:
        the engine reads the whole set at the start of a cycle)."""
        self.engine.loose_leader_worker_sets = loose
        log.info("LeaderWorkerSets restarting pods alone", extra={"sets": sorted(loose)})

    def _lost_lease(self) -> None:
        self.lost_lease = True
        self.stop()

    def run(self) -> int:
        """Run until :meth:`stop` (or SIGTERM); returns 0, or 1 if leadership was lost."""
        cfg = self.config
        previous: dict[signal.Signals, Any] = {}
        if cfg.install_signal_handlers and threading.current_thread() is threading.main_thread():

            def on_signal(signum: int, frame: FrameType | None) -> None:
                log.info("signal received; shutting down", extra={"signal": signum})
                self.stop()

            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, on_signal)
        log.info(
            "starting",
            extra={
                "identity": self.identity,
                "scheduler_name": cfg.scheduler_name,
                "policy": cfg.policy,
                "ordering": cfg.ordering,
                "leader_elect": cfg.leader_elect,
                "metrics_port": self.health.port,
            },
        )
        self.health.start()
        self.reporter.start()
        self.node_reflector.start()
        self.namespace_reflector.start()
        self.job_reflector.start()
        self.service_reflector.start()
        self.pod_reflector.start()
        self.completed_reflector.start()
        self.volume_watch.start()
        self.dra_watch.start()
        self.pod_groups.start(cfg.podgroup_discovery_seconds)
        self.leader_worker_policies.start(cfg.podgroup_discovery_seconds)
        self.forecaster.start()
        if self.elector is not None:
            self.elector.start()
        try:
            self._loop()
        finally:
            self._shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 1 if self.lost_lease else 0

    def _shutdown(self) -> None:
        log.info("stopping: waiting for in-flight binds", extra={"inflight": self.binder.inflight})
        # Binds already decided are finished on a graceful stop, but dropped once leadership
        # is lost: the new leader decides from then on.
        self.binder.shutdown(cancel=self.lost_lease)
        self.evictor.shutdown()
        if self.elector is not None:
            self.elector.stop(release=not self.lost_lease)
        self.metrics.leader.set(0)
        stop_all(
            [
                self.pod_reflector,
                self.completed_reflector,
                self.node_reflector,
                self.namespace_reflector,
                self.job_reflector,
                self.service_reflector,
                *self.volume_watch.reflectors,
                *self.dra_watch.reflectors,
                *self.pod_groups.reflectors,
            ]
        )
        self.forecaster.stop()
        self.reporter.stop()
        self.health.stop()
        self.client.close()
        log.info("stopped", extra={"bound": self.binder.bound_count})

    # ---- health -----------------------------------------------------------------------------
    def _synced(self) -> bool:
        return (
            self.pod_reflector.synced.is_set()
            and self.completed_reflector.synced.is_set()
            and self.node_reflector.synced.is_set()
            and self.namespace_reflector.synced.is_set()
            and self.service_reflector.synced.is_set()
            and self.volume_watch.synced()
            and self.dra_watch.synced()
            and self.pod_groups.synced()
        )

    def _healthy(self) -> tuple[bool, str]:
        stale = time.monotonic() - self._heartbeat
        if stale > 60:
            return False, f"scheduling loop stuck for {stale:.0f}s"
        return True, "ok"

    def _ready(self) -> tuple[bool, str]:
        if not self._synced():
            return False, "caches not synced"
        return True, "ok"

    def is_leader(self) -> bool:
        """True while this replica may schedule."""
        return self.elector is None or self.elector.is_leader.is_set()

    def _busy(self) -> bool:
        """Work is waiting or under way (events to apply, a cycle due, binds in flight)."""
        return self.binder.inflight > 0 or self._dirty or not self.events.empty()

    def _still_pending(self, uid: str) -> bool:
        return uid in self.cache.pending and uid not in self.cache.cluster.placements

    # ---- the loop -----------------------------------------------------------------------------
    def _loop(self) -> None:
        cfg = self.config
        frozen = False
        while not self._stop.is_set():
            self._heartbeat = time.monotonic()
            self._drain(0.02 if self._dirty else 0.25)
            if self._stop.is_set():
                break
            leader = self.is_leader()
            self.metrics.leader.set(1 if leader else 0)
            if not self._synced():
                continue
            if not frozen:
                # The initial list is long-lived: park it outside the collector's generations
                # so later collections stay short and do not stall scheduling cycles.
                gc.collect()
                gc.freeze()
                frozen = True
            now = time.time()
            if leader and not self._notes_restored:
                # A fresh engine (a restart, or this replica newly leading) first takes back
                # its predecessor's recent reclaims and protections.
                taken = engine_notes.restore(self.engine, self.cache.noted_pods(), now)
                log.info("engine notes restored", extra={"notes": taken})
                self._notes_restored = True
                self._publish()
            if leader:
                self._expire_held(now)
                periodic = now - self._last_cycle >= cfg.resync_seconds and (
                    self.cache.pending or self.engine.has_reservations()
                )
                if self._dirty or periodic:
                    self._cycle(now)
            self.forecaster.offer(self.engine)
            if now - self._last_metrics >= 2.0:
                self.exporter.export(self.cache, self.engine)
                self._last_metrics = now

    def _drain(self, timeout: float) -> None:
        try:
            first = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        out = CacheChanges()
        now = time.time()
        self._apply(first, now, out)
        for _ in range(20000):
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                break
            self._apply(item, now, out)
        # First cancel the waiting binds of preemptors the batch unplaced (deleted, node gone),
        # then post those whose victims are all gone.
        if self.holds.reconcile(now):
            out.dirty = True
        check_cache(self.cache, out, now)  # repairs any divergence from the pods' annotations
        self.metrics.count_cache_changes(out.repairs, out.node_problems)
        self.reporter.node_problems(out.node_problems)
        if out.dirty:
            self._dirty = True
        if out.gone:
            # Their claims are released first: the writes are queued before the binds of the
            # preemptors that waited for them, whose allocations wait for those claims.
            self.binder.dra.gone(out.gone, out.gone_pods, self.cache.cluster)
            for b in self.holds.gone(out.gone, now):
                self.binder.submit(b)
            for uid in out.gone:
                self.reporter.forget(uid)
                self.engine.forget_pod(uid)

    def _apply(self, event: LoopEvent, now: float, out: CacheChanges) -> None:
        cache = self.cache
        if isinstance(event, PodEvent):
            if event.etype == "SYNC":
                cache.sync_pods(event.obj, now, out)
                self.metrics.watch_relists.labels("pods").set(self.pod_reflector.relists)
            else:
                self.forecaster.pod_event(event.etype, event.obj, now)
                cache.apply_pod(event.etype, event.obj, now, out)
        elif isinstance(event, CompletedEvent):
            out.dirty |= apply_completed(cache.cluster, event.etype, event.obj)
        elif isinstance(event, NodeEvent):
            if event.etype == "SYNC":
                cache.sync_nodes(event.obj, now, out)
                self.metrics.watch_relists.labels("nodes").set(self.node_reflector.relists)
            else:
                cache.apply_node(event.etype, event.obj, now, out)
        elif isinstance(event, PodGroupEvent):
            self._apply_pod_group(event, out)
        elif isinstance(event, NamespaceEvent):
            out.dirty |= self.namespaces.apply(event.etype, event.obj, cache.cluster)
        elif isinstance(event, JobEvent):
            out.dirty |= self.jobs.apply(event.etype, event.obj)
        elif isinstance(event, ServiceEvent):
            out.dirty |= self.services.apply(event.etype, event.obj, cache.cluster)
        elif isinstance(event, VolumeEvent):
            changed = storage.VolumeWatch.apply(cache.cluster, event.etype, event.obj)
            out.dirty = changed or out.dirty
        elif isinstance(event, DraEvent):
            out.dirty |= DraWatch.apply(cache.cluster, event.etype, event.obj)
        elif isinstance(event, BindResult):
            self.binder.done(event, out, now)
        elif isinstance(event, EvictResult):
            self.evictor.done(event, now, out)

    def _apply_pod_group(self, event: PodGroupEvent, out: CacheChanges) -> None:
        for key, group in self.pod_groups.book.apply(event.path, event.etype, event.obj).items():
            namespace, _, name = key.partition("/")
            if group is None:
                self.engine.remove_pod_group(namespace, name)
            elif group.error is not None:
                self.engine.set_pod_group_error(namespace, name, group.error)
            else:
                self.engine.set_pod_group(namespace, name, group.min_member)
            out.dirty = True

    def _cycle(self, now: float) -> None:
        cache = self.cache
        pending = self.holds.ready(cache.schedulable(), now)
        self.engine.no_preemption = self.holds.no_preemption(pending)
        self.engine.displaceable = self.holds.displaceable()
        self.engine.fragile_jobs = self.jobs.fragile()
        self._dirty = False
        limit = self.config.max_batch
        if limit > 0 and len(pending) > limit:
            pending = batch(self.engine, pending, limit)
            self._dirty = True  # the rest follows in the next cycle
        self._last_cycle = now
        t0 = time.perf_counter()
        result = self.engine.cycle(cache.cluster, pending, now)
        elapsed = time.perf_counter() - t0
        m = self.metrics
        m.cycle_seconds.observe(elapsed)
        if pending:
            m.attempt_seconds.observe(elapsed / len(pending))
        for ev in result.evictions:
            self.evictor.evict(ev)
        for d in result.deallocations:
            self.binder.dra.deallocate(d.claim, d.claim_uid, d.pod)
        timed_out = [ev.pod for ev in result.evictions if ev.preemptor is None]
        self.holds.without_preemptor(timed_out, now)
        displaced = self.holds.displaced(result.displaced, result.binds, now)
        if displaced:
            self._dirty = True  # displaced pods are placed again
        for p in displaced:  # requeued, as kube-scheduler clears a lower-priority nomination
            self.binder.nominate(p, None)
        for b in result.binds:
            self._assumed(b, now)
        self.sharing.check(cache.cluster, result.binds)
        failed = report_unschedulable(self.reporter, self.metrics, cache.cluster, result, now)
        for uid in self.holds.stale_nominations(failed, self.engine.no_preemption):
            self.binder.nominate(cache.pending[uid], None)  # same thread: still pending
        if result.binds or result.evictions:
            log.info(
                "cycle",
                extra={
                    "pending": len(pending),
                    "binds": len(result.binds),
                    "evictions": len(result.evictions),
                    "unschedulable": len(failed),
                    "seconds": round(elapsed, 4),
                },
            )

    # ---- binding --------------------------------------------------------------------------------
    def _preempted(self, ev: Evict) -> None:
        """An eviction made to place another pod was accepted: say so on the victim, as
        kube-scheduler does (a ``Preempted`` Event, labelled with the victim's queue)."""
        if ev.preemptor is None:
            return  # a gang timeout, not a preemption
        note = ev.reason or f"preempted by {ev.preemptor.key}"
        self.reporter.preempted(ev.pod, self.engine.tenant(ev.pod).queue, note)

    def _assumed(self, b: Bind, now: float) -> None:
        self.cache.assumed_by_engine(b.pod.uid, b.node_name)
        self.forecaster.started(b.pod, now)
        ref = self.engine.pod_group(b.pod)
        if self.holds.hold(b, now, ref.key if ref is not None else ""):
            waiting = sorted(self.holds.held[b.pod.uid].waiting)  # taken over ones included
            log.info(
                "preemptor waits for victims",
                extra={"pod": b.pod.key, "node": b.node_name, "victims": waiting},
            )
            # As kube-scheduler does: the pod's status names the node it waits for.
            self.binder.nominate(b.pod, b.node_name, engine_notes.binding_annotations(b))
            return
        self.binder.submit(b)

    def _expire_held(self, now: float) -> None:
        if self.holds.expire(now):
            self._dirty = True
