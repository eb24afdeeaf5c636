"""Which typical pod shapes may use each node's GPU model, and how scarce their models are.

A shape pinned to GPU models (``nvidia.com/gpu.product`` in its node affinity) can only use
the GPUs of those models; the fragmentation measures count a node's free GPU milli as usable
by a shape only where the shape may run.
"""

from __future__ import annotations

import weakref
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.plugins.shape_learning import TypicalPods

Array = npt.NDArray[Any]


class ModelCodes:
    """Per node slot: a small integer code of the node's GPU model ("" for GPU-less nodes),
    and the GPUs of each model. Depends on the node set only (cached per static version)."""

    _cache: ClassVar[dict[int, tuple[weakref.ref[ClusterState], int, ModelCodes]]] = {}

    def __init__(self, cluster: ClusterState) -> None:
        vocab: dict[str, int] = {}
        codes = np.zeros(cluster.size, dtype=np.int64)
        for idx, node in enumerate(cluster.nodes):
            model = node.gpu_model if node is not None and node.gpu_count else ""
            codes[idx] = vocab.setdefault(model, len(vocab))
        self.vocab = vocab
        self.codes = codes
        self.gpus = np.zeros(len(vocab), dtype=np.float64)
        np.add.at(self.gpus, codes, np.asarray(cluster.gpu_count[: cluster.size], dtype=np.float64))

    @classmethod
    def of(cls, cluster: ClusterState) -> ModelCodes:
        """The codes of ``cluster``'s current node set (built once per static version)."""
        hit = cls._cache.get(id(cluster))
        if hit is not None and hit[0]() is cluster and hit[1] == cluster.static_version:
            return hit[2]
        if len(cls._cache) > 16:
            cls._cache.clear()
        codes = cls(cluster)
        cls._cache[id(cluster)] = (weakref.ref(cluster), cluster.static_version, codes)
        return codes


class ModelAccess:
    """Per node slot: which typical shapes may use the node's GPU model (built per cluster
    node set and per set of shapes)."""

    def __init__(self, cluster: ClusterState, typical: TypicalPods) -> None:
        models = ModelCodes.of(cluster)
        table = np.zeros((len(models.vocab), typical.size), dtype=bool)
        for model, code in models.vocab.items():
            for t, allowed in enumerate(typical.models):
                gpu_shape = typical.count[t] > 0
                table[code, t] = gpu_shape and (allowed is None or model in allowed) and model != ""
        self.codes = models.codes
        self.table = table
        # Scarcity per shape: all GPUs over the GPUs of the models the shape may use (0 when
        # none): demand for a scarce model weighs more per GPU of that model.
        gpus = models.gpus
        usable = gpus @ table
        self.scarcity = np.where(usable > 0, gpus.sum() / np.maximum(usable, 1.0), 0.0)

    def rows(self, nodes: Array) -> Array:
        """(len(nodes), T) usable-model mask."""
        rows: Array = self.table[self.codes[nodes]]
        return rows

    def covers(self, cluster: ClusterState) -> bool:
        """Whether the table has a row for every node slot of ``cluster``."""
        return bool(self.codes.size >= cluster.size)
