"""The fixed-rank tie-break: every node a rank from its name and the seed.

Among equally scored nodes ``fixed-rank`` picks the lowest rank, so it keeps filling the same
nodes (packs). The rank is a seeded hash of the node's name -- a fixed pseudo-random order that
changes with the seed -- and never the order nodes were added to the cluster: the simulator
adds them in file order, the live scheduler in API list or watch order, and both must make the
same choice (design.md, "One engine, the same decisions"). Two names with the same 63-bit hash
would tie; ``argmin`` then takes the lower slot, which is harmless at that probability.
"""

from __future__ import annotations

import weakref

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.model.order import name_hash

__all__ = ["NodeRanks"]

# Rank of an empty slot (a removed node): never selected, it is inactive.
_EMPTY = np.iinfo(np.int64).max


class NodeRanks:
    """Per-slot ranks of one cluster, computed once per slot and extended as nodes are added.

    A slot's node name never changes (a node added again under its name keeps its slot; a new
    node takes a new slot), so a slot's rank stays valid; another cluster starts afresh.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._ranks = np.zeros(0, dtype=np.int64)
        self._cluster: weakref.ref[ClusterState] | None = None
        self._by_name: dict[str, int] = {}

    def rank(self, name: str) -> int:
        """The rank of the node called ``name`` (lower wins a tie)."""
        value = self._by_name.get(name)
        if value is None:
            value = name_hash(name, self.seed)
            self._by_name[name] = value
        return value

    def of(self, cluster: ClusterState) -> np.ndarray:
        """Rank per node slot of ``cluster`` (``int64``, at least ``cluster.size`` long)."""
        if self._cluster is None or self._cluster() is not cluster:
            self._cluster = weakref.ref(cluster)
            self._ranks = np.zeros(0, dtype=np.int64)
        n = cluster.size
        done = self._ranks.size
        if done < n:
            extra = np.fromiter(
                (
                    _EMPTY if node is None else self.rank(node.name)
                    for node in cluster.nodes[done:n]
                ),
                dtype=np.int64,
                count=n - done,
            )
            self._ranks = np.concatenate([self._ranks, extra])
        return self._ranks
