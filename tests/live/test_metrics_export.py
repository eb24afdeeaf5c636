"""The per-queue gauges, without an API server: a cache in, gauge values out."""

from __future__ import annotations

from test_cache import apply, make_cache, pod_json

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY
from fairgpu.engine.policies import policy as named_policy
from fairgpu.kube.metrics import Metrics
from fairgpu.kube.metrics_export import MetricsExporter


def _value(metrics: Metrics, name: str, queue: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"queue": queue})


def test_queue_gauges_show_pending_gpus_and_fair_share() -> None:
    cache = make_cache("n1")  # 8 GPUs
    apply(cache, "ADDED", pod_json("run", gpus=2, node="n1", devices="0,1"))
    apply(cache, "ADDED", pod_json("wait-a", gpus=3))
    apply(cache, "ADDED", pod_json("wait-b", gpus=4))
    metrics = Metrics()
    MetricsExporter(metrics).export(cache, Engine(named_policy(DEFAULT_POLICY), 0))
    queue = "ns"  # no tenancy: a queue per namespace
    assert _value(metrics, "fairgpu_pending_pods", queue) == 2
    assert _value(metrics, "fairgpu_queue_gpus_pending", queue) == 7.0
    assert _value(metrics, "fairgpu_queue_gpus_allocated", queue) == 2.0
    # One queue wanting 9 GPUs of 8: all of them.
    assert _value(metrics, "fairgpu_queue_gpus_fair_share", queue) == 8.0
