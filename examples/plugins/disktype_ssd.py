"""Example user policy: only place pods on nodes labelled ``disktype=ssd``.

Use it by naming it in a profile (the directory holding this file must be importable, e.g. on
``PYTHONPATH``)::

    filters: [NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodeResourcesFit,
              "disktype_ssd:DiskTypeSsd"]
    plugin_args:
      "disktype_ssd:DiskTypeSsd": {label: disktype, value: ssd}

or register it under a short name in a registry passed to the scheduler::

    reg = fairgpu.engine.registry.default_registry()
    reg.register("DiskTypeSsd", DiskTypeSsd)
    Scheduler(profile, registry=reg)

The filter is ``static`` (it only reads node labels), so the scheduler evaluates it once per pod
shape and reuses the mask until a node changes.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState, FilterPlugin, FilterResult
from fairgpu.model.pod import PodInfo


class DiskTypeSsd(FilterPlugin):
    """Filter: keep nodes whose ``label`` equals ``value`` (default ``disktype=ssd``)."""

    name = "DiskTypeSsd"
    static = True

    def __init__(self, label: str = "disktype", value: str = "ssd") -> None:
        self.label = label
        self.value = value
        self.reason = f"node(s) not labelled {label}={value}"

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """One vectorised comparison over the dictionary-encoded label column."""
        codes, vocab = cluster.label_codes(self.label)
        if self.value not in vocab:
            mask = np.zeros(cluster.size, dtype=bool)
        else:
            mask = codes == vocab.index(self.value)
        return FilterResult(mask, {self.reason: ~mask})
