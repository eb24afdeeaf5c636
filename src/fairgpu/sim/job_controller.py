"""The Job controller's part in a simulation: a Job's later pods are created as its earlier
ones succeed.

A batch/v1 Job with more completions than parallelism never has more than ``parallelism``
pods at once (:mod:`fairgpu.sim.workloads.kube_jobs`): the simulator adds the first of them
at the Job's arrival and, each time one of its pods completes, the next one at that moment
-- created then, so it waits and is ordered from then on, as a pod the controller creates.
Only success makes room: a preempted pod waits again as itself (the replacement the
controller would create), a pod group that gives up waits again whole.

An eviction is a failed pod to the Job controller (its ``DisruptionTarget`` condition set, its
containers killed) unless the Job's pod failure policy ignores it: more failures than
``backoffLimit`` -- or one a ``FailJob`` rule matches -- fail the Job (:meth:`evicted`), and
its other pods are stopped and none is created any more, as the controller does. So does
``activeDeadlineSeconds`` passing after the Job's creation before all its pods succeeded
(:meth:`deadlines`, :meth:`expire`). A failed child Job of a JobSet then fails, restarts or
recreates its JobSet's Jobs (:meth:`after_failure`, :mod:`fairgpu.sim.jobset_controller`).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fairgpu.model.job_failures import (
    fails_by_indexes,
    fails_on_next_eviction,
    index_fails_on_eviction,
)
from fairgpu.sim.job_backlog import JobAhead, jobs_ahead_in_run
from fairgpu.sim.jobset_controller import FAIL, RESTART, jobset_action
from fairgpu.sim.workload import BatchJob, JobSetPolicy, PodArrival


@dataclass(slots=True)
class JobSetTurn:
    """What a failed child Job did to its JobSet ``jobset`` (``action``: see
    :func:`~fairgpu.sim.jobset_controller.jobset_action`, ``why`` for people): the Jobs
    whose pods go now besides the failed one (``failed``: failed too), or the pods of the
    Jobs created again, which start over (``gone``: their uids before), the pods those Jobs
    create at once (``arrivals``) and their deadlines."""

    jobset: str
    action: str
    why: str
    failed: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    arrivals: list[PodArrival] = field(default_factory=list)
    deadlines: list[tuple[float, str]] = field(default_factory=list)


class JobController:
    """Which of a workload's pods exist from the start, and which one a success creates."""

    def __init__(
        self,
        jobs: Iterable[BatchJob],
        arrivals: Iterable[PodArrival],
        jobsets: Mapping[str, JobSetPolicy] | None = None,
    ) -> None:
        by_uid = {a.pod.uid: a for a in arrivals}
        self._later: dict[str, deque[PodArrival]] = {}
        self._job_of: dict[str, str] = {}
        self._jobs = {job.key: job for job in jobs}
        self._failures: dict[str, int] = {}
        self._succeeded: dict[str, int] = {}
        self.failed: dict[str, str] = {}  # Job key -> why it failed
        self._reason: dict[str, str] = {}  # Job key -> its Failed condition's reason
        # Per-index limits: failures counted per index, indexes failed for good, and what a
        # failed index changed since the simulator last asked.
        self._index_failures: dict[str, dict[int, int]] = {}
        self._failed_indexes: dict[str, set[int]] = {}
        self._dropped: list[tuple[str, str]] = []
        self._made: list[PodArrival] = []
        self.finished_failed: list[str] = []  # Jobs that failed when their last index ended
        # JobSets: policies, restarts counted against maxRestarts, attempts (for names), the
        # pods each Job is made of (copied when it is created again).
        self._jobsets = dict(jobsets or {})
        self._counted: dict[str, int] = {}
        self._jobsets_failed: set[str] = set()
        self._attempt: dict[str, int] = {}
        self._models = {
            job.key: [by_uid[u] for u in job.pods if u in by_uid]
            for job in self._jobs.values()
            if job.jobset
        }
        # fragile(), kept until a success, an eviction or a failure changes it: the replay
        # asks before every cycle, and most cycles change no Job.
        self._fragile: frozenset[str] | None = None
        for job in self._jobs.values():
            for uid in job.pods:
                self._job_of[uid] = job.key
            later = [by_uid[uid] for uid in job.pods[job.first :] if uid in by_uid]
            if later:
                self._later[job.key] = deque(later)
        self._held = {a.pod.uid for q in self._later.values() for a in q}
        self._created = {
            job.key: job.created
            if job.created is not None
            else min((by_uid[u].arrival for u in job.pods if u in by_uid), default=0.0)
            for job in self._jobs.values()
        }

    def deadlines(self) -> list[tuple[float, str]]:
        """(when, Job key) of each Job's ``activeDeadlineSeconds``, counted from its
        creation (its ``created``, else its first pods' arrival)."""
        return [
            (self._created[key] + job.active_deadline, key)
            for key, job in self._jobs.items()
            if job.active_deadline is not None
        ]

    def active(self, key: str) -> bool:
        """Job ``key`` neither failed nor had all its pods succeed."""
        return key not in self.failed and self._succeeded.get(key, 0) < len(self._jobs[key].pods)

    def expire(self, key: str, now: float) -> bool:
        """Job ``key``'s deadline came at ``now``: it fails unless it is no longer
        :meth:`active` or was created again since (True when it fails now)."""
        deadline = self._jobs[key].active_deadline
        if not self.active(key) or deadline is None or now < self._created[key] + deadline:
            return False
        self._fail(
            key,
            f"it was still active {deadline:g} s after it started "
            "(activeDeadlineSeconds; DeadlineExceeded)",
            "DeadlineExceeded",
        )
        return True

    def owns(self, uid: str) -> bool:
        """Whether pod ``uid`` is one of a Job's."""
        return uid in self._job_of

    def reason(self, key: str) -> str:
        """The reason of Job ``key``'s Failed condition (``DeadlineExceeded``,
        ``BackoffLimitExceeded``, ...); "" while it has not failed."""
        return self._reason.get(key, "") if key in self.failed else ""

    def succeeded_count(self, key: str) -> int:
        """How many of Job ``key``'s pods succeeded in this run."""
        return self._succeeded.get(key, 0)

    def _fail(self, key: str, why: str, reason: str) -> None:
        """Job ``key`` fails (``why``; ``reason``: its Failed condition's): it creates no
        more pods."""
        self.failed[key] = f"Job {key} failed: {why}"
        self._reason[key] = reason
        self._later.pop(key, None)
        self._fragile = None

    def initial(self, arrivals: Iterable[PodArrival]) -> list[PodArrival]:
        """The ``arrivals`` that exist without waiting for another pod to succeed."""
        return [a for a in arrivals if a.pod.uid not in self._held]

    @property
    def waiting(self) -> int:
        """How many pods are not created yet."""
        return sum(len(q) for q in self._later.values())

    def succeeded(self, uid: str, now: float) -> PodArrival | None:
        """The pod created because pod ``uid`` succeeded at ``now`` (None: no Job of it has
        pods left to create): a copy of the workload's, created and arriving at ``now``, so
        the workload itself is left as it was for another run."""
        key = self._job_of.get(uid, "")
        if key:
            self._succeeded[key] = self._succeeded.get(key, 0) + 1
            self._fragile = None
            if self._jobs[key].per_index is not None and self._finished_with_failed_indexes(key):
                self.finished_failed.append(key)
        return self._release(key, now)

    def _release(self, key: str, now: float) -> PodArrival | None:
        """The next pod Job ``key`` creates at ``now`` in a place one of its pods left (None:
        none left, or its Job failed): a copy of the workload's, created then."""
        later = self._later.get(key)
        if not later:
            return None
        return later.popleft().made_at(now)

    def evicted(self, uids: Iterable[str], now: float = 0.0, disruption: bool = True) -> list[str]:
        """Count the evictions of pods ``uids`` at ``now`` against their Jobs; return the
        Jobs that fail by them (their reason in :attr:`failed`), which then create no more
        pods. A pod whose index fails for good goes to :meth:`take_dropped` (it does not
        wait again), and the pod its freed place lets the controller create to
        :meth:`take_created`. ``disruption`` False: the pods failed on their own (their
        ``activeDeadlineSeconds``), which no disruption rule of a pod failure policy
        matches -- each counts as a plain failure."""
        failing = []
        for uid in uids:
            key = self._job_of.get(uid)
            if key is None or key in self.failed:
                continue
            job = self._jobs[key]
            action = job.on_disruption if disruption else "Count"
            if action == "Ignore":
                continue
            word = "eviction" if disruption else "failure"
            if job.per_index is not None and self._index_evicted(job, uid, now, action, word):
                failing.append(key)
                continue
            if action == "FailIndex":
                continue  # not counted against backoffLimit
            failed = self._failures.get(key, 0)
            self._failures[key] = failed + 1
            self._fragile = None
            if key in self.failed or not fails_on_next_eviction(action, job.backoff_limit, failed):
                continue
            if action == "FailJob":
                why = "a pod failure policy rule (FailJob) matched an evicted pod"
                self._fail(key, why, "PodFailurePolicy")
            else:
                limit = job.backoff_limit
                what = "evicted" if disruption else "failed"
                why = f"{failed + 1} pod(s) {what}, more than its backoffLimit {limit}"
                self._fail(key, why, "BackoffLimitExceeded")
            failing.append(key)
        return failing

    def _index_evicted(
        self, job: BatchJob, uid: str, now: float, action: str, word: str = "eviction"
    ) -> bool:
        """The eviction (``word``) of pod ``uid`` against its index's limit
        (``backoffLimitPerIndex``), ``action`` the Job's pod failure policy for it: its index
        fails for good past the limit, or at once by a ``FailIndex`` rule. True when that
        fails the Job -- more than ``maxFailedIndexes`` failed, or none left to run."""
        key, index = job.key, job.pods.index(uid)
        counts = self._index_failures.setdefault(key, {})
        done = counts.get(index, 0)
        if action == "Count":
            counts[index] = done + 1
        assert job.per_index is not None
        if not index_fails_on_eviction(action, job.per_index, done):
            return False
        failed = self._failed_indexes.setdefault(key, set())
        failed.add(index)
        self._fragile = None
        why = (
            f"its index {index} failed for good ({done + 1} {word}(s), more than its "
            f"backoffLimitPerIndex {job.per_index})"
            if action == "Count"
            else f"its index {index} failed for good (a FailIndex rule matched its eviction)"
        )
        self._dropped.append((uid, f"Job {key}: {why}"))
        limit = job.max_failed_indexes
        if limit is not None and len(failed) > limit:
            self._fail(
                key,
                f"{len(failed)} failed index(es), more than its maxFailedIndexes {limit}",
                "MaxFailedIndexesExceeded",
            )
            return True
        nxt = self._release(key, now)  # its place goes to the next pod, as a success's
        if nxt is not None:
            self._made.append(nxt)
        return self._finished_with_failed_indexes(key)

    def _finished_with_failed_indexes(self, key: str) -> bool:
        """Every index of Job ``key`` succeeded or failed, some failed: it fails now
        (``FailedIndexes``); True if so."""
        failed = self._failed_indexes.get(key)
        total = len(self._jobs[key].pods)
        if not failed or self._succeeded.get(key, 0) + len(failed) < total:
            return False
        self._fail(key, f"{len(failed)} of its indexes failed", "FailedIndexes")
        return True

    def take_finished_failed(self) -> list[str]:
        """The Jobs that failed since the last call when their last index ended, some of
        their indexes failed (``FailedIndexes``)."""
        out, self.finished_failed = self.finished_failed, []
        return out

    def take_dropped(self) -> list[tuple[str, str]]:
        """(uid, why) of the evicted pods whose index failed for good since the last call:
        deleted, not waiting again."""
        out, self._dropped = self._dropped, []
        return out

    def take_created(self) -> list[PodArrival]:
        """The pods created since the last call in the places failed indexes freed."""
        out, self._made = self._made, []
        return out

    def fragile(self) -> frozenset[str]:
        """The uids of the active Jobs one more evicted pod fails: the scheduler's
        :attr:`~fairgpu.engine.engine.Engine.fragile_jobs`."""
        if self._fragile is None:
            self._fragile = frozenset(
                job.uid
                for key, job in self._jobs.items()
                if job.uid
                and self.active(key)
                and (
                    fails_on_next_eviction(
                        job.on_disruption, job.backoff_limit, self._failures.get(key, 0)
                    )
                    or self._fails_by_its_indexes(job)
                )
            )
        return self._fragile

    def _fails_by_its_indexes(self, job: BatchJob) -> bool:
        """:func:`~fairgpu.model.job_failures.fails_by_indexes` for Job ``job``."""
        failed = len(self._failed_indexes.get(job.key, ()))
        return fails_by_indexes(job.on_disruption, job.per_index, job.max_failed_indexes, failed)

    def ahead(self, present: set[str], now: float) -> list[JobAhead]:
        """The active Jobs as a forecast from ``now`` continues them
        (:func:`~fairgpu.sim.job_backlog.jobs_ahead_in_run`; ``present``: the uids of the
        pods pending or running then). A Job created after ``now`` is not one yet."""
        active = [
            job
            for key, job in self._jobs.items()
            if key not in self.failed and self._created[key] <= now
        ]
        return jobs_ahead_in_run(
            active, present, self._later, self._succeeded, self._failures, now, self._created
        )

    def after_failure(self, key: str, now: float) -> JobSetTurn | None:
        """What failed Job ``key`` does to its JobSet at ``now`` (None: it has none): the
        JobSet fails -- its other active Jobs fail too -- or its Jobs are created again
        (:mod:`fairgpu.sim.jobset_controller`)."""
        job = self._jobs[key]
        policy = self._jobsets.get(job.jobset)
        if policy is None:
            return None
        if job.jobset in self._jobsets_failed:  # it failed before: nothing more happens
            return JobSetTurn(job.jobset, FAIL, "it had failed")
        counted = self._counted.get(job.jobset, 0)
        reason = self._reason.get(key, "BackoffLimitExceeded")
        action, counts, why = jobset_action(policy, counted, reason, job.replicated)
        turn = JobSetTurn(job.jobset, action, why)
        children = [k for k, j in self._jobs.items() if j.jobset == job.jobset]
        if action == FAIL:
            self._jobsets_failed.add(job.jobset)
            for other in children:
                if other != key and self.active(other):
                    self._fail(other, f"its JobSet {job.jobset} failed ({why})", "JobSetFailed")
                    turn.failed.append(other)
            return turn
        if counts:
            self._counted[job.jobset] = counted + 1
        attempt = self._attempt[job.jobset] = self._attempt.get(job.jobset, 0) + 1
        for child in children if action == RESTART else [key]:
            turn.gone.extend(self._jobs[child].pods)
            self._recreate(child, attempt, now, turn)
        return turn

    def _recreate(self, key: str, attempt: int, now: float, turn: JobSetTurn) -> None:
        """Job ``key`` created again at ``now`` (JobSet attempt ``attempt``): new pods, new
        counts; its first pods go to ``turn``."""
        job = self._jobs[key]
        suffix = f"-r{attempt}"
        uid = f"{job.uid}{suffix}"
        pods = []
        for model in self._models.get(key, []):
            pod = dataclasses.replace(
                model.pod,
                name=f"{model.pod.name}{suffix}",
                uid=f"{model.pod.uid}{suffix}",
                owner=uid if model.pod.owner else "",
                created=now,
                _static_key=None,
                labels=dict(model.pod.labels),
                annotations=dict(model.pod.annotations),
            )
            pods.append(PodArrival(pod, now, model.duration))
        new = dataclasses.replace(job, pods=tuple(a.pod.uid for a in pods), uid=uid)
        self._jobs[key] = new
        for a in pods:
            self._job_of[a.pod.uid] = key
        self._later[key] = deque(pods[new.first :])
        if not self._later[key]:
            del self._later[key]
        self._failures[key] = self._succeeded[key] = 0
        self._index_failures.pop(key, None)
        self._failed_indexes.pop(key, None)
        self.failed.pop(key, None)
        self._reason.pop(key, None)
        self._created[key] = now
        self._fragile = None
        turn.arrivals.extend(pods[: new.first])
        if new.active_deadline is not None:
            turn.deadlines.append((now + new.active_deadline, key))

    def jobs(self) -> list[BatchJob]:
        """The Jobs as they are now (a Job created again has its new pods)."""
        return list(self._jobs.values())

    def pods_of(self, key: str) -> tuple[str, ...]:
        """The uids of Job ``key``'s pods."""
        return self._jobs[key].pods
