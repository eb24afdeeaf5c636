"""The live scheduler's cache, without an API server: watch events in, cluster state out."""

from __future__ import annotations

from typing import Any

import msgspec

from fairgpu.cluster.state import COL_CPU
from fairgpu.engine.engine import Engine
from fairgpu.engine.lingering import hold_remainders
from fairgpu.kube.cache import CacheChanges, SchedulerCache, decode_node, decode_pod
from fairgpu.model.node_pools import NodePoolConfig


def node_json(name: str, gpus: int = 8, labels: dict[str, str] | None = None) -> bytes:
    return msgspec.json.encode(
        {
            "metadata": {"name": name, "labels": labels or {}},
            "status": {
                "allocatable": {
                    "cpu": "32",
                    "memory": "128Gi",
                    "pods": "110",
                    "nvidia.com/gpu": str(gpus),
                }
            },
        }
    )


def pod_json(
    name: str,
    *,
    gpus: int = 1,
    node: str = "",
    scheduler: str = "fairgpu",
    devices: str | None = None,
    phase: str = "Pending",
    extra: dict[str, str] | None = None,
) -> bytes:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    limits.update(extra or {})
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "annotations": {"fairgpu.io/gpu-devices": devices} if devices else {},
        },
        "spec": {
            "schedulerName": scheduler,
            "nodeName": node,
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "1", **limits}, "limits": limits}}
            ],
        },
        "status": {"phase": phase},
    }
    return msgspec.json.encode(obj)


def make_cache(*nodes: str) -> SchedulerCache:
    cache = SchedulerCache("fairgpu")
    out = CacheChanges()
    cache.sync_nodes([decode_node(node_json(n)) for n in nodes], 0.0, out)
    return cache


def apply(cache: SchedulerCache, etype: str, raw: bytes) -> CacheChanges:
    out = CacheChanges()
    cache.apply_pod(etype, decode_pod(raw, "fairgpu"), 1.0, out)
    return out


def free_devices(cache: SchedulerCache, node: str) -> list[int]:
    idx = cache.cluster.node_index[node]
    return [d for d in range(8) if cache.cluster.device_milli_free[idx, d] == 1000]


def test_pending_pod_becomes_placed_when_the_watch_reports_it_bound() -> None:
    cache = make_cache("n1")
    out = apply(cache, "ADDED", pod_json("p", gpus=2))
    assert out.dirty and [p.name for p in cache.schedulable()] == ["p"]
    apply(cache, "MODIFIED", pod_json("p", gpus=2, node="n1", devices="2,5"))
    assert not cache.pending and cache.node_name_of("uid-p") == "n1"
    assert cache.cluster.placements["uid-p"].devices == (2, 5)
    assert free_devices(cache, "n1") == [0, 1, 3, 4, 6, 7]


def test_pods_bound_by_another_scheduler_take_free_devices() -> None:
    cache = make_cache("n1")
    apply(cache, "ADDED", pod_json("mine", gpus=2, node="n1", devices="0,1"))
    apply(cache, "ADDED", pod_json("theirs", gpus=3, node="n1", scheduler="default-scheduler"))
    assert free_devices(cache, "n1") == [5, 6, 7]
    assert cache.overcommits == 0


def test_unbound_pods_of_other_schedulers_are_ignored() -> None:
    cache = make_cache("n1")
    out = apply(cache, "ADDED", pod_json("x", scheduler="default-scheduler"))
    assert not out.dirty and not cache.pending


def test_a_pod_on_an_unknown_node_is_placed_when_the_node_arrives() -> None:
    cache = make_cache()
    apply(cache, "ADDED", pod_json("p", gpus=8, node="late", devices="0,1,2,3,4,5,6,7"))
    assert "uid-p" not in cache.cluster.placements
    cache.apply_node("ADDED", decode_node(node_json("late")), 2.0, CacheChanges())
    assert cache.node_name_of("uid-p") == "late" and free_devices(cache, "late") == []


