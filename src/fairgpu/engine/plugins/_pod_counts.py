"""Per-node counts of placed pods matching a predicate, kept up to date incrementally.

Topology spread and inter-pod affinity both ask "how many placed pods matching this selector
run on each node". Counting over every placed pod for every attempt is a Python loop over tens
of thousands of pods; instead each distinct question (a hashable key plus its predicate) keeps
a count array over node slots, and before each use only the nodes whose ``node_version``
changed since the last look are recounted (a placement or release bumps it). Between two
attempts that is usually one node.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.model.pod import PodInfo

Predicate = Callable[[PodInfo], bool]
MAX_TABLES = 256  # distinct selectors remembered per cluster (least recently used dropped)


class _Counts:
    """The count tables of one :class:`ClusterState`."""

    def __init__(self) -> None:
        self.seen = np.zeros(0, dtype=np.int64)
        self.tables: OrderedDict[Hashable, tuple[Predicate, np.ndarray]] = OrderedDict()
        self.namespaces: object = None

    def sync(self, cluster: ClusterState) -> None:
        """Recount the nodes that changed since the last call in every table."""
        n = cluster.size
        if cluster.namespace_labels is not self.namespaces:
            # Namespace labels feed namespaceSelector predicates: start over (rare).
            self.tables.clear()
            self.namespaces = cluster.namespace_labels
        if self.seen.size < n:
            grown = np.full(n, -1, dtype=np.int64)
            grown[: self.seen.size] = self.seen
            self.seen = grown
        versions = cluster.node_version[:n]
        changed = np.flatnonzero(versions != self.seen[:n])
        if changed.size == 0:
            return
        self.seen[:n] = versions
        if changed.size > max(64, n // 8):
            self.tables.clear()  # a bulk change: recounting lazily per table is cheaper
            return
        for key, (pred, arr) in list(self.tables.items()):
            if arr.size < n:
                arr = np.concatenate([arr, np.zeros(n - arr.size, dtype=np.int32)])
                self.tables[key] = (pred, arr)
            for idx in changed.tolist():
                arr[idx] = sum(1 for p in cluster.node_pods[idx].values() if pred(p))

    def get(self, cluster: ClusterState, key: Hashable, pred: Predicate) -> np.ndarray:
        """Count array (one int per node slot) for ``key``, computed in full on first use."""
        entry = self.tables.get(key)
        if entry is not None:
            self.tables.move_to_end(key)
            return entry[1]
        arr = np.zeros(cluster.size, dtype=np.int32)
        for idx, pods in enumerate(cluster.node_pods):
            if pods:
                arr[idx] = sum(1 for p in pods.values() if pred(p))
        self.tables[key] = (pred, arr)
        if len(self.tables) > MAX_TABLES:
            self.tables.popitem(last=False)
        return arr


_BY_CLUSTER: weakref.WeakKeyDictionary[ClusterState, _Counts] = weakref.WeakKeyDictionary()


def matching_counts(cluster: ClusterState, key: Hashable, pred: Predicate) -> np.ndarray:
    """Per-node-slot number of placed pods for which ``pred`` holds.

    ``key`` must identify ``pred`` exactly (same key, same answers). The returned array is
    owned by the index: read it, never write to it.
    """
    counts = _BY_CLUSTER.get(cluster)
    if counts is None:
        counts = _BY_CLUSTER[cluster] = _Counts()
    counts.sync(cluster)
    return counts.get(cluster, key, pred)[: cluster.size]


Extractor = Callable[[PodInfo], tuple[Hashable, ...]]


class _Carried:
    """Per node, how many placed pods carry each term an extractor yields (e.g. the required
    anti-affinity terms of placed pods), kept up to date like the count tables."""

    def __init__(self, extract: Extractor) -> None:
        self.extract = extract
        self.seen = np.zeros(0, dtype=np.int64)
        self.per_node: dict[int, dict[Hashable, int]] = {}
        self.arrays: dict[Hashable, np.ndarray] = {}

    def _recount(self, cluster: ClusterState, idx: int, touched: set[Hashable]) -> None:
        for term, count in self.per_node.pop(idx, {}).items():
            self.arrays[term][idx] -= count
            touched.add(term)
        found: dict[Hashable, int] = {}
        for pod in cluster.node_pods[idx].values():
            for term in self.extract(pod):
                found[term] = found.get(term, 0) + 1
        n = cluster.size
        for term, count in found.items():
            arr = self.arrays.get(term)
            if arr is None:
                arr = self.arrays[term] = np.zeros(n, dtype=np.int32)
            arr[idx] += count
        if found:
            self.per_node[idx] = found

    def sync(self, cluster: ClusterState) -> dict[Hashable, np.ndarray]:
        n = cluster.size
        if self.seen.size < n:
            grown = np.full(n, -1, dtype=np.int64)
            grown[: self.seen.size] = self.seen
            self.seen = grown
            for term, arr in self.arrays.items():
                self.arrays[term] = np.concatenate([arr, np.zeros(n - arr.size, np.int32)])
        versions = cluster.node_version[:n]
        changed = np.flatnonzero(versions != self.seen[:n])
        self.seen[:n] = versions
        touched: set[Hashable] = set()
        for idx in changed.tolist():
            self._recount(cluster, idx, touched)
        for term in touched:
            if term in self.arrays and not self.arrays[term].any():
                del self.arrays[term]  # no placed pod carries it any more
        return self.arrays


_CARRIED: weakref.WeakKeyDictionary[ClusterState, dict[str, _Carried]] = weakref.WeakKeyDictionary()


def carried_terms(
    cluster: ClusterState, name: str, extract: Extractor
) -> dict[Hashable, np.ndarray]:
    """Term -> per-node-slot number of placed pods carrying it, for the terms ``extract``
    yields from a pod (``name`` identifies ``extract``). Read-only for the caller."""
    per_cluster = _CARRIED.get(cluster)
    if per_cluster is None:
        per_cluster = _CARRIED[cluster] = {}
    index = per_cluster.get(name)
    if index is None:
        index = per_cluster[name] = _Carried(extract)
    return index.sync(cluster)
