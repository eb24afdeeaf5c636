"""VolumeBinding: the pod's PersistentVolumeClaims must be usable from the node.

kube-scheduler 1.34's rules:

* a bound claim: its PersistentVolume must exist and its ``nodeAffinity`` must match the node;
* an unbound claim of a ``WaitForFirstConsumer`` class: on the node, either an available volume
  of the class matches it (capacity, access modes, volume mode, selector, node affinity; the
  smallest wins, a volume pre-bound to the claim first) or the class can provision there (a
  provisioner other than ``kubernetes.io/no-provisioner`` and ``allowedTopologies`` matching
  the node's labels); several claims of one pod never share a volume;
* an unbound claim of an ``Immediate`` class (or no class) waits for the PV controller: the pod
  is unschedulable until it is bound.

Volumes chosen for placed pods whose claims are not bound yet count as taken (the assume
cache); the chosen volumes are recorded in the store for the adapters' pre-bind step.
Vectorised: one node mask per candidate volume, the first fitting volume per node by argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.cluster.volumes import ClaimChoices, VolumeStore
from fairgpu.engine.framework import (
    SUCCESS,
    CycleState,
    FilterPlugin,
    FilterResult,
    PreFilterPlugin,
    Status,
)
from fairgpu.engine.plugins._labels import requirement_mask, term_mask
from fairgpu.engine.plugins.volume_restrictions import claim_not_found
from fairgpu.model.pod import PodInfo
from fairgpu.model.selectors import Requirement
from fairgpu.model.volumes import NO_PROVISIONER, PHASE_AVAILABLE, ClaimInfo, ClassInfo, VolumeInfo

BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
# kube-scheduler 1.34's words for a bound volume whose node affinity excludes the node (older
# releases said "node(s) had volume node affinity conflict").
NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
_STATE = "VolumeBinding"


@dataclass(slots=True)
class PodClaims:
    """A pod's claims split as kube-scheduler does: bound (with their volume, None if it does
    not exist) and unbound WaitForFirstConsumer ones (with their class)."""

    bound: list[tuple[ClaimInfo, VolumeInfo | None]]
    delayed: list[tuple[ClaimInfo, ClassInfo]]


def classify(pod: PodInfo, store: VolumeStore) -> PodClaims | Status:
    """Split the pod's claims, or the status that rejects the pod outright."""
    out = PodClaims([], [])
    immediate = False
    for name in pod.claims:
        claim = store.claim(pod.namespace, name)
        if claim is None:
            return Status.unresolvable(_STATE, claim_not_found(name))
        if claim.deleting:
            return Status.unresolvable(_STATE, f'persistentvolumeclaim "{name}" is being deleted')
        if claim.volume_name:
            out.bound.append((claim, store.volumes.get(claim.volume_name)))
            continue
        class_name = store.class_name(claim)
        sc = store.classes.get(class_name) if class_name else None
        if class_name and sc is None:
            return Status.unschedulable(
                _STATE, f'storageclass.storage.k8s.io "{class_name}" not found'
            )
        if sc is not None and sc.wait_for_first_consumer:
            out.delayed.append((claim, sc))
        else:
            immediate = True
    if immediate:
        return Status.unresolvable(_STATE, UNBOUND_IMMEDIATE)
    return out


def _available(claim: ClaimInfo, vol: VolumeInfo, class_name: str, taken: dict[str, str]) -> bool:
    """May ``vol`` bind ``claim`` (before node affinity)? kube-scheduler's FindMatchingVolume."""
    if vol.deleting or vol.capacity < claim.request or vol.volume_mode != claim.volume_mode:
        return False
    if vol.bound_to(claim):
        return True
    if vol.claim or vol.phase != PHASE_AVAILABLE or vol.storage_class != class_name:
        return False
    if taken.get(vol.name, claim.key) != claim.key:
        return False
    if claim.selector is not None and not claim.selector.matches(dict(vol.labels)):
        return False
    return claim.access_modes <= vol.access_modes


