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
* a small pool of bind threads posts ``pods/binding`` (binding is I/O bound: a few in flight
  at once is where throughput comes from) and an eviction pool posts ``policy/v1`` Evictions;
  their results come back on the same queue, so a failed bind is *forgotten* (its capacity
  released) by the loop thread, never concurrently with a cycle;
* a reporter sends Events and ``PodScheduled=False`` conditions, rate-limited;
* the leader elector and the HTTP server (``/metrics``, ``/healthz``, ``/readyz``).

The GPU device annotation travels *in the Binding*: kube-apiserver copies a Binding's
annotations onto the pod in the same write that sets ``spec.nodeName``, so the node agent can
never see the pod bound without its devices, and a crash between two requests cannot leave a
stale annotation behind.
"""

from __future__ import annotations

import gc
import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from fairgpu.engine.engine import Bind, Engine, Evict
from fairgpu.engine.policies import DEFAULT_POLICY
from fairgpu.engine.policies import policy as named_policy
from fairgpu.kube import volumes as storage
from fairgpu.kube.cache import CacheChanges, SchedulerCache, decode_node, decode_pod
from fairgpu.kube.client import (
    CONNECTION_ERRORS,
    STRATEGIC_MERGE_PATCH,
    Connection,
    RateLimiter,
    RestClient,
    load_connection,
)
from fairgpu.kube.consistency import check as check_cache
from fairgpu.kube.leader import LeaderElector
from fairgpu.kube.metrics import HealthServer, Metrics
from fairgpu.kube.namespaces import NamespaceStore, namespace_reflector
from fairgpu.kube.podgroups import (
    POD_GROUP_APIS,
    PodGroupBook,
    decode_pod_group,
    served_pod_group_paths,
)
from fairgpu.kube.preemption_hold import PreemptionHolds
from fairgpu.kube.reflector import Reflector
from fairgpu.kube.reporter import Report, Reporter
from fairgpu.model.gpu import (
    ANN_GPU_DEVICES,
    DEFAULT_NAMES,
    WHOLE,
    device_sharing_problem,
    encode_gpu_devices,
)
from fairgpu.model.node_pools import NodePoolConfig
from fairgpu.model.pod import PodInfo

__all__ = ["ANN_SCHEDULED_BY", "LiveScheduler", "RunConfig", "run"]

log = logging.getLogger("fairgpu.kube")

#: Annotation naming the scheduler replica that bound the pod (written with the binding).
ANN_SCHEDULED_BY = "fairgpu.io/scheduled-by"


@dataclass(slots=True)
class RunConfig:
    """Settings of ``fairgpu run`` (each documented where the CLI option is defined).

    Attributes:
        kubeconfig: kubeconfig path; None: ``$KUBECONFIG``, ``~/.kube/config`` or in-cluster.
        context: kubeconfig context (None: current).
        tenancy: tenancy YAML (queues, quotas; the simulator's ``--config``).
        policy: placement policy name.
        ordering: ``fair`` or ``kube-default``.
        scheduler_name: pods with this ``spec.schedulerName`` are scheduled.
        leader_elect: campaign for the Lease; without it this replica always schedules.
        lease_namespace, lease_name: the Lease.
        lease_duration, renew_deadline, retry_period: leader-election timings (seconds).
        identity: candidate id (default: hostname + random suffix).
        metrics_host, metrics_port: HTTP endpoint (port 0: pick a free one).
        qps, burst: client-side rate limit for binds and evictions (``qps <= 0``: none).
        bind_workers: concurrent bind calls.
        max_batch: most pending pods per engine cycle (0: all). Smaller cycles let binds of
            one batch overlap the engine's work on the next; every queue is represented in
            each batch (round robin over queues, oldest highest-priority jobs first, pod
            groups whole), and the engine orders each batch fairly.
        events_qps: rate cap for Events + PodScheduled conditions.
        node_pool_label: the node-pool label/taint key used to derive placement from a
            ``fairgpu.io/workload-type`` label.
        max_devices: deprecated and ignored (the cache holds nodes of any GPU count).
        seed: engine seed.
        resync_seconds: run a cycle at least this often while pods are pending.
        preemption_wait: seconds a preemptor waits for its victims to go before it is requeued.
        pdb_backoff: seconds a victim whose eviction a PodDisruptionBudget refused is spared.
        podgroup_discovery_seconds: how often to look for PodGroup APIs (CRDs) not watched
            yet, so one installed after the start is picked up.
        log_level: ``debug``, ``info``, ``warning``.
        connection: an already loaded connection (tests); overrides ``kubeconfig``.
        install_signal_handlers: stop gracefully on SIGTERM/SIGINT (main thread only).
    """

    kubeconfig: str | None = None
    context: str | None = None
    tenancy: str | Path | None = None
    policy: str = DEFAULT_POLICY
    ordering: str = "fair"
    scheduler_name: str = "fairgpu"
    leader_elect: bool = True
    lease_namespace: str = "fairgpu-system"
    lease_name: str = "fairgpu-scheduler"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str | None = None
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 10259
    qps: float = 200.0
    burst: int = 400
    bind_workers: int = 32
    max_batch: int = 500
    events_qps: float = 20.0
    node_pool_label: str = "example.com/node.usage"
    max_devices: int = 8
    seed: int = 0
    resync_seconds: float = 2.0
    preemption_wait: float = 120.0
    pdb_backoff: float = 60.0
    podgroup_discovery_seconds: float = 60.0
    log_level: str = "info"
    connection: Connection | None = None
    install_signal_handlers: bool = True


class LiveScheduler:
    """One replica of the live scheduler; :meth:`run` blocks until stopped.

    Raises ``ValueError`` (bad config, no cluster config) from the constructor.
    """

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        from fairgpu.tenancy import load_config

        tenancy = load_config(config.tenancy) if config.tenancy is not None else None
        self.engine = Engine(
            named_policy(config.policy),
            config.seed,
            tenancy=tenancy,
            ordering=config.ordering,  # type: ignore[arg-type]
            time_label=_utc_label,
        )
        conn = config.connection or load_connection(config.kubeconfig, config.context)
        limiter = RateLimiter(config.qps, config.burst)
        pool = config.bind_workers + 16
        self.client = RestClient(conn, maxsize=pool, limiter=limiter)
        self.identity = config.identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        self.cache = SchedulerCache(config.scheduler_name, config.max_devices)
        self.metrics = Metrics()
        self._sharing_checked: set[tuple[str, int]] = set()  # (node, GPU count) looked at
        self.events: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        self.pools = NodePoolConfig(usage_key=config.node_pool_label)
        names = DEFAULT_NAMES
        sched = config.scheduler_name
        self.pod_reflector = Reflector(
            self.client,
            "/api/v1/pods",
            lambda raw: decode_pod(raw, sched, names, self.pools),
            lambda t, obj: self.events.put(("pod", t, obj)),
            params={"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"},
            name="pods",
        )
        self.node_reflector = Reflector(
            self.client,
            "/api/v1/nodes",
            lambda raw: decode_node(raw, names),
            lambda t, obj: self.events.put(("node", t, obj)),
            name="nodes",
        )
        # Claims, volumes, storage classes and CSI nodes for the volume plugins.
        self.volume_watch = storage.VolumeWatch(
            self.client, lambda t, o: self.events.put(("volume", t, o))
        )
        self.namespaces = NamespaceStore()
        self.namespace_reflector = namespace_reflector(
            self.client, lambda t, obj: self.events.put(("namespace", t, obj))
        )
        # PodGroup reflectors, one per PodGroup API the cluster serves (found at start).
        self.pod_group_reflectors: list[Reflector] = []
        self.pod_group_book = PodGroupBook()
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
        self.bind_pool = ThreadPoolExecutor(config.bind_workers, thread_name_prefix="bind")
        self.evict_pool = ThreadPoolExecutor(4, thread_name_prefix="evict")
        # Preemptors waiting for their victims, and the backoff of those that gave up.
        self.holds = PreemptionHolds(self.cache, config.preemption_wait)
        self.inflight = 0
        self.bound_count = 0
        self.lost_lease = False
        self._stop = threading.Event()
        self._dirty = True
        self._heartbeat = time.monotonic()
        self._last_cycle = 0.0
        self._last_metrics = 0.0
        self._nodes_exported: set[str] = set()
        self._queues_exported: set[str] = set()

    # ---- lifecycle ------------------------------------------------------------------------------
    @property
    def metrics_port(self) -> int:
        """The port the HTTP server listens on."""
        return self.health.port

    def stop(self) -> None:
        """Ask :meth:`run` to shut down gracefully (thread-safe, signal-safe)."""
        self._stop.set()
        self.events.put(("wake", None, None))

    def _won_lease(self) -> None:
        self._dirty = True  # schedule at once with the warm cache
        self.events.put(("wake", None, None))

    def _lost_lease(self) -> None:
        self.lost_lease = True
        self.stop()

    def run(self) -> int:
        """Run until :meth:`stop` (or SIGTERM); returns 0, or 1 if leadership was lost."""
        cfg = self.config
        previous: dict[int, Any] = {}
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
        self.pod_reflector.start()
        self.volume_watch.start()
        self._discover_pod_groups()
        threading.Thread(
            target=self._rediscover_pod_groups, name="podgroup-discovery", daemon=True
        ).start()
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
        log.info("stopping: waiting for in-flight binds", extra={"inflight": self.inflight})
        # Binds already decided are finished on a graceful stop, but dropped once leadership
        # is lost: the new leader decides from then on.
        self.bind_pool.shutdown(wait=True, cancel_futures=self.lost_lease)
        self.evict_pool.shutdown(wait=True, cancel_futures=True)
        if self.elector is not None:
            self.elector.stop(release=not self.lost_lease)
        self.metrics.leader.set(0)
        self.pod_reflector.stop()
        self.node_reflector.stop()
        self.volume_watch.stop()
        self.namespace_reflector.stop()
        for reflector in self.pod_group_reflectors:
            reflector.stop()
        self.reporter.stop()
        self.health.stop()
        self.client.close()
        log.info("stopped", extra={"bound": self.bound_count})

    def _discover_pod_groups(self) -> None:
        """Watch the PodGroup kinds whose CRDs are installed (coscheduling, Volcano) and not
        watched yet."""
        try:
            paths = served_pod_group_paths(self.client)
        except CONNECTION_ERRORS as error:
            log.warning("cannot discover PodGroup APIs yet", extra={"error": str(error)})
            return
        watched = {r.path for r in self.pod_group_reflectors}
        paths = [p for p in paths if p not in watched]
        if not paths or self._stop.is_set():
            return
        for path in paths:

            def sink(etype: str, obj: Any, path: str = path) -> None:
                self.events.put(("podgroup", etype, (path, obj)))

            reflector = Reflector(
                self.client, path, decode_pod_group, sink, name=path.rsplit("/", 2)[0]
            )
            self.pod_group_reflectors.append(reflector.start())
        log.info("watching PodGroups", extra={"paths": paths})

    def _rediscover_pod_groups(self) -> None:
        every = self.config.podgroup_discovery_seconds
        while every > 0 and not self._stop.wait(every):
            if len(self.pod_group_reflectors) < len(POD_GROUP_APIS):
                self._discover_pod_groups()

    # ---- health -----------------------------------------------------------------------------
    def _synced(self) -> bool:
        return (
            self.pod_reflector.synced.is_set()
            and self.node_reflector.synced.is_set()
            and self.volume_watch.synced()
            and all(r.synced.is_set() for r in self.pod_group_reflectors)
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
            if leader:
                self._expire_held(now)
                periodic = now - self._last_cycle >= cfg.resync_seconds and (
                    self.cache.pending or self.engine.has_reservations()
                )
                if self._dirty or periodic:
                    self._cycle(now)
            if now - self._last_metrics >= 2.0:
                self._export_metrics()
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
            for b in self.holds.gone(out.gone, now):
                self._submit_bind(b)
            for uid in out.gone:
                self.reporter.forget(uid)
                self.engine.forget_pod(uid)

    def _apply(self, item: tuple[str, Any, Any], now: float, out: CacheChanges) -> None:
        kind, etype, payload = item
        cache = self.cache
        if kind == "pod":
            if etype == "SYNC":
                cache.sync_pods(payload, now, out)
                self.metrics.watch_relists.labels("pods").set(self.pod_reflector.relists)
            else:
                cache.apply_pod(etype, payload, now, out)
        elif kind == "node":
            if etype == "SYNC":
                cache.sync_nodes(payload, now, out)
                self.metrics.watch_relists.labels("nodes").set(self.node_reflector.relists)
            else:
                cache.apply_node(etype, payload, now, out)
        elif kind == "podgroup":
            path, obj = payload
            for key, group in self.pod_group_book.apply(path, etype, obj).items():
                namespace, _, name = key.partition("/")
                if group is None:
                    self.engine.remove_pod_group(namespace, name)
                elif group.error is not None:
                    self.engine.set_pod_group_error(namespace, name, group.error)
                else:
                    self.engine.set_pod_group(namespace, name, group.min_member)
                out.dirty = True
        elif kind == "volume":
            out.dirty = storage.VolumeWatch.apply(cache.cluster, etype, payload) or out.dirty
        elif kind == "namespace":
            out.dirty |= self.namespaces.apply(etype, payload, cache.cluster)
        elif kind == "bind":
            self._bind_done(etype, payload, out)
        elif kind == "evict":
            self._evict_done(etype, payload, now, out)

    def _cycle(self, now: float) -> None:
        cache = self.cache
        pending = self.holds.ready(cache.schedulable(), now)
        self.engine.no_preemption = self.holds.no_preemption(pending)
        self._dirty = False
        limit = self.config.max_batch
        if limit > 0 and len(pending) > limit:
            pending = self._batch(pending, limit)
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
            self._evict(ev, now)
        timed_out = [ev.pod for ev in result.evictions if ev.preemptor is None]
        binds = self.holds.without_preemptor(timed_out, result.binds, now)
        if len(binds) < len(result.binds):
            self._dirty = True  # forgotten binds are placed again next cycle
        for b in binds:
            self._assumed(b, now)
        self._check_sharing(result.binds)
        failed: dict[str, Report] = {}
        errors = 0
        for u in result.unschedulable:
            pod = u.pod
            if pod.uid in cache.cluster.placements or pod.scheduling_gates:
                continue  # placed (a gang member) or gated: the API server's condition stands
            if pod.error:
                errors += 1
            failed[pod.uid] = Report(
                pod.uid,
                pod.namespace,
                pod.name,
                u.reason,
                "SchedulerError" if pod.error else "Unschedulable",
            )
        for rep in failed.values():
            if self.reporter.report(rep, now):
                m.unschedulable_reports.inc()
        m.attempts.labels("scheduled").inc(len(result.binds))
        m.attempts.labels("unschedulable").inc(len(failed) - errors)
        m.attempts.labels("error").inc(errors)
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

    def _check_sharing(self, binds: list[Bind]) -> None:
        """Once per node (and GPU count): warn when a GPU share is bound to a node whose
        device plugin cannot admit more pods requesting ``nvidia.com/gpu`` than it has GPUs,
        or advertises virtual devices fairgpu counts as GPUs (``device_sharing_problem``)."""
        cluster = self.cache.cluster
        for b in binds:
            idx = cluster.node_index.get(b.node_name)
            if not b.pod.gpu.is_shared or idx is None:
                continue
            node = cluster.node(idx)
            if (b.node_name, node.gpu_count) in self._sharing_checked:
                continue
            self._sharing_checked.add((b.node_name, node.gpu_count))
            problem = device_sharing_problem(node)
            self.metrics.node_sharing_problem.labels(b.node_name).set(1 if problem else 0)
            if problem:
                log.warning("GPU shares on this node may not work", extra={"problem": problem})

    def _batch(self, pending: list[PodInfo], limit: int) -> list[PodInfo]:
        """About ``limit`` pods taken round robin over queues: each queue's jobs (a pod, or
        every pending member of a pod group) oldest and highest-priority first."""
        engine = self.engine
        jobs: dict[str, dict[str, list[PodInfo]]] = {}
        for p in pending:
            ref = engine.pod_group(p)
            key = ref.key if ref is not None else p.uid
            jobs.setdefault(engine.tenant(p).queue, {}).setdefault(key, []).append(p)
        lanes = []
        for name in sorted(jobs):
            units = sorted(
                jobs[name].values(),
                key=lambda u: (-max(p.priority for p in u), min(p.created for p in u), u[0].uid),
            )
            lanes.append(units)
        out: list[PodInfo] = []
        depth = 0
        while len(out) < limit and lanes:
            lanes = [lane for lane in lanes if depth < len(lane)]
            for lane in lanes:
                out.extend(lane[depth])
            depth += 1
        return out

    # ---- binding --------------------------------------------------------------------------------
    def _assumed(self, b: Bind, now: float) -> None:
        self.cache.assumed_by_engine(b.pod.uid, b.node_name)
        if self.holds.hold(b, now):
            log.info(
                "preemptor waits for victims",
                extra={"pod": b.pod.key, "node": b.node_name, "victims": sorted(b.wait_for)},
            )
            # As kube-scheduler does: the pod's status names the node it waits for.
            self.bind_pool.submit(self._nominate_call, b.pod, b.node_name)
            return
        self._submit_bind(b)

    def _nominate_call(self, pod: PodInfo, node_name: str) -> None:
        """Set ``status.nominatedNodeName`` of a preemptor waiting for its victims."""
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        body = {"status": {"nominatedNodeName": node_name}}
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

    def _submit_bind(self, b: Bind) -> None:
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
        self.inflight += 1
        plan = storage.plan_for(cluster, b.pod.uid, b.node_name)  # volumes first, as PreBind does
        self.bind_pool.submit(self._bind_call, b, annotations, plan)

    def _bind_call(
        self, b: Bind, annotations: dict[str, str], plan: storage.PreBindPlan | None = None
    ) -> None:
        pod = b.pod
        if plan is not None:
            status, message = storage.prebind(self.client, plan)
            if not 200 <= status < 300:
                self.events.put(("bind", (status, message), b))
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
        self.events.put(("bind", (status, message), b))

    def _bound_where(self, ns: str, name: str, uid: str, node: str) -> int:
        """After a lost reply: 201 if the pod is bound to ``node``, 409 if bound elsewhere,
        404 if gone, 0 if the API stayed unreachable (treated as a failed bind)."""
        delay = 0.2
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self._stop.is_set():
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

    def _bind_done(self, result: tuple[int, str], b: Bind, out: CacheChanges) -> None:
        status, message = result
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
        gone = status == 404  # deleted before its bind (watch lag): expected, not a fault
        m.binds.labels("gone" if gone else "conflict" if status == 409 else "error").inc()
        (log.info if gone else log.warning)(
            "bind failed; forgetting the assumed placement",
            extra={"pod": b.pod.key, "node": b.node_name, "status": status, "error": message},
        )
        if self.cache.forget(uid):
            out.dirty = True

    # ---- preemption ---------------------------------------------------------------------------
    def _evict(self, ev: Evict, now: float) -> None:
        victim = ev.pod
        if victim.uid not in self.cache.bound:
            # An Eviction of an unbound pod deletes it outright: never send one. (The engine
            # does not choose such victims; a gang timeout may release a member not bound yet.)
            self.metrics.evictions.labels("skipped_unbound").inc()
            log.warning("not evicting a pod that is not bound", extra={"pod": victim.key})
            return
        self.metrics.preemptions.labels(ev.kind or "unknown").inc()
        self.holds.evicting(victim, ev.preemptor.uid if ev.preemptor is not None else None)
        log.info(
            "evicting",
            extra={
                "pod": victim.key,
                "kind": ev.kind,
                "reason": ev.reason,
                "preemptor": ev.preemptor.key if ev.preemptor is not None else None,
            },
        )
        self.evict_pool.submit(self._evict_call, victim)

    def _evict_call(self, victim: Any) -> None:
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
        self.events.put(("evict", (status, message), victim))

    def _evict_done(
        self, result: tuple[int, str], victim: Any, now: float, out: CacheChanges
    ) -> None:
        status, message = result
        m = self.metrics
        # 404: already gone; 409: the uid precondition failed, i.e. a new pod of that name.
        if 200 <= status < 300 or status in (404, 409):
            m.evictions.labels("ok").inc()
            return
        blocked = status == 429
        m.evictions.labels("blocked" if blocked else "error").inc()
        log.warning(
            "eviction refused; choosing again" if blocked else "eviction failed",
            extra={"pod": victim.key, "status": status, "error": message},
        )
        # The victim keeps running: put it back, spared for a while (a victim "started" in the
        # future is not old enough to be preempted again until then); its preemptor gives up.
        if self.holds.refused(victim, now, now + self.config.pdb_backoff):
            out.dirty = True

    def _expire_held(self, now: float) -> None:
        if self.holds.expire(now):
            self._dirty = True

    # ---- metrics ------------------------------------------------------------------------------
    def _export_metrics(self) -> None:
        m = self.metrics
        cache = self.cache
        engine = self.engine
        pending: dict[str, int] = {}
        for pod in cache.schedulable():
            q = engine.tenant(pod).queue
            pending[q] = pending.get(q, 0) + 1
        gpus: dict[str, float] = {}
        cluster = cache.cluster
        for uid, pl in cluster.placements.items():
            if pl.devices:
                q = engine.tenant(cluster.pods[uid]).queue
                gpus[q] = gpus.get(q, 0.0) + pl.device_milli * len(pl.devices) / WHOLE
        queues = set(pending) | set(gpus) | self._queues_exported
        for q in queues:
            m.pending.labels(q).set(pending.get(q, 0))
            m.queue_gpus.labels(q).set(gpus.get(q, 0.0))
        self._queues_exported = set(pending) | set(gpus)
        from fairgpu.cluster.state import COL_GPU_MILLI

        names: set[str] = set()
        for idx, node in cluster.active_nodes():
            if node.gpu_count == 0:
                continue
            names.add(node.name)
            m.node_gpus.labels(node.name).set(float(cluster.requested[idx, COL_GPU_MILLI]) / WHOLE)
            m.node_gpu_capacity.labels(node.name).set(node.gpu_count)
        for gone in self._nodes_exported - names:
            m.node_gpus.remove(gone)
            m.node_gpu_capacity.remove(gone)
        self._nodes_exported = names


def _utc_label(t: float) -> str:
    """A wall-clock time as pending pods' reasons give it: RFC 3339, UTC, to the second."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(config: RunConfig) -> int:
    """Run the live scheduler until SIGTERM (or lost leadership); returns the exit code."""
    from fairgpu.kube.logs import setup_logging

    setup_logging(config.log_level)
    if config.identity is None:
        config.identity = (
            f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        )
    return LiveScheduler(config).run()
