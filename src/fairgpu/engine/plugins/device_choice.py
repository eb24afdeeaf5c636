"""Device policies that take the device a score plugin chose jointly with the node."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState, DevicePolicy, ScorePlugin
from fairgpu.engine.plugins.gpu import DeviceBestFit, shared_fit
from fairgpu.engine.plugins.node_cache import scored_device
from fairgpu.model.pod import PodInfo


class DeviceFromScore(DevicePolicy):
    """Use the device the node's score was computed with (joint node/device choice).

    Falls back to the tightest fit when the score left no choice for this node (whole-GPU
    and CPU-only pods, or a different score plugin).
    """

    name = "score-device"

    def choose(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, node: int
    ) -> tuple[int, ...] | None:
        """The scored device if it still fits, else best-fit; a share of several devices
        takes the scored one and the tightest fits beside it."""
        gpu = pod.gpu
        if gpu.is_shared:
            choice = scored_device(cycle, node)
            fits = shared_fit(pod, cluster, node)
            if choice is not None and choice >= 0 and bool(fits[choice]):
                if gpu.count == 1:
                    return (choice,)
                others = np.flatnonzero(fits)
                others = others[others != choice]
                if others.size >= gpu.count - 1:
                    rest = DeviceBestFit().pick_many(cycle, cluster, node, others, gpu.count - 1)
                    return tuple(sorted([choice, *rest]))
        return DeviceBestFit().choose(cycle, pod, cluster, node)


class DeviceFromOwnScore(DeviceFromScore):
    """Device choice recorded by a score plugin; when the node was not scored (a single
    feasible node is chosen without scoring) the plugin ``scorer``, built from this policy's
    arguments, observes the pod and evaluates the node here."""

    scorer: ClassVar[type[ScorePlugin]]

    def __init__(self, **score_args: Any) -> None:
        # Built at once, not at first use: what it learns is part of the scheduler's learning
        # (Scheduler.learned) from the start.
        self._scorer: ScorePlugin = self.scorer(**score_args)

    def learned(self) -> object | None:
        """What the own scorer learned (it observes the pods it evaluates)."""
        return self._scorer.learned()

    def adopt(self, learned: object) -> None:
        """The own scorer continues from ``learned``."""
        self._scorer.adopt(learned)

    def choose(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, node: int
    ) -> tuple[int, ...] | None:
        """Scored device, or a fresh evaluation of the node."""
        if pod.gpu.is_shared and scored_device(cycle, node) is None:
            self._scorer.observe(pod)
            self._scorer.score(cycle, pod, cluster, np.array([node]))
        return super().choose(cycle, pod, cluster, node)
