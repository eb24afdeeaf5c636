"""NodeAffinity: ``nodeSelector`` and required node affinity filter; preferred terms score."""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import (
    CycleState,
    FilterPlugin,
    FilterResult,
    ScorePlugin,
    default_normalize,
)
from fairgpu.engine.plugins._labels import requirement_mask, term_mask
from fairgpu.model.pod import PodInfo
from fairgpu.model.selectors import NodeSelectorTerm, Requirement

REASON = "node(s) didn't match Pod's node affinity/selector"


def required_mask(cluster: ClusterState, pod: PodInfo) -> np.ndarray:
    """Nodes passing the pod's nodeSelector and required node affinity (terms are OR'ed,
    expressions inside a term AND'ed; an empty term list matches none)."""
    mask = np.ones(cluster.size, dtype=bool)
    for key, value in pod.node_selector:
        mask &= requirement_mask(cluster, Requirement(key, "In", (value,)))
    if pod.required_terms is not None:
        any_term = np.zeros(cluster.size, dtype=bool)
        for term in pod.required_terms:
            any_term |= term_mask(cluster, term)
        mask &= any_term
    return mask


class NodeAffinity(FilterPlugin, ScorePlugin):
    """Filter: nodeSelector AND (any required term). Score: sum of matching preferred weights."""

    name = "NodeAffinity"
    static = True

    def __init__(self) -> None:
        self._masks: dict[NodeSelectorTerm, np.ndarray] = {}
        self._version = -1

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """The pod's nodeSelector and required node affinity (see :func:`required_mask`)."""
        mask = required_mask(cluster, pod)
        return FilterResult(mask, {REASON: ~mask})

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """Sum of weights of the preferred terms each node matches."""
        total = np.zeros(len(nodes), dtype=np.int64)
        if self._version != cluster.static_version:
            self._masks.clear()
            self._version = cluster.static_version
        for weight, term in pod.preferred_terms:
            # Term masks depend only on node labels: memoise them per node version.
            mask = self._masks.get(term)
            if mask is None:
                if len(self._masks) > 4096:
                    self._masks.clear()
                mask = self._masks[term] = term_mask(cluster, term)
            total += weight * mask[nodes]
        return total

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Scale so the best node gets 100."""
        return default_normalize(scores)
