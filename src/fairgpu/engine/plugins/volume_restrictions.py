"""VolumeRestrictions: a ReadWriteOncePod claim is used by one pod at a time, and in-tree disks
that cannot be shared (GCE PD, AWS EBS, iSCSI, RBD) are not mounted twice on one node.

As in kube-scheduler 1.34: a missing claim, or a ReadWriteOncePod claim another placed pod
uses, rejects the pod before any node is looked at (no node can help); a disk conflict rejects
the nodes where a placed pod holds the same disk (unless both mount it read-only, where that
is allowed: GCE PD, iSCSI, RBD).
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import (
    SUCCESS,
    CycleState,
    FilterPlugin,
    FilterResult,
    PreFilterPlugin,
    Status,
)
from fairgpu.model.pod import PodInfo
from fairgpu.model.volumes import RWOP

DISK_CONFLICT = "node(s) had no available disk"
RWOP_CONFLICT = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)


def claim_not_found(name: str) -> str:
    """The API's NotFound text kube-scheduler reports for a missing claim."""
    return f'persistentvolumeclaim "{name}" not found'


def _conflicts(mine: tuple[str, str, bool], theirs: tuple[str, str, bool]) -> bool:
    kind, ident, read_only = mine
    if kind != theirs[0] or ident != theirs[1]:
        return False
    # Two read-only mounts of one disk are fine, except EBS, which attaches to one node only.
    return kind == "aws-ebs" or not (read_only and theirs[2])


class VolumeRestrictions(PreFilterPlugin, FilterPlugin):
    """PreFilter: claims exist, ReadWriteOncePod claims unused. Filter: disk conflicts."""

    name = "VolumeRestrictions"

    def pre_filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> Status:
        """Rejects the pod outright (UNRESOLVABLE) for a missing or taken RWOP claim."""
        if not pod.claims:
            return SUCCESS
        store = cluster.volumes
        exclusive: set[str] = set()
        for name in pod.claims:
            claim = store.claim(pod.namespace, name)
            if claim is None:
                return Status.unresolvable(self.name, claim_not_found(name))
            if RWOP in claim.access_modes:
                exclusive.add(name)
        if exclusive:
            for uid, other in cluster.pods.items():
                if (
                    uid != pod.uid
                    and other.namespace == pod.namespace
                    and not exclusive.isdisjoint(other.claims)
                ):
                    return Status.unresolvable(self.name, RWOP_CONFLICT)
        return SUCCESS

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Nodes where a placed pod mounts one of the pod's disks in a conflicting way."""
        ok = np.ones(cluster.size, dtype=bool)
        if not pod.disks:
            return FilterResult(ok)
        for uid, other in cluster.pods.items():
            if not other.disks or uid == pod.uid:
                continue
            node = cluster.placements[uid].node
            if ok[node] and any(_conflicts(d, o) for d in pod.disks for o in other.disks):
                ok[node] = False
        return FilterResult(ok, {DISK_CONFLICT: ~ok})
