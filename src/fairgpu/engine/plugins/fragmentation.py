"""Our fragmentation-aware placement score (policies ``fairgpu-frag*``) and its device choice.

The pieces it combines live in their own modules: the typical shapes
(:mod:`~fairgpu.engine.plugins.shape_learning`), the two fragmentation measures
(:mod:`~fairgpu.engine.plugins.fgd_measure`, :mod:`~fairgpu.engine.plugins.capacity_measure`),
FGD's score (:mod:`~fairgpu.engine.plugins.fgd_score`), the gap balance
(:mod:`~fairgpu.engine.plugins.gap_balance`), the packing plan's tier
(:mod:`~fairgpu.engine.plugins.plan_tier`) and the lexicographic key they are ranked by
(:mod:`~fairgpu.engine.plugins.lex_key`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState
from fairgpu.engine.plugins.device_choice import DeviceFromOwnScore
from fairgpu.engine.plugins.fgd_score import sigmoid_score
from fairgpu.engine.plugins.fragmentation_base import FragmentationBase
from fairgpu.engine.plugins.gap_balance import GapCounts, gap_balance
from fairgpu.engine.plugins.lex_key import capacity_level, gap_level, with_plan_tier
from fairgpu.engine.plugins.node_cache import (
    DEVICE_CHOICE,
    NodeCache,
    cache_for,
    pod_shape_key,
)
from fairgpu.engine.plugins.plan_tier import PlanTier
from fairgpu.engine.plugins.scene import Scene
from fairgpu.model.pod import PodInfo

Array = npt.NDArray[Any]
LEADS = ("none", "fgd")
SHARING_TIES = ("capacity", "gap-balance")


class FragmentationScore(FragmentationBase):
    """Our fragmentation-aware score (policy ``fairgpu-frag``).

    Lexicographic, exact: the smallest increase of expected fragmentation (``measure``,
    default ``capacity``), untruncated, in milli-GPU; a sharing pod's device is chosen
    jointly with the node (the device giving the best node score). Remaining ties go to the
    profile's tie-break (``fixed-rank`` keeps filling the same nodes). Args as
    :class:`~fairgpu.engine.plugins.fragmentation_base.FragmentationBase`, the measure's
    (:meth:`~fairgpu.engine.plugins.fragmentation_base.FragmentationBase.set_measure`), plus:

    ``lead="fgd"`` (policy ``fairgpu-frag-lex``) puts FGD's truncated score first and the
    measure's change below it (:mod:`~fairgpu.engine.plugins.lex_key`).

    ``sharing_ties="gap-balance"`` (with ``lead="fgd"``) orders a sharing pod's FGD ties
    differently: first by the packing capacity of the shapes pinned to GPU models only (so
    unpinned pods keep off the GPUs scarce models need), then by
    :func:`~fairgpu.engine.plugins.gap_balance.gap_balance`; whole-GPU and CPU-only pods keep
    the capacity order.

    ``packing_plan=True`` (with ``sharing_ties="gap-balance"``) puts a tier above FGD's score
    for sharing pods: a partly used device whose shares plus this one are part of an optimal
    packing of the workload's share sizes first, then an idle device, then the rest
    (:class:`~fairgpu.engine.plugins.packing_plan.PackingPlan`).
    """

    name = "FragmentationAware"

    def __init__(
        self,
        typical_pods: Sequence[dict[str, Any]] | None = None,
        *,
        coverage: float = 0.95,
        learn_every: int = 256,
        relearn_threshold: float = 0.2,
        measure: str = "capacity",
        use_memory: bool = False,
        capacity_shapes: str = "typical",
        scarcity: float = 0.0,
        lead: str = "none",
        sharing_ties: str = "capacity",
        packing_plan: bool = False,
    ) -> None:
        super().__init__(typical_pods, coverage, learn_every, relearn_threshold)
        self.set_measure(measure, use_memory, capacity_shapes, scarcity)
        _check_options(self.name, lead, sharing_ties, packing_plan)
        self.lead = lead
        self.sharing_ties = sharing_ties
        self.packing_plan = packing_plan
        self._plan = PlanTier()
        self._gap_counts = GapCounts()
        self._device_caches: dict[tuple[Any, ...], NodeCache] = {}
        self._lead_caches: dict[tuple[Any, ...], NodeCache] = {}

    def reset(self) -> None:
        """Also forget the per-device scores of sharing pods, the cached FGD deltas and the
        packing plan (it follows the typical shapes)."""
        super().reset()
        self._device_caches = {}
        self._lead_caches = {}
        self._plan.shapes_changed()

    def learned(self) -> object | None:
        """The shape learner and the packing plan tier: the plan is solved again only when
        the shares move enough (:class:`~fairgpu.engine.plugins.plan_tier.PlanTier`), so
        which plan is in use depends on the shapes seen before, not only on the last ones."""
        return (self.learner, self._plan)

    def adopt(self, learned: object) -> None:
        """Continue with another instance's shape learner and plan (copies)."""
        if not isinstance(learned, tuple) or not isinstance(learned[1], PlanTier):
            raise TypeError(f"{self.name}: cannot adopt {type(learned).__name__}")
        self._plan = learned[1]
        self._plan.cluster_changed()  # its device contents describe the other cluster
        super().adopt(learned[0])

    def on_cluster_change(self, cluster: ClusterState) -> None:
        """Also forget the devices' contents and gap counts (another cluster or node set)."""
        super().on_cluster_change(cluster)
        self._plan.cluster_changed()
        self._gap_counts = GapCounts()

    def _any_pinned_shape(self) -> bool:
        """Whether some shape the capacity measure counts is pinned to GPU models."""
        return any(models is not None for models in self.capacity_typical().models)

    def _fgd_lead(self, pod: PodInfo, cluster: ClusterState, nodes: Array, scene: Scene) -> Array:
        """FGD's deltas for ``nodes`` (as :meth:`deltas`), cached per node version under a key
        without the pod's memory: pods that differ only in memory (separate score caches when
        the capacity measure counts memory) share them."""
        if not self.use_memory:
            return self.deltas(pod, cluster, nodes, measure="fgd", scene=scene)[0]

        def compute(stale: Array) -> dict[str, Array]:
            part = scene if stale.size == nodes.size else None
            return {"lead": self.deltas(pod, cluster, stale, measure="fgd", scene=part)[0]}

        cache = cache_for(self._lead_caches, pod_shape_key(pod))
        return cache.get(cluster, nodes, compute)["lead"]

    def score(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: Array) -> Array:
        """As :meth:`CachedNodeScore.score`; under ``gap-balance`` a sharing pod's cached
        per-device scores get the gap-balance level of the moment before each node picks its
        device (the level reads every device of the cluster, so it is never cached)."""
        if self.sharing_ties != "gap-balance" or not pod.gpu.is_shared:
            return super().score(cycle, pod, cluster, nodes)
        self.check_cluster(cluster)
        per_device = self._device_scores(pod, cluster, nodes)
        counts = self._gap_counts.counts(cluster)
        balance = gap_balance(cluster, nodes, pod.gpu.milli, counts)
        total = per_device + gap_level(balance)
        best = np.argmax(total, axis=1)
        cycle.data[DEVICE_CHOICE] = (nodes, best)
        scores: Array = total[np.arange(nodes.size), best]
        return scores

    def _device_scores(self, pod: PodInfo, cluster: ClusterState, nodes: Array) -> Array:
        """(len(nodes), D) lexicographic keys: the packing plan's tier (with
        ``packing_plan``), FGD's truncated score, the pinned shapes' capacity change (on each
        node's best devices); -inf where the device cannot host; cached per node version."""

        def compute(stale: Array) -> dict[str, Array]:
            scene = Scene(pod, cluster, stale)
            lead = self._fgd_lead(pod, cluster, stale, scene)
            top = sigmoid_score(np.nan_to_num(lead))
            if self.packing_plan:
                tiers = self._plan.tiers(self.shapes(), pod.gpu.milli, cluster, stale)
                top = with_plan_tier(top, tiers)
            top = np.where(np.isnan(lead), -math.inf, top)
            if not self._any_pinned_shape():
                # Without model-pinned shapes the pinned capacity changes by the pod's own milli
                # on every device: it orders nothing.
                return {"values": top}
            # Only a node's best devices so far can be its choice: the capacity measure (the
            # costly part) is computed for those alone.
            best = top == top.max(axis=1, keepdims=True)
            scene.restrict(best & np.isfinite(top))
            pinned, _ = self.deltas(pod, cluster, stale, measure="capacity-pinned", scene=scene)
            tie = capacity_level(np.floor(np.nan_to_num(pinned)))
            return {"values": np.where(best, top + tie, top)}

        cache = cache_for(self._device_caches, self.cache_key(pod))
        return cache.get(cluster, nodes, compute)["values"]

    def compute(self, pod: PodInfo, cluster: ClusterState, nodes: Array) -> tuple[Array, Array]:
        """Per node: the key (FGD's score first with ``lead="fgd"``, then the measure's
        change) and, for sharing pods, the device reaching it."""
        scene = Scene(pod, cluster, nodes)
        lead = None
        if self.lead == "fgd" and pod.gpu.is_shared:
            # FGD's integer score comes first: a device below its node's best FGD score can
            # never be the node's choice, so only the devices at that score get the (costly)
            # measure.
            lead = self._fgd_lead(pod, cluster, nodes, scene)
            top = np.where(np.isnan(lead), -1.0, sigmoid_score(np.nan_to_num(lead)))
            scene.restrict(top == top.max(axis=1, keepdims=True))
        delta, _ = self.deltas(pod, cluster, nodes, scene=scene)
        key = np.floor(delta)  # (S, D) or (S, 1)
        if self.lead == "fgd":
            if lead is None:
                lead = self._fgd_lead(pod, cluster, nodes, scene)
            key = sigmoid_score(np.nan_to_num(lead)) + capacity_level(key)
            key = np.where(np.isnan(delta), np.nan, key)
        if delta.shape[1] == 1 and not pod.gpu.is_shared:
            return key[:, 0], np.full(nodes.size, -1)
        key = np.where(np.isnan(delta), -math.inf, key)
        best = np.argmax(key, axis=1)
        return key[np.arange(nodes.size), best], best


def _check_options(owner: str, lead: str, sharing_ties: str, packing_plan: bool) -> None:
    """Reject unknown or inconsistent options of :class:`FragmentationScore`."""
    if lead not in LEADS:
        raise ValueError(f"{owner}.lead: unknown {lead!r} (none | fgd)")
    if sharing_ties not in SHARING_TIES:
        raise ValueError(f"{owner}.sharing_ties: unknown {sharing_ties!r} (capacity | gap-balance)")
    if sharing_ties == "gap-balance" and lead != "fgd":
        raise ValueError(f"{owner}.sharing_ties: gap-balance needs lead='fgd'")
    if packing_plan and sharing_ties != "gap-balance":
        raise ValueError(f"{owner}.packing_plan: needs sharing_ties='gap-balance'")


class DeviceFragmentation(DeviceFromOwnScore):
    """Our policy's device choice, evaluated jointly with the node (see
    :class:`FragmentationScore`)."""

    name = "frag"
    scorer = FragmentationScore
