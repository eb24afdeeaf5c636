"""Leader-worker groups: one evicted pod of a LeaderWorkerSet group restarts all of it.

A LeaderWorkerSet (``leaderworkerset.x-k8s.io``, the controller multi-host inference runs
under) is ``replicas`` groups of ``size`` pods -- a leader and its workers, the model sharded
across them. Its default ``restartPolicy``, ``RecreateGroupOnPodRestart``, deletes the
group's leader when any pod of the group is deleted or restarts a container; the workers'
StatefulSet is owned by the leader, so every pod of the group goes and the group starts
over (read in its pod controller's ``handleRestartPolicy``). Evicting one worker of a
2 x 8-GPU replica then costs all 16 GPUs' work, not 8.

So the victim search treats the running pods of each group as one group with no slack, as
it treats a fragile Job (:mod:`~fairgpu.engine.fragile_jobs`): a pod of it costs all of
their work and may go only with all of them (:func:`group_key`, :func:`groups`, used by
:func:`~fairgpu.engine.victim_cost.running_gangs`). A group is named by the labels the
controller puts on every pod of it (:data:`LABEL_NAME`, :data:`LABEL_GROUP_INDEX`). A set
with ``restartPolicy: None`` restarts each pod alone: its pods are victims one by one. The
adapters tell the engine which sets those are (``Engine.loose_leader_worker_sets``): the
simulator from the workload, the live scheduler from the LeaderWorkerSet objects it lists
where the API is served; a set it has not read (the API not served or not readable) takes
the default policy -- spared more than it needs to be, never broken by surprise. A pod
that belongs to a pod group (the Volcano provider of the LeaderWorkerSet controller makes
one per group) is judged by its pod group alone.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from fairgpu.cluster.state import ClusterState
from fairgpu.model.pod import PodInfo

#: The labels the LeaderWorkerSet controller puts on every pod of a group.
LABEL_NAME = "leaderworkerset.sigs.k8s.io/name"
LABEL_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
#: The annotation it puts on them with the group's size (a leader and its workers).
LABEL_SIZE = "leaderworkerset.sigs.k8s.io/size"

#: How a leader-worker group's key starts (pod group keys are ``namespace/name``).
PREFIX = "lws:"


def group_key(pod: PodInfo) -> str:
    """The key of the leader-worker group ``pod`` belongs to ("" for none)."""
    labels = pod.labels
    name = labels.get(LABEL_NAME)
    if not name:
        return ""
    index = labels.get(LABEL_GROUP_INDEX)
    if index is None:
        return ""
    return f"{PREFIX}{pod.namespace}/{name}/{index}"


def set_key(pod: PodInfo) -> str:
    """``namespace/name`` of the LeaderWorkerSet ``pod`` belongs to ("" for none)."""
    name = pod.labels.get(LABEL_NAME)
    return f"{pod.namespace}/{name}" if name else ""


def groups(
    cluster: ClusterState, in_pod_group: Callable[[str], bool], loose: Collection[str] = ()
) -> dict[str, set[str]]:
    """The running pods of each leader-worker group in ``cluster``, by :func:`group_key`;
    pods of a pod group (``in_pod_group``) and of the sets in ``loose`` (``restartPolicy:
    None``, by :func:`set_key`) left out."""
    out: dict[str, set[str]] = {}
    for uid, pod in cluster.pods.items():
        if LABEL_NAME not in pod.labels or in_pod_group(uid) or set_key(pod) in loose:
            continue
        key = group_key(pod)
        if key:
            out.setdefault(key, set()).add(uid)
    return out
