"""SchedulingGates: a pod with a non-empty ``spec.schedulingGates`` is not scheduled yet.

kube-scheduler keeps such a pod out of its active queue (PreEnqueue) until every gate is
removed; the engine skips it before ordering, so it neither takes a node nor counts as pending
work for fair share. The pre-filter refuses it too, for callers that schedule one pod directly.
"""

from __future__ import annotations

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import SUCCESS, CycleState, PreFilterPlugin, Status
from fairgpu.model.pod import PodInfo


def gated_reason(pod: PodInfo) -> str:
    """kube-scheduler's message for a gated pod, or '' if the pod has no gates."""
    if not pod.scheduling_gates:
        return ""
    return f"waiting for scheduling gates: [{' '.join(pod.scheduling_gates)}]"


class SchedulingGates(PreFilterPlugin):
    """Refuses a pod while it has scheduling gates (UNSCHEDULABLE: removing them helps)."""

    name = "SchedulingGates"

    def pre_filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> Status:
        """SUCCESS unless the pod carries gates."""
        reason = gated_reason(pod)
        return Status.unschedulable(self.name, reason) if reason else SUCCESS
