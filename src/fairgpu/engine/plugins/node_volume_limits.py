"""NodeVolumeLimits: a node attaches at most as many volumes of a CSI driver as its CSINode
says (``spec.drivers[].allocatable.count``).

As kube-scheduler 1.34 counts: the unique volumes (driver + volume handle) of the pods on the
node, plus the pod's volumes not already there. Counted are the volumes of the pod's claims
(generic ephemeral volumes included, as their claim ``<pod>-<volume>``): a bound claim as its
PersistentVolume, an unbound one (or one bound to a volume that does not exist) as a volume of
its class's provisioner; and in-tree volumes migrated to CSI, inline or persistent, as their
driver's (see ``_csi_migration``). CSI ephemeral inline volumes (``volumes[].csi``) are not
counted. The node's VolumeAttachments of CSI persistent volumes (as ``attacher/handle``) that
no pod there uses count too, even when the new pod uses the volume (kube-scheduler then counts
it twice). Drivers without a count, and nodes without a CSINode, have no limit.

An inline in-tree volume the CSI translation refuses (a malformed EBS ID, an Azure disk not
Managed) fails the whole attempt with kube-scheduler's error (no node, no preemption): the new
pod's on any still-feasible node with a CSINode; a placed pod's on such a node that has limits
when the new pod has volumes counted there -- kube-scheduler translates both there.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.cluster.volumes import VolumeStore
from fairgpu.engine.framework import AttemptError, CycleState, FilterPlugin, FilterResult
from fairgpu.engine.plugins._csi_migration import (
    VARIANTS,
    inline_driver,
    migrated,
    provisioner_driver,
    volume_driver,
)
from fairgpu.engine.plugins._volume_catalog import all_nodes
from fairgpu.model.pod import PodInfo

# Pods' volumes; other attachments per driver; a placed pod's translation error ("" if none).
Attached = tuple[dict[str, str], dict[str, int], str]

MAX_VOLUME_COUNT = "node(s) exceed max volume count"


def csi_volumes(pod: PodInfo, store: VolumeStore, on: frozenset[str]) -> dict[str, str]:
    """The pod's counted volumes: unique name (``driver/handle``) -> driver, on a node where
    the in-tree plugins ``on`` are migrated."""
    out: dict[str, str] = {}
    for name in pod.claims:
        claim = store.claim(pod.namespace, name)
        if claim is None:
            continue
        vol = store.volumes.get(claim.volume_name) if claim.volume_name else None
        if vol is not None:
            found = volume_driver(vol, on)
            if found is not None:
                out[f"{found[0]}/{found[1]}"] = found[0]
            continue
        sc = store.class_of(claim)
        driver = provisioner_driver(sc.provisioner, on) if sc is not None else ""
        if driver:
            # Not a real handle (kube-scheduler uses a random prefix): never shared.
            out[f"{driver}/\0{claim.namespace}/{claim.name}"] = driver
    for kind, ident, _ in pod.disks:
        found = inline_driver(kind, ident, on)
        if found is not None:
            out[f"{found[0]}/{found[1]}"] = found[0]
    return out


class NodeVolumeLimits(FilterPlugin):
    """Filter: the pod's new CSI volumes fit under each node's per-driver attach limit."""

    name = "NodeVolumeLimits"

    def __init__(self) -> None:
        # slot -> (node version, store version, what is attached there)
        self._attached: dict[int, tuple[int, int, Attached]] = {}
        self._by_node: dict[str, dict[str, str]] = {}
        self._by_node_version = -1

    def _attachments(self, store: VolumeStore, node: str) -> dict[str, str]:
        """The node's VolumeAttachments of CSI persistent volumes: ``attacher/handle`` ->
        attacher (indexed by node once per store version)."""
        if self._by_node_version != store.version:
            self._by_node = {}
            for va in store.attachments.values():
                vol = store.volumes.get(va.volume) if va.attacher and va.volume else None
                if vol is not None and vol.csi_driver:
                    seen = self._by_node.setdefault(va.node, {})
                    seen[f"{va.attacher}/{vol.csi_handle}"] = va.attacher
            self._by_node_version = store.version
        return self._by_node.get(node, {})

    def _attached_on(self, cluster: ClusterState, slot: int, on: frozenset[str]) -> Attached:
        store = cluster.volumes
        version = int(cluster.node_version[slot])
        hit = self._attached.get(slot)
        if hit is not None and hit[0] == version and hit[1] == store.version:
            return hit[2]
        attached: dict[str, str] = {}
        error = ""
        for other in cluster.node_pods[slot].values():
            if other.claims or other.disks:
                attached.update(csi_volumes(other, store, on))
            error = error or (other.inline_errors[0] if other.inline_errors else "")
        others: dict[str, int] = {}
        for unique, driver in self._attachments(store, cluster.node(slot).name).items():
            if unique not in attached:
                others[driver] = others.get(driver, 0) + 1
        found = (attached, others, error)
        self._attached[slot] = (version, store.version, found)
        return found

    def skips(self, pod: PodInfo, cluster: ClusterState) -> bool:
        """A pod without volume claims, disks and inline volumes in error."""
        return not pod.claims and not pod.disks and not pod.inline_errors

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Only nodes with a CSINode are looked at; raises :class:`AttemptError` where
        kube-scheduler's filter fails the attempt (see the module)."""
        if self.skips(pod, cluster):
            return FilterResult(all_nodes(cluster.size))
        ok = np.ones(cluster.size, dtype=bool)
        store = cluster.volumes
        feasible = cycle.data.get("candidates") if cycle is not None else None
        if pod.inline_errors and any(
            slot is not None and (feasible is None or feasible[slot])
            for slot in map(cluster.node_index.get, store.csi_nodes)
        ):
            raise AttemptError(self.name, pod.inline_errors[0])
        # The migrated plugins differ between nodes only by their CSINode's annotation.
        variants = {on: csi_volumes(pod, store, on) for on in VARIANTS}
        drivers = {on: set(new.values()) for on, new in variants.items()}
        if not any(drivers.values()):
            return FilterResult(ok)
        for node_name, info in store.csi_nodes.items():
            on = migrated(info)
            new = variants[on]
            slot = cluster.node_index.get(node_name)
            if not new or not info.limits or slot is None or pod.uid in cluster.node_pods[slot]:
                continue
            attached, others, error = self._attached_on(cluster, slot, on)
            if error and (feasible is None or feasible[slot]):
                raise AttemptError(self.name, error)
            limits = [(d, c) for d, c in info.limits if d in drivers[on]]
            for driver, limit in limits:
                have = sum(1 for d in attached.values() if d == driver) + others.get(driver, 0)
                extra = sum(1 for u, d in new.items() if d == driver and u not in attached)
                if extra and have + extra > limit:
                    ok[slot] = False
                    break
        return FilterResult(ok, {MAX_VOLUME_COUNT: ~ok})
