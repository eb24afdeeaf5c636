"""Shared machinery of the fragmentation-aware scores (FGD and ours): the workload's typical
shapes (given or learned online), which shapes may use each node's GPU model, and the exact
change of a fragmentation measure when a pod is placed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.plugins.capacity_measure import capacity_deltas
from fairgpu.engine.plugins.fgd_measure import fgd_deltas
from fairgpu.engine.plugins.model_access import ModelAccess
from fairgpu.engine.plugins.node_cache import CachedNodeScore, NodeCache
from fairgpu.engine.plugins.scene import Scene
from fairgpu.engine.plugins.shape_learning import ShapeLearner, TypicalPods
from fairgpu.model.pod import MEMORY, PodInfo

Array = npt.NDArray[Any]
# Fragmentation deltas are rounded to this many decimals of a milli-GPU.
DELTA_DECIMALS = 6
MEASURES = ("fgd", "capacity")
CAPACITY_SHAPES = ("typical", "all")


class FragmentationBase(CachedNodeScore):
    """Typical shapes (given or learned online, see :meth:`observe`) and exact ``F`` deltas.

    ``typical_pods``, ``coverage``, ``learn_every``, ``relearn_threshold``: see
    :class:`~fairgpu.engine.plugins.shape_learning.ShapeLearner`. The measure and its options
    are class defaults here (FGD's); a subclass that lets a profile choose them sets them
    through :meth:`set_measure`.
    """

    measure = "fgd"
    use_memory = False
    capacity_shapes = "typical"
    scarcity = 0.0

    def __init__(
        self,
        typical_pods: Sequence[dict[str, Any]] | None = None,
        coverage: float = 0.95,
        learn_every: int = 256,
        relearn_threshold: float = 0.2,
    ) -> None:
        super().__init__()
        self.learner = ShapeLearner(
            self.name, typical_pods, coverage, learn_every, relearn_threshold
        )
        self._access: ModelAccess | None = None
        self._full_access: ModelAccess | None = None
        self._fgd_terms = NodeCache()
        self._capacity_terms = NodeCache()
        self._pinned_terms = NodeCache()

    def set_measure(
        self, measure: str, use_memory: bool, capacity_shapes: str, scarcity: float
    ) -> None:
        """Choose the measure: ``fgd`` or ``capacity`` (packing capacity). The capacity
        measure's options: ``use_memory`` limits copies by node memory (the shapes' mean
        memory); ``capacity_shapes="all"`` counts every shape of the workload, not only the
        most frequent ones (rare shapes pinned to a scarce GPU model still claim its GPUs);
        ``scarcity`` weighs each shape by the scarcity of the GPU models it may use (all GPUs /
        GPUs it may use) to this power (0: by frequency only)."""
        if measure not in MEASURES:
            raise ValueError(f"{self.name}.measure: unknown {measure!r} (fgd | capacity)")
        if capacity_shapes not in CAPACITY_SHAPES:
            raise ValueError(
                f"{self.name}.capacity_shapes: unknown {capacity_shapes!r} (typical | all)"
            )
        self.measure = measure
        self.use_memory = use_memory
        self.capacity_shapes = capacity_shapes
        self.scarcity = float(scarcity)

    @property
    def typical(self) -> TypicalPods | None:
        """The typical shapes in use (None until the first pod is observed when learning)."""
        return self.learner.typical

    def cache_key(self, pod: PodInfo) -> tuple[Any, ...]:
        """As :meth:`CachedNodeScore.cache_key`, plus the pod's memory when the capacity
        measure counts memory."""
        key = super().cache_key(pod)
        return (*key, pod.requests.get(MEMORY, 0)) if self.use_memory else key

    def observe(self, pod: PodInfo) -> None:
        """Learn the workload's shape distribution from ``pod`` (online, see
        :meth:`ShapeLearner.observe`); a replaced distribution drops every cached score."""
        if self.learner.observe(pod):
            self._shapes_replaced()

    def learned(self) -> object | None:
        """The shape learner (typical shapes given or learned, and the counts behind them)."""
        return self.learner

    def adopt(self, learned: object) -> None:
        """Continue with another instance's shape learner (a copy)."""
        if not isinstance(learned, ShapeLearner):
            raise TypeError(f"{self.name}: cannot adopt {type(learned).__name__}")
        self.learner = learned
        self._shapes_replaced()

    def _shapes_replaced(self) -> None:
        """The typical shapes may be others now: the model-access tables (built for the
        shapes) and every cached score go."""
        self._access = None
        self._full_access = None
        self.reset()

    def on_cluster_change(self, cluster: ClusterState) -> None:
        """Rebuild the model-access tables."""
        self._access = None
        self._full_access = None

    def reset(self) -> None:
        """Forget cached scores and the cached per-node terms of both measures."""
        super().reset()
        self._fgd_terms = NodeCache()
        self._capacity_terms = NodeCache()
        self._pinned_terms = NodeCache()

    def shapes(self) -> TypicalPods:
        """The typical shapes; a clear error when there are none yet."""
        typical = self.learner.typical
        if typical is None:
            raise RuntimeError(
                f"{self.name}: no typical pod shapes: set typical_pods or observe() a pod first"
            )
        return typical

    def access_table(self, cluster: ClusterState) -> ModelAccess:
        """Which typical shapes may use each node's GPU model (rebuilt for new node slots)."""
        if self._access is None or not self._access.covers(cluster):
            self._access = ModelAccess(cluster, self.shapes())
        return self._access

    def access(self, cluster: ClusterState, nodes: Array) -> Array:
        """(len(nodes), T) usable-model mask for the typical shapes."""
        return self.access_table(cluster).rows(nodes)

    def capacity_typical(self) -> TypicalPods:
        """The shapes the capacity measure counts (all of them with ``capacity_shapes="all"``)."""
        typical = self.shapes()
        if self.capacity_shapes == "all" and typical.full is not None:
            return typical.full
        return typical

    def deltas(
        self,
        pod: PodInfo,
        cluster: ClusterState,
        nodes: Array,
        measure: str | None = None,
        scene: Scene | None = None,
    ) -> tuple[Array, Array]:
        """``F_before - F_after`` for ``nodes``, and ``F_before``.

        Sharing pods: (len(nodes), D) per candidate device (NaN where the device cannot host
        the pod). Whole-GPU and CPU-only pods: (len(nodes), 1), devices as the engine assigns
        them (lowest-index idle devices). ``measure`` overrides the plugin's measure (``fgd``
        | ``capacity`` | ``capacity-pinned``: only the shapes pinned to GPU models count);
        ``scene`` shares what was read of the nodes between the measures of one scoring.
        """
        scene = scene if scene is not None else Scene(pod, cluster, nodes)
        kind = measure or self.measure
        if kind in ("capacity", "capacity-pinned"):
            delta, before = self._capacity_deltas(scene, pinned_only=kind == "capacity-pinned")
        else:
            table = self.access_table(cluster)
            delta, before = fgd_deltas(scene, self.shapes(), table, self._fgd_terms)
        # A difference of two float sums carries rounding noise (-160 comes out as
        # -160.0000000000016); the scores truncate and floor deltas, so snap it away.
        return np.round(delta, DELTA_DECIMALS), before

    def _capacity_deltas(self, scene: Scene, pinned_only: bool) -> tuple[Array, Array]:
        """:meth:`deltas` under the capacity measure: its shapes weighted by frequency times
        scarcity; with ``pinned_only`` only the shapes pinned to some GPU models count."""
        cluster = scene.cluster
        table = self.access_table(cluster)
        typical = self.capacity_typical()
        if typical is not self.shapes():
            if self._full_access is None or not self._full_access.covers(cluster):
                self._full_access = ModelAccess(cluster, typical)
            table = self._full_access
        weight = typical.weight * table.scarcity**self.scarcity if self.scarcity else None
        if pinned_only:
            pinned = np.array([models is not None for models in typical.models])
            weight = np.where(pinned, typical.weight if weight is None else weight, 0.0)
        cache = self._pinned_terms if pinned_only else self._capacity_terms
        memory = self.use_memory and typical.memory is not None
        return capacity_deltas(scene, typical, table, weight, memory, cache)
