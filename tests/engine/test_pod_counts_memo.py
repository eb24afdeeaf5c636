"""The memo shared by PodTopologySpread and InterPodAffinity answers exactly what a fresh
computation answers, and forgets everything when placements, nodes or Namespaces change."""

from __future__ import annotations

import random

import numpy as np
import pytest

from fairgpu.engine.plugins._pod_counts import memo, selector_counts
from fairgpu.model.selectors import LabelSelector
from tests.builders import cluster, k8s_node, k8s_pod
from tests.engine.profiles import feasible

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
WEB = LabelSelector((("app", "web"),))


def _constrained(name: str) -> object:
    sel = {"matchLabels": {"app": "web"}}
    return k8s_pod(
        name,
        labels={"app": "web"},
        topologySpreadConstraints=[
            {
                "topologyKey": ZONE,
                "maxSkew": 1,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": sel,
            }
        ],
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": sel, "topologyKey": HOST}
                ]
            }
        },
    )


def test_selector_counts_are_shared_read_only_and_dropped_on_change() -> None:
    state = cluster(
        k8s_node("n1"), k8s_node("n2"), placed=[(k8s_pod("a", labels={"app": "web"}), "n1")]
    )
    first = selector_counts(state, frozenset({"default"}), WEB)
    assert selector_counts(state, frozenset({"default"}), WEB) is first
    assert first.tolist() == [1, 0]
    with pytest.raises(ValueError):
        first[0] = 5
    state.assign(k8s_pod("b", labels={"app": "web"}), 1)
    assert selector_counts(state, frozenset({"default"}), WEB).tolist() == [1, 1]
    assert selector_counts(state, frozenset({"other"}), WEB).tolist() == [0, 0]
    memo(state)["x"] = 1
    state.namespace_labels = {"default": {"tier": "prod"}}  # a new mapping: memo emptied
    assert "x" not in memo(state)


def test_memoised_filters_match_a_fresh_cluster_under_churn() -> None:
    rng = random.Random(5)
    nodes = [k8s_node(f"n{i}", labels={ZONE: "abc"[i % 3]}) for i in range(7)]
    state = cluster(*nodes)
    placed: list[tuple[object, str]] = []
    for i in range(60):
        if placed and rng.random() < 0.3:
            pod, _ = placed.pop(rng.randrange(len(placed)))
            state.release(pod.uid)  # type: ignore[attr-defined]
        else:
            pod = _constrained(f"p{i}")
            ok = feasible(["PodTopologySpread", "InterPodAffinity"], pod, state)
            fresh = cluster(*nodes, placed=list(placed))  # type: ignore[arg-type]
            assert ok == feasible(["PodTopologySpread", "InterPodAffinity"], pod, fresh)
            if ok:
                name = rng.choice(ok)
                state.assign(pod, state.node_index[name])  # type: ignore[arg-type]
                placed.append((pod, name))
    assert len(state.pods) == len(placed)
    assert np.array_equal(
        selector_counts(state, None, WEB),
        np.bincount([state.node_index[n] for _, n in placed], minlength=7),
    )
