"""Fragile Jobs: a batch/v1 Job that one more evicted pod fails loses all of its pods.

The Job controller counts an evicted pod against the Job's ``backoffLimit`` unless its pod
failure policy ignores disruptions (:mod:`~fairgpu.model.job_failures`); when that count
goes over the limit -- or a ``FailJob`` rule matches -- the Job fails and the controller
deletes its other pods. Evicting one pod of such a Job then throws away the work of every
running pod of it, as tearing down a pod group does. So the victim search treats the
running pods of each Job the adapter names fragile (:attr:`~fairgpu.engine.engine.Engine.
fragile_jobs`, by Job uid, the pods' controller owner) as one group with no slack
(:func:`job_groups`, used by :func:`~fairgpu.engine.victim_cost.running_gangs`): a pod of
it costs all of their work, and may go only with all of them. A pod that belongs to a pod
group is judged by its group alone.

**A JobSet goes with its child Job.** The pods of a JobSet's child Jobs carry its name
(:data:`LABEL_JOBSET`). When a child Job fails, the JobSet controller by default fails the
whole JobSet (no ``failurePolicy``; its active Jobs are deleted) or restarts it (a
``failurePolicy`` whose rules do not match: every child Job deleted and created again, their
pods starting over, until ``maxRestarts``): either way every running pod of the JobSet loses
its work. So the group of a fragile child Job is every running pod of its JobSet
(:func:`fragile_key`). A pod of a sibling Job that tolerates the eviction still goes alone at
its own cost: its Job replaces it and nothing else happens; it goes with the group only when
a fragile pod does. A ``RecreateJob`` rule recreates only the failed Job; the scheduler does
not read JobSet objects, so it takes the default, and such a JobSet is spared more than it
needs to be -- never broken by surprise.

The adapters decide fragility from the Job's spec and the failures counted so far: the live
scheduler from the Jobs it watches (``status.failed``), the simulator from its own Job
controller.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from fairgpu.cluster.state import ClusterState
from fairgpu.model.pod import PodInfo

#: How a fragile Job's group key starts (pod group keys are ``namespace/name``).
PREFIX = "job:"

#: The label the JobSet controller puts on its child Jobs and their pods.
LABEL_JOBSET = "jobset.sigs.k8s.io/jobset-name"


def job_key(owner: str) -> str:
    """The group key of the fragile Job whose uid is ``owner``."""
    return PREFIX + owner


def jobset_key(pod: PodInfo) -> str:
    """The group key of the JobSet ``pod`` belongs to ("" for none)."""
    name = pod.labels.get(LABEL_JOBSET)
    return f"{PREFIX}jobset/{pod.namespace}/{name}" if name else ""


def fragile_key(pod: PodInfo) -> str:
    """The group a pod of a fragile Job takes down with it: its JobSet's if it has one, else
    its Job's."""
    return jobset_key(pod) or job_key(pod.owner)


def job_groups(
    cluster: ClusterState, fragile: Collection[str], in_pod_group: Callable[[str], bool]
) -> dict[str, set[str]]:
    """The running pods each fragile Job (``fragile``: Job uids) takes down, by
    :func:`fragile_key`: the Job's own, or all of its JobSet's; pods of a pod group
    (``in_pod_group``) left out."""
    groups: dict[str, set[str]] = {}
    if not fragile:
        return groups
    sets: dict[str, set[str]] = {}  # JobSet key -> its running pods, for the JobSets hit
    for uid, pod in cluster.pods.items():
        if in_pod_group(uid):
            continue
        if pod.owner_kind == "Job" and pod.owner in fragile:
            groups.setdefault(fragile_key(pod), set()).add(uid)
        key = jobset_key(pod)
        if key:
            sets.setdefault(key, set()).add(uid)
    for key, members in groups.items():
        members |= sets.get(key, set())
    return groups


def group_key(pod: PodInfo, fragile: Collection[str], groups: Collection[str]) -> str:
    """The group of ``groups`` (keys of :func:`job_groups`) evicting ``pod`` alone breaks:
    its fragile Job's or JobSet's; "" for a pod whose own Job tolerates the eviction, even
    in a JobSet that is a group (it goes with it, but not the other way round)."""
    if pod.owner_kind != "Job" or pod.owner not in fragile:
        return ""
    key = fragile_key(pod)
    return key if key in groups else ""
