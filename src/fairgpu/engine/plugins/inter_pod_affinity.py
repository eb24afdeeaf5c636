"""InterPodAffinity: required (anti-)affinity filters, preferred terms score.

Topology domains are label values of ``topologyKey``; the set of domains holding matching pods
is collected once per term and turned into a node mask with the dictionary-encoded labels.
Existing pods' required anti-affinity is honoured symmetrically, as in kube-scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState, FilterPlugin, FilterResult, ScorePlugin
from fairgpu.model.pod import PodInfo
from fairgpu.model.selectors import PodAffinityTerm

AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI = "node(s) didn't satisfy existing pods anti-affinity rules"


def _domain_mask(cluster: ClusterState, key: str, values: Iterable[str]) -> np.ndarray:
    codes, vocab = cluster.label_codes(key)
    wanted = set(values)
    ids = [i for i, v in enumerate(vocab) if v in wanted]
    return np.isin(codes, ids) if ids else np.zeros(codes.shape, dtype=bool)


def _domains(cluster: ClusterState, term: PodAffinityTerm) -> dict[str, int]:
    """Topology values holding pods matched by ``term`` -> number of such pods."""
    out: dict[str, int] = {}
    for uid, other in cluster.pods.items():
        if term.selects(other.namespace, other.labels):
            node = cluster.nodes[cluster.placements[uid].node]
            if node is not None and term.topology_key in node.labels:
                value = node.labels[term.topology_key]
                out[value] = out.get(value, 0) + 1
    return out


class InterPodAffinity(FilterPlugin, ScorePlugin):
    """Required pod affinity/anti-affinity (both directions) and preferred-term scoring."""

    name = "InterPodAffinity"

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Skips all work when neither the pod nor any placed pod uses pod affinity."""
        n = cluster.size
        mask = np.ones(n, dtype=bool)
        if (
            not pod.affinity_terms
            and not pod.anti_affinity_terms
            and not cluster.pods_with_affinity
        ):
            return FilterResult(mask)
        reasons: dict[str, np.ndarray] = {}
        # Existing pods whose required anti-affinity selects the incoming pod.
        existing = np.zeros(n, dtype=bool)
        for uid, other in cluster.pods_with_affinity.items():
            for term in other.anti_affinity_terms:
                if term.selects(pod.namespace, pod.labels):
                    node = cluster.nodes[cluster.placements[uid].node]
                    if node is not None and term.topology_key in node.labels:
                        existing |= _domain_mask(
                            cluster, term.topology_key, [node.labels[term.topology_key]]
                        )
        if existing.any():
            reasons[EXISTING_ANTI] = existing
            mask &= ~existing
        aff_fail = np.zeros(n, dtype=bool)
        for term in pod.affinity_terms:
            has_key = cluster.label_codes(term.topology_key)[0] >= 0
            domains = _domains(cluster, term)
            if not domains and term.selects(pod.namespace, pod.labels):
                # First pod of a self-affine group may go anywhere the key exists.
                ok = has_key
            else:
                ok = _domain_mask(cluster, term.topology_key, domains)
            aff_fail |= ~ok
        if aff_fail.any():
            reasons[AFFINITY] = aff_fail
            mask &= ~aff_fail
        anti_fail = np.zeros(n, dtype=bool)
        for term in pod.anti_affinity_terms:
            anti_fail |= _domain_mask(cluster, term.topology_key, _domains(cluster, term))
        if anti_fail.any():
            reasons[ANTI_AFFINITY] = anti_fail
            mask &= ~anti_fail
        return FilterResult(mask, reasons)

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """+weight per matching pod in the node's domain for affinity, -weight for anti."""
        total = np.zeros(cluster.size, dtype=np.int64)
        for sign, terms in ((1, pod.preferred_affinity), (-1, pod.preferred_anti_affinity)):
            for term in terms:
                codes, vocab = cluster.label_codes(term.topology_key)
                for value, count in _domains(cluster, term).items():
                    total[codes == vocab.index(value)] += sign * term.weight * count
        # Symmetry: placed pods' preferred terms that select the incoming pod.
        for uid, other in cluster.pods_with_affinity.items():
            node = cluster.nodes[cluster.placements[uid].node]
            if node is None:
                continue
            for sign, terms in ((1, other.preferred_affinity), (-1, other.preferred_anti_affinity)):
                for term in terms:
                    if term.selects(pod.namespace, pod.labels) and term.topology_key in node.labels:
                        value = node.labels[term.topology_key]
                        total += (
                            sign * term.weight * _domain_mask(cluster, term.topology_key, [value])
                        )
        return total[nodes]

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Min-max to 0..100; all-equal scores become 0."""
        lo, hi = (scores.min(), scores.max()) if scores.size else (0, 0)
        if hi == lo:
            return np.zeros(scores.shape, dtype=np.float64)
        return np.floor((scores - lo) * 100.0 / (hi - lo))
