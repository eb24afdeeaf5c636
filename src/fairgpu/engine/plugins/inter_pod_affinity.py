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


def _affinity_mask(cluster: ClusterState, pod: PodInfo) -> np.ndarray:
    """Nodes satisfying all of the pod's required affinity terms, as kube-scheduler decides.

    An existing pod counts only if it matches *every* term; it then marks its node's value of
    each term's topology key. A node passes if, for every term, it has the key and its value is
    marked. If no existing pod matches and the pod matches its own terms (the first pod of a
    self-affine group), every node carrying all the topology keys passes.
    """
    terms = pod.affinity_terms
    domains: list[set[str]] = [set() for _ in terms]
    for uid, other in cluster.pods.items():
        if all(t.selects(other.namespace, other.labels) for t in terms):
            node = cluster.nodes[cluster.placements[uid].node]
            if node is None:
                continue
            for term, found in zip(terms, domains, strict=True):
                if term.topology_key in node.labels:
                    found.add(node.labels[term.topology_key])
    ok = np.ones(cluster.size, dtype=bool)
    if not any(domains) and all(t.selects(pod.namespace, pod.labels) for t in terms):
        for term in terms:
            ok &= cluster.label_codes(term.topology_key)[0] >= 0
        return ok
    for term, found in zip(terms, domains, strict=True):
        ok &= _domain_mask(cluster, term.topology_key, found)
    return ok


class InterPodAffinity(FilterPlugin, ScorePlugin):
    """Required pod affinity/anti-affinity (both directions) and preferred-term scoring."""

    name = "InterPodAffinity"

    def __init__(self, hard_pod_affinity_weight: int = 1) -> None:
        # kube-scheduler's hardPodAffinityWeight: placed pods' *required* affinity terms that
        # select the incoming pod also attract it, with this weight (0 turns it off).
        if not 0 <= hard_pod_affinity_weight <= 100:
            raise ValueError("InterPodAffinity.hard_pod_affinity_weight: must be in 0..100")
        self.hard_weight = hard_pod_affinity_weight

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
        if pod.affinity_terms:
            ok = _affinity_mask(cluster, pod)
            aff_fail = mask & ~ok
            if aff_fail.any():
                reasons[AFFINITY] = aff_fail
                mask &= ok
        anti_hit = np.zeros(n, dtype=bool)
        for term in pod.anti_affinity_terms:
            anti_hit |= _domain_mask(cluster, term.topology_key, _domains(cluster, term))
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
                codes, vocab = cluster.label_codes(term.topology_key)
                for value, count in _domains(cluster, term).items():
                    total[codes == vocab.index(value)] += sign * term.weight * count
        # Symmetry: placed pods' preferred terms that select the incoming pod.
        for uid, other in cluster.pods_with_affinity.items():
            node = cluster.nodes[cluster.placements[uid].node]
            if node is None:
                continue
            weighted = (
                (1, other.preferred_affinity),
                (-1, other.preferred_anti_affinity),
                (self.hard_weight, other.affinity_terms),  # required terms carry weight 1
            )
            for sign, terms in weighted:
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
