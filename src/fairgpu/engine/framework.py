"""Extension points of the scheduling framework.

Mirrors kube-scheduler's framework, vectorised: a filter sees *all* nodes at once and returns a
boolean mask; a score plugin scores an array of candidate node slots. Plugins return a
:class:`Status` (or masks) rather than raising; an exception inside a plugin is turned into an
``ERROR`` status for that pod only.

Order within one scheduling attempt (:meth:`fairgpu.engine.scheduler.Scheduler.schedule`)::

    pre_filter -> filter (static, then dynamic) -> observe + score + normalize (every score
    plugin) -> select (tie-break policy) -> device policy (which GPUs of the chosen node)

The attempt never changes the cluster. Placing the result, rolling it back, and holding a pod
group until all its needed members fit (what kube-scheduler's Reserve and Permit do) belong to
the engine's transactional statement (:mod:`fairgpu.engine.statement`), not to plugins.

Lifecycle hooks every plugin may override (no-ops by default), called by the scheduler:
:meth:`Plugin.on_cluster_change` then :meth:`Plugin.reset` whenever the node set changes (a
new cluster, a node added, removed or relabelled), and :meth:`Plugin.observe` for every pod a
score plugin is about to score.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.model.pod import PodInfo

MAX_NODE_SCORE = 100


class Code(enum.IntEnum):
    """Outcome of one plugin call."""

    SUCCESS = 0
    UNSCHEDULABLE = 1  # might fit after the cluster changes (e.g. preemption)
    UNRESOLVABLE = 2  # cannot fit whatever happens (bad ask, no such GPU model)
    ERROR = 4


@dataclass(frozen=True, slots=True)
class Status:
    """A plugin's verdict with human-readable reasons."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def ok(self) -> bool:
        """True for SUCCESS."""
        return self.code == Code.SUCCESS

    @staticmethod
    def unschedulable(plugin: str, *reasons: str) -> Status:
        """Build an UNSCHEDULABLE status."""
        return Status(Code.UNSCHEDULABLE, reasons, plugin)

    @staticmethod
    def unresolvable(plugin: str, *reasons: str) -> Status:
        """Build an UNRESOLVABLE status."""
        return Status(Code.UNRESOLVABLE, reasons, plugin)


SUCCESS = Status()


class AttemptError(Exception):
    """Raised by a filter where kube-scheduler's Filter returns an Error status: the whole
    attempt fails at once (on any node still feasible when the filter runs), with no
    preemption, and the message is the pod's pending reason as written."""

    def __init__(self, plugin: str, message: str) -> None:
        super().__init__(f'{_ERROR_PREFIX}"{plugin}" filter plugin: {message}')


_ERROR_PREFIX = "running "


def is_attempt_error(reason: str) -> bool:
    """Is ``reason`` the message of an attempt that failed with an error
    (:class:`AttemptError`)? An adapter reports such a pod as kube-scheduler does, with the
    condition reason ``SchedulerError`` instead of ``Unschedulable``."""
    return reason.startswith(_ERROR_PREFIX + '"')


@dataclass(slots=True)
class FilterResult:
    """A filter's verdict over all node slots.

    ``mask[i]`` is True where node ``i`` passes. ``reasons`` optionally breaks failures down:
    reason text -> mask of nodes failing for that reason (a node may fail for several).
    """

    mask: np.ndarray
    reasons: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(slots=True)
class CycleState:
    """Per-attempt scratch space shared by the plugins of one pod's scheduling attempt."""

    data: dict[str, Any] = field(default_factory=dict)
    rng: np.random.Generator | None = None


class Plugin:
    """Base of all plugins. ``name`` is the registry key used in configuration."""

    name: ClassVar[str] = ""

    def on_cluster_change(self, cluster: ClusterState) -> None:
        """The node set changed (another cluster object, or its ``static_version`` moved):
        rebuild per-node static tables. Followed by :meth:`reset`."""

    def reset(self) -> None:
        """Forget every cached result (after :meth:`on_cluster_change`, or when a plugin's own
        learned inputs changed)."""

    def observe(self, pod: PodInfo) -> None:
        """``pod`` is about to be scored: a plugin that learns from the workload (typical pod
        shapes) counts it here. Called once per scoring, so it must ignore repeats itself."""

    def learned(self) -> object | None:
        """What this plugin learned from the workload so far, as objects it keeps updating in
        place (so a reference taken once stays current, and a copy of it carries the
        learning to another instance of the same configuration); None when it learns
        nothing. Decisions depend on it: an engine that starts afresh from the same cluster
        but without it places pods differently."""
        return None

    def adopt(self, learned: object) -> None:
        """Continue from ``learned``: a copy of another instance's :meth:`learned` (same
        plugin, same arguments). Cached results that depended on the old learning go."""


class PreFilterPlugin(Plugin):
    """Checks a pod before any node is looked at (e.g. an impossible GPU ask)."""

    def pre_filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> Status:
        """Return non-SUCCESS to stop the attempt."""
        raise NotImplementedError


class FilterPlugin(Plugin):
    """Removes nodes that cannot run the pod.

    ``static`` plugins depend only on node labels, taints, names and the pod spec, never on
    load: their result is cached per pod shape until a node changes.
    """

    static: ClassVar[bool] = False

    def filter(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState
    ) -> FilterResult | np.ndarray:
        """Return a boolean mask over ``cluster.size`` slots (or a :class:`FilterResult`)."""
        raise NotImplementedError

    def skips(self, pod: PodInfo, cluster: ClusterState) -> bool:
        """True when :meth:`filter` would pass every node for ``pod`` without looking at
        them (a pod without host ports, volumes, claims, spread constraints ...): the
        scheduler then leaves the plugin out of the attempt, as kube-scheduler does for a
        plugin whose PreFilter returns Skip. Default: never."""
        return False


class ScorePlugin(Plugin):
    """Ranks feasible nodes; higher is better."""

    def applies(self, pod: PodInfo, cluster: ClusterState) -> bool:
        """False when this plugin would score every node alike for ``pod`` (it is then not
        asked to: the sum of scores is the same without it)."""
        return True

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """Raw scores for the node slots in ``nodes`` (int array), same length."""
        raise NotImplementedError

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Map raw scores to 0..MAX_NODE_SCORE; default: already in range."""
        return scores


class DevicePolicy(Plugin):
    """Chooses which GPU devices of the chosen node a pod gets."""

    def choose(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, node: int
    ) -> tuple[int, ...] | None:
        """Device indexes for ``pod`` on slot ``node``, or None if none fit."""
        raise NotImplementedError


def default_normalize(scores: np.ndarray, reverse: bool = False) -> np.ndarray:
    """kube-scheduler's DefaultNormalizeScore: scale so the maximum becomes 100."""
    scores = scores.astype(np.float64)
    top = scores.max() if scores.size else 0.0
    if top <= 0:
        return np.full_like(scores, MAX_NODE_SCORE if reverse else 0.0)
    out = np.floor(scores * MAX_NODE_SCORE / top)
    return MAX_NODE_SCORE - out if reverse else out
