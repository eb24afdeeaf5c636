"""PodTopologySpread: ``DoNotSchedule`` constraints filter, ``ScheduleAnyway`` ones score.

kube-scheduler 1.34's rules, vectorised over node slots:

* Matching pods are counted per node (same namespace as the incoming pod, selector with
  ``matchLabelKeys`` merged) and summed per topology domain over the *eligible* nodes: those
  carrying every topology key of the pod's constraints and, per constraint, passing the pod's
  required node affinity (``nodeAffinityPolicy: Honor``, the default) and tolerating the node's
  NoSchedule/NoExecute taints (``nodeTaintsPolicy: Honor``; default Ignore).
* Filter: a node without a constraint's key fails; otherwise
  ``count(node's domain) + (1 if the pod matches itself) - global minimum <= maxSkew``, where
  the global minimum is the smallest eligible domain count, or 0 when there are fewer eligible
  domains than ``minDomains``.
* Score: per node, ``sum(count * log(domains + 2) + maxSkew - 1)`` over its constraints, fewer
  matching pods scoring higher after normalisation; hostname constraints count the node itself.
* A pod without constraints gets the cluster's default constraints, scoring only (kube's
  ``System`` defaults: hostname maxSkew 3, zone maxSkew 5), when a Service of its namespace
  selects it or it belongs to a ReplicaSet, StatefulSet or ReplicationController. Their
  selector is kube's ``DefaultSelector``: the selectors of every Service selecting the pod
  (``ClusterState.service_selectors``), merged with the controller's selector, which is
  taken to be the pod's own labels (controllers select their pods by the template labels)
  less those a StatefulSet's controller puts on each pod (:data:`STATEFUL_POD_LABELS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import (
    MAX_NODE_SCORE,
    CycleState,
    FilterPlugin,
    FilterResult,
    ScorePlugin,
)
from fairgpu.engine.plugins._pod_counts import frozen, memo, selector_counts
from fairgpu.engine.plugins.node_affinity import required_mask
from fairgpu.engine.plugins.taint_toleration import tolerated
from fairgpu.model.pod import PodInfo
from fairgpu.model.pod_constraints import HOSTNAME, ZONE, SpreadConstraint
from fairgpu.model.selectors import LabelSelector

MISSING_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
SKEW = "node(s) didn't match pod topology spread constraints"
# Deployment: the simulator's expanded Deployments own their replicas directly (live, a
# ReplicaSet owns them).
DEFAULT_OWNER_KINDS = frozenset(
    {"ReplicaSet", "StatefulSet", "ReplicationController", "Deployment"}
)
#: The labels the StatefulSet controller puts on each of its pods (its name, index and
#: revision): the pod's own, never its StatefulSet's selector, so the default spreading of
#: a StatefulSet's pods counts its other pods too.
STATEFUL_POD_LABELS = (
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "controller-revision-hash",
)
SYSTEM_DEFAULTS = (
    {"topologyKey": HOSTNAME, "maxSkew": 3},
    {"topologyKey": ZONE, "maxSkew": 5},
)
IGNORED = -1  # raw score of a node the score ignores (lacks a topology key)


def _count(cluster: ClusterState, pod: PodInfo, c: SpreadConstraint) -> np.ndarray:
    """Per-node number of placed pods in the pod's namespace matching ``c``'s selector; a
    terminating pod is not counted (kube-scheduler's ``countPodsMatchSelector`` skips pods
    with a deletionTimestamp: a rolling update must not be blocked by the pods it replaces)."""
    if c.selector is None:
        return np.zeros(cluster.size, dtype=np.int32)
    return selector_counts(cluster, frozenset((pod.namespace,)), c.selector, skip_terminating=True)


def _taints_mask(cluster: ClusterState, pod: PodInfo) -> np.ndarray:
    """Nodes whose NoSchedule/NoExecute taints the pod tolerates."""
    ids, groups = cluster.taint_groups()
    ok = np.array(
        [
            all(t.effect == "PreferNoSchedule" or tolerated(t, pod.tolerations) for t in taints)
            for taints in groups
        ],
        dtype=bool,
    )
    return ok[ids] if ids.size else np.ones(cluster.size, dtype=bool)


def _memoised(
    cluster: ClusterState, key: Hashable, compute: Callable[[], np.ndarray]
) -> np.ndarray:
    """A node mask that depends only on the nodes and pod fields in ``key``, shared by the
    pods that have the same ones (a workload's replicas)."""
    cache = memo(cluster)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = frozen(compute())
    assert isinstance(hit, np.ndarray)
    return hit


def default_selector(pod: PodInfo, cluster: ClusterState) -> LabelSelector | None:
    """kube's ``helper.DefaultSelector`` for ``pod``: the merged selectors of the Services in
    its namespace that select it, plus its labels if a default-spread controller owns it;
    None when that is empty (no default constraints then).

    A Service without a selector selects nothing (kube skips it), and selectors that all
    match one pod cannot conflict, so merging them is safe."""
    merged: dict[str, str] = {}
    for selector in cluster.service_selectors.get(pod.namespace, ()):
        if selector and all(pod.labels.get(k) == v for k, v in selector.items()):
            merged.update(selector)
    if pod.owner_kind in DEFAULT_OWNER_KINDS:
        merged.update(pod.labels)
        if pod.owner_kind == "StatefulSet":  # labels of this one pod, never in its selector
            for key in STATEFUL_POD_LABELS:
                merged.pop(key, None)
    return LabelSelector(tuple(sorted(merged.items()))) if merged else None


class _Nodes:
    """Node masks shared by the constraints of one attempt (computed on first use)."""

    def __init__(self, cluster: ClusterState, pod: PodInfo) -> None:
        self.cluster, self.pod = cluster, pod
        self._affinity: np.ndarray | None = None
        self._taints: np.ndarray | None = None

    def has_keys(self, constraints: tuple[SpreadConstraint, ...]) -> np.ndarray:
        mask = self.cluster.active[: self.cluster.size].copy()
        for c in constraints:
            mask &= self.cluster.label_codes(c.topology_key)[0] >= 0
        return mask

    def included(self, c: SpreadConstraint) -> np.ndarray | None:
        """Nodes the inclusion policies admit (None: all)."""
        mask = None
        pod = self.pod
        if c.honor_affinity and (pod.node_selector or pod.required_terms is not None):
            if self._affinity is None:
                key = ("spread_affinity", pod.node_selector, pod.required_terms)
                self._affinity = _memoised(
                    self.cluster, key, lambda: required_mask(self.cluster, pod)
                )
            mask = self._affinity
        if c.honor_taints:
            if self._taints is None:
                taint_key = ("spread_taints", pod.tolerations)
                self._taints = _memoised(
                    self.cluster, taint_key, lambda: _taints_mask(self.cluster, pod)
                )
            mask = self._taints if mask is None else mask & self._taints
        return mask


def _domain_counts(
    cluster: ClusterState, pod: PodInfo, c: SpreadConstraint, eligible: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes per node, matching pods per domain, whether each domain is eligible) for ``c``.

    Memoised per (namespace, selector, key, eligible nodes): pods of one workload share them.
    """
    key = ("spread_domains", pod.namespace, c.selector, c.topology_key, eligible.tobytes())
    cache = memo(cluster)
    hit = cache.get(key)
    if hit is None:
        counts = _count(cluster, pod, c)
        codes, vocab = cluster.label_codes(c.topology_key)
        where = eligible & (codes >= 0)
        per_domain = np.bincount(codes[where], weights=counts[where], minlength=len(vocab))
        present = np.bincount(codes[where], minlength=len(vocab)) > 0
        hit = cache[key] = (codes, frozen(per_domain.astype(np.int64)), frozen(present))
    assert isinstance(hit, tuple)
    return hit


class PodTopologySpread(FilterPlugin, ScorePlugin):
    """Topology spread constraints (filter and score) with cluster default constraints.

    Args:
        default_constraints: ``"system"`` (kube-scheduler's defaults), ``"none"`` (the
            off-switch), or a list of ``{"topologyKey", "maxSkew"}`` mappings applied, scoring
            only, to pods without constraints of their own that a Service selects or a
            controller owns.
    """

    name = "PodTopologySpread"

    def __init__(self, default_constraints: str | list[dict[str, Any]] = "system") -> None:
        if default_constraints == "system":
            items: list[dict[str, Any]] = list(SYSTEM_DEFAULTS)
        elif default_constraints == "none":
            items = []
        elif isinstance(default_constraints, list):
            items = default_constraints
        else:
            raise ValueError(
                "PodTopologySpread.default_constraints: 'system', 'none' or a list of "
                f"{{topologyKey, maxSkew}}, got {default_constraints!r}"
            )
        self.system_defaulted = default_constraints == "system"
        self.defaults: list[tuple[str, int]] = []
        for i, item in enumerate(items):
            key, skew = item.get("topologyKey"), item.get("maxSkew")
            if not isinstance(key, str) or not key or not isinstance(skew, int) or skew < 1:
                raise ValueError(
                    f"PodTopologySpread.default_constraints[{i}]: needs a topologyKey and a "
                    f"maxSkew >= 1, got {item!r}"
                )
            self.defaults.append((key, skew))

    # ---- filter ---------------------------------------------------------------------------
    def skips(self, pod: PodInfo, cluster: ClusterState) -> bool:
        """A pod without DoNotSchedule constraints."""
        return not any(c.hard for c in pod.spread_constraints)

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """DoNotSchedule constraints; every node passes for a pod without any."""
        n = cluster.size
        hard = tuple(c for c in pod.spread_constraints if c.hard)
        if not hard:
            return FilterResult(np.ones(n, dtype=bool))
        nodes = _Nodes(cluster, pod)
        has_keys = nodes.has_keys(hard)
        missing = ~has_keys
        skewed = np.zeros(n, dtype=bool)
        for c in hard:
            eligible = has_keys
            included = nodes.included(c)
            if included is not None:
                eligible = eligible & included
            codes, per_domain, present = _domain_counts(cluster, pod, c, eligible)
            domains = int(present.sum())
            if domains == 0:
                continue  # no eligible domain: the minimum is "infinite", nothing is skewed
            minimum = int(per_domain[present].min()) if domains >= c.min_domains else 0
            self_match = 1 if c.matches(pod.labels) else 0
            lookup = np.append(per_domain, 0)  # code -1 (key missing) reads 0
            skewed |= (lookup[codes] + self_match - minimum > c.max_skew) & has_keys
        mask = has_keys & ~skewed
        return FilterResult(mask, {MISSING_LABEL: missing, SKEW: skewed})

    # ---- score ----------------------------------------------------------------------------
    def _soft(
        self, pod: PodInfo, cluster: ClusterState
    ) -> tuple[tuple[SpreadConstraint, ...], bool]:
        """The constraints to score with and whether nodes must carry all their keys."""
        if pod.spread_constraints:
            return tuple(c for c in pod.spread_constraints if not c.hard), True
        selector = default_selector(pod, cluster) if self.defaults else None
        if selector is None:
            return (), True
        soft = tuple(SpreadConstraint(key, skew, False, selector) for key, skew in self.defaults)
        return soft, not self.system_defaulted

    def score(
        self, cycle: CycleState, pod: PodInfo, cluster: ClusterState, nodes: np.ndarray
    ) -> np.ndarray:
        """Raw score per candidate (lower is better; ``IGNORED`` for nodes left out)."""
        soft, require_all = self._soft(pod, cluster)
        if not soft:
            return np.full(len(nodes), IGNORED, dtype=np.int64)
        masks = _Nodes(cluster, pod)
        has_keys = masks.has_keys(soft)
        ignored = ~has_keys[nodes] if require_all else np.zeros(len(nodes), dtype=bool)
        kept = nodes[~ignored]
        total = np.zeros(len(nodes), dtype=np.float64)
        for c in soft:
            codes = cluster.label_codes(c.topology_key)[0]
            if c.topology_key == HOSTNAME:
                per_node = _count(cluster, pod, c)[nodes].astype(np.float64)
                size = len(kept)
            else:
                # Domains of the candidates ("" for a candidate lacking the key counts as one).
                cand = codes[kept]
                size = len(np.unique(cand))
                eligible = has_keys if require_all else cluster.active[: cluster.size].copy()
                included = masks.included(c)
                if included is not None:
                    eligible = eligible & included
                _, per_domain, _ = _domain_counts(cluster, pod, c, eligible)
                per_node = np.append(per_domain, 0)[codes[nodes]].astype(np.float64)
            weight = math.log(size + 2)
            has = codes[nodes] >= 0
            total += np.where(has, per_node * weight + (c.max_skew - 1), 0.0)
        raw = np.floor(total + 0.5).astype(np.int64)  # Go's math.Round on positives
        raw[ignored] = IGNORED
        return raw

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """kube-scheduler's: ``100 * (max + min - s) / max``; all zero -> 100; ignored -> 0."""
        valid = scores != IGNORED
        out = np.zeros(scores.shape, dtype=np.float64)
        if not valid.any():
            return out
        lo, hi = int(scores[valid].min()), int(scores[valid].max())
        if hi == 0:
            out[valid] = MAX_NODE_SCORE
            return out
        out[valid] = (MAX_NODE_SCORE * (hi + lo - scores[valid])) // hi
        return out
