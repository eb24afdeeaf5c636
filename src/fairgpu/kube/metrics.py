"""Prometheus metrics and the ``/metrics``, ``/healthz``, ``/readyz`` HTTP endpoints."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["HealthServer", "Metrics"]

log = logging.getLogger("fairgpu.kube.metrics")

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class Metrics:
    """Every metric the live scheduler exports, in its own registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self._add_cycle_metrics(r)
        self._add_api_metrics(r)
        self._add_cluster_metrics(r)
        self._add_health_metrics(r)
        self._add_forecast_metrics(r)

    def _add_cycle_metrics(self, r: CollectorRegistry) -> None:
        """Engine cycles and the pods they try."""
        self.attempts = Counter(
            "fairgpu_scheduling_attempts",
            "Pods tried by the engine, by result (scheduled, unschedulable, error).",
            ["result"],
            registry=r,
        )
        self.cycle_seconds = Histogram(
            "fairgpu_scheduling_cycle_duration_seconds",
            "Duration of one engine cycle over the pending pods.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.attempt_seconds = Histogram(
            "fairgpu_scheduling_attempt_duration_seconds",
            "Engine time per pod tried (cycle duration divided by pods in the cycle).",
            buckets=(1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1),
            registry=r,
        )
        self.e2e_seconds = Histogram(
            "fairgpu_pod_scheduling_duration_seconds",
            "End-to-end latency from when the scheduler first saw a pod pending to a "
            "successful bind.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )

    def _add_api_metrics(self, r: CollectorRegistry) -> None:
        """Binds, preemptions and the Eviction calls they cause."""
        self.binds = Counter(
            "fairgpu_binds",
            "Bind calls by result (ok, conflict, gone = the pod was deleted first, error).",
            ["result"],
            registry=r,
        )
        self.bind_seconds = Histogram(
            "fairgpu_bind_duration_seconds",
            "Latency of one POST pods/binding.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.preemptions = Counter(
            "fairgpu_preemptions",
            "Victims the engine chose to evict, by kind (reclaim, relocate, precedence, priority, "
            "gang-restart, gang-timeout, backfill-overrun).",
            ["kind"],
            registry=r,
        )
        self.evictions = Counter(
            "fairgpu_evictions",
            "Eviction calls by result (ok, blocked = refused by a PodDisruptionBudget, error; "
            "skipped_unbound = not sent, the pod was never bound).",
            ["result"],
            registry=r,
        )

    def _add_cluster_metrics(self, r: CollectorRegistry) -> None:
        """Pending pods and GPUs per queue and per node."""
        self.pending = Gauge(
            "fairgpu_pending_pods",
            "Pods waiting to be scheduled, per queue.",
            ["queue"],
            registry=r,
        )
        self.queue_gpus = Gauge(
            "fairgpu_queue_gpus_allocated",
            "GPUs (whole-GPU equivalents) held by running and assumed pods, per queue.",
            ["queue"],
            registry=r,
        )
        self.queue_gpus_pending = Gauge(
            "fairgpu_queue_gpus_pending",
            "GPUs (whole-GPU equivalents) asked by the pods waiting, per queue.",
            ["queue"],
            registry=r,
        )
        self.queue_fair_share = Gauge(
            "fairgpu_queue_gpus_fair_share",
            "Fair share of the cluster's GPUs (whole-GPU equivalents), per queue: weighted "
            "max-min, capped by what the queue holds plus what it has pending.",
            ["queue"],
            registry=r,
        )
        self.node_gpus = Gauge(
            "fairgpu_node_gpus_allocated",
            "GPUs (whole-GPU equivalents) allocated on each node.",
            ["node"],
            registry=r,
        )
        self.node_gpu_capacity = Gauge(
            "fairgpu_node_gpus_capacity", "GPUs on each node.", ["node"], registry=r
        )
        self.node_sharing_problem = Gauge(
            "fairgpu_node_gpu_sharing_problem",
            "1 where a GPU share was bound but the node's device plugin cannot admit shares "
            "as booked (allocatable nvidia.com/gpu equal to, or above, the physical count).",
            ["node"],
            registry=r,
        )

    def _add_health_metrics(self, r: CollectorRegistry) -> None:
        """Leadership, reports, and the cache's and watches' health."""
        self.leader = Gauge(
            "fairgpu_leader", "1 while this replica holds the leader Lease.", registry=r
        )
        self.unschedulable_reports = Counter(
            "fairgpu_unschedulable_reports",
            "FailedScheduling reports queued (Event + PodScheduled=False).",
            registry=r,
        )
        self.cache_repairs = Counter(
            "fairgpu_cache_repairs",
            "Divergences between the cache and the bound pods' node and gpu-devices annotation "
            "found after a batch of watch events and repaired, by kind (missing, orphan, node, "
            "devices, stale, arrays). Stays 0 in a healthy scheduler.",
            ["kind"],
            registry=r,
        )
        self.node_problems = Counter(
            "fairgpu_node_problems",
            "Node fields read only for GPU detail that could not be read and fell back to a "
            "default (counted once per Node object and field), by field.",
            ["field"],
            registry=r,
        )
        self.watch_relists = Gauge(
            "fairgpu_watch_relists", "Full relists per watched resource.", ["resource"], registry=r
        )

    def _add_forecast_metrics(self, r: CollectorRegistry) -> None:
        """Predicted start times (:mod:`fairgpu.kube.forecaster`)."""
        self.prediction_error = Histogram(
            "fairgpu_prediction_error_ratio",
            "|predicted - actual start| / actual wait of pods when they start.",
            buckets=(0.05, 0.1, 0.2, 0.35, 0.5, 1, 2, 5, 10),
            registry=r,
        )
        self.forecast_seconds = Gauge(
            "fairgpu_forecast_duration_seconds", "Wall time of the last forecast.", registry=r
        )
        self.forecast_pods = Gauge(
            "fairgpu_forecast_pods", "Pending pods with a predicted start.", registry=r
        )

    def count_cache_changes(
        self, repairs: dict[str, int], node_problems: list[tuple[str, str, Any]]
    ) -> None:
        """Count one batch's cache repairs and newly seen node problems."""
        for kind, count in repairs.items():
            self.cache_repairs.labels(kind).inc(count)
        for _, _, problem in node_problems:
            self.node_problems.labels(getattr(problem, "field", "")).inc()

    def render(self) -> bytes:
        """The exposition text."""
        return generate_latest(self.registry)


class HealthServer:
    """``/metrics``, ``/healthz`` (process alive, loop not stuck) and ``/readyz`` (caches
    synced) on one port, served from a background thread.
    """

    def __init__(
        self,
        metrics: Metrics,
        healthy: Callable[[], tuple[bool, str]],
        ready: Callable[[], tuple[bool, str]],
        host: str = "0.0.0.0",
        port: int = 10259,
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, outer.metrics.render(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/livez"):
                    ok, why = outer.healthy()
                    self._send(200 if ok else 503, (why or "ok").encode(), "text/plain")
                elif path == "/readyz":
                    ok, why = outer.ready()
                    self._send(200 if ok else 503, (why or "ok").encode(), "text/plain")
                else:
                    self._send(404, b"not found", "text/plain")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.metrics = metrics
        self.healthy = healthy
        self.ready = ready
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="health-server", daemon=True
        )

    def start(self) -> HealthServer:
        """Start serving."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
