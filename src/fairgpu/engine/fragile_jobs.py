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

The adapters decide fragility from the Job's spec and the failures counted so far: the live
scheduler from the Jobs it watches (``status.failed``), the simulator from its own Job
controller.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from fairgpu.cluster.state import ClusterState

#: How a fragile Job's group key starts (pod group keys are ``namespace/name``).
PREFIX = "job:"


def job_key(owner: str) -> str:
    """The group key of the fragile Job whose uid is ``owner``."""
    return PREFIX + owner


def job_groups(
    cluster: ClusterState, fragile: Collection[str], in_pod_group: Callable[[str], bool]
) -> dict[str, set[str]]:
    """The running pods of each Job of ``fragile`` (uids), by :func:`job_key`; pods of a pod
    group (``in_pod_group``) left out."""
    groups: dict[str, set[str]] = {}
    if not fragile:
        return groups
    for uid, pod in cluster.pods.items():
        if pod.owner_kind == "Job" and pod.owner in fragile and not in_pod_group(uid):
            groups.setdefault(job_key(pod.owner), set()).add(uid)
    return groups
