"""Which Jobs one more evicted pod fails, from the Jobs' JSON as the watch delivers it."""

from __future__ import annotations

import json
from typing import Any

from fairgpu.kube.jobs import JobStore, decode_job

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
