"""What a forecast reads of a live LeaderWorkerSet: the workers a group creates once its
leader runs."""

from __future__ import annotations

import json
from typing import Any

from fairgpu.kube.cache import decode_pod
from fairgpu.kube.leader_worker_progress import decode_leader_worker_set, sets_ahead
from fairgpu.model.pod import PodInfo
from tests.builders import cluster, node_info, pod_info


def lws(startup: str | None = "LeaderReady", scheduler: str = "fairgpu", **meta: Any) -> bytes:
    template = {
        "metadata": {"labels": {"fairgpu.io/queue": "a"}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {"name": "w", "image": "v", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
            ],
        },
    }
    spec: dict[str, Any] = {
        "replicas": 2,
        "leaderWorkerTemplate": {"size": 3, "workerTemplate": template},
    }
    if startup:
        spec["startupPolicy"] = startup
    doc = {"metadata": {"name": "vllm", "namespace": "ml", "uid": "lws-1", **meta}, "spec": spec}
    return json.dumps(doc).encode()


def ours(raw: bytes) -> PodInfo | None:
    return decode_pod(raw, "fairgpu").info


def test_a_leader_worker_set_s_groups_are_made_from_its_templates() -> None:
    rec = decode_leader_worker_set(lws(), ours)
    assert rec is not None and rec.key == "ml/vllm" and rec.leader_first
    assert [(leader, [w.name for w in workers]) for leader, workers in rec.groups] == [
        ("vllm-0", ["vllm-0-1", "vllm-0-2"]),
        ("vllm-1", ["vllm-1-1", "vllm-1-2"]),
    ]
    worker = rec.groups[1][1][0]
    assert worker.gpu.count == 2 and worker.labels["leaderworkerset.sigs.k8s.io/group-index"] == "1"


def test_foreign_deleted_and_unreadable_sets_are_left_out() -> None:
    assert decode_leader_worker_set(lws(scheduler="default-scheduler"), ours) is None
    assert decode_leader_worker_set(lws(deletionTimestamp="2026-11-30T07:00:00Z"), ours) is None
    assert decode_leader_worker_set(b"{}", ours) is None
    assert decode_leader_worker_set(lws(startup="Eager"), ours) is None


def test_workers_come_once_their_waiting_leader_starts() -> None:
    """Group 0's leader waits: its two workers come once it starts. Group 1's leader runs
    and its workers exist: nothing to come."""
    rec = decode_leader_worker_set(lws(), ours)
    assert rec is not None
    leader = pod_info("vllm-0", "ml", gpus=2)
    running = [(pod_info(n, "ml", gpus=2), "n0", 0.0) for n in ("vllm-1", "vllm-1-1", "vllm-1-2")]
    state = cluster(node_info("n0", gpus=8), placed=running)
    (ahead,) = sets_ahead([rec], state, [leader], 10.0, lambda _p: 60.0)
    assert ahead.key == "LeaderWorkerSet ml/vllm group 0" and ahead.gate == leader.uid
    assert ahead.fan and [a.pod.name for a in ahead.future] == ["vllm-0-1", "vllm-0-2"]
    assert all(a.arrival == 10.0 and a.duration == 60.0 for a in ahead.future)


def test_under_leader_created_missing_workers_come_at_once() -> None:
    rec = decode_leader_worker_set(lws(startup=None), ours)
    assert rec is not None and not rec.leader_first
    leader = pod_info("vllm-0", "ml", gpus=2)
    aheads = sets_ahead([rec], cluster(node_info("n0", gpus=8)), [leader], 0.0, lambda _p: None)
    assert [(a.gate, len(a.future)) for a in aheads] == [("", 2)]  # group 1 has no leader yet
