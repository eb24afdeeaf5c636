"""Profiles of a few named plugins, and what they let through, for engine tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState, FilterPlugin, FilterResult
from fairgpu.engine.profile import Profile, ScoreRef
from fairgpu.engine.scheduler import Scheduler
from fairgpu.model.pod import PodInfo


def profile(filters: list[str], scores: dict[str, int] | None = None, **kw: Any) -> Profile:
    """A profile with only the named filters and weighted scores."""
    refs = [ScoreRef(name=n, weight=w) for n, w in (scores or {}).items()]
    return Profile(pre_filters=[], filters=filters, scores=refs, **kw)


def feasible(filters: list[str], p: PodInfo, state: ClusterState) -> list[str]:
    """Names of the nodes that pass ``filters`` for pod ``p``."""
    mask, _ = Scheduler(profile(filters)).filter(p, state)
    return sorted(state.node(int(i)).name for i in np.flatnonzero(mask))


def run_filter(plugin: FilterPlugin, p: PodInfo, state: ClusterState) -> FilterResult:
    """One filter's FilterResult (a bare mask is wrapped)."""
    result = plugin.filter(CycleState(), p, state)
    return result if isinstance(result, FilterResult) else FilterResult(np.asarray(result))
