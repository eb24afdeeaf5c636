"""VolumeStore: the claims, volumes, storage classes, CSI nodes, CSI drivers, storage
capacities and volume attachments the volume plugins read.

The store is part of the engine's input, next to the :class:`ClusterState` (as its
``volumes`` attribute); the adapters fill it (the simulator from YAML, the live scheduler from
watches) and the engine only reads it, except for one thing: like kube-scheduler's assume
cache, the VolumeBinding filter records which volume each unbound claim would get on each
feasible node (:class:`ClaimChoices`). Once the pod is placed, that choice *is* the binding
decision: later pods see the volume as taken, the simulator applies it and the live scheduler
writes it to the API before binding the pod. A choice of a pod that is not (or no longer)
placed is ignored, so discarded gangs and failed binds need no cleanup here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from fairgpu.model.selectors import NodeSelectorTerm, Requirement
from fairgpu.model.volumes import (
    NO_PROVISIONER,
    PHASE_AVAILABLE,
    AttachmentInfo,
    CapacityInfo,
    ClaimInfo,
    ClassInfo,
    CSIDriverInfo,
    CSINodeInfo,
    StorageObject,
    VolumeInfo,
)

if TYPE_CHECKING:
    from fairgpu.cluster.state import ClusterState


@dataclass(slots=True)
class ClaimChoices:
    """For each unbound WaitForFirstConsumer claim of one pod, the volume it would bind to on
    every node slot: ``choice[j][slot]`` indexes ``candidates[j]`` (-1: provision a new
    volume there, or nothing fits, which the filter already rejected)."""

    claims: tuple[str, ...]
    candidates: tuple[tuple[str, ...], ...]
    choice: tuple[np.ndarray, ...]


@dataclass(frozen=True, slots=True)
class VolumeDecision:
    """What binding the pod to ``node`` means for its unbound claims: claim key -> volume
    name to bind, and the claims to provision on that node (selected-node annotation)."""

    node: str
    bind: tuple[tuple[str, str], ...] = ()
    provision: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.bind or self.provision)


@dataclass(slots=True)
class VolumeStore:
    """Storage objects by key, plus the per-pod volume choices of the current decisions.

    ``version`` grows on every change, so plugins can cache derived data;
    ``capacity_version`` only on changes of CSIDrivers and CSIStorageCapacities.
    """

    claims: dict[str, ClaimInfo] = field(default_factory=dict)
    volumes: dict[str, VolumeInfo] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    csi_nodes: dict[str, CSINodeInfo] = field(default_factory=dict)
    csi_drivers: dict[str, CSIDriverInfo] = field(default_factory=dict)
    capacities: dict[str, CapacityInfo] = field(default_factory=dict)  # by namespace/name
    attachments: dict[str, AttachmentInfo] = field(default_factory=dict)
    choices: dict[str, ClaimChoices] = field(default_factory=dict)
    version: int = 0
    capacity_version: int = 0
    # Changes of PersistentVolumes only: all of them, and per StorageClass name.
    volume_version: int = 0
    class_versions: dict[str, int] = field(default_factory=dict)

    # ---- updates (adapters) ------------------------------------------------------------
    def set_claim(self, claim: ClaimInfo) -> None:
        """Add or replace a claim."""
        self.claims[claim.key] = claim
        self.version += 1

    def set_volume(self, volume: VolumeInfo) -> None:
        """Add or replace a PersistentVolume."""
        old = self.volumes.get(volume.name)
        self.volumes[volume.name] = volume
        self.version += 1
        self._volume_changed(old)
        self._volume_changed(volume)

    def _volume_changed(self, volume: VolumeInfo | None) -> None:
        if volume is not None:
            self.volume_version += 1
            name = volume.storage_class
            self.class_versions[name] = self.class_versions.get(name, 0) + 1

    def class_version(self, name: str) -> int:
        """How often the volumes of StorageClass ``name`` changed (grows only)."""
        return self.class_versions.get(name, 0)

    def set_class(self, sc: ClassInfo) -> None:
        """Add or replace a StorageClass."""
        self.classes[sc.name] = sc
        self.version += 1

    def set_csi_node(self, node: CSINodeInfo) -> None:
        """Add or replace a CSINode."""
        self.csi_nodes[node.name] = node
        self.version += 1

    def set_csi_driver(self, driver: CSIDriverInfo) -> None:
        """Add or replace a CSIDriver."""
        self.csi_drivers[driver.name] = driver
        self.version += 1
        self.capacity_version += 1

    def set_capacity(self, capacity: CapacityInfo) -> None:
        """Add or replace a CSIStorageCapacity."""
        self.capacities[capacity.key] = capacity
        self.version += 1
        self.capacity_version += 1

    def set_attachment(self, attachment: AttachmentInfo) -> None:
        """Add or replace a VolumeAttachment."""
        self.attachments[attachment.name] = attachment
        self.version += 1

    def add(self, obj: StorageObject) -> None:
        """Add or replace any decoded storage object."""
        if isinstance(obj, ClaimInfo):
            self.set_claim(obj)
        elif isinstance(obj, VolumeInfo):
            self.set_volume(obj)
        elif isinstance(obj, ClassInfo):
            self.set_class(obj)
        elif isinstance(obj, CSIDriverInfo):
            self.set_csi_driver(obj)
        elif isinstance(obj, CapacityInfo):
            self.set_capacity(obj)
        elif isinstance(obj, AttachmentInfo):
            self.set_attachment(obj)
        else:
            self.set_csi_node(obj)

    def table(self, kind: str) -> dict[str, Any]:
        """The objects of ``kind`` (claim, volume, class, csinode, csidriver, capacity or
        attachment) by key."""
        tables: dict[str, dict[str, Any]] = {
            "claim": self.claims,
            "volume": self.volumes,
            "class": self.classes,
            "csinode": self.csi_nodes,
            "csidriver": self.csi_drivers,
            "capacity": self.capacities,
            "attachment": self.attachments,
        }
        return tables[kind]

    def remove(self, kind: str, key: str) -> None:
        """Forget object ``key`` of ``kind`` (see :meth:`table`)."""
        gone = self.table(kind).pop(key, None)
        if gone is not None:
            self._changed(kind)
            if kind == "volume":
                self._volume_changed(gone)

    def clear(self, kind: str) -> None:
        """Forget every object of ``kind`` (before a relist fills it again)."""
        table = self.table(kind)
        if kind == "volume":
            for vol in table.values():
                self._volume_changed(vol)
        table.clear()
        self._changed(kind)

    def _changed(self, kind: str) -> None:
        self.version += 1
        if kind in ("csidriver", "capacity"):
            self.capacity_version += 1

    def prune_bound(self) -> None:
        """Drop the choices of pods whose claims are all bound now (the decision is done)."""
        done = [
            uid
            for uid, pick in self.choices.items()
            if all((c := self.claims.get(k)) is not None and c.volume_name for k in pick.claims)
        ]
        for uid in done:
            del self.choices[uid]

    def forget_pod(self, uid: str) -> None:
        """Drop a pod's recorded volume choices (it was bound or deleted)."""
        self.choices.pop(uid, None)

    # ---- queries (plugins) ---------------------------------------------------------------
    def claim(self, namespace: str, name: str) -> ClaimInfo | None:
        """The claim ``namespace/name``, or None."""
        return self.claims.get(f"{namespace}/{name}")

    def class_of(self, claim: ClaimInfo) -> ClassInfo | None:
        """The claim's StorageClass; an unset class name means the default class, as the
        DefaultStorageClass admission plugin fills it in."""
        name = claim.storage_class
        if name is None:
            return next((c for c in self.classes.values() if c.default), None)
        return self.classes.get(name) if name else None

    def class_name(self, claim: ClaimInfo) -> str:
        """The class name the claim asks for ('' for none)."""
        if claim.storage_class is None:
            sc = self.class_of(claim)
            return sc.name if sc is not None else ""
        return claim.storage_class

    def volumes_of_class(self, name: str) -> Iterator[VolumeInfo]:
        """Volumes of StorageClass ``name`` in name order (a deterministic tie-break)."""
        for key in sorted(self.volumes):
            vol = self.volumes[key]
            if vol.storage_class == name:
                yield vol

    def taken(self, cluster: ClusterState) -> dict[str, str]:
        """Volumes chosen for placed pods whose claims are not bound yet: volume -> claim."""
        out: dict[str, str] = {}
        for uid, pick in self.choices.items():
            placement = cluster.placements.get(uid)
            if placement is None:
                continue
            for claim, cands, choice in zip(pick.claims, pick.candidates, pick.choice, strict=True):
                idx = int(choice[placement.node]) if placement.node < choice.size else -1
                if idx >= 0:
                    out[cands[idx]] = claim
        return out

    def decision(self, uid: str, node: int, node_name: str) -> VolumeDecision:
        """The volume binding decision for pod ``uid`` placed on slot ``node``."""
        pick = self.choices.get(uid)
        if pick is None:
            return VolumeDecision(node_name)
        bind: list[tuple[str, str]] = []
        provision: list[str] = []
        for claim, cands, choice in zip(pick.claims, pick.candidates, pick.choice, strict=True):
            idx = int(choice[node]) if node < choice.size else -1
            if idx >= 0:
                bind.append((claim, cands[idx]))
            else:
                provision.append(claim)
        return VolumeDecision(node_name, tuple(bind), tuple(provision))

    def claims_of(self, namespace: str, names: Iterable[str]) -> list[ClaimInfo | None]:
        """The claims ``names`` of a pod in ``namespace`` (None where missing)."""
        return [self.claims.get(f"{namespace}/{n}") for n in names]


