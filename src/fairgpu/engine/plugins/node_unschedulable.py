"""NodeUnschedulable: skip cordoned nodes unless the pod tolerates the unschedulable taint."""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState, FilterPlugin, FilterResult
from fairgpu.model.pod import PodInfo

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


class NodeUnschedulable(FilterPlugin):
    """Filter out nodes with ``spec.unschedulable: true``."""

    name = "NodeUnschedulable"
    static = True

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Pass all nodes if the pod tolerates ``node.kubernetes.io/unschedulable:NoSchedule``."""
        n = cluster.size
        if any(t.tolerates(UNSCHEDULABLE_TAINT, "", "NoSchedule") for t in pod.tolerations):
            return FilterResult(np.ones(n, dtype=bool))
        cordoned = cluster.unschedulable[:n]
        return FilterResult(~cordoned, {"node(s) were unschedulable": cordoned})
