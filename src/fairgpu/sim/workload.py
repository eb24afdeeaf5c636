"""What a simulation replays: nodes plus pods with arrival times and run times."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import PodInfo


@dataclass(slots=True)
class PodArrival:
    """A pod entering the queue at ``arrival`` seconds and running ``duration`` seconds once
    started (``None``: until the simulation ends)."""

    pod: PodInfo
    arrival: float = 0.0
    duration: float | None = None


@dataclass(slots=True)
class Workload:
    """A cluster and the pods submitted to it.

    ``pod_groups`` maps ``namespace/name`` of declared PodGroups to their ``minMember``;
    ``description`` is shown in reports.
    """

    name: str
    nodes: list[NodeInfo]
    arrivals: list[PodArrival]
    pod_groups: dict[str, int] = field(default_factory=dict)
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
