"""batch/v1 Jobs, watched live for what an eviction of one of their pods would do.

The scheduler does not manage Jobs; it reads them for one thing: which Jobs one more evicted
pod fails (:mod:`~fairgpu.engine.fragile_jobs`) -- those whose pod failure policy counts an
eviction (:mod:`~fairgpu.model.job_failures`) and whose ``status.failed`` already reached
``backoffLimit``, or that fail on it at once (``FailJob``), or whose per-index limits make any
evicted pod fail it (:func:`~fairgpu.model.job_failures.fails_by_indexes`). A
:class:`~fairgpu.kube.reflector.Reflector` on ``/apis/batch/v1/jobs`` decodes each Job to a
:data:`JobRecord`; :class:`JobStore` applies the events on the scheduler loop's thread, and
each cycle hands :meth:`JobStore.fragile` to the engine.

Readiness does not wait for this watch: until it has listed (or when the scheduler's RBAC
does not grant ``list``/``watch`` on Jobs) no Job is known fragile, and victims are chosen as
if every Job tolerated the eviction. A Job whose policy cannot be read is taken to count
evictions (the Job controller's default).
"""

from __future__ import annotations

from typing import Any

import msgspec

from fairgpu.kube.reflector import Reflector, Sink
from fairgpu.model.job_failures import (
    DEFAULT_BACKOFF_LIMIT,
    PolicyError,
    count_indexes,
    disruption_action,
    fails_by_indexes,
    fails_on_next_eviction,
)

PATH = "/apis/batch/v1/jobs"

#: (uid, action on an evicted pod, backoffLimit, pods failed so far, finished, whether any
#: evicted pod fails it through its per-index limits); uid "" when the object could not be
#: read.
JobRecord = tuple[str, str, int, int, bool, bool]


class _Meta(msgspec.Struct, rename="camel"):
    uid: str = ""
    deletion_timestamp: str | None = None


class _Condition(msgspec.Struct):
    type: str = ""
    status: str = ""


class _Spec(msgspec.Struct, rename="camel"):
    backoff_limit: int | None = None
    pod_failure_policy: Any = None
    backoff_limit_per_index: int | None = None
    max_failed_indexes: int | None = None


class _Status(msgspec.Struct, rename="camel"):
    failed: int = 0
    conditions: list[_Condition] = []
    failed_indexes: str | None = None


class _Job(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec = msgspec.field(default_factory=_Spec)
    status: _Status = msgspec.field(default_factory=_Status)


_decoder = msgspec.json.Decoder(_Job)


def decode_job(raw: bytes) -> JobRecord:
    """What :class:`JobStore` keeps of one Job's JSON."""
    try:
        job = _decoder.decode(raw)
    except msgspec.DecodeError:
        return ("", "Count", DEFAULT_BACKOFF_LIMIT, 0, True, False)
    try:
        action = disruption_action(job.spec.pod_failure_policy)
    except PolicyError:
        action = "Count"
    limit = DEFAULT_BACKOFF_LIMIT if job.spec.backoff_limit is None else job.spec.backoff_limit
    # A Job being deleted is as good as finished: nothing it loses matters any more.
    finished = job.metadata.deletion_timestamp is not None or any(
        c.type in ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet")
        and c.status == "True"
        for c in job.status.conditions
    )
    spec = job.spec
    failed_indexes = count_indexes(job.status.failed_indexes)
    by_indexes = fails_by_indexes(
        action, spec.backoff_limit_per_index, spec.max_failed_indexes, failed_indexes
    )
    return (job.metadata.uid, action, limit, job.status.failed, finished, by_indexes)


class JobStore:
    """The fragile Jobs among those the watch reported, kept up to date one event at a time
    (a Job's status changes with every pod it finishes: no event rescans them all)."""

    def __init__(self) -> None:
        self._fragile: set[str] = set()

    def apply(self, etype: str, payload: Any) -> bool:
        """Apply one reflector event (``SYNC`` with a list, or one record); True if the set
        of fragile Jobs changed."""
        if etype == "SYNC":
            new = {r[0] for r in payload if r[0] and _fragile(r)}
            changed = new != self._fragile
            self._fragile = new
            return changed
        uid = payload[0]
        if not uid:
            return False
        was = uid in self._fragile
        now = etype != "DELETED" and _fragile(payload)
        if now:
            self._fragile.add(uid)
        else:
            self._fragile.discard(uid)
        return was != now

    def fragile(self) -> frozenset[str]:
        """The uids of the unfinished Jobs one more evicted pod fails."""
        return frozenset(self._fragile)


def _fragile(record: JobRecord) -> bool:
    _, action, limit, failed, finished, by_indexes = record
    return not finished and (by_indexes or fails_on_next_eviction(action, limit, failed))


def job_reflector(client: Any, sink: Sink) -> Reflector:
    """A reflector over all Jobs feeding ``sink`` with :data:`JobRecord` items."""
    return Reflector(client, PATH, decode_job, sink, name="jobs")
