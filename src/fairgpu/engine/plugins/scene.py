"""What one scoring reads of the scored nodes, and a sharing pod's distinct candidate devices.

Both fragmentation measures and the FGD lead score of one pod read the same node state; a
:class:`Scene` gathers it once. A sharing pod's score on a device depends only on the node and
the device's own free milli, so :class:`Candidates` evaluates each distinct (node, free milli)
pair once and scatters the results back to the devices.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.plugins.gpu import shared_fit
from fairgpu.engine.plugins.node_cache import cpu_left, free_milli
from fairgpu.model.pod import CPU, PodInfo

Array = npt.NDArray[Any]


class Scene:
    """What one scoring reads of the scored nodes, gathered once for every measure."""

    __slots__ = ("_candidates", "_only", "cluster", "cpu", "cpu_after", "free", "nodes", "pod")

    def __init__(self, pod: PodInfo, cluster: ClusterState, nodes: Array) -> None:
        self.pod, self.cluster, self.nodes = pod, cluster, nodes
        self.free = free_milli(cluster, nodes)
        self.cpu = cpu_left(cluster, nodes)
        self.cpu_after = self.cpu - pod.requests.get(CPU, 0)
        self._candidates: Candidates | None = None
        self._only: Array | None = None

    def restrict(self, devices: Array) -> None:
        """From now on evaluate only the (node, device) pairs set in ``devices``."""
        self._only = devices
        self._candidates = None

    def candidates(self) -> Candidates:
        """A sharing pod's distinct candidate devices."""
        if self._candidates is None:
            valid = shared_fit(self.pod, self.cluster, self.nodes)
            if self._only is not None:
                valid = valid & self._only
            self._candidates = Candidates(valid, self.free)
        return self._candidates


class Candidates:
    """The distinct (node, free milli) pairs among a sharing pod's candidate devices.

    A device's score depends on its node and its own free milli only, so the devices of one
    node with equal free milli are evaluated once (nodes mostly hold idle devices plus a few
    partly used ones: about two rows per node instead of one per device).
    """

    __slots__ = ("_cols", "_inverse", "_rows", "_shape", "free", "node")

    def __init__(self, valid: Array, free: Array) -> None:
        rows, cols = np.nonzero(valid)
        values = free[rows, cols]
        key = rows * (int(free.max(initial=0)) + 1) + values
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        self.node = rows[first]
        self.free = values[first]
        self._rows, self._cols, self._inverse = rows, cols, inverse.reshape(-1)
        self._shape = valid.shape

    def scatter(self, values: Array) -> Array:
        """(S, D) array of the per-candidate ``values``, NaN where the device cannot host."""
        out = np.full(self._shape, np.nan)
        out[self._rows, self._cols] = values[self._inverse]
        return out
