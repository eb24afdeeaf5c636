"""The JobSet controller's part in a simulation: what a failed child Job does to its JobSet.

A JobSet (``jobset.x-k8s.io``) runs child Jobs (:mod:`fairgpu.sim.workloads.jobsets`). When
one fails -- here only by evictions past its ``backoffLimit``, a ``FailJob`` pod failure rule
or its ``activeDeadlineSeconds`` (:mod:`fairgpu.sim.job_controller`) -- the JobSet controller
applies the JobSet's failure policy (:func:`jobset_action`):

* no ``failurePolicy``: the JobSet fails, and its other active Jobs are deleted;
* else the first rule whose ``onJobFailureReasons`` (the Job's failure reason:
  ``BackoffLimitExceeded``, ``PodFailurePolicy``, ``DeadlineExceeded``) and
  ``targetReplicatedJobs`` match (an empty list matches any) decides: ``FailJobSet`` fails
  it; ``RestartJobSet`` -- also when no rule matches -- restarts it, counted against
  ``maxRestarts`` (past it, the JobSet fails instead); ``RestartJobSetAndIgnoreMaxRestarts``
  restarts it uncounted; ``RecreateJob`` recreates the failed Job alone (uncounted here).

A restart deletes every child Job -- running, waiting or done -- and creates them again: their
pods start over, new pods (named ``<pod>-r<attempt>``) with new uids, as the controller's new
Jobs make new pods. So evicting one pod of a JobSet whose Job fails by it throws away all the
JobSet's work, which the scheduler costs (:mod:`fairgpu.engine.fragile_jobs`).
"""

from __future__ import annotations

from fairgpu.sim.workload import JobSetPolicy

__all__ = ["FAIL", "RECREATE", "RESTART", "jobset_action"]

FAIL, RESTART, RECREATE = "fail", "restart", "recreate"


def jobset_action(
    policy: JobSetPolicy, counted: int, reason: str, replicated: str
) -> tuple[str, bool, str]:
    """What the JobSet of ``policy`` does when its child Job of replicated Job ``replicated``
    fails with ``reason``, ``counted`` restarts of it counted so far: (:data:`FAIL`,
    :data:`RESTART` or :data:`RECREATE`, whether it counts against ``maxRestarts``, why --
    for people)."""
    if not policy.defined:
        return FAIL, False, "it has no failurePolicy"
    action, rule = "RestartJobSet", "no failurePolicy rule matched"
    for i, (act, reasons, targets) in enumerate(policy.rules):
        if (not reasons or reason in reasons) and (not targets or replicated in targets):
            action, rule = act, f"failurePolicy rule {i} ({act})"
            break
    if action == "FailJobSet":
        return FAIL, False, rule
    if action == "RecreateJob":
        return RECREATE, False, rule
    if action == "RestartJobSetAndIgnoreMaxRestarts":
        return RESTART, False, rule
    if counted >= policy.max_restarts:
        limit = policy.max_restarts
        return FAIL, False, f"{rule}, and it had restarted maxRestarts ({limit}) times"
    return RESTART, True, f"{rule}: restart {counted + 1} of {policy.max_restarts}"
