"""NodeVolumeLimits: a node attaches at most as many volumes of a CSI driver as its CSINode
says (``spec.drivers[].allocatable.count``).

As kube-scheduler 1.34 counts: the unique volumes (driver + volume handle) of the pods on the
node, plus the pod's volumes not already there; an unbound claim counts as a volume of its
class's provisioner. Drivers without a count, and nodes without a CSINode, have no limit.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.cluster.volumes import VolumeStore
from fairgpu.engine.framework import CycleState, FilterPlugin, FilterResult
from fairgpu.engine.plugins._volume_catalog import all_nodes
from fairgpu.model.pod import PodInfo

MAX_VOLUME_COUNT = "node(s) exceed max volume count"


def csi_volumes(pod: PodInfo, store: VolumeStore) -> dict[str, str]:
    """The pod's CSI volumes: unique name (``driver/handle``) -> driver."""
    out: dict[str, str] = {}
    for name in pod.claims:
        claim = store.claim(pod.namespace, name)
        if claim is None:
            continue
        if claim.volume_name:
            vol = store.volumes.get(claim.volume_name)
            if vol is not None and vol.csi_driver and vol.csi_handle:
                out[f"{vol.csi_driver}/{vol.csi_handle}"] = vol.csi_driver
            continue
        sc = store.class_of(claim)
        if sc is not None and sc.provisioner:
            out[f"{sc.provisioner}/{claim.namespace}-{claim.name}"] = sc.provisioner
    return out


class NodeVolumeLimits(FilterPlugin):
    """Filter: the pod's new CSI volumes fit under each node's per-driver attach limit."""

    name = "NodeVolumeLimits"

    def __init__(self) -> None:
        # slot -> (node version, store version, unique volumes attached there)
        self._attached: dict[int, tuple[int, int, dict[str, str]]] = {}

    def _attached_on(self, cluster: ClusterState, slot: int) -> dict[str, str]:
        store = cluster.volumes
        version = int(cluster.node_version[slot])
        hit = self._attached.get(slot)
        if hit is not None and hit[0] == version and hit[1] == store.version:
            return hit[2]
        attached: dict[str, str] = {}
        for other in cluster.node_pods[slot].values():
            if other.claims:
                attached.update(csi_volumes(other, store))
        self._attached[slot] = (version, store.version, attached)
        return attached

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Only nodes whose CSINode limits one of the pod's drivers are looked at."""
        if not pod.claims:
            return FilterResult(all_nodes(cluster.size))
        ok = np.ones(cluster.size, dtype=bool)
        store = cluster.volumes
        new = csi_volumes(pod, store)
        drivers = set(new.values())
        if not drivers:
            return FilterResult(ok)
        for node_name, info in store.csi_nodes.items():
            limits = {d: c for d, c in info.limits if d in drivers}
            slot = cluster.node_index.get(node_name)
            if not limits or slot is None:
                continue
            attached = self._attached_on(cluster, slot)
            if pod.uid in cluster.node_pods[slot]:
                continue
            for driver, limit in limits.items():
                have = sum(1 for d in attached.values() if d == driver)
                extra = sum(1 for u, d in new.items() if d == driver and u not in attached)
                if extra and have + extra > limit:
                    ok[slot] = False
                    break
        return FilterResult(ok, {MAX_VOLUME_COUNT: ~ok})
