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
(:meth:`deadlines`, :meth:`expire`).
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterable

from fairgpu.model.job_failures import fails_on_next_eviction
from fairgpu.sim.job_backlog import JobAhead, jobs_ahead_in_run
from fairgpu.sim.workload import BatchJob, PodArrival


class JobController:
    """Which of a workload's pods exist from the start, and which one a success creates."""

    def __init__(self, jobs: Iterable[BatchJob], arrivals: Iterable[PodArrival]) -> None:
        by_uid = {a.pod.uid: a for a in arrivals}
        self._later: dict[str, deque[PodArrival]] = {}
        self._job_of: dict[str, str] = {}
        self._jobs = {job.key: job for job in jobs}
        self._failures: dict[str, int] = {}
        self._succeeded: dict[str, int] = {}
        self.failed: dict[str, str] = {}  # Job key -> why it failed
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
            job.key: min((by_uid[u].arrival for u in job.pods if u in by_uid), default=0.0)
            for job in self._jobs.values()
        }

    def deadlines(self) -> list[tuple[float, str]]:
        """(when, Job key) of each Job's ``activeDeadlineSeconds``, counted from its
        creation (its first pods' arrival)."""
        return [
            (self._created[key] + job.active_deadline, key)
            for key, job in self._jobs.items()
            if job.active_deadline is not None
        ]

    def active(self, key: str) -> bool:
        """Job ``key`` neither failed nor had all its pods succeed."""
        return key not in self.failed and self._succeeded.get(key, 0) < len(self._jobs[key].pods)

    def expire(self, key: str) -> bool:
        """Job ``key`` reached its deadline: it fails unless it is no longer
        :meth:`active` (True when it fails now)."""
        if not self.active(key):
            return False
        deadline = self._jobs[key].active_deadline
        self._fail(
            key,
            f"it was still active {deadline:g} s after its creation "
            "(activeDeadlineSeconds; DeadlineExceeded)",
        )
        return True

    def _fail(self, key: str, why: str) -> None:
        """Job ``key`` fails (``why``): it creates no more pods."""
        self.failed[key] = f"Job {key} failed: {why}"
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
        later = self._later.get(key)
        if not later:  # none left, or its Job failed
            return None
        arrival = later.popleft()
        pod = copy.copy(arrival.pod)
        pod.created = now
        return PodArrival(pod, now, arrival.duration)

    def evicted(self, uids: Iterable[str]) -> list[str]:
        """Count the evictions of pods ``uids`` against their Jobs; return the Jobs that
        fail by them (their reason in :attr:`failed`), which then create no more pods."""
        failing = []
        for uid in uids:
            key = self._job_of.get(uid)
            if key is None or key in self.failed:
                continue
            job = self._jobs[key]
            if job.on_disruption == "Ignore":
                continue
            failed = self._failures.get(key, 0)
            self._failures[key] = failed + 1
            self._fragile = None
            if not fails_on_next_eviction(job.on_disruption, job.backoff_limit, failed):
                continue
            if job.on_disruption == "FailJob":
                self._fail(key, "a pod failure policy rule (FailJob) matched an evicted pod")
            else:
                limit = job.backoff_limit
                self._fail(key, f"{failed + 1} pod(s) evicted, more than its backoffLimit {limit}")
            failing.append(key)
        return failing

    def fragile(self) -> frozenset[str]:
        """The uids of the active Jobs one more evicted pod fails: the scheduler's
        :attr:`~fairgpu.engine.engine.Engine.fragile_jobs`."""
        if self._fragile is None:
            self._fragile = frozenset(
                job.uid
                for key, job in self._jobs.items()
                if job.uid
                and self.active(key)
                and fails_on_next_eviction(
                    job.on_disruption, job.backoff_limit, self._failures.get(key, 0)
                )
            )
        return self._fragile

    def ahead(self, present: set[str], now: float) -> list[JobAhead]:
        """The active Jobs as a forecast from ``now`` continues them
        (:func:`~fairgpu.sim.job_backlog.jobs_ahead_in_run`; ``present``: the uids of the
        pods pending or running then). A Job created after ``now`` is not one yet."""
        active = [
            job
            for key, job in self._jobs.items()
            if key not in self.failed and self._created[key] <= now
        ]
        return jobs_ahead_in_run(active, present, self._later, self._succeeded, self._failures, now)

    def pods_of(self, key: str) -> tuple[str, ...]:
        """The uids of Job ``key``'s pods."""
        return self._jobs[key].pods
