"""Backfill masks as a cycle reads them: which nodes other jobs' reservations leave a pod,
computed once per backfill class (:meth:`~fairgpu.engine.memo.CycleMemo.backfill_key`)."""

from __future__ import annotations

import numpy as np

from fairgpu.engine.actions.reserve import allowed_nodes
from fairgpu.engine.jobs import Job
from fairgpu.engine.session import Session
from fairgpu.model.pod import PodInfo


def allowed(session: Session, job: Job, pod: PodInfo) -> np.ndarray | None:
    """:func:`~fairgpu.engine.actions.reserve.allowed_nodes`, computed once per cycle for
    all pods with the same :func:`backfill_key` (the mask is shared: callers must not
    change it)."""
    reservations = session.state.reservations
    if not reservations or (len(reservations) == 1 and job.key in reservations):
        return None
    key = backfill_key(session, job, pod)
    if key is None:
        return allowed_nodes(session, job, pod)
    cache = session.memo.allowed
    if key not in cache:
        cache[key] = allowed_nodes(session, job, pod)
    return cache[key]


def backfill_key(session: Session, job: Job, pod: PodInfo) -> tuple[object, ...] | None:
    """:meth:`~fairgpu.engine.memo.CycleMemo.job_backfill_key` in this session."""
    return session.memo.job_backfill_key(
        job.key, pod, session.state.reservations, session.drain, session.now, session.cluster.size
    )
