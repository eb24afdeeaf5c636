"""Storage capacity: where a CSI driver can still provision a volume of a given size.

kube-scheduler 1.34's VolumeBinding checks this for every claim it would provision on a node
(an unbound claim of a ``WaitForFirstConsumer`` class that no existing volume matches), after
the class's provisioner and allowed topologies passed:

* only if the claim requests storage and the provisioner names a CSIDriver object with
  ``spec.storageCapacity: true``; otherwise (no such driver, the field false or unset, not a
  CSI provisioner at all) provisioning is not limited by capacity;
* then some CSIStorageCapacity object (in any namespace) of the claim's class must have a
  ``nodeTopology`` selecting the node's labels (no ``nodeTopology``: no node) and a
  ``maximumVolumeSize`` (if set, else ``capacity``; neither set: no room) of at least the
  requested bytes. Without such an object the node fails with "node(s) did not have enough
  free storage".

Like kube-scheduler, the capacity is not reduced by the volumes assumed for pods placed
earlier in the same cycle (or not yet provisioned): the driver publishes new objects once it
has created them, and until then several claims may be sent to the same pool.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.plugins._labels import requirement_mask
from fairgpu.engine.plugins._volume_catalog import GENERAL, HOSTNAME, NOWHERE, host_slots
from fairgpu.model.selectors import LabelSelector, Requirement
from fairgpu.model.volumes import ClaimInfo, ClassInfo

NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"


def selector_mask(cluster: ClusterState, selector: LabelSelector | None) -> np.ndarray:
    """Node slots whose labels ``selector`` selects (None: none; empty: all)."""
    if selector is None:
        return np.zeros(cluster.size, dtype=bool)
    mask = np.ones(cluster.size, dtype=bool)
    for key, value in selector.match_labels:
        mask &= requirement_mask(cluster, Requirement(key, "In", (value,)))
    for req in selector.expressions:
        mask &= requirement_mask(cluster, req)
    return mask


class StorageCapacity:
    """Per (class, requested bytes), the nodes with room; cached until the nodes, the
    CSIDrivers or the CSIStorageCapacities change."""

    def __init__(self) -> None:
        self._versions = (-1, -1)
        self._masks: dict[tuple[str, int], np.ndarray] = {}
        self._hosts: dict[str, int] | None = None

    def checked(self, cluster: ClusterState, sc: ClassInfo, claim: ClaimInfo) -> bool:
        """Whether provisioning ``claim`` with ``sc`` is limited by published capacity."""
        if not claim.storage_requested:
            return False
        driver = cluster.volumes.csi_drivers.get(sc.provisioner)
        return driver is not None and driver.storage_capacity

    def room(self, cluster: ClusterState, sc: ClassInfo, claim: ClaimInfo) -> np.ndarray | None:
        """Nodes where ``sc``'s driver has room for ``claim``; None: no capacity check."""
        if not self.checked(cluster, sc, claim):
            return None
        store = cluster.volumes
        versions = (cluster.static_version, store.capacity_version)
        if versions != self._versions or len(self._masks) > 1024:
            self._masks.clear()
            self._hosts = None
            self._versions = versions
        key = (sc.name, claim.request)
        mask = self._masks.get(key)
        if mask is None:
            mask = np.zeros(cluster.size, dtype=bool)
            for cap in store.capacities.values():
                if (
                    cap.storage_class == sc.name
                    and cap.limit is not None
                    and cap.limit >= claim.request
                ):
                    self._add(cluster, mask, cap.topology)
            self._masks[key] = mask
        return mask

    def _add(self, cluster: ClusterState, mask: np.ndarray, topology: LabelSelector | None) -> None:
        """Mark the nodes ``topology`` selects. Drivers of node-local storage publish one
        object per node, selecting its hostname: that costs one slot, not a node mask."""
        if topology is not None and not topology.expressions and len(topology.match_labels) == 1:
            label, value = topology.match_labels[0]
            if label == HOSTNAME:
                if self._hosts is None:
                    self._hosts = host_slots(cluster)
                slot = self._hosts.get(value, NOWHERE)
                if slot >= 0:
                    mask[slot] = True
                if slot != GENERAL:
                    return
        mask |= selector_mask(cluster, topology)
