"""The free volumes of one StorageClass as arrays, for VolumeBinding's per-node choice.

A cluster of local disks has a volume or more per node: comparing every volume's node
affinity with every node would cost volumes x nodes per attempt. Instead the free volumes
(unclaimed, ``Available``, not being deleted) of a class are kept sorted smallest first with
their capacity, access and volume modes as arrays, and each volume's node affinity is
classified once: pinned to one node slot (the ``kubernetes.io/hostname In [x]`` that local
volumes carry), usable everywhere (no affinity), or general (a node mask). The catalog is
rebuilt when the store or the nodes change.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.model.volumes import PHASE_AVAILABLE, ClaimInfo, VolumeInfo

HOSTNAME = "kubernetes.io/hostname"
EVERYWHERE = -1  # no node affinity
GENERAL = -2  # node affinity evaluated as a mask
NOWHERE = -3  # pinned to a hostname no node has
_MODES = {"ReadWriteOnce": 1, "ReadOnlyMany": 2, "ReadWriteMany": 4, "ReadWriteOncePod": 8}


@lru_cache(maxsize=8)
def all_nodes(size: int) -> np.ndarray:
    """A read-only all-True mask: what a volume filter returns for a pod without volumes
    (shared, so that such pods cost no allocation; read-only, so that no caller can alter it)."""
    mask = np.ones(size, dtype=bool)
    mask.flags.writeable = False
    return mask


def mode_bits(modes: frozenset[str]) -> int:
    """Access modes as a bit set (unknown modes get a bit no volume has)."""
    return sum(_MODES.get(m, 16) for m in modes)


@dataclass(slots=True)
class Catalog:
    """Free volumes of one class, smallest (then by name) first."""

    vols: list[VolumeInfo]
    capacity: np.ndarray
    modes: np.ndarray
    block: np.ndarray
    slot: np.ndarray
    index: dict[str, int]
    names: tuple[str, ...]

    def fitting(self, claim: ClaimInfo, taken: dict[str, str]) -> np.ndarray:
        """Which volumes could bind ``claim`` (before node affinity)."""
        want = mode_bits(claim.access_modes)
        fit = (
            (self.capacity >= claim.request)
            & ((self.modes & want) == want)
            & (self.block == (claim.volume_mode == "Block"))
        )
        for name, owner in taken.items():
            i = self.index.get(name)
            if i is not None and owner != claim.key:
                fit[i] = False
        if claim.selector is not None:
            sel = claim.selector
            fit &= np.array([sel.matches(dict(v.labels)) for v in self.vols], dtype=bool)
        return np.asarray(fit)


def _slot(hosts: dict[str, int], vol: VolumeInfo) -> int:
    terms = vol.node_terms
    if terms is None:
        return EVERYWHERE
    if len(terms) != 1 or terms[0].fields or len(terms[0].expressions) != 1:
        return GENERAL
    req = terms[0].expressions[0]
    if req.key != HOSTNAME or req.operator != "In" or len(req.values) != 1:
        return GENERAL
    return hosts.get(req.values[0], NOWHERE)


def host_slots(cluster: ClusterState) -> dict[str, int]:
    """Hostname label value -> its one node slot (GENERAL where several nodes share it)."""
    out: dict[str, int] = {}
    for idx, node in cluster.active_nodes():
        host = node.labels.get(HOSTNAME)
        if host is not None:
            out[host] = GENERAL if host in out else idx
    return out


Row = tuple[int, int, bool, int]  # capacity, access mode bits, block mode, slot


def build_catalog(
    cluster: ClusterState, vols: list[VolumeInfo], rows: dict[int, tuple[VolumeInfo, Row]]
) -> Catalog:
    """The catalog of the free volumes among ``vols`` (one class). ``rows`` memoises each
    volume's row by object (valid while the nodes do not change), so a rebuild after one
    volume changed costs little per unchanged volume."""
    hosts: dict[str, int] | None = None
    free = []
    for v in vols:
        if v.claim or v.deleting or v.phase != PHASE_AVAILABLE:
            continue
        hit = rows.get(id(v))
        if hit is None or hit[0] is not v:
            if hosts is None:
                hosts = host_slots(cluster)
            row = (v.capacity, mode_bits(v.access_modes), v.volume_mode == "Block", _slot(hosts, v))
            hit = rows[id(v)] = (v, row)
        free.append(hit)
    free.sort(key=lambda h: (h[1][0], h[0].name))
    table = np.array([h[1] for h in free], dtype=np.int64).reshape(len(free), 4)
    return Catalog(
        vols=[h[0] for h in free],
        capacity=table[:, 0],
        modes=table[:, 1],
        block=table[:, 2].astype(bool),
        slot=table[:, 3],
        index={h[0].name: i for i, h in enumerate(free)},
        names=tuple(h[0].name for h in free),
    )
