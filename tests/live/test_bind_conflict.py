"""A bind the API refuses because the pod is bound already, against the real API server."""

from __future__ import annotations

import queue
import threading
import time

import msgspec
import pytest
from live_helpers import connection, create, pod

from fairgpu.devcluster import ControlPlane, KubeClient
from fairgpu.engine.engine import Bind
from fairgpu.kube.binder import Binder
from fairgpu.kube.cache import CacheChanges, SchedulerCache, decode_node, decode_pod
from fairgpu.kube.client import RestClient
from fairgpu.kube.events import BindResult, LoopEvent
from fairgpu.kube.metrics import Metrics
from fairgpu.kube.reporter import Reporter
from fairgpu.model.gpu import ANN_GPU_DEVICES

pytestmark = pytest.mark.integration

THERE, HERE = "lv-training-a100", "lv-inference-a100"


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

    cache = SchedulerCache("fairgpu")
    nodes = admin.get("/api/v1/nodes")["items"]
    cache.sync_nodes([decode_node(msgspec.json.encode(n)) for n in nodes], 0.0, CacheChanges())
    cache.apply_pod(
        "ADDED", decode_pod(msgspec.json.encode(pending), "fairgpu"), 0.0, CacheChanges()
    )
    uid = pending["metadata"]["uid"]
    here = cache.cluster.node_index[HERE]
    cache.cluster.assign(cache.pending[uid], here, (0, 1))
    cache.assumed_by_engine(uid, HERE)

    events: queue.Queue[LoopEvent] = queue.Queue()
    client = RestClient(connection(live_cp))
    reporter = Reporter(client, "fairgpu-scheduler", lambda uid: True)
    binder = Binder(
        client,
        events,
        cache,
        Metrics(),
        reporter,
        "replica-b",
        1,
        threading.Event(),
        lambda raw: decode_pod(raw, "fairgpu"),
    )
    try:
        binder.submit(Bind(cache.pending[uid], HERE, (0, 1)))
        result = events.get(timeout=30)
        assert isinstance(result, BindResult) and result.status == 409
        binder.done(result, CacheChanges(), time.time())
    finally:
        binder.shutdown()
        client.close()
    assert cache.node_name_of(uid) == THERE
    assert cache.cluster.placements[uid].devices == (6, 7)
    assert uid not in {p.uid for p in cache.schedulable()}
    there = cache.cluster.node_index[THERE]
    assert list(cache.cluster.device_milli_free[there, 6:8]) == [0, 0]
    assert list(cache.cluster.device_milli_free[here, 0:2]) == [1000, 1000]
