"""One scheduling attempt for one pod: filter, score, select, choose devices.

:class:`Scheduler` never mutates the cluster; callers commit a :class:`ScheduleResult` with
:meth:`ClusterState.assign` (the simulator at simulated time, the live adapter as an "assume"
before the bind). Deterministic given the seed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import (
    AttemptError,
    Code,
    CycleState,
    DevicePolicy,
    FilterPlugin,
    FilterResult,
    Plugin,
    PreFilterPlugin,
    ScorePlugin,
    Status,
)
from fairgpu.engine.profile import Profile
from fairgpu.engine.registry import Registry, default_registry
from fairgpu.engine.tie_break import NodeRanks
from fairgpu.model.pod import PodInfo

# What a failure calls the nodes a caller's ``restrict`` left out, unless it names them.
EXCLUDED = "node(s) excluded by the scheduling decision"


class Diagnosis:
    """Why a pod fits nowhere: per reason, how many nodes failed for it (first failing filter).

    Counting is deferred until :attr:`reasons` or :meth:`message` is read, because most
    failed attempts in a busy cluster are retried before anyone looks at the reason.
    """

    __slots__ = ("_deferred", "_reasons", "status", "total_nodes")

    def __init__(
        self,
        total_nodes: int = 0,
        reasons: Counter[str] | None = None,
        status: Status | None = None,
        deferred: tuple[np.ndarray, list[tuple[str, FilterResult]]] | None = None,
    ) -> None:
        self.total_nodes = total_nodes
        self.status = status
        self._reasons = reasons
        self._deferred = deferred

    @property
    def reasons(self) -> Counter[str]:
        """Reason text -> number of nodes rejected for it."""
        if self._reasons is None:
            self._reasons = Counter()
            if self._deferred is not None:
                alive, results = self._deferred
                _count_reasons(self._reasons, alive.copy(), results)
                self._deferred = None
        return self._reasons

    def message(self) -> str:
        """kube-scheduler style: ``0/500 nodes are available: 320 Insufficient nvidia.com/gpu.``"""
        if self.status is not None and self.status.reasons:
            return "; ".join(self.status.reasons)
        # As kube-scheduler: the "<count> <reason>" strings sorted as strings.
        parts = sorted(f"{count} {reason}" for reason, count in self.reasons.items())
        detail = ", ".join(parts) if parts else "no nodes in the cluster"
        return f"0/{self.total_nodes} nodes are available: {detail}."


def _count_reasons(
    reasons: Counter[str], alive: np.ndarray, results: list[tuple[str, FilterResult]]
) -> None:
    # np.count_nonzero: a boolean array's any() and sum() at a fraction of their cost
    # (no Python-level reduction wrapper), which counts here: once per filter and reason
    # of every failed attempt.
    for name, res in results:
        failing = alive & ~res.mask
        if not np.count_nonzero(failing):
            continue
        counted = np.zeros(alive.shape, dtype=bool)
        for reason, where in res.reasons.items():
            hit = failing & where
            hits = int(np.count_nonzero(hit))
            if hits:
                reasons[reason] += hits
                counted |= hit
        rest = failing & ~counted
        left = int(np.count_nonzero(rest))
        if left:
            reasons[f"node(s) rejected by {name}"] += left
        alive &= res.mask


@dataclass(slots=True)
class ScheduleResult:
    """Outcome of one attempt: a node and devices, or a diagnosis."""

    pod: PodInfo
    node: int | None = None
    node_name: str = ""
    devices: tuple[int, ...] = ()
    score: float = 0.0
    diagnosis: Diagnosis | None = None
    code: Code = Code.SUCCESS

    @property
    def ok(self) -> bool:
        """True when a node was chosen."""
        return self.node is not None

    def reason(self) -> str:
        """Human-readable reason for an unplaced pod ('' if placed)."""
        return self.diagnosis.message() if self.diagnosis else ""


class Scheduler:
    """Runs a :class:`Profile` against a :class:`ClusterState`.

    Static filters (labels, taints, names) are cached per pod shape and invalidated whenever a
    node changes; dynamic filters and scores are numpy operations over all node slots.
    ``registry`` resolves the profile's plugin names (default: :func:`default_registry`).
    """

    def __init__(self, profile: Profile, seed: int = 0, registry: Registry | None = None) -> None:
        self.profile = profile
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        registry = registry or default_registry()
        instances: dict[str, Plugin] = {}

        def get(name: str) -> Plugin:
            if name not in instances:
                instances[name] = registry.build(name, profile.plugin_args.get(name))
            return instances[name]

        self.pre_filters: list[PreFilterPlugin] = [
            self._typed(get(n), PreFilterPlugin, n) for n in profile.pre_filters
        ]
        filters = [self._typed(get(n), FilterPlugin, n) for n in profile.filters]
        self.static_filters = [f for f in filters if f.static]
        self.dynamic_filters = [f for f in filters if not f.static]
        self.scores: list[tuple[ScorePlugin, int]] = [
            (self._typed(get(s.name), ScorePlugin, s.name), s.weight)
            for s in profile.scores
            if s.weight > 0
        ]
        self.tie_scores: list[ScorePlugin] = [
            self._typed(get(n), ScorePlugin, n) for n in profile.tie_scores
        ]
        device = registry.build(
            profile.device_policy, profile.device_policy_args, device_policy=True
        )
        self.device_policy: DevicePolicy = self._typed(device, DevicePolicy, profile.device_policy)
        self.plugins: list[Plugin] = [*instances.values(), self.device_policy]
        self._cluster_id = -1
        self._static_cache: dict[tuple[object, ...], list[tuple[str, FilterResult]]] = {}
        self._static_version = -1
        self._ranks = NodeRanks(seed)
        # uid -> (pod, release_version, static_version, result) of the last failed attempt.
        self._failures: dict[str, tuple[PodInfo, int, int, ScheduleResult]] = {}

    def learned(self) -> list[tuple[str, object | None]]:
        """Each plugin's name and :meth:`~fairgpu.engine.framework.Plugin.learned`, in plugin
        order: references that stay current (copy them to carry the learning elsewhere)."""
        return [(p.name, p.learned()) for p in self.plugins]

    def adopt(self, learned: Sequence[tuple[str, object | None]]) -> None:
        """Continue from a copy of another scheduler's :meth:`learned` -- only when its
        plugins are these (the same policy); otherwise nothing is adopted. Every plugin
        rebuilds its per-cluster tables at its next attempt."""
        if [name for name, _ in learned] != [p.name for p in self.plugins]:
            return
        for plugin, (_, got) in zip(self.plugins, learned, strict=True):
            if got is not None:
                plugin.adopt(got)
        self._cluster_id = -1  # on_cluster_change for every plugin before the next attempt

    @staticmethod
    def _typed(obj: object, kind: type, name: str):  # type: ignore[no-untyped-def]
        if not isinstance(obj, kind):
            raise ValueError(f"plugin {name!r} is not a {kind.__name__}")
        return obj

    # ---- filtering ----------------------------------------------------------------------
    def _static_results(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState
    ) -> list[tuple[str, FilterResult]]:
        if self._static_version != cluster.static_version or self._cluster_id != id(cluster):
            self._static_cache.clear()
            self._static_version = cluster.static_version
            self._cluster_id = id(cluster)
            for plugin in self.plugins:
                plugin.on_cluster_change(cluster)
                plugin.reset()
        key = pod.static_key()
        cached = self._static_cache.get(key)
        if cached is None:
            cached = []
            for plugin in self.static_filters:
                result = plugin.filter(cycle, pod, cluster)
                cached.append((plugin.name, _as_result(result)))
            combined = np.ones(cluster.size, dtype=bool)
            for _, res in cached:
                combined &= res.mask
            cached.append(("", FilterResult(combined)))
            if len(self._static_cache) > 4096:
                self._static_cache.clear()
            self._static_cache[key] = cached
        return cached

    def static_mask(self, pod: PodInfo, cluster: ClusterState) -> np.ndarray:
        """Nodes that pass every load-independent filter (labels, taints, names), cached."""
        cycle = CycleState(rng=self.rng)
        mask = self._static_results(cycle, pod, cluster)[-1][1].mask
        out: np.ndarray = mask & cluster.active[: cluster.size]
        return out

    def filter(
        self,
        pod: PodInfo,
        cluster: ClusterState,
        cycle: CycleState | None = None,
        restrict: np.ndarray | None = None,
    ) -> tuple[np.ndarray, list[tuple[str, FilterResult]]]:
        """Feasibility mask over all node slots plus each filter's result (for diagnosis)."""
        cycle = cycle or CycleState(rng=self.rng)
        n = cluster.size
        static = self._static_results(cycle, pod, cluster)
        mask = static[-1][1].mask & cluster.active[:n]
        if restrict is not None:
            mask &= restrict
        results = list(static[:-1])
        for plugin in self.dynamic_filters:
            if plugin.skips(pod, cluster):
                continue  # it would pass every node: no result, as a PreFilter Skip
            if not np.count_nonzero(mask):
                break
            # Nodes still feasible: kube-scheduler runs a filter only on those, which matters
            # where a filter can fail the whole attempt (a DRA CEL error) and for cost.
            cycle.data["candidates"] = mask
            res = _as_result(plugin.filter(cycle, pod, cluster))
            results.append((plugin.name, res))
            mask &= res.mask
        return mask, results

    @staticmethod
    def diagnose(
        cluster: ClusterState,
        results: list[tuple[str, FilterResult]],
        restrict: np.ndarray | None,
        restricted: str = EXCLUDED,
    ) -> Diagnosis:
        """Attribute each failing node to the first filter that rejected it (lazily); the
        nodes ``restrict`` leaves out to ``restricted``."""
        n = cluster.size
        alive = cluster.active[:n].copy()
        total = int(np.count_nonzero(alive))
        if restrict is not None:
            outside = alive & ~restrict
            if np.count_nonzero(outside):
                reasons: Counter[str] = Counter()
                reasons[restricted] += int(np.count_nonzero(outside))
                alive &= restrict
                _count_reasons(reasons, alive, results)
                return Diagnosis(total, reasons)
        return Diagnosis(total, deferred=(alive, results))

    # ---- scoring and selection -----------------------------------------------------------
    def score(
        self, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray, cycle: CycleState
    ) -> np.ndarray:
        """Weighted sum of normalised plugin scores for the candidate slots."""
        total = np.zeros(len(nodes), dtype=np.float64)
        for plugin, weight in self.scores:
            plugin.observe(pod)
            if not plugin.applies(pod, cluster):
                continue
            raw = np.asarray(plugin.score(cycle, pod, cluster, nodes))
            total += weight * np.asarray(plugin.normalize(raw), dtype=np.float64)
        return total

    def _break_ties(
        self,
        pod: PodInfo,
        cluster: ClusterState,
        nodes: np.ndarray,
        scores: np.ndarray,
        cycle: CycleState,
    ) -> np.ndarray:
        """``scores`` with the nodes tied at the top ordered among themselves by the
        profile's ``tie_scores`` (each a further level; nodes below the top unchanged, and
        still below every tied one)."""
        top = np.flatnonzero(scores == scores.max())
        if top.size < 2:
            return scores
        out = scores.astype(np.float64, copy=True)
        for plugin in self.tie_scores:
            if not plugin.applies(pod, cluster):
                continue
            raw = np.asarray(
                plugin.normalize(np.asarray(plugin.score(cycle, pod, cluster, nodes[top])))
            )
            best = top[raw == raw.max()]
            out[np.setdiff1d(top, best)] = np.nextafter(scores.max(), -np.inf)
            top = best
            if top.size < 2:
                break
        return out

    def ranks(self, cluster: ClusterState) -> np.ndarray:
        """Fixed per-slot tie-break rank: a seeded hash of each node's name, so the order
        nodes were added in (file order, API list order) never matters."""
        return self._ranks.of(cluster)

    def select(self, nodes: np.ndarray, scores: np.ndarray, cluster: ClusterState) -> int:
        """Index into ``nodes`` of the winner under the profile's tie-break rule."""
        best = np.flatnonzero(scores == scores.max())
        if best.size == 1:
            return int(best[0])
        if self.profile.tie_break == "fixed-rank":
            ranks = self.ranks(cluster)[nodes[best]]
            return int(best[np.argmin(ranks)])
        return int(best[self.rng.integers(best.size)])

    # ---- one attempt ----------------------------------------------------------------------
    def schedule(
        self,
        pod: PodInfo,
        cluster: ClusterState,
        restrict: np.ndarray | None = None,
        restricted: str = EXCLUDED,
    ) -> ScheduleResult:
        """Choose a node and devices for ``pod`` without changing ``cluster``.

        ``restrict`` optionally limits the candidates (e.g. a nominated node after preemption);
        a failure counts the nodes it leaves out as ``restricted`` ("N node(s) ...").
        """
        if pod.error:
            diag = Diagnosis(status=Status.unresolvable("Decode", pod.error))
            return ScheduleResult(pod, diagnosis=diag, code=Code.UNRESOLVABLE)
        # A spread pod's failure can clear when another pod lands (the minimum domain grows).
        cacheable = restrict is None and not pod.has_pod_affinity and not pod.spread_constraints
        if cacheable:
            # Assigns only take capacity, so a failure stands until something is released.
            hit = self._failures.get(pod.uid)
            if (
                hit is not None
                and hit[0] is pod
                and hit[1] == cluster.release_version
                and hit[2] == cluster.static_version
            ):
                return hit[3]
        try:
            result = self._attempt(pod, cluster, restrict, restricted)
        except AttemptError as error:
            status = Status(Code.ERROR, (str(error),))
            result = ScheduleResult(pod, diagnosis=Diagnosis(status=status), code=Code.ERROR)
        except Exception as error:  # a broken plugin must fail only this pod, not the cycle
            status = Status(Code.ERROR, (f"plugin error: {type(error).__name__}: {error}",))
            return ScheduleResult(pod, diagnosis=Diagnosis(status=status), code=Code.ERROR)
        if cacheable:
            if result.ok:
                self._failures.pop(pod.uid, None)
            else:
                if len(self._failures) > 100_000:
                    self._failures.clear()
                self._failures[pod.uid] = (
                    pod,
                    cluster.release_version,
                    cluster.static_version,
                    result,
                )
        return result

    def _attempt(
        self,
        pod: PodInfo,
        cluster: ClusterState,
        restrict: np.ndarray | None,
        restricted: str = EXCLUDED,
    ) -> ScheduleResult:
        cycle = CycleState(rng=self.rng)
        for plugin in self.pre_filters:
            status = plugin.pre_filter(cycle, pod, cluster)
            if not status.ok:
                return ScheduleResult(pod, diagnosis=Diagnosis(status=status), code=status.code)
        mask, results = self.filter(pod, cluster, cycle, restrict)
        nodes = mask.nonzero()[0]
        if nodes.size == 0:
            return ScheduleResult(
                pod,
                diagnosis=self.diagnose(cluster, results, restrict, restricted),
                code=Code.UNSCHEDULABLE,
            )
        if nodes.size == 1 and self.profile.skip_scoring_single_node:
            chosen, score = int(nodes[0]), 0.0
        else:
            scores = self.score(pod, cluster, nodes, cycle)
            if self.tie_scores:
                scores = self._break_ties(pod, cluster, nodes, scores, cycle)
            pick = self.select(nodes, scores, cluster)
            chosen, score = int(nodes[pick]), float(scores[pick])
        devices = self.device_policy.choose(cycle, pod, cluster, chosen)
        if devices is None:  # a filter/device-policy disagreement is a bug, not a user error
            status = Status(Code.ERROR, (f"no GPU device fits on {cluster.node(chosen).name}",))
            return ScheduleResult(pod, diagnosis=Diagnosis(status=status), code=Code.ERROR)
        return ScheduleResult(pod, chosen, cluster.node(chosen).name, devices, score)


def _as_result(result: FilterResult | np.ndarray) -> FilterResult:
    return result if isinstance(result, FilterResult) else FilterResult(np.asarray(result, bool))
