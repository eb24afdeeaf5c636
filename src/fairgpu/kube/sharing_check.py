"""A warning when GPU shares land on a node whose device plugin cannot admit them as booked."""

from __future__ import annotations

import logging

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Bind
from fairgpu.kube.metrics import Metrics
from fairgpu.model.gpu import device_sharing_problem

__all__ = ["SharingCheck"]

log = logging.getLogger("fairgpu.kube")


class SharingCheck:
    """Looks at each node once per GPU count; the result is the gauge
    ``fairgpu_node_gpu_sharing_problem`` and a warning in the log."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._checked: set[tuple[str, int]] = set()  # (node, GPU count) looked at

    def check(self, cluster: ClusterState, binds: list[Bind]) -> None:
        """Once per node (and GPU count): warn when a GPU share is bound to a node whose
        device plugin cannot admit more pods requesting ``nvidia.com/gpu`` than it has GPUs,
        or advertises virtual devices fairgpu counts as GPUs (``device_sharing_problem``)."""
        for b in binds:
            idx = cluster.node_index.get(b.node_name)
            if not b.pod.gpu.is_shared or idx is None:
                continue
            node = cluster.node(idx)
            if (b.node_name, node.gpu_count) in self._checked:
                continue
            self._checked.add((b.node_name, node.gpu_count))
            problem = device_sharing_problem(node)
            self.metrics.node_sharing_problem.labels(b.node_name).set(1 if problem else 0)
            if problem:
                log.warning("GPU shares on this node may not work", extra={"problem": problem})
