"""Admission: the checks a job passes before any node is looked at.

An :class:`Admission` reports a refused job's pods itself (in the session's result) and says
whether placement should go on. :class:`FairAdmission` applies tenancy (queue errors, quotas,
namespace caps); :class:`KubeDefaultAdmission` only the namespace caps, as a ResourceQuota
would. Per-pod namespace caps are checked again for each member at placement
(:mod:`~fairgpu.engine.actions.allocate`), as earlier members use them up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fairgpu.engine import memo as memo_keys
from fairgpu.engine.decisions import Unschedulable
from fairgpu.engine.jobs import Job
from fairgpu.engine.session import Session
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.book import QueueBook


@dataclass(frozen=True, slots=True)
class QuotaFull:
    """Admission's answer for a job refused only because its queue's quota is used up now:
    the job's needed members' ask together (``need``) and the refusal (``reason``), not yet
    reported -- lower-priority pods of the queue may make room
    (:mod:`~fairgpu.engine.actions.quota_room`)."""

    need: np.ndarray
    reason: str


class Admission(Protocol):
    """Checks before placement."""

    def valid(self, session: Session, job: Job) -> bool:
        """False (after reporting) for a job that can never be judged (a bad tenant)."""

    def outcome_key(self, session: Session, job: Job) -> tuple[object, ...] | None:
        """A key under which the job's failure may be remembered for the cycle, or None."""

    def admit(self, session: Session, job: Job) -> bool | QuotaFull:
        """True to place the job; False (after reporting) if quotas or caps refuse it;
        :class:`QuotaFull` (not reported) if only its queue's quota refuses it now."""

    def extra(self, session: Session, job: Job, pod: PodInfo) -> str | None:
        """Why ``pod``, a member beyond those ``job`` needs (an elastic group's, past its
        minMember: :meth:`admit` judged only the needed ones), may not be placed now, or
        None."""


class KubeDefaultAdmission:
    """Namespace caps only; no queues, no quotas."""

    def valid(self, session: Session, job: Job) -> bool:
        """Every pod is judged."""
        return True

    def outcome_key(self, session: Session, job: Job) -> tuple[object, ...] | None:
        """No job-level memo (the failed-ask memo still applies)."""
        return None

    def admit(self, session: Session, job: Job) -> bool:
        """Refuse a pod its namespace can never hold."""
        pod = job.pods[0]
        reason = session.book.namespace_never_fits(pod)
        if reason:
            session.out.unschedulable.append(Unschedulable(pod, reason, False))
            return False
        return True

    def extra(self, session: Session, job: Job, pod: PodInfo) -> str | None:
        """No quotas: none."""
        return None


class FairAdmission:
    """The tenant must resolve, every pod must decode, and the queue's quota must admit the
    job's needed members together."""

    def valid(self, session: Session, job: Job) -> bool:
        """A tenant that does not resolve (bad queue label) fails the job for good."""
        error = job.tenant.error
        if error:
            session.out.unschedulable.extend(Unschedulable(p, error, False) for p in job.pods)
            return False
        return True

    def outcome_key(self, session: Session, job: Job) -> tuple[object, ...] | None:
        """See :func:`fairgpu.engine.memo.outcome_key`."""
        held = session.state.reservations
        backfill = None
        if held and job.group is None:
            cluster = session.cluster
            backfill = session.memo.job_backfill_key(
                job.key, job.pods[0], held, session.drain, session.now, cluster.size
            )
        # The user matters only where the queue holds pods its pod could preempt.
        by_user = session.book.holds_lower_priority(job.tenant.queue, job.pods[0].priority)
        return memo_keys.outcome_key(job, session.cluster, bool(held), backfill, by_user)

    def admit(self, session: Session, job: Job) -> bool | QuotaFull:
        """Decode errors, quotas that can never fit, then quotas that do not fit now (a
        :class:`QuotaFull`, reported by the caller)."""
        out = session.out
        book = session.book
        pods = job.pods
        if any(p.error for p in pods):
            out.unschedulable.extend(Unschedulable(p, p.error, False) for p in pods if p.error)
            return False
        need_vec = _needed(book, job)
        queue = job.tenant.queue
        reason = book.never_fits(queue, need_vec) or book.namespace_never_fits(pods[0])
        if reason:
            out.unschedulable.extend(Unschedulable(p, reason, False) for p in pods)
            return False
        reason = book.admit(queue, need_vec)
        if reason:
            return QuotaFull(need_vec, reason)
        return True

    def extra(self, session: Session, job: Job, pod: PodInfo) -> str | None:
        """Its queue's quota and limit, and its department's limit, with the members placed
        before it counted (the book holds them)."""
        book = session.book
        return book.admit(job.tenant.queue, book.pending_vector(pod))


def _needed(book: QueueBook, job: Job) -> np.ndarray:
    """What ``job``'s needed members take together once placed, summed from zero in member
    order. Kept on the job while the largest device's memory (a whole GPU's charge) stays
    and no member asks through DRA claims (their charge reads the cluster): a job's pods
    and ``need`` do not change, and a waiting job is handed out every cycle."""
    known = job.need_vec
    if known is not None and known[0] == book.device_memory:
        return known[1]
    pods = job.pods
    vecs = [book.pending_vector(p) for p in pods[: job.need]]
    # In place (one array, not one per member).
    need_vec = np.zeros_like(vecs[0] if vecs else book.pending_vector(pods[0]))
    for vec in vecs:
        need_vec += vec
    if not any(p.resource_claims for p in pods):
        job.need_vec = (book.device_memory, need_vec)
    return need_vec
