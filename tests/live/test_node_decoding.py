"""A Node field read only for GPU detail never costs the node: it falls back, is reported once
(in the live cache and the simulator alike), and the label stays a plain label for affinity."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import msgspec
import pytest

from fairgpu.engine.engine import Engine
from fairgpu.kube.cache import CacheChanges, SchedulerCache, decode_node, decode_pod
from fairgpu.kube.metrics import Metrics
from fairgpu.model.node import DEFAULT_GPU_MEMORY_MIB
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workloads.kube_yaml import load_kube_yaml

LABEL = "nvidia.com/gpu.memory"


def odd_node(memory: str, uid: str = "u1", gpus: str = "8", cpu: str = "32") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "odd",
            "uid": uid,
            "labels": {LABEL: memory, "nvidia.com/gpu.product": "A100"},
        },
        "status": {
            "allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110", "nvidia.com/gpu": gpus}
        },
    }


def pinned_cpu_pod(memory: str, name: str = "cpu") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {
            "schedulerName": "fairgpu",
            "nodeSelector": {LABEL: memory},
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Pending"},
    }


@pytest.mark.parametrize("memory", ["16Gi", "x1", "0", "-5"])
def test_an_unreadable_memory_label_falls_back_and_names_the_field(memory: str) -> None:
    rec = decode_node(msgspec.json.encode(odd_node(memory)))
    assert rec.info is not None, rec.error
    info = rec.info
    assert info.gpu_count == 8 and info.gpu_memory_mib == DEFAULT_GPU_MEMORY_MIB
    assert info.labels[LABEL] == memory  # still a plain label for affinity
    assert [p.field for p in info.problems] == [f"metadata.labels[{LABEL}]"]
    assert "Node odd" in info.problems[0].message and repr(memory) in info.problems[0].message


def test_a_readable_memory_label_is_used_without_a_problem() -> None:
    rec = decode_node(msgspec.json.encode(odd_node("81920")))
    assert rec.info is not None and rec.info.gpu_memory_mib == 81920 and not rec.info.problems


def test_an_unreadable_gpu_amount_counts_as_no_gpus_and_keeps_the_node() -> None:
    rec = decode_node(msgspec.json.encode(odd_node("81920", gpus="lots")))
    assert rec.info is not None and rec.info.gpu_count == 0
    assert [p.field for p in rec.info.problems] == ["status.allocatable.nvidia.com/gpu"]
    # A field every pod depends on still makes the node invalid, with the field named.
    bad = decode_node(msgspec.json.encode(odd_node("81920", cpu="lots")))
    assert bad.info is None and "status.allocatable.cpu" in bad.error


def test_the_cache_keeps_the_node_and_reports_each_node_object_once(caplog: Any) -> None:
    cache = SchedulerCache("fairgpu")
    out = CacheChanges()
    with caplog.at_level(logging.WARNING, logger="fairgpu.kube.cache"):
        for _ in range(3):  # ADDED, then status heartbeats
            cache.apply_node("MODIFIED", decode_node(msgspec.json.encode(odd_node("16Gi"))), 1, out)
    assert "odd" in cache.cluster.node_index
    assert [(n, u, p.field) for n, u, p in out.node_problems] == [
        ("odd", "u1", f"metadata.labels[{LABEL}]")
    ]
    assert len([r for r in caplog.records if "odd" in str(r.__dict__.get("node"))]) == 1
    metrics = Metrics()
    metrics.count_cache_changes(out.repairs, out.node_problems)
    assert b'fairgpu_node_problems_total{field="metadata.labels[nvidia.com/gpu.memory]"} 1.0' in (
        metrics.render()
    )
    # Re-created under the same name: a new object, reported again.
    again = CacheChanges()
    cache.apply_node("DELETED", decode_node(msgspec.json.encode(odd_node("16Gi"))), 2, again)
    cache.apply_node("ADDED", decode_node(msgspec.json.encode(odd_node("16Gi", "u2"))), 2, again)
    assert [u for _, u, _ in again.node_problems] == ["u2"]


def test_the_engine_places_a_cpu_pod_pinned_by_the_label_on_the_live_cache() -> None:
    cache = SchedulerCache("fairgpu")
    out = CacheChanges()
    cache.apply_node("ADDED", decode_node(msgspec.json.encode(odd_node("16Gi"))), 1, out)
    raw = msgspec.json.encode(pinned_cpu_pod("16Gi"))
    cache.apply_pod("ADDED", decode_pod(raw, "fairgpu"), 1, out)
    result = Engine().cycle(cache.cluster, cache.schedulable(), 1.0)
    assert [(b.pod.name, b.node_name) for b in result.binds] == [("cpu", "odd")]


@pytest.mark.parametrize("memory", ["16Gi", "x1"])
def test_the_simulator_keeps_the_node_warns_once_and_schedules_the_pinned_pod(
    tmp_path: Path, caplog: Any, memory: str
) -> None:
    docs = [odd_node(memory), pinned_cpu_pod(memory, "a"), pinned_cpu_pod(memory, "b")]
    path = tmp_path / "w.yaml"
    path.write_text("\n---\n".join(msgspec.json.encode(d).decode() for d in docs))
    with caplog.at_level(logging.WARNING, logger="fairgpu.sim.workloads"):
        workload = load_kube_yaml([path])
    assert [n.name for n in workload.nodes] == ["odd"]
    assert (
        len(workload.extra["node_problems"]) == 1 and memory in workload.extra["node_problems"][0]
    )
    assert len(caplog.records) == 1 and LABEL in caplog.records[0].getMessage()
    result = Simulation(workload, Engine()).run()
    assert {r.pod.name: r.node for r in result.records} == {"a": "odd", "b": "odd"}
