"""FGD as published (fragmentation gradient descent, USENIX ATC'23): place a pod where the
node's expected fragmentation drops most, through a truncated sigmoid."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import MAX_NODE_SCORE
from fairgpu.engine.plugins.device_choice import DeviceFromOwnScore
from fairgpu.engine.plugins.fragmentation_base import FragmentationBase
from fairgpu.model.pod import PodInfo

Array = npt.NDArray[Any]


def sigmoid_score(delta: Array) -> Array:
    """FGD's score of fragmentation decreases (milli-GPU): ``int(100 * sigmoid(d / 1000))``."""
    with np.errstate(over="ignore"):
        score: Array = np.trunc(MAX_NODE_SCORE / (1.0 + np.exp(-delta / 1000.0)))
    return score


class FgdScore(FragmentationBase):
    """FGD as published: ``int(100 * sigmoid((F_before - F_after) / 1000))``.

    A sharing pod is scored with its best device (the first device reaching the best
    truncated score). Args: ``typical_pods`` (see :meth:`TypicalPods.from_args`; learned
    online from the pods observed when absent), ``coverage`` (0.95), ``learn_every`` (256)
    and ``relearn_threshold`` (0.2, see :meth:`ShapeLearner.observe`).
    """

    name = "FGD"

    def compute(self, pod: PodInfo, cluster: ClusterState, nodes: Array) -> tuple[Array, Array]:
        """Truncated sigmoid scores; for sharing pods the best device's."""
        delta, _ = self.deltas(pod, cluster, nodes)
        if delta.shape[1] == 1 and not pod.gpu.is_shared:
            return sigmoid_score(delta[:, 0]), np.full(nodes.size, -1)
        scores = np.where(np.isnan(delta), -1.0, sigmoid_score(np.nan_to_num(delta)))
        best = np.argmax(scores, axis=1)  # first device with the best truncated score
        return scores[np.arange(nodes.size), best], best


class DeviceFgd(DeviceFromOwnScore):
    """FGD's device choice: the device with the best FGD score."""

    name = "fgd"
    scorer = FgdScore