def test_status_heartbeats_do_not_touch_the_cluster() -> None:
    cache = make_cache("n1")
    version = cache.cluster.static_version
    out = CacheChanges()
    cache.apply_node("MODIFIED", decode_node(node_json("n1")), 2.0, out)
    assert cache.cluster.static_version == version and not out.dirty
    cache.apply_node("MODIFIED", decode_node(node_json("n1", labels={"a": "b"})), 2.0, out)
    assert cache.cluster.static_version > version and out.dirty


def test_forget_releases_an_assumed_pod_but_never_a_bound_one() -> None:
    cache = make_cache("n1")
    apply(cache, "ADDED", pod_json("p"))
    pod = cache.pending["uid-p"]
    cache.cluster.assign(pod, 0, (0,))
    cache.assumed_by_engine("uid-p", "n1")
    assert cache.schedulable() == []
    assert cache.forget("uid-p") and [p.name for p in cache.schedulable()] == ["p"]
    # Bound according to the watch before a (timed-out) bind reply: kept.
    apply(cache, "MODIFIED", pod_json("p", node="n1", devices="0"))
    assert not cache.forget("uid-p") and "uid-p" in cache.cluster.placements


def test_relist_drops_pods_that_disappeared_meanwhile() -> None:
    cache = make_cache("n1")
    apply(cache, "ADDED", pod_json("gone", gpus=4, node="n1", devices="0,1,2,3"))
    apply(cache, "ADDED", pod_json("waiting"))
    out = CacheChanges()
    cache.sync_pods(
        [decode_pod(pod_json("kept", gpus=1, node="n1", devices="7"), "fairgpu")], 3.0, out
    )
    assert out.dirty and out.gone == {"uid-gone", "uid-waiting"}
    assert set(cache.cluster.placements) == {"uid-kept"} and not cache.pending


def test_victims_stay_released_until_deleted_or_restored() -> None:
    cache = make_cache("n1")
    apply(cache, "ADDED", pod_json("v", gpus=2, node="n1", devices="0,1"))
    victim = cache.cluster.pods["uid-v"]
    cache.cluster.release("uid-v")  # what the engine's plan does
    cache.mark_evicting("uid-v")
    apply(cache, "MODIFIED", pod_json("v", gpus=2, node="n1", devices="0,1"))
    assert "uid-v" not in cache.cluster.placements
    assert cache.restore("uid-v", victim, 100.0)
    assert cache.cluster.placements["uid-v"].devices == (0, 1)
    assert cache.cluster.placements["uid-v"].started == 100.0
    out = apply(cache, "DELETED", pod_json("v", gpus=2, node="n1", devices="0,1"))
    assert out.gone == {"uid-v"} and free_devices(cache, "n1") == list(range(8))


def test_terminal_pods_release_their_gpus() -> None:
    cache = make_cache("n1")
    apply(cache, "ADDED", pod_json("done", gpus=8, node="n1", devices="0,1,2,3,4,5,6,7"))
    apply(cache, "MODIFIED", pod_json("done", gpus=8, node="n1", phase="Succeeded"))
    assert free_devices(cache, "n1") == list(range(8))


def test_malformed_pods_carry_the_error_naming_the_field() -> None:
    rec = decode_pod(pod_json("bad", gpus=0, extra={"nvidia.com/gpucores": "150"}), "fairgpu")
    assert rec.info is not None and rec.info.error
    assert "Pod ns/bad" in rec.info.error and "nvidia.com/gpucores" in rec.info.error
    not_json = decode_pod(
        b'{"metadata": {"name": "x", "namespace": "ns", "uid": "u"}, "spec": 5}', "fairgpu"
    )
    assert not_json.info is not None and "spec" in (not_json.info.error or "")


