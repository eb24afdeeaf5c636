"""NodePorts: a node fails if a pod there already binds a host port the incoming pod wants.

Ports conflict on the same protocol and port when the host IPs are equal or either is the
wildcard ``0.0.0.0`` (kube-scheduler's HostPortInfo). Only pods that bind host ports are looked
at, so pods without them cost one attribute check.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState, FilterPlugin, FilterResult
from fairgpu.model.pod import PodInfo

REASON = "node(s) didn't have free ports for the requested pod ports"


class NodePorts(FilterPlugin):
    """Host port conflicts with the pods placed on each node."""

    name = "NodePorts"

    def skips(self, pod: PodInfo, cluster: ClusterState) -> bool:
        """A pod without host ports."""
        return not pod.host_ports

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """All nodes pass for a pod without host ports."""
        mask = np.ones(cluster.size, dtype=bool)
        wanted = pod.host_ports
        if not wanted:
            return FilterResult(mask)
        ports = {p.port for p in wanted}
        for uid, other in cluster.pods.items():
            if not other.host_ports or uid == pod.uid:
                continue
            node = cluster.placements[uid].node
            if not mask[node]:
                continue
            if any(
                used.port in ports and any(used.conflicts(w) for w in wanted)
                for used in other.host_ports
            ):
                mask[node] = False
        return FilterResult(mask, {REASON: ~mask})
