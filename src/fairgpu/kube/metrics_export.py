"""The gauges read from the loop's state: pending pods and GPUs per queue, GPUs per node.

Exported every couple of seconds by the loop thread (it owns the cache and the engine).
A queue or node that disappears is reset (queues) or removed (nodes) so dashboards do not
show stale values.
"""

from __future__ import annotations

from fairgpu.cluster.state import COL_GPU_MILLI
from fairgpu.engine.engine import Engine
from fairgpu.kube.cache import SchedulerCache
from fairgpu.kube.metrics import Metrics
from fairgpu.model.gpu import WHOLE

__all__ = ["MetricsExporter"]


class MetricsExporter:
    """Sets the per-queue and per-node gauges of ``metrics`` from a cache and an engine."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._nodes_exported: set[str] = set()
        self._queues_exported: set[str] = set()

    def export(self, cache: SchedulerCache, engine: Engine) -> None:
        """Update every gauge (loop thread)."""
        self._export_queues(cache, engine)
        self._export_nodes(cache)

    def _export_queues(self, cache: SchedulerCache, engine: Engine) -> None:
        m = self.metrics
        pending: dict[str, int] = {}
        asked: dict[str, float] = {}
        waiting = cache.schedulable()
        for pod in waiting:
            q = engine.tenant(pod).queue
            pending[q] = pending.get(q, 0) + 1
            dra = cache.cluster.dra  # GPUs asked through DRA claims count as GPUs
            claims = dra.asked_gpu_milli(pod, cache.cluster)
            asked[q] = asked.get(q, 0.0) + (pod.gpu.total_milli + claims) / WHOLE
        shares = engine.fair_shares(cache.cluster, waiting)
        gpus: dict[str, float] = {}
        cluster = cache.cluster
        for uid, pl in cluster.placements.items():
            if pl.devices or pl.dra_milli:
                q = engine.tenant(cluster.pods[uid]).queue
                held = pl.device_milli * len(pl.devices) + pl.dra_milli
                gpus[q] = gpus.get(q, 0.0) + held / WHOLE
        queues = set(pending) | set(gpus) | set(shares) | self._queues_exported
        for q in queues:
            m.pending.labels(q).set(pending.get(q, 0))
            m.queue_gpus.labels(q).set(gpus.get(q, 0.0))
            m.queue_gpus_pending.labels(q).set(asked.get(q, 0.0))
            m.queue_fair_share.labels(q).set(shares.get(q, 0.0) / WHOLE)
        self._queues_exported = set(pending) | set(gpus) | set(shares)

    def _export_nodes(self, cache: SchedulerCache) -> None:
        m = self.metrics
        cluster = cache.cluster
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
