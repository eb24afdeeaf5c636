"""ImageLocality: prefer nodes that already have the pod's container images.

kube-scheduler 1.34's score, exactly: for each of the pod's containers (init containers
included) whose image (:func:`~fairgpu.model.pod.normalized_image_name`) a node has, the
image's size weighed by the share of all nodes that have it
(:meth:`~fairgpu.cluster.images.ImageStates.spread_size`: an image on every node gains no
node anything over another, and a small image on one node does not pull every pod there);
the sum, clamped to [23 MiB, 1000 MiB x the pod's containers], scaled to 0-100. Not
normalized across nodes. GPU images are large (10-20 GB), so where they are cached decides
how long a pod takes to start.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import MAX_NODE_SCORE, CycleState, ScorePlugin
from fairgpu.model.pod import PodInfo

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


class ImageLocality(ScorePlugin):
    """kube-scheduler's ImageLocality score."""

    name = "ImageLocality"

    def applies(self, pod: PodInfo, cluster: ClusterState) -> bool:
        """No node reports images (a simulated cluster, most tests): every node scores 0."""
        return bool(pod.images) and bool(cluster.images)

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """0-100 per node slot in ``nodes``: how much of the pod's images it has."""
        states = cluster.images
        slot_sum = np.zeros(cluster.size, dtype=np.int64)
        for name in pod.images:
            got = states.spread_size(name)
            if got is not None:
                scaled, slots = got
                slot_sum[slots] += scaled
        top = MAX_CONTAINER_THRESHOLD * len(pod.images)
        sums = np.clip(slot_sum[nodes], MIN_THRESHOLD, top)
        # Integer arithmetic as kube's (int64, truncating; every term is non-negative).
        return np.asarray(MAX_NODE_SCORE * (sums - MIN_THRESHOLD) // (top - MIN_THRESHOLD))
