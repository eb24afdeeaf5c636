"""VolumeRestrictions: a ReadWriteOncePod claim is used by one pod at a time, and in-tree disks
that cannot be shared (GCE PD, AWS EBS, iSCSI, RBD) are not mounted twice on one node.

As in kube-scheduler 1.34, for the claims of ``persistentVolumeClaim`` volumes (not those of
generic ephemeral volumes, which VolumeBinding checks): a missing claim rejects the pod before
any node is looked at; a ReadWriteOncePod claim another placed pod uses rejects every node
(evicting that pod could help). A disk conflict rejects the nodes where a placed pod holds the
same disk (unless both mount it read-only, where that is allowed: GCE PD, iSCSI, RBD).
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
from fairgpu.engine.plugins._volume_catalog import all_nodes
from fairgpu.model.pod import PodInfo
from fairgpu.model.volumes import RWOP, ephemeral_claims

DISK_CONFLICT = "node(s) had no available disk"
RWOP_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
    "already in-use by another pod"
)


def claim_not_found(name: str) -> str:
    """The API's NotFound text kube-scheduler reports for a missing claim."""
    return f'persistentvolumeclaim "{name}" not found'


def pvc_claims(pod: PodInfo) -> tuple[str, ...]:
    """The claims the pod's ``persistentVolumeClaim`` volumes name."""
    if pod.source is None or not pod.claims:
        return pod.claims
    ephemeral = ephemeral_claims(pod.source)
    return tuple(c for c in pod.claims if c not in ephemeral) if ephemeral else pod.claims


# The in-tree disks kube-scheduler's VolumeRestrictions compares (other kinds never conflict).
_CONFLICTING = frozenset({"gce-pd", "aws-ebs", "iscsi", "rbd"})


def _conflicts(mine: tuple[str, str, bool], theirs: tuple[str, str, bool]) -> bool:
    kind, ident, read_only = mine
    if kind != theirs[0] or ident != theirs[1] or kind not in _CONFLICTING:
        return False
    # Two read-only mounts of one disk are fine, except EBS, which attaches to one node only.
    return kind == "aws-ebs" or not (read_only and theirs[2])


class VolumeRestrictions(PreFilterPlugin, FilterPlugin):
    """PreFilter: claims exist, ReadWriteOncePod claims unused. Filter: disk conflicts."""

    name = "VolumeRestrictions"

    def pre_filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> Status:
        """Rejects the pod outright (UNRESOLVABLE) if one of its claims does not exist."""
        store = cluster.volumes
        for name in pvc_claims(pod):
            if store.claim(pod.namespace, name) is None:
                return Status.unresolvable(self.name, claim_not_found(name))
        return SUCCESS

    def skips(self, pod: PodInfo, cluster: ClusterState) -> bool:
        """A pod without volume claims and disks."""
        return not pod.claims and not pod.disks

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Every node if a ReadWriteOncePod claim is in use; else nodes with a disk conflict."""
        if self.skips(pod, cluster):
            return FilterResult(all_nodes(cluster.size))
        ok = np.ones(cluster.size, dtype=bool)
        if pod.claims and _exclusive_in_use(pod, cluster):
            ok[:] = False
            return FilterResult(ok, {RWOP_CONFLICT: ~ok})
        if not pod.disks:
            return FilterResult(ok)
        for uid, other in cluster.pods.items():
            if not other.disks or uid == pod.uid:
                continue
            node = cluster.placements[uid].node
            if ok[node] and any(_conflicts(d, o) for d in pod.disks for o in other.disks):
                ok[node] = False
        return FilterResult(ok, {DISK_CONFLICT: ~ok})


def _exclusive_in_use(pod: PodInfo, cluster: ClusterState) -> bool:
    """Does another placed pod use one of the pod's ReadWriteOncePod claims?"""
    store = cluster.volumes
    exclusive = set()
    for name in pvc_claims(pod):
        claim = store.claim(pod.namespace, name)
        if claim is not None and RWOP in claim.access_modes:
            exclusive.add(name)
    if not exclusive:
        return False
    return any(
        uid != pod.uid
        and other.namespace == pod.namespace
        and not exclusive.isdisjoint(pvc_claims(other))
        for uid, other in cluster.pods.items()
    )
