"""InterPodAffinity: required (anti-)affinity filters, preferred terms score.

Topology domains are label values of ``topologyKey``. Per term, the placed pods it selects are
counted per node by an incrementally maintained index (:mod:`._pod_counts`), summed per domain
with the dictionary-encoded labels and turned back into a node mask. Existing pods' required
anti-affinity is honoured symmetrically, as in kube-scheduler, through an index of the terms
placed pods carry. A term's namespaces are its ``namespaces`` list, the Namespaces its
``namespaceSelector`` matches (labels from ``cluster.namespace_labels``), or the pod's own
namespace when neither is given; ``matchLabelKeys``/``mismatchLabelKeys`` are merged into its
selector when the pod is decoded.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState, FilterPlugin, FilterResult, ScorePlugin
from fairgpu.engine.plugins._pod_counts import (
    carried_terms,
    frozen,
    matching_counts,
    memo,
    selector_counts,
)
from fairgpu.model.pod import PodInfo
from fairgpu.model.selectors import LabelSelector, PodAffinityTerm

AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI = "node(s) didn't satisfy existing pods anti-affinity rules"


def _domain_mask(cluster: ClusterState, key: str, values: Iterable[str]) -> np.ndarray:
    codes, vocab = cluster.label_codes(key)
    wanted = set(values)
    ids = [i for i, v in enumerate(vocab) if v in wanted]
    return np.isin(codes, ids) if ids else np.zeros(codes.shape, dtype=bool)


def _selected(cluster: ClusterState, terms: tuple[PodAffinityTerm, ...]) -> np.ndarray:
    """Per node slot, how many placed pods every one of ``terms`` selects (memoised)."""
    cache = memo(cluster)
    key = ("selected", terms)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = frozen(_count_selected(cluster, terms))
    assert isinstance(hit, np.ndarray)
    return hit


def _count_selected(cluster: ClusterState, terms: tuple[PodAffinityTerm, ...]) -> np.ndarray:
    sel = terms[0].selector if len(terms) == 1 else None
    if sel is not None and terms[0].namespace_selector is None:
        # The common case, shared with other terms and spread constraints of the same selector.
        namespaces = None if terms[0].all_namespaces else terms[0].namespaces
        return selector_counts(cluster, namespaces, sel)
    selectors = tuple(t.selector for t in terms if t.selector is not None)
    if len(selectors) < len(terms):
        return np.zeros(cluster.size, dtype=np.int64)  # a term without a selector selects none
    ns_labels = cluster.namespace_labels
    return matching_counts(
        cluster,
        selectors,
        lambda p: all(t.selects(p.namespace, p.labels, ns_labels) for t in terms),
    )


def _per_domain(cluster: ClusterState, key: str, per_node: np.ndarray) -> np.ndarray:
    """Sum of ``per_node`` per value of label ``key``, gathered back per node (0 without it)."""
    codes, vocab = cluster.label_codes(key)
    hit = np.flatnonzero(per_node)  # few nodes hold matching pods: sum over those only
    hit = hit[codes[hit] >= 0]
    if hit.size == 0:
        return np.zeros(cluster.size, dtype=np.float64)
    sums = np.bincount(codes[hit], weights=per_node[hit], minlength=len(vocab))
    return np.asarray(np.append(sums, 0.0)[codes])


def _term_domains(cluster: ClusterState, term: PodAffinityTerm) -> np.ndarray:
    """Per node: matching pods in the node's domain of ``term.topology_key`` (memoised)."""
    cache = memo(cluster)
    key = ("term_domains", term)
    hit = cache.get(key)
    if hit is None:
        per_node = _selected(cluster, (term,))
        hit = cache[key] = frozen(_per_domain(cluster, term.topology_key, per_node))
    assert isinstance(hit, np.ndarray)
    return hit


def _affinity_mask(cluster: ClusterState, pod: PodInfo) -> np.ndarray:
    """Nodes satisfying all of the pod's required affinity terms, as kube-scheduler decides.

    An existing pod counts only if it matches *every* term; it then marks its node's value of
    each term's topology key. A node passes if, for every term, it has the key and its value is
    marked. If no existing pod matches and the pod matches its own terms (the first pod of a
    self-affine group), every node carrying all the topology keys passes.
    """
    terms = pod.affinity_terms
    counts = _selected(cluster, terms)
    marked = [_per_domain(cluster, t.topology_key, counts) > 0 for t in terms]
    ok = np.ones(cluster.size, dtype=bool)
    ns_labels = cluster.namespace_labels
    if not any(m.any() for m in marked) and all(
        t.selects(pod.namespace, pod.labels, ns_labels) for t in terms
    ):
        for term in terms:
            ok &= cluster.label_codes(term.topology_key)[0] >= 0
        return ok
    for found in marked:
        ok &= found
    return ok


def _anti_terms(pod: PodInfo) -> tuple[tuple[Hashable, LabelSelector | None], ...]:
    return tuple((t, t.selector) for t in pod.anti_affinity_terms)


def _weighted_terms(pod: PodInfo) -> tuple[tuple[Hashable, LabelSelector | None], ...]:
    return (
        *((("pref", t), t.selector) for t in pod.preferred_affinity),
        *((("anti", t), t.selector) for t in pod.preferred_anti_affinity),
        *((("hard", t), t.selector) for t in pod.affinity_terms),
    )


