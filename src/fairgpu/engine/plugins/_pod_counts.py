"""Indexes over the placed pods for selector questions, kept up to date incrementally.

Topology spread and inter-pod affinity ask "how many placed pods matching this selector run on
each node" and "which placed pods carry a term that selects this pod". Scanning every placed
pod per attempt is a Python loop over tens of thousands of pods. Instead, per
:class:`ClusterState`:

* placed pods are indexed by each ``label=value`` they carry, so a selector requiring
  ``app=web`` is evaluated only on the pods labelled ``app=web``;
* terms that placed pods carry (e.g. required anti-affinity) are counted per node and indexed
  by a label pair their selector requires, so only terms that can select the incoming pod are
  evaluated.

Before each use only the nodes whose ``node_version`` changed since the last look are
re-read (a placement or release bumps it); between two attempts that is usually one node.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.model.pod import PodInfo
from fairgpu.model.selectors import LabelSelector

Predicate = Callable[[PodInfo], bool]
Pair = tuple[str, str]
Extractor = Callable[[PodInfo], tuple[tuple[Hashable, LabelSelector | None], ...]]


def required_pairs(selector: LabelSelector | None) -> list[Pair]:
    """``label=value`` pairs every pod ``selector`` matches must carry."""
    if selector is None:
        return []
    pairs = list(selector.match_labels)
    pairs += [
        (r.key, r.values[0])
        for r in selector.expressions
        if r.operator == "In" and len(r.values) == 1
    ]
    return pairs


class _Carried:
    """Per node, how many placed pods carry each term an extractor yields."""

    def __init__(self, extract: Extractor) -> None:
        self.extract = extract
        self.per_node: dict[int, dict[Hashable, int]] = {}
        self.arrays: dict[Hashable, np.ndarray] = {}
        self.by_pair: dict[Pair, set[Hashable]] = {}
        self.pairs: dict[Hashable, list[Pair]] = {}
        self.unkeyed: set[Hashable] = set()

    def recount(self, cluster: ClusterState, idx: int) -> None:
        for term, count in self.per_node.pop(idx, {}).items():
            arr = self.arrays[term]
            arr[idx] -= count
            if not arr.any():  # no placed pod carries it any more
                del self.arrays[term]
                self.unkeyed.discard(term)
                for pair in self.pairs.pop(term, ()):
                    self.by_pair[pair].discard(term)
        found: dict[Hashable, int] = {}
        for pod in cluster.node_pods[idx].values():
            for term, selector in self.extract(pod):
                found[term] = found.get(term, 0) + 1
                if term not in self.arrays:
                    self._add_term(term, selector, cluster.size)
        for term, count in found.items():
            self.arrays[term][idx] += count
        if found:
            self.per_node[idx] = found

    def _add_term(self, term: Hashable, selector: LabelSelector | None, n: int) -> None:
        self.arrays[term] = np.zeros(n, dtype=np.int32)
        pairs = required_pairs(selector)[:1]
        if pairs:
            self.pairs[term] = pairs
            self.by_pair.setdefault(pairs[0], set()).add(term)
        else:
            self.unkeyed.add(term)

    def grow(self, n: int) -> None:
        for term, arr in self.arrays.items():
            if arr.size < n:
                self.arrays[term] = np.concatenate([arr, np.zeros(n - arr.size, np.int32)])

    def candidates(self, labels: dict[str, str]) -> Iterable[Hashable]:
        """Terms that may select a pod with ``labels`` (their required pair is among them)."""
        yield from self.unkeyed
        for pair in labels.items():
            yield from self.by_pair.get(pair, ())


class _Index:
    """The indexes of one :class:`ClusterState`."""

    def __init__(self) -> None:
        self.seen = np.zeros(0, dtype=np.int64)
        self.node_uids: dict[int, set[str]] = {}
        self.by_pair: dict[Pair, set[str]] = {}
        self.pod_pairs: dict[str, list[Pair]] = {}
        self.carried: dict[str, _Carried] = {}
        # Answers that hold while placements, nodes and Namespaces stay as they are.
        self.memo: dict[Hashable, object] = {}
        self.memo_state: tuple[int, int, object] = (-1, -1, None)

    def _reindex(self, cluster: ClusterState, idx: int) -> None:
        old = self.node_uids.get(idx, set())
        now = set(cluster.node_pods[idx])
        for uid in old - now:
            for pair in self.pod_pairs.pop(uid, ()):
                self.by_pair[pair].discard(uid)
        for uid in now - old:
            pairs = list(cluster.node_pods[idx][uid].labels.items())
            self.pod_pairs[uid] = pairs
            for pair in pairs:
                self.by_pair.setdefault(pair, set()).add(uid)
        self.node_uids[idx] = now
        for carried in self.carried.values():
            carried.recount(cluster, idx)

    def sync(self, cluster: ClusterState) -> None:
        """Re-read the nodes that changed since the last call."""
        n = cluster.size
        if self.seen.size < n:
            grown = np.full(n, -1, dtype=np.int64)
            grown[: self.seen.size] = self.seen
            self.seen = grown
            for carried in self.carried.values():
                carried.grow(n)
        versions = cluster.node_version[:n]
        changed = np.flatnonzero(versions != self.seen[:n])
        self.seen[:n] = versions
        for idx in changed.tolist():
            self._reindex(cluster, idx)

    def candidates(
        self, cluster: ClusterState, selectors: Iterable[LabelSelector]
    ) -> Iterable[str]:
        """Uids of the placed pods that may match every selector (a superset)."""
        best: set[str] | None = None
        for selector in selectors:
            for pair in required_pairs(selector):
                uids = self.by_pair.get(pair, set())
                if best is None or len(uids) < len(best):
                    best = uids
        return cluster.pods.keys() if best is None else best


_BY_CLUSTER: weakref.WeakKeyDictionary[ClusterState, _Index] = weakref.WeakKeyDictionary()


def _index(cluster: ClusterState) -> _Index:
    index = _BY_CLUSTER.get(cluster)
    if index is None:
        index = _BY_CLUSTER[cluster] = _Index()
    index.sync(cluster)
    return index


MEMO_LIMIT = 4096  # entries; a full memo is dropped rather than evicted piecemeal


def memo(cluster: ClusterState) -> dict[Hashable, object]:
    """A dictionary for answers derived from the placed pods, the nodes and the Namespaces'
    labels, emptied whenever one of them changes (``load_version``, ``static_version``, a new
    ``namespace_labels`` mapping). Within one attempt several plugins ask the same question
    (spread and affinity terms of one pod usually share a selector), and between placements a
    pod shape seen before gets the same answer. Cached arrays are read-only."""
    index = _BY_CLUSTER.get(cluster)
    if index is None:
        index = _BY_CLUSTER[cluster] = _Index()
    state = (cluster.load_version, cluster.static_version, cluster.namespace_labels)
    old = index.memo_state
    if old[0] != state[0] or old[1] != state[1] or old[2] is not state[2]:
        index.memo.clear()
        index.memo_state = state
    elif len(index.memo) > MEMO_LIMIT:
        index.memo.clear()
    return index.memo


def frozen(arr: np.ndarray) -> np.ndarray:
    """``arr`` made read-only (it is shared through :func:`memo`)."""
    arr.flags.writeable = False
    return arr


def selector_counts(
    cluster: ClusterState,
    namespaces: frozenset[str] | None,
    selector: LabelSelector,
    skip_terminating: bool = False,
) -> np.ndarray:
    """Per-node-slot number of placed pods in ``namespaces`` (None: any) that ``selector``
    matches, without those whose deletion has begun if ``skip_terminating`` (topology spread
    does not count them; inter-pod affinity does); memoised (read-only)."""
    cache = memo(cluster)
    key = ("selector_counts", namespaces, selector, skip_terminating)
    hit = cache.get(key)
    if hit is None:
        if namespaces is None:
            pred: Predicate = lambda p: selector.matches(p.labels)  # noqa: E731
        else:
            pred = lambda p: p.namespace in namespaces and selector.matches(p.labels)  # noqa: E731
        if skip_terminating:
            placements, matches = cluster.placements, pred
            pred = lambda p: not placements[p.uid].terminating and matches(p)  # noqa: E731
        hit = cache[key] = frozen(matching_counts(cluster, (selector,), pred))
    assert isinstance(hit, np.ndarray)
    return hit


def matching_counts(
    cluster: ClusterState, selectors: tuple[LabelSelector, ...], pred: Predicate
) -> np.ndarray:
    """Per-node-slot number of placed pods for which ``pred`` holds.

    ``pred`` must imply every one of ``selectors`` (they only narrow the pods it is asked
    about, through the label index).
    """
    index = _index(cluster)
    nodes = [
        cluster.placements[uid].node
        for uid in list(index.candidates(cluster, selectors))
        if pred(cluster.pods[uid])
    ]
    return np.bincount(np.asarray(nodes, dtype=np.intp), minlength=cluster.size)[: cluster.size]


def carried_terms(
    cluster: ClusterState, name: str, extract: Extractor, labels: dict[str, str]
) -> list[tuple[Hashable, np.ndarray]]:
    """Terms placed pods carry that may select a pod with ``labels``, each with the per-node
    number of placed pods carrying it. ``extract`` yields ``(term, its label selector)`` per
    pod; ``name`` identifies it. The arrays are read-only for the caller."""
    index = _BY_CLUSTER.get(cluster)
    if index is None:
        index = _BY_CLUSTER[cluster] = _Index()
    carried = index.carried.get(name)
    if carried is None:
        carried = index.carried[name] = _Carried(extract)
        for idx in range(min(index.seen.size, cluster.size)):
            carried.recount(cluster, idx)  # nodes indexed before this extractor existed
    index.sync(cluster)
    return [(t, carried.arrays[t]) for t in set(carried.candidates(labels))]
