"""VolumeBinding: the pod's PersistentVolumeClaims must be usable from the node.

kube-scheduler 1.34's rules:

* a bound claim: its PersistentVolume must exist and its ``nodeAffinity`` must match the node
  (for an in-tree GCE, EBS, Azure disk, Cinder or Portworx volume on a node where its plugin is
  migrated, as translated for the CSI driver: see ``_csi_migration``);
* an unbound claim of a ``WaitForFirstConsumer`` class: on the node, either an available volume
  of the class matches it (capacity, access modes, volume mode, selector, node affinity; the
  smallest wins, a volume pre-bound to the claim first) or the class can provision there (a
  provisioner other than ``kubernetes.io/no-provisioner``, ``allowedTopologies`` matching
  the node's labels, and room in a CSIStorageCapacity if the driver publishes them: see
  ``_storage_capacity``); several claims of one pod never share a volume; the first claim
  (smallest first) that cannot be provisioned on a node gives that node's reason; a claim
  annotated ``volume.kubernetes.io/selected-node`` (provisioning already asked for) matches no
  volume and is provisioned on that node or nowhere;
* an unbound claim of an ``Immediate`` class (or no class) waits for the PV controller: the pod
  is unschedulable until it is bound.

Volumes chosen for placed pods whose claims are not bound yet count as taken (the assume
cache); the chosen volumes are recorded in the store for the adapters' pre-bind step.
Vectorised: the free volumes of a class are a sorted catalog of arrays; a volume pinned to one
node (local disks) costs no node mask at all (see ``_volume_catalog``).
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
from fairgpu.engine.plugins._csi_migration import translated_affinity
from fairgpu.engine.plugins._labels import requirement_mask, term_mask
from fairgpu.engine.plugins._storage_capacity import NOT_ENOUGH_SPACE, StorageCapacity
from fairgpu.engine.plugins._volume_catalog import (
    EVERYWHERE,
    GENERAL,
    Catalog,
    Row,
    all_nodes,
    build_catalog,
)
from fairgpu.engine.plugins.volume_restrictions import claim_not_found
from fairgpu.model.pod import PodInfo
from fairgpu.model.selectors import NodeSelectorTerm, Requirement
from fairgpu.model.volumes import (
    NO_PROVISIONER,
    ClaimInfo,
    ClassInfo,
    VolumeInfo,
    ephemeral_claims,
)

BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
# kube-scheduler 1.34's words for a bound volume whose node affinity excludes the node (older
# releases said "node(s) had volume node affinity conflict").
NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
EPHEMERAL_MISSING = (
    'waiting for ephemeral volume controller to create the persistentvolumeclaim "{}"'
)
_STATE = "VolumeBinding"


@dataclass(slots=True)
class PodClaims:
    """A pod's claims split as kube-scheduler does: bound (with their volume, None if it does
    not exist) and unbound WaitForFirstConsumer ones (with their class)."""

    bound: list[tuple[ClaimInfo, VolumeInfo | None]]
    delayed: list[tuple[ClaimInfo, ClassInfo]]


def claim_problem(pod: PodInfo, store: VolumeStore) -> Status | None:
    """kube-scheduler's first look at every claim of the pod, in order: it exists, its volume
    is not lost, it is not being deleted, and a generic ephemeral volume's claim belongs to
    the pod (checked only for pods with a uid: the simulator's YAML pods may have none)."""
    ephemeral = ephemeral_claims(pod.source) if pod.source is not None else frozenset()
    uid = pod.source.metadata.uid if pod.source is not None else ""
    for name in pod.claims:
        claim = store.claim(pod.namespace, name)
        if claim is None:
            if name in ephemeral:
                return Status.unresolvable(_STATE, EPHEMERAL_MISSING.format(name))
            return Status.unresolvable(_STATE, claim_not_found(name))
        if claim.lost:
            return Status.unresolvable(
                _STATE,
                f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume '
                f'"{claim.volume_name}"',
            )
        if claim.deleting:
            return Status.unresolvable(_STATE, f'persistentvolumeclaim "{name}" is being deleted')
        if name in ephemeral and uid and claim.controller_uid != uid:
            return Status.unresolvable(
                _STATE,
                f"PVC {pod.namespace}/{name} was not created for pod "
                f"{pod.namespace}/{pod.name} (pod is not owner)",
            )
    return None


def classify(pod: PodInfo, store: VolumeStore) -> PodClaims | Status:
    """Split the pod's claims, or the status that rejects the pod outright."""
    problem = claim_problem(pod, store)
    if problem is not None:
        return problem
    out = PodClaims([], [])
    immediate = False
    for name in pod.claims:
        claim = store.claims[f"{pod.namespace}/{name}"]
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


class VolumeBinding(PreFilterPlugin, FilterPlugin):
    """PreFilter: claims exist, none waits for immediate binding. Filter: see the module."""

    name = "VolumeBinding"

    def __init__(self) -> None:
        self._masks: dict[object, np.ndarray] = {}
        self._version = -1
        self._catalogs: dict[str, tuple[int, Catalog]] = {}
        self._rows: dict[int, tuple[VolumeInfo, Row]] = {}
        self._rows_version = -1
        self._prebound: dict[str, list[VolumeInfo]] = {}
        self._prebound_version = -1
        self._capacity = StorageCapacity()
        self._listed: dict[str, np.ndarray] = {}
        self._listed_versions = (-1, -1)

    def _cached(self, cluster: ClusterState, key: object) -> np.ndarray | None:
        if self._version != cluster.static_version or len(self._masks) > 4096:
            self._masks.clear()
            self._version = cluster.static_version
        return self._masks.get(key)

    def volume_mask(self, cluster: ClusterState, vol: VolumeInfo) -> np.ndarray:
        """Nodes ``vol``'s node affinity admits (label-only: cached per node version)."""
        return self._terms_mask(cluster, vol.node_terms)

    def _terms_mask(
        self, cluster: ClusterState, terms: tuple[NodeSelectorTerm, ...] | None
    ) -> np.ndarray:
        if terms is None:
            return np.ones(cluster.size, dtype=bool)
        mask = self._cached(cluster, terms)
        if mask is None:
            mask = np.zeros(cluster.size, dtype=bool)
            for term in terms:
                mask |= term_mask(cluster, term)
            self._masks[terms] = mask
        return mask

    def bound_mask(self, cluster: ClusterState, vol: VolumeInfo) -> np.ndarray:
        """Nodes where bound volume ``vol`` is usable: its node affinity, translated for its
        CSI driver on nodes whose CSINode lists its in-tree plugin as migrated."""
        mask = self.volume_mask(cluster, vol)
        if not vol.in_tree:
            return mask
        listed = self._migrated_nodes(cluster, vol.in_tree[0])
        if not listed.any():
            return mask
        try:
            translated = self._terms_mask(cluster, translated_affinity(vol))
        except ValueError:
            # kube-scheduler fails the attempt with an error there; no node of them fits.
            translated = np.zeros(cluster.size, dtype=bool)
        return np.where(listed, translated, mask)

    def _migrated_nodes(self, cluster: ClusterState, plugin: str) -> np.ndarray:
        """Nodes whose CSINode's migrated-plugins annotation lists ``plugin``."""
        store = cluster.volumes
        versions = (cluster.static_version, store.version)
        if self._listed_versions != versions:
            self._listed.clear()
            self._listed_versions = versions
        mask = self._listed.get(plugin)
        if mask is None:
            mask = np.zeros(cluster.size, dtype=bool)
            for name, info in store.csi_nodes.items():
                slot = cluster.node_index.get(name)
                if slot is not None and plugin in info.migrated:
                    mask[slot] = True
            self._listed[plugin] = mask
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

    def skips(self, pod: PodInfo, cluster: ClusterState) -> bool:
        """A pod without volume claims."""
        return not pod.claims

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Bound claims' node affinity, then a volume (or provisioning) per unbound claim."""
        if self.skips(pod, cluster):
            return FilterResult(all_nodes(cluster.size))
        n = cluster.size
        ok = np.ones(n, dtype=bool)
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
                affinity &= self.bound_mask(cluster, vol)
        if not affinity.all():
            reasons[NODE_CONFLICT] = ~affinity
            ok &= affinity
        if found.delayed:
            conflict, short = self._choose(pod, found.delayed, cluster)
            if conflict.any():
                reasons[BIND_CONFLICT] = conflict
            if short.any():
                reasons[NOT_ENOUGH_SPACE] = short
            ok &= ~(conflict | short)
        return FilterResult(ok, reasons)

    def _catalog(self, cluster: ClusterState, class_name: str) -> Catalog:
        """The class's catalog, rebuilt only after its volumes (or the nodes) changed."""
        store = cluster.volumes
        if (
            self._rows_version != cluster.static_version
            or len(self._rows) > 4 * len(store.volumes) + 1024
        ):
            self._rows.clear()  # slots follow node slots; drop rows of forgotten volumes
            self._catalogs.clear()
            self._rows_version = cluster.static_version
        if self._prebound_version != store.volume_version:
            self._prebound.clear()
            for vol in store.volumes.values():
                if vol.claim:
                    self._prebound.setdefault(vol.claim, []).append(vol)
            self._prebound_version = store.volume_version
        version = store.class_version(class_name)
        hit = self._catalogs.get(class_name)
        if hit is None or hit[0] != version:
            vols = [v for v in store.volumes.values() if v.storage_class == class_name]
            hit = self._catalogs[class_name] = (
                version,
                build_catalog(cluster, vols, self._rows),
            )
        return hit[1]

    def _prebound_choice(
        self, cluster: ClusterState, claim: ClaimInfo
    ) -> tuple[tuple[str, ...], np.ndarray] | None:
        """A volume whose claimRef already names the claim decides alone (kube-scheduler's
        FindMatchingVolume): usable where its node affinity allows, nowhere else."""
        vols = sorted(
            (
                v
                for v in self._prebound.get(claim.key, ())
                if v.bound_to(claim)
                and not v.deleting
                and v.capacity >= claim.request
                and v.volume_mode == claim.volume_mode
            ),
            key=lambda v: v.name,
        )
        if not vols:
            return None
        mask = self.volume_mask(cluster, vols[0])
        return (vols[0].name,), np.where(mask, 0, -1)

    def _first_fit(
        self,
        cluster: ClusterState,
        cat: Catalog,
        fit: np.ndarray,
        used: dict[str, np.ndarray],
    ) -> np.ndarray:
        """Per node slot, the index of the smallest fitting volume usable there (-1: none)."""
        n = cluster.size
        choice = np.full(n, -1, dtype=np.int64)
        pinned = np.flatnonzero(fit & (cat.slot >= 0))
        if pinned.size:
            # Sorted smallest first: a slot's first pinned volume is its smallest.
            slots, first = np.unique(cat.slot[pinned], return_index=True)
            choice[slots] = pinned[first]
        remaining = np.ones(n, dtype=bool)
        for i in np.flatnonzero(fit & ((cat.slot == EVERYWHERE) | (cat.slot == GENERAL))):
            vol = cat.vols[int(i)]
            mask = remaining if cat.slot[i] == EVERYWHERE else self.volume_mask(cluster, vol)
            mask = mask & remaining
            if vol.name in used:
                mask &= ~used[vol.name]
            choice[mask & ((choice < 0) | (choice > i))] = i
            remaining &= ~mask
            if not remaining.any():
                break
        return choice

    def _match(
        self, cluster: ClusterState, ordered: list[tuple[ClaimInfo, ClassInfo]]
    ) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """Per claim (smallest first), its candidate volumes and the one chosen per node slot
        (-1: none); several claims never get one volume."""
        taken = cluster.volumes.taken(cluster)
        used: dict[str, np.ndarray] = {}  # volume -> nodes where an earlier claim took it
        out = []
        for k, (claim, sc) in enumerate(ordered):
            cat = self._catalog(cluster, sc.name)
            found = self._prebound_choice(cluster, claim)
            if found is not None:
                names, choice = found
            else:
                fit = cat.fitting(claim, taken)
                for name, where in used.items():
                    i = cat.index.get(name)
                    if i is not None and cat.slot[i] >= 0 and where[cat.slot[i]]:
                        fit[i] = False  # a pinned volume taken at its only node
                names, choice = cat.names, self._first_fit(cluster, cat, fit, used)
            if k + 1 < len(ordered):
                for i in np.unique(choice[choice >= 0]):
                    name = names[int(i)]
                    used[name] = used.get(name, np.zeros(cluster.size, bool)) | (choice == i)
            out.append((names, choice))
        return out

    def _choose(
        self, pod: PodInfo, delayed: list[tuple[ClaimInfo, ClassInfo]], cluster: ClusterState
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per node: can every unbound claim get a volume or be provisioned? The nodes where
        one cannot (no volume and no provisioning there, or provisioning already sent
        elsewhere; or no storage capacity left), as kube-scheduler tells them apart. Records
        the volume chosen per claim and node in the store."""
        store = cluster.volumes
        n = cluster.size
        # A claim whose node was selected already (the annotation PreBind writes) is
        # provisioned there or nowhere: kube-scheduler matches no volume for it and rejects
        # every other node before looking at the other claims.
        selected = [d for d in delayed if d[0].selected_node]
        rest = [d for d in delayed if not d[0].selected_node]
        rest.sort(key=lambda d: (d[0].request, d[0].name))
        conflict = np.zeros(n, dtype=bool)
        for claim, _ in selected:
            there = cluster.node_index.get(claim.selected_node)
            conflict |= np.arange(n) != (-1 if there is None else there)
        unmatched = np.full(n, -1, dtype=np.int64)
        picks = [((), unmatched) for _ in selected] + self._match(cluster, rest)
        short = np.zeros(n, dtype=bool)
        for (claim, sc), (_, choice) in zip(selected + rest, picks, strict=True):
            # Provisioned here: the first claim that cannot be decides the node's reason.
            need = (choice < 0) & ~(conflict | short)
            can = self.provision_mask(cluster, sc)
            conflict |= need & ~can
            room = self._capacity.room(cluster, sc, claim)
            if room is not None:
                short |= need & can & ~room
        if len(store.choices) > 4096:
            # Only placed pods' choices are ever read again; the others are recomputed at
            # their next attempt (this bounds what deleted pods leave behind).
            for uid in [u for u in store.choices if u not in cluster.placements]:
                del store.choices[uid]
        store.choices[pod.uid] = ClaimChoices(
            tuple(c.key for c, _ in selected + rest),
            tuple(names for names, _ in picks),
            tuple(choice for _, choice in picks),
        )
        return conflict, short
