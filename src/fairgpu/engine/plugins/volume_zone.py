"""VolumeZone: a bound volume labelled with a zone or region is used only from nodes there.

kube-scheduler 1.34's rule: the PersistentVolume's ``topology.kubernetes.io/{zone,region}``
labels (or their ``failure-domain.beta.kubernetes.io`` forms; a value may list several zones
joined by ``__``) must each match the node's label of the same key (a node without the beta
key is checked against the GA key). A node with none of these labels passes. Unbound claims
are VolumeBinding's business.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState, FilterPlugin, FilterResult
from fairgpu.engine.plugins._labels import requirement_mask
from fairgpu.engine.plugins._volume_catalog import all_nodes
from fairgpu.model.pod import PodInfo
from fairgpu.model.selectors import Requirement

ZONE_CONFLICT = "node(s) had no available volume zone"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
TOPOLOGY_KEYS = (ZONE, REGION, BETA_ZONE, BETA_REGION)
_TO_GA = {BETA_ZONE: ZONE, BETA_REGION: REGION}


def volume_topologies(labels: tuple[tuple[str, str], ...]) -> list[tuple[str, tuple[str, ...]]]:
    """The zone/region constraints of a volume: (label key, allowed values)."""
    out = []
    for key, value in labels:
        if key in TOPOLOGY_KEYS:
            values = tuple(sorted({v.strip() for v in value.split("__") if v.strip()}))
            out.append((key, values))
    return out


class VolumeZone(FilterPlugin):
    """Filter: nodes in the zones and regions of the pod's bound volumes."""

    name = "VolumeZone"

    def skips(self, pod: PodInfo, cluster: ClusterState) -> bool:
        """A pod without volume claims."""
        return not pod.claims

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Skips all work for pods without claims or whose volumes carry no zone labels."""
        if self.skips(pod, cluster):
            return FilterResult(all_nodes(cluster.size))
        n = cluster.size
        ok = np.ones(n, dtype=bool)
        store = cluster.volumes
        constraints = []
        for name in pod.claims:
            claim = store.claim(pod.namespace, name)
            vol = store.volumes.get(claim.volume_name) if claim and claim.volume_name else None
            if vol is not None:
                constraints.extend(volume_topologies(vol.labels))
        if not constraints:
            return FilterResult(ok)
        constrained = np.zeros(n, dtype=bool)
        for key in TOPOLOGY_KEYS:
            constrained |= cluster.label_codes(key)[0] >= 0
        for key, values in constraints:
            present = cluster.label_codes(key)[0] >= 0
            match = requirement_mask(cluster, Requirement(key, "In", values))
            ga = _TO_GA.get(key)
            if ga is not None:
                match |= ~present & requirement_mask(cluster, Requirement(ga, "In", values))
            ok &= match
        ok |= ~constrained
        return FilterResult(ok, {ZONE_CONFLICT: ~ok})
