"""User plugins defined in a test module, named by ``module:Class`` or registered by name."""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState, FilterPlugin, ScorePlugin
from fairgpu.model.pod import PodInfo


class DiskTypeSsd(FilterPlugin):
    """Only nodes labelled ``disktype=ssd`` (a plain mask, no reasons)."""

    name = "DiskTypeSsd"
    static = True

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> np.ndarray:
        """True where the node's disktype label is ``ssd``."""
        return np.array(
            [n is not None and n.labels.get("disktype") == "ssd" for n in cluster.nodes],
            dtype=bool,
        )


class PreferRack(ScorePlugin):
    """Score 100 for nodes in ``rack``, 0 elsewhere."""

    name = "PreferRack"

    def __init__(self, rack: str = "r1") -> None:
        self.rack = rack

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """Per candidate slot."""
        return np.array(
            [100 if cluster.node(int(i)).labels.get("rack") == self.rack else 0 for i in nodes]
        )


class Broken(FilterPlugin):
    """A filter that raises, to check how errors surface."""

    name = "Broken"

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> np.ndarray:
        """Always fails."""
        raise RuntimeError("boom")


class NotAPlugin:
    """Has the right name but is not a Plugin subclass."""