def _pool_node(name: str, usage: str) -> bytes:
    return msgspec.json.encode(
        {
            "metadata": {"name": name, "labels": {USAGE: usage}},
            "spec": {"taints": [{"key": USAGE, "value": usage, "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {
                    "cpu": "32",
                    "memory": "128Gi",
                    "pods": "110",
                    "nvidia.com/gpu": "8",
                }
            },
        }
    )


def _training_pod(name: str, namespace: str, node: str = "") -> bytes:
    limits = {"nvidia.com/gpu": "8"}
    return msgspec.json.encode(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{namespace}-{name}",
                "labels": {"fairgpu.io/workload-type": "training"},
            },
            "spec": {
                "schedulerName": "fairgpu",
                "nodeName": node,
                "containers": [{"name": "c", "resources": {"requests": limits, "limits": limits}}],
            },
            "status": {"phase": "Running" if node else "Pending"},
        }
    )


USAGE = "example.com/node.usage"


def test_running_pods_keep_their_node_pool_placement_for_fair_shares() -> None:
    """A bound pod labelled with a workload type is decoded with the affinity and
    tolerations derived from it, as a pending one: its queue's pool-aware share counts the
    pools it may use. Without them a running training pod could run nowhere and its queue's
    share fell to what it had pending: here team-a's and team-b's to 0, and team-c, whose
    8-GPU pod exceeds its third of the 16 training GPUs, was judged against those."""
    pools = NodePoolConfig()
    rec = decode_pod(_training_pod("a0", "team-a", node="t0"), "fairgpu", pools=pools)
    assert rec.info is not None and rec.info.required_terms is not None
    assert any(t.key == USAGE and t.value == "training" for t in rec.info.tolerations)

    cache = SchedulerCache("fairgpu")
    out = CacheChanges()
    cache.sync_nodes([decode_node(_pool_node(n, "training")) for n in ("t0", "t1")], 0.0, out)
    for name, ns, node in (("a0", "team-a", "t0"), ("b0", "team-b", "t1")):
        cache.apply_pod(
            "ADDED", decode_pod(_training_pod(name, ns, node), "fairgpu", pools=pools), 0.0, out
        )
    pending = decode_pod(_training_pod("c0", "team-c"), "fairgpu", pools=pools).info
    assert pending is not None
    res = Engine().cycle(cache.cluster, [pending], 1000.0)
    assert not res.evictions and not res.binds
    assert (
        "reclaim refused: queue 'team-c' would exceed its fair share" in res.unschedulable[0].reason
    )


def test_a_victim_terminating_when_its_node_registers_again_keeps_its_gpus() -> None:
    # A preemption released v (the engine held what its preemptor elsewhere does not take as
    # its remainder: all of it), and its eviction was posted. Its node is deleted and created
    # again under its name while v still terminates there: v holds its GPUs again, as the
    # API has it, and is never a victim again; once it is gone they are free.
    cache = make_cache("n1")
    apply(cache, "ADDED", pod_json("v", gpus=4, node="n1", devices="4,5,6,7"))
    cache.mark_evicting("uid-v")  # the engine's plan released it and put back its remainder
    cache.cluster.mark_terminating("uid-v", True)
    cache.apply_node("DELETED", decode_node(node_json("n1")), 2.0, CacheChanges())
    assert "uid-v" not in cache.cluster.placements
    cache.apply_node("ADDED", decode_node(node_json("n1")), 3.0, CacheChanges())
    assert free_devices(cache, "n1") == [0, 1, 2, 3]
    assert cache.cluster.placements["uid-v"].terminating
    out = apply(cache, "DELETED", pod_json("v", gpus=4, node="n1", devices="4,5,6,7"))
    assert out.gone == {"uid-v"} and free_devices(cache, "n1") == list(range(8))


