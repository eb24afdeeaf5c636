"""A bind the API refuses because the pod is bound already, against the real API server."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import msgspec
import pytest
from live_helpers import connection, create, pod, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient
from fairgpu.engine.engine import Bind
from fairgpu.kube.binder import Binder
from fairgpu.kube.cache import CacheChanges, SchedulerCache, decode_node, decode_pod
from fairgpu.kube.client import RestClient
from fairgpu.kube.decode import PodRecord
from fairgpu.kube.events import BindResult, LoopEvent
from fairgpu.kube.metrics import Metrics
from fairgpu.kube.reporter import Reporter
from fairgpu.model.gpu import ANN_GPU_DEVICES

pytestmark = pytest.mark.integration

THERE, HERE = "lv-training-a100", "lv-inference-a100"


def cache_of(admin: KubeClient, pending: dict[str, Any]) -> SchedulerCache:
    """A cache of every node and of ``pending`` as a lagging watch last showed it, placed by
    the engine on GPU 0 (and 1, for two) of HERE."""
    cache = SchedulerCache("fairgpu")
    nodes = admin.get("/api/v1/nodes")["items"]
    cache.sync_nodes([decode_node(msgspec.json.encode(n)) for n in nodes], 0.0, CacheChanges())
    cache.apply_pod(
        "ADDED", decode_pod(msgspec.json.encode(pending), "fairgpu"), 0.0, CacheChanges()
    )
    uid = pending["metadata"]["uid"]
    gpus = tuple(range(cache.pending[uid].gpu.count))
    cache.cluster.assign(cache.pending[uid], cache.cluster.node_index[HERE], gpus)
    cache.assumed_by_engine(uid, HERE)
    return cache


def decode(raw: bytes) -> PodRecord:
    """The pod watch's decoder (this scheduler's name)."""
    return decode_pod(raw, "fairgpu")


def bind_once(live_cp: ControlPlane, cache: SchedulerCache, uid: str) -> BindResult:
    """Bind ``uid`` to HERE through a Binder and apply the result as the loop does."""
    events: queue.Queue[LoopEvent] = queue.Queue()
    client = RestClient(connection(live_cp))
    reporter = Reporter(client, "fairgpu-scheduler", lambda uid: True)
    binder = Binder(client, events, cache, Metrics(), reporter, "b", 1, threading.Event(), decode)
    try:
        pod = cache.pending[uid]
        binder.submit(Bind(pod, HERE, tuple(range(pod.gpu.count))))
        result = events.get(timeout=30)
        assert isinstance(result, BindResult)
        binder.done(result, CacheChanges(), time.time())
    finally:
        binder.shutdown()
        client.close()
    return result


def test_a_pod_bound_already_is_placed_where_the_api_has_it(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # p waits in this scheduler's cache (its watch lags), but another replica bound it to
    # THERE on GPUs 6 and 7. This scheduler places p HERE and binds: 409. Forgetting p would
    # leave GPUs 6 and 7 of THERE free in the cache until the watch catches up, for the next
    # cycle to hand out; the pod as read after the 409 is applied at once instead.
    pending = create(admin, ns, pod("p", gpus=2, pool=None, model=None))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "annotations": {ANN_GPU_DEVICES: "6,7"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": THERE},
    }
    admin.post(f"/api/v1/namespaces/{ns}/pods/p/binding", binding)

    cache = cache_of(admin, pending)
    uid = pending["metadata"]["uid"]
    assert bind_once(live_cp, cache, uid).status == 409
    here = cache.cluster.node_index[HERE]
    assert cache.node_name_of(uid) == THERE
    assert cache.cluster.placements[uid].devices == (6, 7)
    assert uid not in {p.uid for p in cache.schedulable()}
    there = cache.cluster.node_index[THERE]
    assert list(cache.cluster.device_milli_free[there, 6:8]) == [0, 0]
    assert list(cache.cluster.device_milli_free[here, 0:2]) == [1000, 1000]


def test_a_pod_created_again_under_its_name_is_gone_for_the_old_binds(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # The user deleted p and created it again (a new uid); the lagging watch still shows the
    # old p pending. Its bind fails the uid precondition with 409: the old p is gone, and is
    # not placed and bound again each cycle until the watch says so.
    old = create(admin, ns, pod("p", gpus=1, pool=None, model=None))
    admin.request("DELETE", f"/api/v1/namespaces/{ns}/pods/p", {"gracePeriodSeconds": 0})
    wait_for(lambda: not admin.request("GET", f"/api/v1/namespaces/{ns}/pods/p").ok)
    create(admin, ns, pod("p", gpus=1, pool=None, model=None))

    cache = cache_of(admin, old)
    uid = old["metadata"]["uid"]
    result = bind_once(live_cp, cache, uid)
    assert result.status == 409 and result.pod_gone
    assert cache.schedulable() == [] and uid not in cache.cluster.placements
    late = decode_pod(msgspec.json.encode(old), "fairgpu")
    cache.apply_pod("MODIFIED", late, 1.0, CacheChanges())  # the watch, late
    assert cache.schedulable() == []
