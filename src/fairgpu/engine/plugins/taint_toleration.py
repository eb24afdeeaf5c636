"""TaintToleration: NoSchedule/NoExecute taints filter, PreferNoSchedule taints score."""

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
from fairgpu.model.pod import PodInfo
from fairgpu.model.selectors import Taint, Toleration


def tolerated(taint: Taint, tolerations: tuple[Toleration, ...]) -> bool:
    """Whether any toleration tolerates ``taint``."""
    return any(t.tolerates(taint.key, taint.value, taint.effect) for t in tolerations)


class TaintToleration(FilterPlugin, ScorePlugin):
    """kube-scheduler's TaintToleration, evaluated once per distinct taint set."""

    name = "TaintToleration"
    static = True

    def __init__(self) -> None:
        self._counts: dict[tuple[Toleration, ...], np.ndarray] = {}
        self._version = -1

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """A node fails if any NoSchedule or NoExecute taint is not tolerated."""
        ids, groups = cluster.taint_groups()
        ok = np.ones(len(groups), dtype=bool)
        reasons: dict[str, np.ndarray] = {}
        for gid, taints in enumerate(groups):
            for taint in taints:
                if taint.effect == "PreferNoSchedule" or tolerated(taint, pod.tolerations):
                    continue
                ok[gid] = False
                text = f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
                reasons.setdefault(text, np.zeros(len(groups), dtype=bool))[gid] = True
                break
        return FilterResult(ok[ids], {r: m[ids] for r, m in reasons.items()})

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """Count of untolerated PreferNoSchedule taints (fewer is better)."""
        ids, groups = cluster.taint_groups()
        # Counts per taint group depend only on the tolerations: memoise per node version.
        if self._version != cluster.static_version:
            self._counts.clear()
            self._version = cluster.static_version
        counts = self._counts.get(pod.tolerations)
        if counts is None:
            counts = np.array(
                [
                    sum(
                        1
                        for t in taints
                        if t.effect == "PreferNoSchedule" and not tolerated(t, pod.tolerations)
                    )
                    for taints in groups
                ],
                dtype=np.int64,
            )
            if len(self._counts) > 4096:
                self._counts.clear()
            self._counts[pod.tolerations] = counts
        return np.asarray(counts[ids[nodes]])

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Reverse: zero untolerated taints scores 100."""
        return default_normalize(scores, reverse=True)
