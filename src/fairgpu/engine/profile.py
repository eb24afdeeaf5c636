"""Scheduling profiles: which plugins run, their weights and arguments, and the tie-break rule.

A profile is plain configuration (validated with pydantic); :mod:`fairgpu.engine.policies`
holds the named presets users select with ``--policy``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TieBreak = Literal["random", "fixed-rank"]

DEFAULT_PRE_FILTERS = [
    "SchedulingGates",
    "GpuRequestCheck",
    "VolumeRestrictions",
    "VolumeBinding",
    "DynamicResources",
]
DEFAULT_FILTERS = [
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "GpuModel",
    "NodeResourcesFit",
    "GpuFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "DynamicResources",
    "InterPodAffinity",
]


class ScoreRef(BaseModel):
    """A score plugin and its weight in the combined score."""

    model_config = ConfigDict(extra="forbid")
    name: str
    weight: int = Field(1, ge=0, le=1000)


class Profile(BaseModel):
    """A complete placement policy.

    ``tie_break``: ``random`` picks uniformly among the top-scoring nodes with the seeded RNG
    (kube-scheduler's behaviour, spreads); ``fixed-rank`` ranks every node by a seeded hash of
    its name (never the order nodes were added) and always picks the lowest rank among ties
    (keeps filling the same nodes, packs). ``tie_scores``: score plugins consulted, in order,
    only among the nodes tied at the top of the combined score, before the tie-break rule --
    a preference that must never outweigh the scores (the packing policies' image locality).
    """

    model_config = ConfigDict(extra="forbid")
    name: str = "custom"
    pre_filters: list[str] = Field(default_factory=lambda: list(DEFAULT_PRE_FILTERS))
    filters: list[str] = Field(default_factory=lambda: list(DEFAULT_FILTERS))
    scores: list[ScoreRef] = Field(default_factory=list)
    plugin_args: dict[str, dict[str, Any]] = Field(default_factory=dict)
    device_policy: str = "best-fit"
    device_policy_args: dict[str, Any] = Field(default_factory=dict)
    tie_break: TieBreak = "random"
    tie_scores: list[str] = Field(default_factory=list)
    skip_scoring_single_node: bool = True
