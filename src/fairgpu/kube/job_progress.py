"""What a forecast reads of a live batch/v1 Job: how far it is, and the pods still to come.

The pods of a Job with more ``completions`` than ``parallelism`` are created a few at a time
(:mod:`fairgpu.sim.job_backlog`), so a forecast over the pods in the cluster alone would miss
most of such a Job. :func:`decode_job_progress` reads, of one Job's JSON, the counts its
spec and status give (:class:`~fairgpu.sim.job_backlog.JobCounts`) and its pod template as
the scheduler would decode the pod the controller makes from it (the stand-in for the pods
to come when none of its pods exists); :func:`jobs_ahead` pairs them with the Job's pods in a
snapshot.

Only Jobs whose pods this scheduler places count: the template must name it in
``schedulerName``; suspended, finished and deleted Jobs create no more pods. A Job that
cannot be read is left out of forecasts (the forecast is then what it was before Jobs were
read), never an error: the scheduler does not manage Jobs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from fairgpu.cluster.state import ClusterState
from fairgpu.kube.decode import parse_time
from fairgpu.kube.jobs import JobRecord
from fairgpu.model.pod import PodInfo
from fairgpu.sim.job_backlog import JobAhead, JobCounts, job_ahead
from fairgpu.sim.workloads.kube_jobs import job_pod_document

__all__ = ["JobProgress", "decode_job_progress", "jobs_ahead"]

#: One Job as a forecast reads it: its counts and its template decoded (None: unreadable).
JobProgress = tuple[JobCounts, PodInfo | None]

#: Decodes one pod's JSON as the scheduler does; None when it is not this scheduler's.
PodDecoder = Callable[[bytes], PodInfo | None]


def decode_job_progress(
    raw: bytes, record: JobRecord, decode_pod: PodDecoder
) -> JobProgress | None:
    """One Job's counts and template (see the module docstring), ``record`` being what
    :func:`~fairgpu.kube.jobs.decode_job` read of the same JSON; None when the Job cannot
    be read, creates no more pods (most Jobs kept in a cluster have finished: their
    templates are not decoded) or its pods are another scheduler's."""
    uid, action, limit, failed, finished, _ = record
    try:
        doc = msgspec.json.decode(raw)
        meta, spec, status = doc["metadata"], doc.get("spec") or {}, doc.get("status") or {}
        counts = JobCounts(
            f"{meta.get('namespace') or 'default'}/{meta['name']}",
            uid,
            _count(spec.get("completions")),
            _count(spec.get("parallelism"), 1) or 0,
            _count(status.get("succeeded"), 0) or 0,
            failed,
            limit,
            action,
            # The controller creates no pod for a suspended Job, nor for one being deleted
            # (``finished``: a Job deleted with the default orphan policy keeps its object
            # until the garbage collector has orphaned its pods).
            finished or spec.get("suspend") is True,
            _count(spec.get("activeDeadlineSeconds")),
            # The controller counts the deadline from the start it recorded.
            parse_time(status.get("startTime")),
        )
        if not uid or counts.done:
            return None
        indexed = spec.get("completionMode") == "Indexed"
        pod_doc = job_pod_document(meta, spec.get("template") or {}, uid, 0, indexed)
        pod_doc["metadata"]["uid"] = f"{uid}/template"
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError):
        return None
    pod = decode_pod(json.dumps(pod_doc).encode())
    if pod is None:  # not ours
        return None
    return counts, (None if pod.error else pod)


def _count(value: Any, default: int | None = None) -> int | None:
    """A count the API server validated: a whole number, else ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def jobs_ahead(
    progress: Iterable[JobProgress],
    cluster: ClusterState,
    pending: Iterable[PodInfo],
    now: float,
    runtime: Callable[[PodInfo], float | None],
) -> list[JobAhead]:
    """The Jobs of ``progress`` as a forecast from ``now`` continues them: each with its pods
    running in ``cluster`` (not terminating) or in ``pending``, and the pods to come, which run
    ``runtime(pod)`` seconds (:func:`~fairgpu.sim.job_backlog.job_ahead`)."""
    owned: dict[str, list[PodInfo]] = {}
    for uid, pod in cluster.pods.items():
        placement = cluster.placements.get(uid)
        if pod.owner_kind == "Job" and placement is not None and not placement.terminating:
            owned.setdefault(pod.owner, []).append(pod)
    for pod in pending:
        if pod.owner_kind == "Job":
            owned.setdefault(pod.owner, []).append(pod)
    out = []
    for counts, template in progress:
        ahead = job_ahead(counts, owned.get(counts.uid, []), template, now, runtime)
        if ahead is not None:
            out.append(ahead)
    return out