def test_a_device_plugin_restart_keeps_a_victims_remainder_on_its_own_devices() -> None:
    # v (devices 4-7) is evicted for p, assumed on 4 and 5 while v terminates: v's remainder
    # holds 6 and 7. The node's GPUs read 0 and come back: the remainder keeps 6 and 7 (read
    # again from v's annotation, it would count 4 and 5 twice).
    cache = make_cache("n1")
    apply(cache, "ADDED", pod_json("v", gpus=4, node="n1", devices="4,5,6,7"))
    apply(cache, "ADDED", pod_json("p", gpus=2))
    victim = cache.cluster.pods["uid-v"]
    _, where = cache.cluster.release("uid-v")  # type: ignore[misc]
    cache.mark_evicting("uid-v")
    taken = cache.cluster.assign(cache.pending["uid-p"], 0, (4, 5))
    cache.assumed_by_engine("uid-p", "n1")
    hold_remainders(cache.cluster, [(victim, where)], [(cache.pending["uid-p"], taken)])
    for gpus in (0, 8):
        cache.apply_node("MODIFIED", decode_node(node_json("n1", gpus=gpus)), 2.0, CacheChanges())
    assert cache.cluster.placements["uid-v"].devices == (6, 7)
    assert free_devices(cache, "n1") == [0, 1, 2, 3]
    assert (cache.cluster.device_milli_free[0] >= 0).all()


def bind_sent(cache: SchedulerCache, name: str, gpus: int, devices: tuple[int, ...]) -> None:
    """Pending pod ``name`` placed on n1's ``devices`` by the engine, its bind sent."""
    apply(cache, "ADDED", pod_json(name, gpus=gpus))
    uid = f"uid-{name}"
    cache.cluster.assign(cache.pending[uid], cache.cluster.node_index["n1"], devices)
    cache.assumed_by_engine(uid, "n1")
    cache.bind_sent(uid, "n1", devices)


def test_a_pod_whose_bind_was_sent_keeps_its_gpus_while_its_node_registers_again() -> None:
    # p's bind to n1 (devices 2 and 5) was sent; the watch lags, so the cache has not seen it
    # bound. n1 is deleted and created again under its name meanwhile: the API accepts a
    # Binding to a node that is gone, so p may well be bound there. It is not pending again,
    # and holds devices 2 and 5 again when n1 returns; a failed bind lets go of them.
    cache = make_cache("n1")
    bind_sent(cache, "p", 2, (2, 5))
    cache.apply_node("DELETED", decode_node(node_json("n1")), 2.0, CacheChanges())
    assert cache.schedulable() == []
    cache.apply_node("ADDED", decode_node(node_json("n1")), 3.0, CacheChanges())
    assert cache.cluster.placements["uid-p"].devices == (2, 5)
    assert free_devices(cache, "n1") == [0, 1, 3, 4, 6, 7] and cache.schedulable() == []
    apply(cache, "MODIFIED", pod_json("p", gpus=2, node="n1", devices="2,5"))  # the watch
    assert not cache.binding and cache.overcommits == 0
    assert free_devices(cache, "n1") == [0, 1, 3, 4, 6, 7]
    # Another bind in flight when the node goes, which then fails: pending again.
    bind_sent(cache, "q", 1, (0,))
    cache.apply_node("DELETED", decode_node(node_json("n1")), 4.0, CacheChanges())
    cache.forget("uid-q")
    assert [p.name for p in cache.schedulable()] == ["q"]
    cache.apply_node("ADDED", decode_node(node_json("n1")), 5.0, CacheChanges())
    assert "uid-q" not in cache.cluster.placements and free_devices(cache, "n1")[0] == 0


def test_a_pod_its_bind_found_gone_stays_gone_while_the_watch_lags() -> None:
    # The user deleted p; the watch has not said so yet. Its bind answers 404: p is gone now,
    # and the events the lagging watch still delivers (p pending) do not bring it back --
    # else every cycle until its DELETED event would place it, bind it and fail again.
    cache = make_cache("n1")
    bind_sent(cache, "p", 2, (2, 5))
    out = CacheChanges()
    cache.gone_before_bound("uid-p", out)
    assert out.gone == {"uid-p"} and out.dirty and cache.schedulable() == []
    assert free_devices(cache, "n1") == list(range(8))
    assert not apply(cache, "MODIFIED", pod_json("p", gpus=2)).dirty
    assert cache.schedulable() == []
    apply(cache, "DELETED", pod_json("p", gpus=2))
    assert not cache.buried
    # A pod of that name created again (another uid) is a new pod.
    apply(cache, "ADDED", pod_json("p", gpus=2).replace(b"uid-p", b"uid-p2"))
    assert [p.uid for p in cache.schedulable()] == ["uid-p2"]


