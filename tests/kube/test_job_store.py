"""Which Jobs one more evicted pod fails, from the Jobs' JSON as the watch delivers it."""

from __future__ import annotations

import json
from typing import Any

from fairgpu.kube.jobs import JobStore, decode_job
from fairgpu.model.job_failures import count_indexes

IGNORE = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def raw(uid: str, limit: int | None = None, failed: int = 0, **spec: Any) -> bytes:
    body: dict[str, Any] = {"metadata": {"uid": uid}, "spec": dict(spec), "status": {}}
    if limit is not None:
        body["spec"]["backoffLimit"] = limit
    if failed:
        body["status"]["failed"] = failed
    return json.dumps(body).encode()


def test_fragile_jobs_are_those_one_more_eviction_fails() -> None:
    store = JobStore()
    records = [
        decode_job(raw("zero", limit=0)),  # the first eviction fails it
        decode_job(raw("default")),  # backoffLimit 6: not yet
        decode_job(raw("used-up", limit=2, failed=2)),  # its third failure fails it
        decode_job(raw("ignores", limit=0, podFailurePolicy=IGNORE)),
        decode_job(raw("garbled", limit=0, podFailurePolicy={"rules": "x"})),  # counts
        decode_job(b"not json"),
    ]
    assert store.apply("SYNC", records)
    assert store.fragile() == {"zero", "used-up", "garbled"}
    done = json.loads(raw("zero", limit=0))
    done["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
    assert store.apply("MODIFIED", decode_job(json.dumps(done).encode()))
    deleting = json.loads(raw("used-up", limit=2, failed=2))
    deleting["metadata"]["deletionTimestamp"] = "2026-11-30T07:00:00Z"
    assert store.apply("MODIFIED", decode_job(json.dumps(deleting).encode()))
    assert store.fragile() == {"garbled"}
    assert not store.apply("DELETED", decode_job(raw("used-up", limit=2, failed=2)))
    assert store.fragile() == {"garbled"}
    assert not store.apply("MODIFIED", decode_job(raw("default", limit=5)))


def per_index(
    uid: str, per: int, most: int | None, failed: str | None = None, **spec: Any
) -> bytes:
    body = json.loads(raw(uid, completionMode="Indexed", backoffLimitPerIndex=per, **spec))
    body["spec"]["backoffLimit"] = 2**31 - 1  # as the API server defaults it beside them
    if most is not None:
        body["spec"]["maxFailedIndexes"] = most
    if failed is not None:
        body["status"]["failedIndexes"] = failed
    return json.dumps(body).encode()


def test_per_index_limits_make_a_job_fragile_once_its_failed_indexes_are_used_up() -> None:
    """Any evicted pod fails a Job whose ``maxFailedIndexes`` failed indexes are used up and
    whose every eviction fails an index (``backoffLimitPerIndex: 0`` or ``FailIndex``);
    with a larger per-index limit it is a pod's own count that decides: not fragile."""
    fail_index = {
        "rules": [{"action": "FailIndex", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    store = JobStore()
    records = [
        decode_job(per_index("used-up", 0, 2, failed="1,4")),
        decode_job(per_index("room-left", 0, 2, failed="4")),
        decode_job(per_index("no-max", 0, None, failed="1-3")),
        decode_job(per_index("per-pod", 1, 0)),
        decode_job(per_index("fail-index", 2, 0, podFailurePolicy=fail_index)),
        decode_job(per_index("ignores", 0, 0, podFailurePolicy=IGNORE)),
    ]
    store.apply("SYNC", records)
    assert store.fragile() == {"used-up", "fail-index"}


def test_failed_indexes_are_counted_from_their_list() -> None:
    assert count_indexes("1,3-5,9") == 5
    assert count_indexes(None) == count_indexes("") == 0
    assert count_indexes("x-2") == 0
