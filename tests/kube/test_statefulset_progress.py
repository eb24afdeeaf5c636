"""What a forecast reads of a live StatefulSet: its pods as its controller makes them, and
which of them are still to come."""

from __future__ import annotations

import json
from typing import Any

from fairgpu.kube.cache import decode_pod
from fairgpu.kube.statefulset_progress import decode_statefulset, sets_ahead
from fairgpu.model.pod import PodInfo
from tests.builders import cluster, node_info, pod_info


def statefulset(policy: str | None = None, scheduler: str = "fairgpu", **meta: Any) -> bytes:
    spec: dict[str, Any] = {
        "replicas": 4,
        "serviceName": "vllm",
        "selector": {"matchLabels": {"app": "vllm"}},
        "template": {
            "metadata": {"labels": {"app": "vllm", "fairgpu.io/queue": "a"}},
            "spec": {
                "schedulerName": scheduler,
                "containers": [
                    {"name": "s", "image": "v", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
            },
        },
    }
    if policy:
        spec["podManagementPolicy"] = policy
    doc = {"metadata": {"name": "vllm", "namespace": "ml", "uid": "sts-1", **meta}, "spec": spec}
    return json.dumps(doc).encode()


def ours(raw: bytes) -> PodInfo | None:
    return decode_pod(raw, "fairgpu").info


def member(i: int) -> PodInfo:
    """Pod ``vllm-<i>`` of the StatefulSet, as the cluster holds it."""
    return pod_info(
        f"vllm-{i}", "ml", gpus=1, owner="sts-1", owner_kind="StatefulSet",
        labels={"apps.kubernetes.io/pod-index": str(i)},
    )  # fmt: skip


def test_a_statefulset_s_pods_are_made_from_its_template() -> None:
    rec = decode_statefulset(statefulset(), ours)
    assert rec is not None and rec.key == "ml/vllm" and rec.ordered
    assert [p.name for p in rec.pods] == ["vllm-0", "vllm-1", "vllm-2", "vllm-3"]
    pod = rec.pods[3]
    assert pod.owner == "sts-1" and pod.owner_kind == "StatefulSet" and pod.gpu.count == 1
    assert pod.labels["apps.kubernetes.io/pod-index"] == "3"


def test_foreign_deleted_and_unreadable_statefulsets_are_left_out() -> None:
    assert decode_statefulset(statefulset(scheduler="default-scheduler"), ours) is None
    gone = statefulset(deletionTimestamp="2026-11-30T07:00:00Z")
    assert decode_statefulset(gone, ours) is None
    assert decode_statefulset(b"not json", ours) is None
    assert decode_statefulset(statefulset(policy="Random"), ours) is None


def test_ordered_pods_come_after_the_lowest_waiting_one() -> None:
    """vllm-0 runs, vllm-1 waits: vllm-2 and vllm-3 come, the first once vllm-1 starts."""
    rec = decode_statefulset(statefulset(), ours)
    assert rec is not None
    state = cluster(node_info("n0", gpus=8), placed=[(member(0), "n0", 0.0)])
    waiting = member(1)
    (ahead,) = sets_ahead([rec], state, [waiting], 100.0, lambda _p: 60.0)
    assert ahead.key == "StatefulSet ml/vllm" and ahead.gate == waiting.uid and not ahead.fan
    assert [a.pod.name for a in ahead.future] == ["vllm-2", "vllm-3"]
    assert all(a.arrival == 100.0 and a.duration == 60.0 for a in ahead.future)
    assert ahead.future[0].pod.created == 100.0 and ahead.total == 4


def test_parallel_pods_come_at_once_and_a_full_set_has_none_to_come() -> None:
    rec = decode_statefulset(statefulset(policy="Parallel"), ours)
    assert rec is not None
    state = cluster(node_info("n0", gpus=8), placed=[(member(0), "n0", 0.0)])
    (ahead,) = sets_ahead([rec], state, [], 0.0, lambda _p: None)
    assert ahead.fan and ahead.gate == "" and len(ahead.future) == 3
    assert ahead.chain() == ((), True)
    full = cluster(node_info("n0", gpus=8), placed=[(member(i), "n0", 0.0) for i in range(4)])
    assert sets_ahead([rec], full, [], 0.0, lambda _p: None) == []
