"""Named placement policies (presets of :class:`~fairgpu.engine.profile.Profile`).

Each policy states its tie-break rule, because on real traces the tie-break alone moves GPU
allocation by several points.
"""

from __future__ import annotations

from collections.abc import Callable

from fairgpu.engine.profile import Profile, ScoreRef

_KUBE_SCORES = [
    ScoreRef(name="TaintToleration", weight=3),
    ScoreRef(name="NodeAffinity", weight=2),
    ScoreRef(name="InterPodAffinity", weight=2),
]


def spread() -> Profile:
    """kube-scheduler's default scoring: LeastAllocated + balanced allocation, random ties."""
    return Profile(
        name="spread",
        scores=[
            *_KUBE_SCORES,
            ScoreRef(name="NodeResourcesFit", weight=1),
            ScoreRef(name="NodeResourcesBalancedAllocation", weight=1),
        ],
        device_policy="spread",
        tie_break="random",
    )


def binpack() -> Profile:
    """MostAllocated on cpu, memory and GPU compute; tightest GPU device; fixed-rank ties."""
    return Profile(
        name="binpack",
        scores=[*_KUBE_SCORES, ScoreRef(name="NodeResourcesFit", weight=5)],
        plugin_args={
            "NodeResourcesFit": {
                "strategy": "MostAllocated",
                "resources": [
                    {"name": "nvidia.com/gpu", "weight": 4},
                    {"name": "cpu", "weight": 1},
                    {"name": "memory", "weight": 1},
                ],
            }
        },
        device_policy="best-fit",
        tie_break="fixed-rank",
    )


POLICIES: dict[str, Callable[[], Profile]] = {
    "spread": spread,
    "kube-default": spread,
    "binpack": binpack,
}

DEFAULT_POLICY = "binpack"


def register_policy(name: str, factory: Callable[[], Profile]) -> None:
    """Add a named policy selectable with ``--policy``."""
    POLICIES[name] = factory


def policy(name: str) -> Profile:
    """The profile for a named policy; raises ``ValueError`` listing the known names."""
    factory = POLICIES.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}")
    return factory()
