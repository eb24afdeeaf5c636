"""What a forecast reads of a live Job: its counts, and its template as a pod to come."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from fairgpu.kube.cache import decode_pod
from fairgpu.kube.job_progress import decode_job_progress, jobs_ahead
from fairgpu.kube.jobs import decode_job
from fairgpu.model.pod import PodInfo
from tests.builders import cluster, node_info, pod_info


def template(scheduler: str = "fairgpu", gpus: str = "2") -> dict[str, Any]:
    return {
        "metadata": {"labels": {"fairgpu.io/queue": "a"}},
        "spec": {
            "schedulerName": scheduler,
            "restartPolicy": "Never",
            "containers": [
                {"name": "m", "image": "i", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
            ],
        },
    }


def job_json(**spec: Any) -> dict[str, Any]:
    status = spec.pop("status", {})
    body = {"completions": 4, "parallelism": 2, "template": template(), **spec}
    meta = {"name": "train", "namespace": "ml", "uid": "u-1"}
    return {"metadata": meta, "spec": body, "status": status}


def ours(raw: bytes) -> PodInfo | None:
    return decode_pod(raw, "fairgpu").info


def decode(doc: dict[str, Any]) -> Any:
    raw = json.dumps(doc).encode()
    return decode_job_progress(raw, decode_job(raw), ours)


def test_counts_and_template_of_a_job() -> None:
    got = decode(job_json(backoffLimit=1, status={"succeeded": 1, "failed": 1}))
    assert got is not None
    counts, pod = got
    assert (counts.key, counts.uid, counts.completions, counts.parallelism) == (
        "ml/train",
        "u-1",
        4,
        2,
    )
    assert (counts.succeeded, counts.failed, counts.backoff_limit, counts.done) == (1, 1, 1, False)
    assert pod is not None and pod.gpu.count == 2 and pod.owner == "u-1"
    assert pod.owner_kind == "Job" and pod.namespace == "ml"


def test_suspended_finished_foreign_and_unreadable_jobs() -> None:
    assert decode(job_json()) is not None
    assert decode(job_json(suspend=True)) is None
    assert decode(job_json(status={"conditions": [{"type": "Complete", "status": "True"}]})) is None
    deleted = job_json()
    deleted["metadata"]["deletionTimestamp"] = "2026-11-30T07:00:00Z"
    assert decode(deleted) is None
    assert decode(job_json(template=template("default-scheduler"))) is None
    assert decode_job_progress(b"not json", decode_job(b"not json"), ours) is None
    assert decode({"metadata": {"uid": "x"}}) is None  # no name
    bad = decode(job_json(template=template(gpus="lots")))
    assert bad is not None and bad[1] is None  # counted, but no stand-in pod


def test_a_job_is_paired_with_its_running_and_pending_pods_not_terminating_ones() -> None:
    got = decode(job_json())
    assert got is not None
    run = pod_info("train-a", gpus=2, owner="u-1", owner_kind="Job")
    gone = pod_info("train-b", gpus=2, owner="u-1", owner_kind="Job")
    waiting = pod_info("train-c", gpus=2, owner="u-1", owner_kind="Job")
    state = cluster(node_info("n0", gpus=8), placed=[(run, "n0", 0.0), (gone, "n0", 0.0)])
    state.placements[gone.uid].terminating = True
    (ahead,) = jobs_ahead([got], state, [waiting], 100.0, lambda _p: 60.0)
    assert set(ahead.existing) == {run.uid, waiting.uid}
    assert len(ahead.future) == 2 and ahead.future[0].duration == 60.0


def test_malformed_jobs_are_left_out_never_an_error() -> None:
    """Whatever a Job holds, reading it for a forecast never raises: a Job that cannot be
    read is left out, one whose template cannot be decoded has no stand-in pod."""
    odd_templates: list[Any] = [
        "not a template",
        {"metadata": {"labels": ["a"]}, "spec": template()["spec"]},
        {"metadata": {"annotations": "x"}, "spec": template()["spec"]},
        {"metadata": {}, "spec": {"schedulerName": "fairgpu", "containers": "none"}},
        {"metadata": {}, "spec": {"schedulerName": "fairgpu"}},
        {"metadata": {"name": 5}, "spec": template()["spec"]},
    ]
    for odd in odd_templates:
        got = decode(job_json(template=odd))
        assert got is None or got[1] is None or isinstance(got[1], PodInfo), odd
    for spec in ({"completions": "3"}, {"parallelism": None}, {"suspend": "yes"}):
        got = decode(job_json(**spec))
        assert got is not None
    assert decode({"metadata": "x", "spec": {}, "status": {}}) is None
    assert decode({"metadata": {"name": "j", "uid": "u"}, "spec": [], "status": 3}) is None
    assert decode_job_progress(b"[]", decode_job(b"[]"), ours) is None


def test_the_deadline_and_the_start_it_counts_from() -> None:
    got = decode(job_json(activeDeadlineSeconds=3600, status={"startTime": "2026-11-30T07:00:00Z"}))
    assert got is not None
    counts = got[0]
    assert (
        counts.active_deadline == 3600
        and counts.started == datetime(2026, 11, 30, 7, tzinfo=UTC).timestamp()
    )
    plain = decode(job_json())
    assert plain is not None and (plain[0].active_deadline, plain[0].started) == (None, None)
