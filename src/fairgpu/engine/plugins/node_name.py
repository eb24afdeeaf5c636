"""NodeName: a pod with ``spec.nodeName`` may only go to that node."""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState, FilterPlugin, FilterResult
from fairgpu.model.pod import PodInfo


class NodeName(FilterPlugin):
    """Filter nodes whose name differs from ``spec.nodeName`` (when set)."""

    name = "NodeName"
    static = True

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """All nodes pass when ``nodeName`` is empty."""
        n = cluster.size
        if not pod.node_name:
            return FilterResult(np.ones(n, dtype=bool))
        mask = np.zeros(n, dtype=bool)
        idx = cluster.node_index.get(pod.node_name)
        if idx is not None:
            mask[idx] = True
        return FilterResult(mask, {"node(s) didn't match the requested node name": ~mask})
