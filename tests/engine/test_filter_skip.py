"""Filters a pod does not concern are left out of its attempt (kube-scheduler's PreFilter
Skip): only where they would pass every node, and the attempt decides as with all of them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fairgpu.engine.framework import CycleState, FilterPlugin, FilterResult
from fairgpu.engine.policies import policy
from fairgpu.engine.scheduler import Scheduler
from fairgpu.model.pod import PodInfo
from tests.builders import cluster, k8s_pod, node_info, pod_info

ZONE = "topology.kubernetes.io/zone"


def _pods() -> dict[str, PodInfo]:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ZONE}
            ]
        }
    }
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    soft = [{**spread[0], "whenUnsatisfiable": "ScheduleAnyway"}]
    ports = [{"name": "main", "ports": [{"containerPort": 80, "hostPort": 8080}]}]
    claim = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    return {
        "plain": k8s_pod("plain", gpus=1),
        "no gpu": k8s_pod("cpu", cpu="1"),
        "host port": k8s_pod("port", gpus=1, containers=ports),
        "hard spread": k8s_pod(
            "spread", gpus=1, labels={"app": "web"}, topologySpreadConstraints=spread
        ),
        "soft spread": k8s_pod(
            "soft", gpus=1, labels={"app": "web"}, topologySpreadConstraints=soft
        ),
        "anti-affinity": k8s_pod("anti", gpus=1, labels={"app": "web"}, affinity=anti),
        "claim": k8s_pod("claim", gpus=1, volumes=claim),
    }


def _cluster(with_affinity: bool) -> Any:
    nodes = [node_info(f"n{i}", labels={ZONE: f"z{i % 2}"}) for i in range(4)]
    placed = [(pod_info("busy", gpus=4), "n0")]
    if with_affinity:
        placed.append((_pods()["anti-affinity"], "n1"))
    return cluster(*nodes, placed=placed)


def _scheduler() -> Scheduler:
    return Scheduler(policy("fairgpu-frag"))


@pytest.mark.parametrize(
    "with_affinity", [False, True], ids=["no affinity placed", "affinity placed"]
)
def test_a_skipped_filter_would_have_passed_every_node(with_affinity: bool) -> None:
    """For every pod and dynamic filter: ``skips`` only where ``filter`` passes all nodes
    and gives no reason."""
    state = _cluster(with_affinity)
    scheduler = _scheduler()
    skipped: set[tuple[str, str]] = set()
    for label, pod in _pods().items():
        for plugin in scheduler.dynamic_filters:
            if not plugin.skips(pod, state):
                continue
            skipped.add((label, plugin.name))
            got = plugin.filter(CycleState(rng=np.random.default_rng(0)), pod, state)
            res = got if isinstance(got, FilterResult) else FilterResult(np.asarray(got, bool))
            assert res.mask[: state.size].all(), (label, plugin.name)
            assert not any(np.any(m) for m in res.reasons.values()), (label, plugin.name)
    # The skip is in effect where a pod does not concern a filter, and only there.
    for name in ("NodePorts", "VolumeBinding", "PodTopologySpread", "DynamicResources"):
        assert ("plain", name) in skipped
    assert ("plain", "InterPodAffinity") in skipped or with_affinity
    assert ("plain", "InterPodAffinity") not in skipped or not with_affinity
    assert ("soft spread", "PodTopologySpread") in skipped
    assert ("host port", "NodePorts") not in skipped
    assert ("hard spread", "PodTopologySpread") not in skipped
    assert ("claim", "VolumeBinding") not in skipped
    assert ("anti-affinity", "InterPodAffinity") not in skipped
    assert ("plain", "NodeResourcesFit") not in skipped


@pytest.mark.parametrize(
    "with_affinity", [False, True], ids=["no affinity placed", "affinity placed"]
)
def test_an_attempt_without_the_skipped_filters_decides_as_with_all(
    with_affinity: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node, devices and the reasons of a failure are those of an attempt that runs every
    filter; the skipped filters' plugins are not called."""
    state = _cluster(with_affinity)
    pods = _pods()
    big = pod_info("big", gpus=8)  # fits nowhere: the failure's reasons are compared too
    calls: list[str] = []
    real = {type(p): type(p).filter for p in _scheduler().dynamic_filters}

    def counting(self: FilterPlugin, cycle: CycleState, pod: PodInfo, cl: Any) -> Any:
        calls.append(self.name)
        return real[type(self)](self, cycle, pod, cl)

    def outcome(pod: PodInfo) -> tuple[object, ...]:
        res = _scheduler().schedule(pod, state)
        return (res.ok, res.node_name, res.devices, res.reason())

    for cls in real:
        monkeypatch.setattr(cls, "filter", counting)
    skipping = {label: outcome(p) for label, p in {**pods, "big": big}.items()}
    with_skips = len(calls)
    monkeypatch.setattr(FilterPlugin, "skips", lambda self, pod, cl: False)
    for cls in real:
        monkeypatch.setattr(cls, "skips", lambda self, pod, cl: False, raising=False)
    calls.clear()
    every = {label: outcome(p) for label, p in {**pods, "big": big}.items()}
    assert skipping == every
    assert with_skips < len(calls)
