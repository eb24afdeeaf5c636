"""The packing plan's tier of each candidate device, for the workload's current typical
shapes (the glue between :class:`PackingPlan` and the fragmentation-aware score)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.plugins.node_cache import NodeCache
from fairgpu.engine.plugins.packing_plan import DeviceContents, PackingPlan
from fairgpu.engine.plugins.shape_learning import TypicalPods
from fairgpu.model.gpu import WHOLE

Array = npt.NDArray[Any]
# The packing plan is solved again when the typical shares moved by more than this (L1).
PLAN_RELEARN = 0.05


def share_weights(typical: TypicalPods) -> dict[int, float]:
    """The typical shapes' GPU shares (single-device, under one GPU): milli -> weight."""
    weights: dict[int, float] = {}
    for i in range(typical.size):
        milli = int(typical.milli[i])
        if typical.count[i] == 1 and 0 < milli < WHOLE:
            weights[milli] = weights.get(milli, 0.0) + float(typical.weight[i])
    return weights


class PlanTier:
    """The packing plan of the typical shapes' shares and the devices' contents.

    The plan is solved again after the typical shapes changed (:meth:`shapes_changed`) only
    if their shares moved by more than :data:`PLAN_RELEARN` (the solve takes up to a few
    hundred ms). Device contents are coded per cluster node set (:meth:`cluster_changed`).
    """

    def __init__(self) -> None:
        self._plan: PackingPlan | None = None
        self._current = False
        self.contents = DeviceContents()
        self._codes = NodeCache()

    def __getstate__(self) -> dict[str, object]:
        """A copy (another engine's, the forecasting process's) keeps the plan, not the
        device contents of this cluster, which the copy rebuilds for its own."""
        return {"_plan": self._plan, "_current": self._current}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__()  # type: ignore[misc]
        self._plan = state["_plan"]  # type: ignore[assignment]
        self._current = bool(state["_current"])

    def shapes_changed(self) -> None:
        """The typical shapes may have changed: check the plan against them on next use."""
        self._current = False

    def cluster_changed(self) -> None:
        """Another cluster or node set: forget the devices' contents."""
        self.contents = DeviceContents()
        self._codes = NodeCache()

    def plan(self, typical: TypicalPods) -> PackingPlan:
        """The packing plan of ``typical``'s GPU shares (all shapes where known)."""
        if self._plan is None or not self._current:
            shapes = typical.full if typical.full is not None else typical
            weights = share_weights(shapes)
            if self._plan is None or (weights and self._plan.distance(weights) > PLAN_RELEARN):
                self._plan = PackingPlan(weights)
            self._current = True
        return self._plan

    def device_codes(self, cluster: ClusterState, nodes: Array) -> Array:
        """(len(nodes), D) content codes of the devices, cached per node version."""

        def compute(stale: Array) -> dict[str, Array]:
            return {"codes": self.contents.of(cluster, stale)}

        return self._codes.get(cluster, nodes, compute)["codes"]

    def tiers(self, typical: TypicalPods, milli: int, cluster: ClusterState, nodes: Array) -> Array:
        """(len(nodes), D) plan tier of placing a share of ``milli`` on each device."""
        codes = self.device_codes(cluster, nodes)
        tiers: Array = np.asarray(self.plan(typical).tiers(milli, codes, self.contents))
        return tiers