def apply_decision(
    store: VolumeStore, decision: VolumeDecision, node_labels: Mapping[str, str]
) -> list[str]:
    """Do what the PV controller and a provisioner do once the pod is bound (the simulator's
    stand-in): bind each claim to its chosen volume, and provision a volume for each claim to
    provision, limited to the node's values of the class's allowed-topology keys. Returns the
    names of the volumes bound."""
    names = []
    for key, vol_name in decision.bind:
        claim, vol = store.claims.get(key), store.volumes.get(vol_name)
        if claim is None or vol is None:
            continue
        store.set_volume(replace(vol, claim=key, claim_uid=claim.uid, phase="Bound"))
        store.set_claim(replace(claim, volume_name=vol_name))
        names.append(vol_name)
    for key in decision.provision:
        claim = store.claims.get(key)
        if claim is None:
            continue
        sc = store.class_of(claim)
        topology_keys = sorted({k for term in sc.allowed_topologies for k, _ in term}) if sc else []
        terms = None
        if topology_keys:
            reqs = tuple(
                Requirement(k, "In", (node_labels[k],)) for k in topology_keys if k in node_labels
            )
            terms = (NodeSelectorTerm(reqs),)
        name = f"pvc-{claim.uid or key.replace('/', '-')}"
        store.set_volume(
            VolumeInfo(
                name=name,
                capacity=claim.request,
                access_modes=claim.access_modes,
                storage_class=sc.name if sc else "",
                claim=key,
                claim_uid=claim.uid,
                node_terms=terms,
                phase="Bound",
                volume_mode=claim.volume_mode,
            )
        )
        store.set_claim(replace(claim, volume_name=name, selected_node=decision.node))
        names.append(name)
    return names


