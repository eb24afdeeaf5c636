"""Device bookkeeping of the live cache without an API server: a node that shows 0 GPUs for a
moment (re-created under the same name, status patched later, or seen so at a restart) must
never make its bound pods' GPUs look free; the consistency check repairs any divergence."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import numpy as np
from test_cache import apply, free_devices, make_cache, node_json, pod_json

from fairgpu.cluster.state import COL_GPU_MILLI, ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.engine.framework import CycleState
from fairgpu.engine.plugins.node_resources import NodeResourcesFit
from fairgpu.engine.policies import policy as named_policy
from fairgpu.kube.cache import CacheChanges, SchedulerCache, decode_node, decode_pod
from fairgpu.kube.consistency import check
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import PodInfo, pod_from_k8s
from fairgpu.tenancy import parse_config


def node_event(cache: SchedulerCache, etype: str, raw: bytes) -> CacheChanges:
    out = CacheChanges()
    cache.apply_node(etype, decode_node(raw), 2.0, out)
    return out


def gpu_node_json(name: str, gpus: int, uid: str = "u1", memory: str | None = None) -> bytes:
    """A GPU node; ``gpus=0`` is a Node whose status has not been written yet."""
    labels = {"nvidia.com/gpu.memory": memory} if memory is not None else {}
    obj: dict[str, Any] = {"metadata": {"name": name, "uid": uid, "labels": labels}}
    if gpus:
        obj["status"] = {
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}
            | {"nvidia.com/gpu": str(gpus)}
        }
    return msgspec.json.encode(obj)


def held(cache: SchedulerCache) -> dict[str, tuple[int, ...]]:
    return {uid: pl.devices for uid, pl in cache.cluster.placements.items()}


def fill(cache: SchedulerCache, node: str = "n1", count: int = 8) -> None:
    for i in range(count):
        apply(cache, "ADDED", pod_json(f"p{i}", node=node, devices=str(i)))


def test_a_node_recreated_empty_keeps_its_bound_pods_devices() -> None:
    cache = make_cache("n1")
    fill(cache)
    assert free_devices(cache, "n1") == []
    node_event(cache, "DELETED", node_json("n1"))
    node_event(cache, "ADDED", gpu_node_json("n1", 0, uid="u2"))  # status comes later
    assert held(cache) == {f"uid-p{i}": (i,) for i in range(8)}  # kept while 0 GPUs show
    node_event(cache, "MODIFIED", gpu_node_json("n1", 8, uid="u2"))
    assert free_devices(cache, "n1") == []
    idx = cache.cluster.node_index["n1"]
    assert cache.cluster.requested[idx, COL_GPU_MILLI] == 8000
    assert sorted(d for pl in cache.cluster.placements.values() for d in pl.devices) == list(
        range(8)
    )


def test_a_restart_that_lists_the_node_with_zero_gpus_keeps_the_devices() -> None:
    cache = SchedulerCache("fairgpu")
    out = CacheChanges()
    cache.sync_nodes([decode_node(gpu_node_json("n1", 0))], 0.0, out)
    pods = [decode_pod(pod_json(f"p{i}", node="n1", devices=str(i)), "fairgpu") for i in range(8)]
    cache.sync_pods(pods, 0.0, out)
    assert held(cache) == {f"uid-p{i}": (i,) for i in range(8)}
    node_event(cache, "MODIFIED", gpu_node_json("n1", 8))
    assert free_devices(cache, "n1") == []


def test_pods_without_an_annotation_get_devices_when_the_gpus_appear() -> None:
    cache = SchedulerCache("fairgpu")
    node_event(cache, "ADDED", gpu_node_json("n1", 0))
    apply(cache, "ADDED", pod_json("theirs", gpus=3, node="n1", scheduler="default-scheduler"))
    apply(cache, "ADDED", pod_json("mine", gpus=2, node="n1", devices="0,1"))
    node_event(cache, "MODIFIED", gpu_node_json("n1", 8))
    assert cache.cluster.placements["uid-mine"].devices == (0, 1)
    assert cache.cluster.placements["uid-theirs"].devices == (2, 3, 4)
    assert free_devices(cache, "n1") == [5, 6, 7]


def test_an_annotation_naming_devices_the_node_lacks_is_read_again_when_it_shrinks() -> None:
    cache = SchedulerCache("fairgpu")
    node_event(cache, "ADDED", gpu_node_json("n1", 8))
    apply(cache, "ADDED", pod_json("p", gpus=2, node="n1", devices="6,7"))
    node_event(cache, "MODIFIED", gpu_node_json("n1", 4))
    assert cache.cluster.placements["uid-p"].devices == (0, 1)
    idx = cache.cluster.node_index["n1"]
    assert list(cache.cluster.device_milli_free[idx, :4]) == [0, 0, 1000, 1000]


def test_whole_gpus_take_all_device_memory_once_the_node_shows_it() -> None:
    cache = SchedulerCache("fairgpu")
    node_event(cache, "ADDED", gpu_node_json("n1", 0))
    apply(cache, "ADDED", pod_json("p", gpus=1, node="n1", devices="3"))
    node_event(cache, "MODIFIED", gpu_node_json("n1", 8, memory="81920"))
    idx = cache.cluster.node_index["n1"]
    assert cache.cluster.device_memory_free[idx, 3] == 0
    assert cache.cluster.device_memory_free[idx, 2] == 81920


def test_a_node_wider_than_the_initial_arrays_is_kept() -> None:
    cache = SchedulerCache("fairgpu", max_devices=8)
    node_event(cache, "ADDED", gpu_node_json("mig", 56))
    apply(cache, "ADDED", pod_json("p", gpus=1, node="mig", devices="55"))
    idx = cache.cluster.node_index["mig"]
    assert cache.cluster.max_devices == 56 and cache.cluster.gpu_count[idx] == 56
    assert cache.cluster.device_milli_free[idx, 55] == 0
    assert int((cache.cluster.device_milli_free[idx] == 1000).sum()) == 55


# ---- the consistency check ---------------------------------------------------------------------
def test_the_check_repairs_lost_wrong_and_stale_placements() -> None:
    cache = make_cache("n1")
    fill(cache, count=3)
    cluster = cache.cluster
    cluster.release("uid-p0")  # lost
    cluster.set_devices("uid-p1", (5,))  # wrong devices
    ghost = pod_from_k8s_json(pod_json("ghost", node="n1"))
    cluster.assign(ghost, 0, (6,))  # held by a pod nobody knows
    out = CacheChanges(nodes={"n1"})
    check(cache, out, now=10.0, full_every=1e9)
    assert out.repairs == {"missing": 1, "devices": 1, "stale": 1} and out.dirty
    assert {uid: pl.devices for uid, pl in cluster.placements.items()} == {
        "uid-p0": (0,),
        "uid-p1": (1,),
        "uid-p2": (2,),
    }
    assert free_devices(cache, "n1") == [3, 4, 5, 6, 7]
    again = CacheChanges(nodes={"n1"})
    check(cache, again, now=11.0, full_every=1e9)
    assert again.repairs == {} and cache.repairs == {"missing": 1, "devices": 1, "stale": 1}


def test_the_check_repairs_drifted_arrays_and_leaves_evicted_pods_alone() -> None:
    cache = make_cache("n1")
    fill(cache, count=2)
    cache.cluster.release("uid-p1")
    cache.mark_evicting("uid-p1")  # released by a preemption plan on purpose
    idx = cache.cluster.node_index["n1"]
    cache.cluster.device_milli_free[idx, 0] = 1000  # drifted
    out = CacheChanges(nodes={"n1"})
    check(cache, out, now=10.0, full_every=1e9)
    assert out.repairs == {"arrays": 1}
    assert "uid-p1" not in cache.cluster.placements
    assert free_devices(cache, "n1") == [1, 2, 3, 4, 5, 6, 7]


def test_a_full_check_runs_periodically_even_when_nothing_was_touched() -> None:
    cache = make_cache("n1", "n2")
    fill(cache, node="n2", count=1)
    cache.cluster.release("uid-p0")
    out = CacheChanges()
    check(cache, out, now=100.0, full_every=60.0)  # first call: full
    assert out.repairs == {"missing": 1}
    cache.cluster.release("uid-p0")
    out = CacheChanges()
    check(cache, out, now=130.0, full_every=60.0)  # untouched, not due
    assert out.repairs == {}
    check(cache, out, now=161.0, full_every=60.0)
    assert out.repairs == {"missing": 1}


def test_a_healthy_history_needs_no_repair(caplog: Any) -> None:
    cache = make_cache("n1")
    out = CacheChanges()
    for i in range(8):
        cache.apply_pod(
            "ADDED", decode_pod(pod_json(f"p{i}", node="n1", devices=str(i)), ""), 1, out
        )
    cache.apply_node("DELETED", decode_node(node_json("n1")), 2.0, out)
    cache.apply_node("ADDED", decode_node(gpu_node_json("n1", 0, uid="u2")), 2.0, out)
    check(cache, out, now=3.0)
    cache.apply_node("MODIFIED", decode_node(gpu_node_json("n1", 8, uid="u2")), 2.0, out)
    cache.apply_pod("DELETED", decode_pod(pod_json("p3", node="n1", devices="3"), ""), 1, out)
    with caplog.at_level(logging.WARNING, logger="fairgpu.kube.consistency"):
        check(cache, out, now=4.0)
    assert cache.repairs == {} and not caplog.records
    assert free_devices(cache, "n1") == [3]


# ---- the fit backstop ----------------------------------------------------------------------------
def test_the_node_gpu_total_backstops_device_arrays_that_look_free() -> None:
    cluster = ClusterState()
    cluster.add_node(NodeInfo("n1", allocatable={"cpu": 32000, "pods": 110}, gpu_count=8))
    for i in range(8):
        # Placed without devices: the per-device arrays wrongly show every GPU free.
        cluster.assign(pod_from_k8s_json(pod_json(f"p{i}", node="n1")), 0, ())
    idx = cluster.node_index["n1"]
    assert int(cluster.idle_devices[idx]) == 8
    pod = pod_from_k8s_json(pod_json("new"))
    result = NodeResourcesFit().filter(CycleState(), pod, cluster)
    assert not result.mask[idx]
    assert result.reasons["Insufficient nvidia.com/gpu"][idx]
    engine = Engine(named_policy("fairgpu-frag-plan"), 0)
    cycle = engine.cycle(cluster, [pod], 0.0)
    assert not cycle.binds and "Insufficient nvidia.com/gpu" in cycle.unschedulable[0].reason


def test_the_engine_places_on_a_node_wider_than_any_seen_before() -> None:
    cluster = ClusterState(max_devices=8)
    node = NodeInfo("a", allocatable={"cpu": 32000, "pods": 110}, gpu_count=8)
    cluster.add_node(node)
    engine = Engine(named_policy("fairgpu-frag-plan"), 0)
    first = engine.cycle(cluster, [pod_from_k8s_json(pod_json("x", gpus=8))], 0.0)
    assert [b.node_name for b in first.binds] == ["a"]
    cluster.add_node(NodeInfo("mig", allocatable={"cpu": 32000, "pods": 110}, gpu_count=56))
    second = engine.cycle(cluster, [pod_from_k8s_json(pod_json("y", gpus=40))], 1.0)
    assert [(b.node_name, len(b.devices)) for b in second.binds] == [("mig", 40)]
    assert cluster.max_devices == 56
    assert np.array_equal(cluster.device_milli_free[0, :8], np.zeros(8))


def pod_from_k8s_json(raw: bytes) -> PodInfo:
    from fairgpu.api import objects as k8s

    return pod_from_k8s(k8s.decode_json(raw, k8s.Pod))


def test_the_max_devices_option_is_deprecated_and_ignored(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from fairgpu.cli import app

    missing = tmp_path / "no-kubeconfig"
    result = CliRunner().invoke(
        app, ["run", "--max-devices", "8", "--kubeconfig", str(missing), "--metrics-port", "0"]
    )
    assert "--max-devices is deprecated and ignored" in result.output
    assert result.exit_code != 0 and str(missing) in result.output
    assert "--max-devices" not in CliRunner().invoke(app, ["run", "--help"]).output


def test_the_scheduling_loop_checks_after_each_batch_and_counts_repairs() -> None:
    from fairgpu.kube import LiveScheduler, RunConfig
    from fairgpu.kube.client import Connection
    from fairgpu.kube.events import NodeEvent, PodEvent

    # The loop's own drain, fed directly (no threads started, nothing sent to an API server).
    s = LiveScheduler(
        RunConfig(
            connection=Connection("https://127.0.0.1:1"),
            leader_elect=False,
            metrics_port=0,
            metrics_host="127.0.0.1",
            install_signal_handlers=False,
        )
    )
    try:
        s.events.put(NodeEvent("ADDED", decode_node(gpu_node_json("n1", 8, memory="16Gi"))))
        for i in range(2):
            raw = pod_json(f"p{i}", node="n1", devices=str(i))
            s.events.put(PodEvent("ADDED", decode_pod(raw, "fairgpu")))
        s._drain(0.1)
        assert s.reporter.backlog == 1  # the Node's Warning Event, queued once
        s.cache.cluster.release("uid-p0")  # a divergence the events did not cause
        raw = pod_json("p1", node="n1", devices="1", phase="Running")
        s.events.put(PodEvent("MODIFIED", decode_pod(raw, "fairgpu")))  # touches n1
        s._drain(0.1)
        assert s.cache.cluster.placements["uid-p0"].devices == (0,)
        text = s.metrics.render().decode()
        assert 'fairgpu_cache_repairs_total{kind="missing"} 1.0' in text
        assert (
            'fairgpu_node_problems_total{field="metadata.labels[nvidia.com/gpu.memory]"} 1.0'
            in (text)
        )
    finally:
        s.health.server.server_close()
        s.client.close()


def test_pods_waiting_for_their_deleted_node_still_count_for_their_queues_limit() -> None:
    """Queue ``ns`` may hold 4 GPUs and holds them on n1; n1 is deleted (to come back under
    its name, its pods still bound to it in the API): a new pod of the queue is not bound on
    n2 in their place -- once n1 is back the queue would hold 5."""
    cache = make_cache("n1", "n2")
    fill(cache, count=4)
    node_event(cache, "DELETED", node_json("n1"))
    assert not cache.cluster.placements and len(cache.cluster.detached) == 4
    apply(cache, "ADDED", pod_json("new"))
    config = parse_config({"queues": [{"name": "ns", "namespaces": ["ns"], "limit": {"gpu": 4}}]})
    result = Engine(tenancy=config).cycle(cache.cluster, cache.schedulable(), 3.0)
    assert not result.binds
    [refusal] = result.unschedulable
    assert "queue 'ns' would hold 5 GPU, above its limit of 4 GPU" in refusal.reason
    node_event(cache, "ADDED", gpu_node_json("n1", 8))  # back: its pods are placed again
    assert not cache.cluster.detached and len(cache.cluster.placements) == 4
