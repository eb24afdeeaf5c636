"""LeaderWorkerSets (``leaderworkerset.x-k8s.io/v1``) as a simulator workload: the pods their
controller makes, group by group.

A LeaderWorkerSet is ``spec.replicas`` groups of ``spec.leaderWorkerTemplate.size`` pods:
group ``i``'s leader ``<name>-<i>`` (from ``leaderTemplate``, else ``workerTemplate``) and its
workers ``<name>-<i>-<j>``, ``j`` = 1 .. size-1 (from ``workerTemplate``), each labelled with
the set's name, its group index and its worker index and annotated with the group's size, as
the controller and its webhook label them (the labels the scheduler groups by:
:mod:`~fairgpu.engine.leader_worker_groups`); the leaders are one StatefulSet's pods, each
group's workers another's. ``restartPolicy`` (default ``RecreateGroupOnPodRestart``) decides
what an eviction does in the replay: the whole group is recreated
(:mod:`fairgpu.sim.leader_worker_controller`), or -- ``None``, or the deprecated ``Default``
-- only the pod. Timing annotations on the set apply to its pods.

Under the default ``startupPolicy: LeaderCreated`` a group's workers are created with its
leader; under ``LeaderReady`` only once the leader runs (it counts as ready when it starts:
no readiness probe is replayed), all at once (:mod:`fairgpu.sim.statefulset_controller`).

Not replayed: rolling updates, sub-groups, exclusive placement annotations and the Volcano
provider's pod groups.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairgpu.engine.leader_worker_groups import LABEL_GROUP_INDEX, LABEL_NAME
from fairgpu.engine.leader_worker_groups import LABEL_SIZE as ANN_SIZE
from fairgpu.sim.workloads.kube_jobs import Controller, JobError, pass_timing, whole_number
from fairgpu.sim.workloads.statefulsets import LABEL_POD_INDEX, LABEL_POD_NAME

LABEL_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
ANN_LEADER_NAME = "leaderworkerset.sigs.k8s.io/leader-name"

#: The restart policies that recreate the whole group when one of its pods goes; the
#: second only once every pod of the group has started.
RECREATE = "RecreateGroupOnPodRestart"
RECREATE_AFTER_START = "RecreateGroupAfterStart"
_POLICIES = (RECREATE, RECREATE_AFTER_START, "None", "Default")


@dataclass(slots=True)
class ExpandedLeaderWorkerSet:
    """One LeaderWorkerSet's pods' documents, group after group (leader first), each group's
    size, its restart policy, and whether a group's workers wait for its leader to run
    (``startupPolicy: LeaderReady``)."""

    key: str
    pods: list[dict[str, Any]] = field(default_factory=list)
    size: int = 1
    restart_policy: str = RECREATE
    leader_first: bool = False

    @property
    def recreates_groups(self) -> bool:
        """Whether one evicted pod takes its whole group down."""
        return recreates_groups(self.restart_policy)


def recreates_groups(restart_policy: str) -> bool:
    """Does a LeaderWorkerSet under ``restart_policy`` take a whole group down when one of
    its pods goes (``None`` / ``Default``: the pod restarts alone)?"""
    return restart_policy in (RECREATE, RECREATE_AFTER_START)


def expand_leaderworkerset(path: Path, doc: dict[str, Any]) -> ExpandedLeaderWorkerSet:
    """The pods the LeaderWorkerSet ``doc`` (read from ``path``) makes (raises
    :class:`~fairgpu.sim.workloads.kube_jobs.JobError` naming the field it cannot read)."""
    c = Controller.of(path, doc, "LeaderWorkerSet")
    meta, spec, namespace, where = c.meta, c.spec, c.namespace, c.where
    name = meta["name"]
    replicas = whole_number(spec, "replicas", 1, 0, f"{where}: spec.replicas")
    lwt = spec.get("leaderWorkerTemplate")
    if not isinstance(lwt, dict) or not isinstance(lwt.get("workerTemplate"), dict):
        raise JobError(f"{where}: spec.leaderWorkerTemplate.workerTemplate: required")
    size = whole_number(lwt, "size", 1, 1, f"{where}: spec.leaderWorkerTemplate.size")
    policy = lwt.get("restartPolicy") or RECREATE
    if policy not in _POLICIES:
        raise JobError(
            f"{where}: spec.leaderWorkerTemplate.restartPolicy: must be one of "
            f"{', '.join(_POLICIES)}, not {policy!r}"
        )
    startup = spec.get("startupPolicy") or "LeaderCreated"
    if startup not in ("LeaderCreated", "LeaderReady"):
        raise JobError(
            f"{where}: spec.startupPolicy: must be LeaderCreated or LeaderReady, not {startup!r}"
        )
    worker = lwt["workerTemplate"]
    leader = lwt.get("leaderTemplate") or worker
    if not isinstance(leader, dict):
        raise JobError(f"{where}: spec.leaderWorkerTemplate.leaderTemplate: must be a template")
    out = ExpandedLeaderWorkerSet(
        f"{namespace}/{name}",
        size=size,
        restart_policy=policy,
        leader_first=startup != "LeaderCreated",
    )
    uid = str(meta.get("uid") or f"leaderworkerset/{namespace}/{name}")
    for i in range(replicas):
        leader_name = f"{name}-{i}"
        for j in range(size):
            pod_name = leader_name if j == 0 else f"{leader_name}-{j}"
            # The leaders are StatefulSet <name>'s pods, group i's workers <name>-<i>'s.
            owner, index = (name, i) if j == 0 else (leader_name, j)
            pod_meta = copy.deepcopy((leader if j == 0 else worker).get("metadata") or {})
            pod_meta.update(name=pod_name, namespace=namespace)
            pod_meta.setdefault("labels", {}).update(
                {
                    LABEL_NAME: name,
                    LABEL_GROUP_INDEX: str(i),
                    LABEL_WORKER_INDEX: str(j),
                    LABEL_POD_NAME: pod_name,
                    LABEL_POD_INDEX: str(index),
                }
            )
            notes = pod_meta.setdefault("annotations", {})
            notes[ANN_SIZE] = str(size)
            if j:
                notes[ANN_LEADER_NAME] = leader_name
            pass_timing(meta, notes)
            pod_meta["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": owner,
                    "uid": f"{uid}/statefulset/{owner}",
                    "controller": True,
                }
            ]
            pod_spec = copy.deepcopy((leader if j == 0 else worker).get("spec") or {})
            pod_spec.setdefault("hostname", pod_name)
            pod_spec.setdefault("subdomain", name)
            out.pods.append(
                {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}
            )
    return out
