"""What a simulation replays: nodes plus pods with arrival times and run times."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import PodInfo


@dataclass(slots=True)
class PodArrival:
    """A pod entering the queue at ``arrival`` seconds and running ``duration`` seconds once
    started (``None``: until the simulation ends)."""

    pod: PodInfo
    arrival: float = 0.0
    duration: float | None = None

    def made_at(self, now: float) -> PodArrival:
        """This pod as a controller creates it at ``now`` in a run: a copy, created and
        arriving then, so the workload itself is left as it was for another run."""
        pod = copy.copy(self.pod)
        pod.created = now
        return PodArrival(pod, now, self.duration)


@dataclass(frozen=True, slots=True)
class BatchJob:
    """A batch/v1 Job as a replay runs it (``key``: ``namespace/name``; ``pods``: its pods'
    uids, in the order its controller creates them): the first ``first`` pods arrive at
    their arrival time, each later one when one of the Job's pods succeeds; an evicted pod
    counts as a failed one unless ``on_disruption`` says otherwise (``Ignore``; ``FailJob``
    fails the Job at once), and more than ``backoff_limit`` failures fail the Job, as does
    still running ``active_deadline`` seconds after it started
    (:mod:`fairgpu.sim.job_controller`). ``uid``: the Job's, its pods' controller owner.
    ``jobset``: the key of the JobSet it is a child of ("" for none), ``replicated``: its
    replicated Job's name there. ``per_index``: ``backoffLimitPerIndex`` of an Indexed Job
    (its pods are in index order), with ``max_failed_indexes``. ``created``: when its
    ``active_deadline`` starts counting, on the replay's clock (a forecast of a Job started
    before it); None: its first pods' arrival."""

    key: str
    first: int
    pods: tuple[str, ...]
    backoff_limit: int = 6
    on_disruption: str = "Count"
    active_deadline: float | None = None
    uid: str = ""
    jobset: str = ""
    replicated: str = ""
    per_index: int | None = None
    max_failed_indexes: int | None = None
    created: float | None = None


@dataclass(frozen=True, slots=True)
class JobSetPolicy:
    """What a JobSet's controller does when one of its child Jobs fails
    (:mod:`fairgpu.sim.jobset_controller`): ``defined`` False (no ``failurePolicy``) fails
    the JobSet; else the first of ``rules`` -- (action, the Job failure reasons it matches,
    the replicated Jobs it targets; an empty set matches any) -- that matches decides, and
    none restarts it, each restart counted against ``max_restarts``."""

    key: str
    defined: bool = False
    max_restarts: int = 0
    rules: tuple[tuple[str, frozenset[str], frozenset[str]], ...] = ()


@dataclass(slots=True)
class Workload:
    """A cluster and the pods submitted to it.

    ``pod_groups`` maps ``namespace/name`` of declared PodGroups to their ``minMember``;
    ``jobs``: the Jobs whose pods ``arrivals`` holds (each pod's arrival is its Job's; the
    simulator creates the later ones as earlier ones succeed), ``jobsets`` the failure
    policies of the JobSets some of them belong to; ``ordered``: the pods (uids, in order)
    of each StatefulSet that creates a pod only once the one before it runs
    (:mod:`fairgpu.sim.statefulset_controller`); ``recreated_groups``: the pods (uids) of
    each LeaderWorkerSet group whose controller recreates all of it when one of them is
    evicted, and whether only once all of them have started
    (:mod:`fairgpu.sim.workloads.leaderworkersets`); ``fanned``: pods (uids) the first of
    which must start before the others are created, all at once (a LeaderWorkerSet group's
    leader and workers under ``startupPolicy: LeaderReady``); ``loose_leader_worker_sets``:
    the LeaderWorkerSets (``namespace/name``) whose pods restart alone (``restartPolicy:
    None``), told to the engine; ``description`` is shown in reports.
    """

    name: str
    nodes: list[NodeInfo]
    arrivals: list[PodArrival]
    pod_groups: dict[str, int] = field(default_factory=dict)
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    jobs: list[BatchJob] = field(default_factory=list)
    jobsets: dict[str, JobSetPolicy] = field(default_factory=dict)
    ordered: list[tuple[str, ...]] = field(default_factory=list)
    recreated_groups: list[tuple[tuple[str, ...], bool]] = field(default_factory=list)
    fanned: list[tuple[str, ...]] = field(default_factory=list)
    loose_leader_worker_sets: frozenset[str] = frozenset()
