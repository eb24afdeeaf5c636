"""GPU asks against the contract of model/gpu.py, through decoding and the engine.

Shares never land on MIG slices; asks no node can ever meet are unresolvable with their own
reason; asks that make no sense are refused when the pod is decoded, naming pod and field;
and a pending pod's reason is its own, never one borrowed from a different kind of ask.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

import pytest

from fairgpu.api.errors import InvalidObjectError
from fairgpu.cluster.state import ClusterState
from fairgpu.engine import memo as memo_keys
from fairgpu.engine.engine import CycleResult, Engine, Unschedulable
from fairgpu.engine.plugins.gpu import INSUFFICIENT_GPU, MIG_NOT_SHARED, NO_DEVICE
from fairgpu.model.gpu import device_sharing_problem
from fairgpu.model.pod import PodInfo
from tests.builders import cluster, k8s_node, k8s_pod

MIG_SINGLE = {
    "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb",
    "nvidia.com/mig.strategy": "single",
}


# The pods here run in team-a and ask one CPU and 1 GiB besides what each test names.
team_pod = partial(k8s_pod, namespace="team-a", cpu="1", memory="1Gi", created=0)


def cycle(state: ClusterState, *pending: PodInfo, engine: Engine | None = None) -> CycleResult:
    return (engine or Engine()).cycle(state, list(pending), 0.0)


def pending_of(result: CycleResult) -> dict[str, Unschedulable]:
    return {u.pod.name: u for u in result.unschedulable}


def bound_to(result: CycleResult) -> dict[str, str]:
    return {b.pod.name: b.node_name for b in result.binds}


# ---- decoding: asks that make no sense --------------------------------------------------------
@pytest.mark.parametrize("section", ["requests", "limits"])
def test_zero_gpus_with_a_share_is_refused_naming_pod_and_field(section: str) -> None:
    ask = {"nvidia.com/gpu": 0, "nvidia.com/gpucores": 50}
    with pytest.raises(InvalidObjectError) as caught:
        if section == "requests":
            team_pod("zero", requests=ask)
        else:
            team_pod("zero", limits=ask)
    assert caught.value.obj == "Pod team-a/zero"
    assert caught.value.field == f"spec.containers[0].resources.{section}.nvidia.com/gpu"
    assert "nvidia.com/gpucores 50" in str(caught.value)


def test_a_share_without_a_gpu_count_still_means_one_device() -> None:
    pod = team_pod("share", requests={"nvidia.com/gpucores": 50})
    assert (pod.gpu.count, pod.gpu.milli) == (1, 500)


def test_a_share_of_a_mig_slice_is_refused_naming_pod_and_field() -> None:
    with pytest.raises(InvalidObjectError) as caught:
        team_pod("mixed", requests={"nvidia.com/gpucores": 30, "nvidia.com/mig-1g.5gb": 1})
    assert caught.value.obj == "Pod team-a/mixed"
    assert "nvidia.com/gpucores" in caught.value.problem
    assert "nvidia.com/mig-1g.5gb" in caught.value.problem
    whole_slices = team_pod("slices", requests={"nvidia.com/mig-1g.5gb": 2})
    assert whole_slices.requests["nvidia.com/mig-1g.5gb"] == 2


# ---- MIG: slices are never shared ------------------------------------------------------------
def test_a_share_never_lands_on_a_mig_slice() -> None:
    state = cluster(k8s_node("mig", MIG_SINGLE, gpus=7))
    shares = [team_pod(f"s{i}", requests={"nvidia.com/gpucores": 30}) for i in range(4)]
    result = cycle(state, *shares)
    assert result.binds == []
    for item in result.unschedulable:
        assert not item.resolvable, item.reason
        assert "MIG slices" in item.reason and "cannot be shared" in item.reason
        assert "nvidia.com/gpucores" in item.reason


def test_a_share_goes_to_a_real_gpu_beside_mig_nodes() -> None:
    state = cluster(k8s_node("mig", MIG_SINGLE, gpus=7), k8s_node("plain", gpus=1))
    shares = [team_pod(f"s{i}", requests={"nvidia.com/gpucores": 30}, created=i) for i in range(4)]
    result = cycle(state, *shares)
    assert bound_to(result) == {"s0": "plain", "s1": "plain", "s2": "plain"}
    last = pending_of(result)["s3"]
    assert last.resolvable
    assert f"1 {MIG_NOT_SHARED}" in last.reason and f"1 {NO_DEVICE}" in last.reason
    whole = team_pod("whole", requests={"nvidia.com/gpu": 2})
    assert bound_to(cycle(state, whole)) == {"whole": "mig"}  # whole slices are fine


# ---- asks no node can ever meet ---------------------------------------------------------------
MIG_MIXED = {"nvidia.com/mig.strategy": "mixed"}


def test_more_mig_slices_than_any_node_has_is_unresolvable() -> None:
    state = cluster(
        k8s_node("a", MIG_MIXED, extra={"nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-1g.5gb": 1}),
        k8s_node("b", MIG_MIXED, extra={"nvidia.com/mig-1g.5gb": 7}),
    )
    greedy = team_pod("greedy", requests={"nvidia.com/mig-3g.40gb": 3})
    unknown = team_pod("unknown", requests={"nvidia.com/mig-2g.20gb": 1})
    fits = team_pod("fits", requests={"nvidia.com/mig-3g.40gb": 2})
    result = cycle(state, greedy, unknown, fits)
    assert bound_to(result) == {"fits": "a"}
    pending = pending_of(result)
    assert not pending["greedy"].resolvable and not pending["unknown"].resolvable
    assert pending["greedy"].reason == (
        "nvidia.com/mig-3g.40gb: 3 MIG 3g.40gb instance(s) asked, no node has more than 2"
    )
    assert pending["unknown"].reason == (
        "nvidia.com/mig-2g.20gb: no node offers MIG profile 2g.20gb "
        "(profiles offered: 1g.5gb, 3g.40gb)"
    )


# ---- each pending pod's reason is its own -----------------------------------------------------
def _half_used(gpus: int = 2) -> ClusterState:
    """One node whose every GPU runs a 60% share: no device is idle."""
    state = cluster(k8s_node("n1", gpus=gpus))
    for d in range(gpus):
        running = team_pod(f"run{d}", requests={"nvidia.com/gpucores": 60})
        state.assign(running, 0, (d,))
    return state


def own_reason(state_factory: Any, pod: PodInfo) -> str:
    """The reason ``pod`` gets when it is the only pending pod."""
    return pending_of(cycle(state_factory(), pod))[pod.name].reason


def test_a_whole_gpu_pod_is_not_told_a_share_pods_reason() -> None:
    share = team_pod("share", requests={"nvidia.com/gpucores": 50, "nvidia.com/gpumem": 4096})
    whole = team_pod("whole", requests={"nvidia.com/gpu": 1}, created=1)
    pending = pending_of(cycle(_half_used(), share, whole))
    assert NO_DEVICE in pending["share"].reason
    assert pending["whole"].reason == f"0/1 nodes are available: 1 {INSUFFICIENT_GPU}."
    assert pending["whole"].reason == own_reason(_half_used, whole)


def test_a_pod_asking_more_cpu_gets_its_own_reason() -> None:
    small = team_pod("small", requests={"nvidia.com/gpu": 1})
    big = team_pod("big", requests={"nvidia.com/gpu": 1, "cpu": "64"}, created=1)
    pending = pending_of(cycle(_half_used(), small, big))
    assert pending["small"].reason == f"0/1 nodes are available: 1 {INSUFFICIENT_GPU}."
    assert pending["big"].reason == "0/1 nodes are available: 1 Insufficient cpu."


def test_a_bigger_gpu_ask_still_borrows_a_reason_that_is_its_own() -> None:
    one = team_pod("one", requests={"nvidia.com/gpu": 1})
    # More GPUs and more CPU, still below what every node with room for "one" has free.
    two = team_pod("two", requests={"nvidia.com/gpu": 2, "cpu": "3"}, created=1)
    engine = Engine()
    calls: list[str] = []
    schedule = engine.scheduler.schedule
    engine.scheduler.schedule = lambda pod, *a, **k: (
        calls.append(pod.name)
        or schedule(  # type: ignore[method-assign]
            pod, *a, **k
        )
    )
    pending = pending_of(cycle(_half_used(), one, two, engine=engine))
    assert calls == ["one"]  # the shortcut still answers for the bigger ask
    assert pending["two"].reason == own_reason(_half_used, two)


def test_existing_anti_affinity_against_one_pods_labels_does_not_stop_another() -> None:
    state = cluster(k8s_node("n1", cpu="4"), k8s_node("n2", cpu="4"))
    guard = team_pod(
        "guard",
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "x"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
    )
    state.assign(guard, 0)
    filler = team_pod("filler", requests={"cpu": "4"})
    state.assign(filler, 1)
    repelled = team_pod("repelled", labels={"app": "x"})
    welcome = team_pod("welcome", labels={"app": "y"}, created=1)
    result = cycle(state, repelled, welcome)
    assert bound_to(result) == {"welcome": "n1"}
    assert "anti-affinity" in pending_of(result)["repelled"].reason


def test_a_pod_that_may_preempt_is_not_skipped_after_one_that_may_not() -> None:
    state = cluster(k8s_node("n1", gpus=1))
    low = team_pod("low", requests={"nvidia.com/gpu": 1}, priority=0)
    state.assign(low, 0, (0,))
    polite = team_pod(
        "polite", requests={"nvidia.com/gpu": 1}, priority=100, preemptionPolicy="Never"
    )
    pushy = team_pod("pushy", requests={"nvidia.com/gpu": 1}, priority=100, created=1)
    result = cycle(state, polite, pushy)
    assert [e.pod.name for e in result.evictions] == ["low"]
    assert bound_to(result) == {"pushy": "n1"}


# ---- what the node's device plugin allows ------------------------------------------------------
@pytest.mark.parametrize(
    ("labels", "gpus", "needle"),
    [
        ({"nvidia.com/gpu.count": "8"}, 8, "equals its physical GPU count"),
        (
            {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.replicas": "10"},
            80,
            "counts 80 devices there",
        ),
        ({"nvidia.com/gpu.count": "8"}, 7, None),  # one GPU unhealthy: nothing to say
        ({}, 8, None),  # no physical count known: nothing honest to say
        ({"nvidia.com/gpu.count": "eight"}, 8, None),
    ],
)
def test_device_sharing_problem(labels: dict[str, str], gpus: int, needle: str | None) -> None:
    problem = device_sharing_problem(k8s_node("n1", labels, gpus=gpus))
    if needle is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith("Node n1: ") and needle in problem


def _crowded(seed: int) -> tuple[ClusterState, list[PodInfo]]:
    """Six GPU nodes with every device at least 91% busy, and 60 pending pods of every kind
    (CPU only, whole GPUs, shares; varied CPU; two node selectors): none of them fits."""
    rng = random.Random(seed)
    nodes = [
        k8s_node(f"n{i}", {"zone": "ab"[i % 2]}, gpus=4, cpu=str(rng.choice([8, 16, 32])))
        for i in range(6)
    ]
    state = cluster(*nodes)
    for i in range(6):
        for d in range(4):
            busy = team_pod(f"busy{i}-{d}", requests={"nvidia.com/gpucores": rng.randint(91, 100)})
            state.assign(busy, i, (d,))
    pending = []
    for j in range(60):
        kind = rng.choice(["cpu", "whole", "share"])
        ask: dict[str, Any] = {"cpu": str(rng.choice([1, 2, 4, 8, 30]))}
        if kind == "cpu":
            ask["memory"] = "1Ti"
        elif kind == "whole":
            ask["nvidia.com/gpu"] = rng.choice([1, 2, 4])
        else:
            ask["nvidia.com/gpucores"] = rng.choice([10, 30, 50, 90])
            if rng.random() < 0.5:
                ask["nvidia.com/gpumem"] = rng.choice([1024, 4096])
        selector = {"zone": rng.choice("ab")} if rng.random() < 0.3 else {}
        pending.append(team_pod(f"p{j}", requests=ask, created=j % 60, nodeSelector=selector))
    return state, pending


@pytest.mark.parametrize("seed", range(8))
def test_every_reason_is_the_one_the_pod_gets_without_shortcuts(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, pending = _crowded(seed)
    fast = pending_of(cycle(state, *pending))
    monkeypatch.setattr(memo_keys, "ask", lambda *args: None)
    monkeypatch.setattr(memo_keys, "memo_key", lambda *args: None)
    state, pending = _crowded(seed)
    slow = pending_of(cycle(state, *pending))
    assert len(slow) == 60
    assert {k: v.reason for k, v in fast.items()} == {k: v.reason for k, v in slow.items()}