def _resized(raw: bytes, cpu: str, labels: dict[str, str] | None = None) -> bytes:
    """``raw`` (a bound pod) whose kubelet still shows ``cpu`` for its container, as while
    a resize of its spec is under way; ``labels`` replace its labels."""
    obj = msgspec.json.decode(raw)
    obj["status"]["containerStatuses"] = [
        {"name": "c", "resources": {"requests": {"cpu": cpu}}, "allocatedResources": {"cpu": cpu}}
    ]
    if labels is not None:
        obj["metadata"]["labels"] = labels
    return msgspec.json.encode(obj)


def test_a_bound_pod_resized_in_place_charges_its_node_what_it_holds() -> None:
    cache = make_cache("n1")
    idx = cache.cluster.node_index["n1"]
    bound = pod_json("p", gpus=2, node="n1", devices="2,5", phase="Running")
    apply(cache, "ADDED", bound)
    assert cache.cluster.requested[idx, COL_CPU] == 1000  # milli-CPU
    # Its spec asks 1 cpu, but the kubelet still runs it with 6 (a resize down not done).
    out = apply(cache, "MODIFIED", _resized(bound, "6"))
    assert out.dirty and cache.cluster.requested[idx, COL_CPU] == 6000
    assert cache.cluster.placements["uid-p"].devices == (2, 5)  # same devices
    apply(cache, "MODIFIED", _resized(bound, "1"))
    assert cache.cluster.requested[idx, COL_CPU] == 1000


def test_a_bound_pod_relabelled_is_seen_with_its_new_labels() -> None:
    cache = make_cache("n1")
    bound = pod_json("p", node="n1", devices="0", phase="Running")
    apply(cache, "ADDED", bound)
    assert cache.cluster.pods["uid-p"].labels == {}
    apply(cache, "MODIFIED", _resized(bound, "1", labels={"app": "web"}))
    assert cache.cluster.pods["uid-p"].labels == {"app": "web"}
    assert cache.cluster.placements["uid-p"].devices == (0,)


def _annotated(raw: bytes, annotations: dict[str, str]) -> bytes:
    obj = msgspec.json.decode(raw)
    obj["metadata"]["annotations"].update(annotations)
    return msgspec.json.encode(obj)


def test_a_bound_pod_that_no_longer_decodes_keeps_holding_its_node() -> None:
    """Annotations change on running pods: one that makes a bound pod malformed for this
    scheduler (a bad topology label), or a GPU ask another scheduler placed that this one
    cannot read (150% of a GPU on each of two), must not free what the pod holds, or the node
    is booked twice."""
    cache = make_cache("n1")
    apply(cache, "ADDED", pod_json("mine", gpus=6, node="n1", devices="0,1,2,3,4,5"))
    bad = _annotated(
        pod_json("mine", gpus=6, node="n1", devices="0,1,2,3,4,5"),
        {"fairgpu.io/topology-required": "not a label!"},
    )
    rec = decode_pod(bad, "fairgpu")
    assert rec.info is not None and "topology-required" in (rec.info.error or "")
    apply(cache, "MODIFIED", bad)
    assert free_devices(cache, "n1") == [6, 7]
    idx = cache.cluster.node_index["n1"]
    assert cache.cluster.requested[idx, COL_CPU] == 1000  # its cpu request too
    theirs = pod_json(
        "theirs", gpus=2, node="n1", scheduler="other", extra={"nvidia.com/gpucores": "150"}
    )
    unreadable = decode_pod(theirs, "fairgpu").info
    assert unreadable is not None and "150%" in (unreadable.error or "")
    apply(cache, "ADDED", theirs)
    assert free_devices(cache, "n1") == []  # counted as two whole GPUs: never fewer
    assert cache.overcommits == 0