class VolumeBinding(PreFilterPlugin, FilterPlugin):
    """PreFilter: claims exist, none waits for immediate binding. Filter: see the module."""

    name = "VolumeBinding"

    def __init__(self) -> None:
        self._masks: dict[object, np.ndarray] = {}
        self._version = -1

    def _cached(self, cluster: ClusterState, key: object) -> np.ndarray | None:
        if self._version != cluster.static_version or len(self._masks) > 4096:
            self._masks.clear()
            self._version = cluster.static_version
        return self._masks.get(key)

    def volume_mask(self, cluster: ClusterState, vol: VolumeInfo) -> np.ndarray:
        """Nodes ``vol``'s node affinity admits (label-only: cached per node version)."""
        if vol.node_terms is None:
            return np.ones(cluster.size, dtype=bool)
        mask = self._cached(cluster, vol.node_terms)
        if mask is None:
            mask = np.zeros(cluster.size, dtype=bool)
            for term in vol.node_terms:
                mask |= term_mask(cluster, term)
            self._masks[vol.node_terms] = mask
        return mask

    def provision_mask(self, cluster: ClusterState, sc: ClassInfo) -> np.ndarray:
        """Nodes where ``sc`` can provision a volume."""
        if not sc.provisioner or sc.provisioner == NO_PROVISIONER:
            return np.zeros(cluster.size, dtype=bool)
        if not sc.allowed_topologies:
            return np.ones(cluster.size, dtype=bool)
        key = ("class", sc.allowed_topologies)
        mask = self._cached(cluster, key)
        if mask is None:
            mask = np.zeros(cluster.size, dtype=bool)
            for term in sc.allowed_topologies:
                hit = np.ones(cluster.size, dtype=bool)
                for label, values in term:
                    hit &= requirement_mask(cluster, Requirement(label, "In", tuple(values)))
                mask |= hit
            self._masks[key] = mask
        return mask

    def pre_filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> Status:
        """Classify the claims once per attempt; reject missing or immediate unbound ones."""
        if not pod.claims:
            return SUCCESS
        found = classify(pod, cluster.volumes)
        if isinstance(found, Status):
            return found
        cycle.data[_STATE] = found
        return SUCCESS

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Bound claims' node affinity, then a volume (or provisioning) per unbound claim."""
        n = cluster.size
        ok = np.ones(n, dtype=bool)
        if not pod.claims:
            return FilterResult(ok)
        found = cycle.data.get(_STATE) or classify(pod, cluster.volumes)
        if isinstance(found, Status):
            return FilterResult(np.zeros(n, dtype=bool), {found.reasons[0]: np.ones(n, bool)})
        reasons: dict[str, np.ndarray] = {}
        affinity = np.ones(n, dtype=bool)
        for _claim, vol in found.bound:
            if vol is None:
                reasons[PV_NOT_EXIST] = np.ones(n, dtype=bool)
                ok[:] = False
            else:
                affinity &= self.volume_mask(cluster, vol)
        if not affinity.all():
            reasons[NODE_CONFLICT] = ~affinity
            ok &= affinity
        if found.delayed:
            fits = self._choose(pod, found.delayed, cluster)
            if not fits.all():
                reasons[BIND_CONFLICT] = ~fits
            ok &= fits
        return FilterResult(ok, reasons)

    def _choose(
        self, pod: PodInfo, delayed: list[tuple[ClaimInfo, ClassInfo]], cluster: ClusterState
    ) -> np.ndarray:
        """Per node: can every unbound claim get a volume or be provisioned? Records the
        volume chosen per claim and node in the store."""
        store = cluster.volumes
        n = cluster.size
        taken = store.taken(cluster)
        fits = np.ones(n, dtype=bool)
        used: dict[str, np.ndarray] = {}  # volume -> nodes where an earlier claim took it
        keys, all_cands, choices = [], [], []
        for claim, sc in sorted(delayed, key=lambda d: (d[0].request, d[0].name)):
            cands = [
                v for v in store.volumes_of_class(sc.name) if _available(claim, v, sc.name, taken)
            ]
            prebound = [v for v in cands if v.bound_to(claim)]
            cands = prebound[:1] or sorted(cands, key=lambda v: (v.capacity, v.name))
            choice = np.full(n, -1, dtype=np.int32)
            if cands:
                masks = np.stack([self.volume_mask(cluster, v) for v in cands])
                for i, vol in enumerate(cands):
                    if vol.name in used:
                        masks[i] &= ~used[vol.name]
                has = masks.any(axis=0)
                choice = np.where(has, masks.argmax(axis=0), -1).astype(np.int32)
                for i in np.unique(choice[has]):
                    name = cands[int(i)].name
                    used[name] = used.get(name, np.zeros(n, dtype=bool)) | (choice == i)
            fits &= (choice >= 0) | self.provision_mask(cluster, sc)
            keys.append(claim.key)
            all_cands.append(tuple(v.name for v in cands))
            choices.append(choice)
        store.choices[pod.uid] = ClaimChoices(tuple(keys), tuple(all_cands), tuple(choices))
        return fits
