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
from fairgpu.model.selectors import Requirement

REASON = "node(s) didn't match Pod's node affinity/selector"


class NodeAffinity(FilterPlugin, ScorePlugin):
    """Filter: nodeSelector AND (any required term). Score: sum of matching preferred weights."""

    name = "NodeAffinity"
    static = True

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Terms are OR'ed, expressions inside a term AND'ed; an empty term list matches none."""
        mask = np.ones(cluster.size, dtype=bool)
        for key, value in pod.node_selector:
            mask &= requirement_mask(cluster, Requirement(key, "In", (value,)))
        if pod.required_terms is not None:
            any_term = np.zeros(cluster.size, dtype=bool)
            for term in pod.required_terms:
                any_term |= term_mask(cluster, term)
            mask &= any_term
        return FilterResult(mask, {REASON: ~mask})

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """Sum of weights of the preferred terms each node matches."""
        total = np.zeros(len(nodes), dtype=np.int64)
        for weight, term in pod.preferred_terms:
            total += weight * term_mask(cluster, term)[nodes]
        return total

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Scale so the best node gets 100."""
        return default_normalize(scores)