class InterPodAffinity(FilterPlugin, ScorePlugin):
    """Required pod affinity/anti-affinity (both directions) and preferred-term scoring."""

    name = "InterPodAffinity"

    def __init__(self, hard_pod_affinity_weight: int = 1) -> None:
        # kube-scheduler's hardPodAffinityWeight: placed pods' *required* affinity terms that
        # select the incoming pod also attract it, with this weight (0 turns it off).
        if not 0 <= hard_pod_affinity_weight <= 100:
            raise ValueError("InterPodAffinity.hard_pod_affinity_weight: must be in 0..100")
        self.hard_weight = hard_pod_affinity_weight

    def _existing_anti(self, pod: PodInfo, cluster: ClusterState) -> np.ndarray:
        """Nodes in a domain where a placed pod's required anti-affinity selects ``pod``
        (memoised per namespace and labels)."""
        cache = memo(cluster)
        key = ("existing_anti", pod.namespace, frozenset(pod.labels.items()))
        found = cache.get(key)
        if found is None:
            found = cache[key] = frozen(self._compute_existing_anti(pod, cluster))
        assert isinstance(found, np.ndarray)
        return found

    def _compute_existing_anti(self, pod: PodInfo, cluster: ClusterState) -> np.ndarray:
        hit = np.zeros(cluster.size, dtype=bool)
        ns_labels = cluster.namespace_labels
        for term, per_node in carried_terms(cluster, "anti", _anti_terms, pod.labels):
            assert isinstance(term, PodAffinityTerm)
            if term.selects(pod.namespace, pod.labels, ns_labels):
                hit |= _per_domain(cluster, term.topology_key, per_node) > 0
        return hit

    def skips(self, pod: PodInfo, cluster: ClusterState) -> bool:
        """Neither the pod nor any placed pod uses pod affinity."""
        return (
            not pod.affinity_terms
            and not pod.anti_affinity_terms
            and not cluster.pods_with_affinity
        )

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Skips all work when neither the pod nor any placed pod uses pod affinity."""
        n = cluster.size
        mask = np.ones(n, dtype=bool)
        if self.skips(pod, cluster):
            return FilterResult(mask)
        reasons: dict[str, np.ndarray] = {}
        existing = self._existing_anti(pod, cluster)
        if existing.any():
            reasons[EXISTING_ANTI] = existing
            mask &= ~existing
        if pod.affinity_terms:
            ok = _affinity_mask(cluster, pod)
            aff_fail = mask & ~ok
            if aff_fail.any():
                reasons[AFFINITY] = aff_fail
                mask &= ok
        anti_hit = np.zeros(n, dtype=bool)
        for term in pod.anti_affinity_terms:
            anti_hit |= _term_domains(cluster, term) > 0
        anti_fail = mask & anti_hit
        if anti_fail.any():
            # Reasons are exclusive per node, as kube-scheduler reports only the first one.
            reasons[ANTI_AFFINITY] = anti_fail
            mask &= ~anti_hit
        return FilterResult(mask, reasons)

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """+weight per matching pod in the node's domain for affinity, -weight for anti.

        Symmetric, as in kube-scheduler: placed pods' preferred terms (and, with
        ``hard_pod_affinity_weight``, required affinity terms) that select the incoming pod count
        too.
        """
        if (
            not pod.preferred_affinity
            and not pod.preferred_anti_affinity
            and not cluster.pods_with_affinity
        ):
            return np.zeros(len(nodes), dtype=np.int64)  # the common case: nothing to weigh
        total = np.zeros(cluster.size, dtype=np.int64)
        for sign, terms in ((1, pod.preferred_affinity), (-1, pod.preferred_anti_affinity)):
            for term in terms:
                total += (sign * term.weight * _term_domains(cluster, term)).astype(np.int64)
        return np.asarray((total + self._symmetric(pod, cluster))[nodes])

    def _symmetric(self, pod: PodInfo, cluster: ClusterState) -> np.ndarray:
        """Placed pods' preferred (and required affinity) terms selecting ``pod``, per node
        slot (memoised per namespace and labels)."""
        cache = memo(cluster)
        key = ("symmetric", pod.namespace, frozenset(pod.labels.items()), self.hard_weight)
        found = cache.get(key)
        if found is None:
            found = cache[key] = frozen(self._compute_symmetric(pod, cluster))
        assert isinstance(found, np.ndarray)
        return found

    def _compute_symmetric(self, pod: PodInfo, cluster: ClusterState) -> np.ndarray:
        total = np.zeros(cluster.size, dtype=np.int64)
        signs = {"pref": 1, "anti": -1, "hard": self.hard_weight}
        ns_labels = cluster.namespace_labels
        for item, per_node in carried_terms(cluster, "weighted", _weighted_terms, pod.labels):
            assert isinstance(item, tuple)
            kind, term = item
            if signs[kind] and term.selects(pod.namespace, pod.labels, ns_labels):
                # Each carrying pod adds its weight to every node of its domain.
                carriers = _per_domain(cluster, term.topology_key, per_node)
                total += (signs[kind] * term.weight * carriers).astype(np.int64)
        return total

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Min-max to 0..100; all-equal scores become 0. In kube-scheduler's floating-point
        order -- 100 x ((score - min) / (max - min)), truncated -- which is not always
        (score - min) x 100 / (max - min): 29 of 100 gives 28."""
        lo, hi = (scores.min(), scores.max()) if scores.size else (0, 0)
        if hi == lo:
            return np.zeros(scores.shape, dtype=np.float64)
        return np.trunc(100.0 * ((scores - lo) / float(hi - lo)))