def settle(store: VolumeStore) -> list[str]:
    """What the PV controller does on its own, for the simulator: a volume without a phase
    becomes ``Available`` (``Bound`` if it names a claim), and each unbound claim of an
    ``Immediate`` class (or of no class) is bound at once to the smallest fitting free volume
    of its class, whatever its node affinity, or else provisioned if the class has a
    provisioner (in the first of its allowed topologies). Returns the claims bound."""
    for vol in list(store.volumes.values()):
        if not vol.phase:
            store.set_volume(replace(vol, phase="Bound" if vol.claim else PHASE_AVAILABLE))
    bound = []
    for key in sorted(store.claims):
        claim = store.claims[key]
        sc = store.class_of(claim)
        if claim.volume_name or claim.deleting or (sc is not None and sc.wait_for_first_consumer):
            continue
        name = store.class_name(claim)
        if name and sc is None:
            continue  # the class does not exist: the claim stays pending
        free = _smallest_free(store, claim, name)
        if free is not None:
            apply_decision(store, VolumeDecision("", ((key, free.name),)), {})
        elif sc is not None and sc.provisioner and sc.provisioner != NO_PROVISIONER:
            first = sc.allowed_topologies[0] if sc.allowed_topologies else ()
            labels = {k: sorted(values)[0] for k, values in first if values}
            apply_decision(store, VolumeDecision("", (), (key,)), labels)
        else:
            continue
        bound.append(key)
    return bound


def _smallest_free(store: VolumeStore, claim: ClaimInfo, class_name: str) -> VolumeInfo | None:
    fits = [
        v
        for v in store.volumes_of_class(class_name)
        if (v.bound_to(claim) or (not v.claim and v.phase == PHASE_AVAILABLE))
        and not v.deleting
        and v.capacity >= claim.request
        and v.volume_mode == claim.volume_mode
        and claim.access_modes <= v.access_modes
        and (claim.selector is None or claim.selector.matches(dict(v.labels)))
    ]
    prebound = [v for v in fits if v.bound_to(claim)]
    ranked = prebound or sorted(fits, key=lambda v: (v.capacity, v.name))
    return ranked[0] if ranked else None
