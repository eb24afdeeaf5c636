"""Declarative scenarios: a small cluster, running pods and pending pods in; binds and
evictions out (in the style of Volcano's scheduler tests)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from fairgpu.engine.engine import Engine
from fairgpu.model.pod import QOS_BEST_EFFORT, QOS_BURSTABLE, QOS_GUARANTEED
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info
from tests.fairness.runner import gpus_by_namespace, run_until_idle

# The reclaim rule alone, without the guards against churn (reclaimMinRuntimeSeconds,
# default 60, would protect the pods these short scenarios started seconds ago;
# reclaimCooldownSeconds, default 600, would hide the rule behind the cooldown).
NO_CHURN_GUARDS: dict[str, Any] = {
    "preemption": {"reclaimMinRuntimeSeconds": 0, "reclaimCooldownSeconds": 0}
}


def engine(config: dict[str, Any] | None = None, ordering: str = "fair") -> Engine:
    return Engine(tenancy=parse_config(config), ordering=ordering)  # type: ignore[arg-type]


def flood(ordering: str, priority_a: int = 0) -> dict[str, int]:
    """A submits 10x the pods of B, C, D (optionally at a higher priority), all at once."""
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8))
    pending = []
    for t in "abcd":
        count = 40 if t == "a" else 4
        prio = priority_a if t == "a" else 0
        first = 0.0 if t == "a" else 1.0  # A's burst was submitted a moment earlier
        pending += [
            pod_info(f"{t}{j}", t, priority=prio, created=first + j / 100) for j in range(count)
        ]
    engine(ordering=ordering).cycle(state, pending, 0.0)
    return gpus_by_namespace(state)


def test_flood_cannot_take_more_than_a_fair_share() -> None:
    assert flood("fair") == {"a": 4, "b": 4, "c": 4, "d": 4}
    assert flood("kube-default")["a"] > 4  # the baseline gives the flooder more


def test_priority_never_moves_a_tenant_ahead() -> None:
    assert flood("fair", priority_a=1_000_000) == {"a": 4, "b": 4, "c": 4, "d": 4}
    assert flood("kube-default", priority_a=1_000_000) == {"a": 16}


def test_priority_orders_pods_inside_their_own_queue() -> None:
    state = cluster(node_info("n1", gpus=2))
    pending = [
        pod_info("low", "a", priority=1, created=0),
        pod_info("high", "a", priority=9, created=5),
    ]
    pending += [pod_info("b0", "b", created=1), pod_info("b1", "b", created=2)]
    res = engine().cycle(state, pending, 0.0)
    assert sorted(b.pod.name for b in res.binds) == ["b0", "high"]


def test_weights_split_three_to_one() -> None:
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8))
    pending = [pod_info(f"{t}{j}", t, created=j) for t in "ab" for j in range(20)]
    engine({"queues": [{"name": "a", "weight": 3}, {"name": "b"}]}).cycle(state, pending, 0.0)
    assert gpus_by_namespace(state) == {"a": 12, "b": 4}


def test_users_inside_a_queue_share_fairly() -> None:
    state = cluster(node_info("n1", gpus=4))
    many = [
        pod_info(f"m{j}", "q", labels={"fairgpu.io/user": "many"}, created=j) for j in range(10)
    ]
    few = [pod_info("f0", "q", labels={"fairgpu.io/user": "few"}, created=50)]
    res = engine().cycle(state, many + few, 0.0)
    assert "f0" in {b.pod.name for b in res.binds}


def test_departments_share_before_teams() -> None:
    config = {
        "queues": [
            {"name": "x"},
            {"name": "y"},
            {"name": "x1", "parent": "x"},
            {"name": "x2", "parent": "x"},
            {"name": "y1", "parent": "y"},
        ]
    }
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8))
    pending = [pod_info(f"{t}-{j}", t, created=j) for t in ("x1", "x2", "y1") for j in range(16)]
    engine(config).cycle(state, pending, 0.0)
    assert gpus_by_namespace(state) == {"x1": 4, "x2": 4, "y1": 8}


def test_a_team_holding_nothing_reclaims_from_its_department_sibling() -> None:
    """Department x: x1 holds all 16 GPUs, x2 holds nothing and asks 4. x2 is first in
    reclaim order before and after taking a GPU of x1 (same department, 1 GPU against 15):
    the department's total after the move counts x2's new GPU for x1 too -- counted for x2
    alone, x2's department looked 1 GPU fuller than x1's and the move was refused as "would
    pass 'x1' in reclaim order" (a team's first pod could then come only from elsewhere)."""
    config = {
        "queues": [{"name": "x"}, {"name": "x1", "parent": "x"}, {"name": "x2", "parent": "x"}]
    }
    placed = [(pod_info(f"x1-{j}", "x1"), f"n{j // 8}", 0.0) for j in range(16)]
    state = cluster(node_info("n0", gpus=8), node_info("n1", gpus=8), placed=placed)
    pending = [pod_info(f"x1-{j}", "x1") for j in range(16, 24)]
    pending += [pod_info(f"x2-{j}", "x2") for j in range(4)]
    res = engine(config).cycle(state, pending, 1000.0)
    assert [e.pod.namespace for e in res.evictions] == ["x1"] * 4
    assert sorted(b.pod.name for b in res.binds) == [f"x2-{j}" for j in range(4)]


def test_late_arrival_reclaims_in_dynamic_mode_only() -> None:
    for mode in ("dynamic", "static"):
        state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8))
        arrivals = [(0.0, pod_info(f"a{j}", "a", created=j), 1e6) for j in range(30)]
        arrivals += [(5.0, pod_info(f"b{j}", "b", created=10 + j), 1e6) for j in range(30)]
        eng = engine({"mode": mode, "queues": [{"name": "a"}, {"name": "b"}], **NO_CHURN_GUARDS})
        results, avg = run_until_idle(eng, state, arrivals, 8)
        assert gpus_by_namespace(state) == {"a": 8, "b": 8}, mode
        evictions = sum(len(r.evictions) for r in results)
        # Dynamic: A borrowed the idle half and gives it back by preemption. Static: A never
        # held more than its nominal half, so B starts without preemption.
        assert evictions == (8 if mode == "dynamic" else 0), mode
        assert avg["a"] > 8 if mode == "dynamic" else avg["a"] == 8


def test_static_mode_caps_at_nominal_quota() -> None:
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8))
    config = {"mode": "static", "queues": [{"name": "a", "quota": {"gpu": 3}}]}
    res = engine(config).cycle(state, [pod_info(f"a{j}", "a", created=j) for j in range(10)], 0.0)
    assert len(res.binds) == 3
    assert "above its nominal quota" in res.unschedulable[0].reason


def test_borrowing_limit_and_cohort_lending() -> None:
    config = {
        "queues": [
            {"name": "a", "cohort": "c", "quota": {"gpu": 4}, "borrowingLimit": {"gpu": 2}},
            {"name": "b", "cohort": "c", "quota": {"gpu": 4}, "lendingLimit": {"gpu": 1}},
        ]
    }
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8))
    res = engine(config).cycle(state, [pod_info(f"a{j}", "a", created=j) for j in range(10)], 0.0)
    # Nominal 4 + what B lends (1) although the borrowing limit would allow 2.
    assert len(res.binds) == 5
    assert any("cohort 'c' lends only" in u.reason for u in res.unschedulable)


def test_namespace_gpu_cap_like_resourcequota() -> None:
    state = cluster(node_info("n1", gpus=8))
    config = {"namespaceQuotas": {"a": {"requests.nvidia.com/gpu": 2}}}
    res = engine(config).cycle(state, [pod_info(f"a{j}", "a", created=j) for j in range(4)], 0.0)
    assert len(res.binds) == 2
    assert "requests.nvidia.com/gpu" in res.unschedulable[0].reason
    too_big = engine(config).cycle(
        cluster(node_info("n1", gpus=8)), [pod_info("big", "a", gpus=3)], 0.0
    )
    assert not too_big.unschedulable[0].resolvable


def test_unknown_queue_and_impossible_ask_are_explained_not_crashes() -> None:
    config = {
        "namespaceQueues": False,
        "queues": [
            {"name": "a", "namespaces": ["a"], "quota": {"gpu": 2}, "borrowingLimit": {"gpu": 0}}
        ],
    }
    state = cluster(node_info("n1", gpus=8))
    pending = [
        pod_info("x", "a", labels={"fairgpu.io/queue": "ghost"}),
        pod_info("y", "a", gpus=4),
        pod_info("z", "nowhere"),
    ]
    res = engine(config).cycle(state, pending, 0.0)
    reasons = {u.pod.name: u for u in res.unschedulable}
    assert "'ghost'" in reasons["x"].reason and not reasons["x"].resolvable
    assert "may never hold more than 2 GPU" in reasons["y"].reason and not reasons["y"].resolvable
    assert "not mapped" in reasons["z"].reason
    assert not res.binds


@pytest.mark.parametrize("gpus", [1, 0])
def test_pods_of_a_queue_that_does_not_exist_take_no_share(gpus: int) -> None:
    """Pods labelled with a queue the config lacks are never tried; kept pending cycle after
    cycle (as the live scheduler keeps them), they must not count as demand -- GPU pods (the
    pool-aware shares) or CPU-only pods (dominant shares): counted, they took a third of the
    node as a share, and b reclaimed 2 of a's 8 pods instead of 4."""
    config = {**NO_CHURN_GUARDS, "queues": [{"name": "a"}, {"name": "b"}]}
    size = {"gpus": gpus, "cpu": 1000}
    placed = [(pod_info(f"a{j}", "a", created=j, **size), "n1", 0.0) for j in range(8)]
    state = cluster(node_info("n1", gpus=8 * gpus, cpu=8000), placed=placed)
    ghost = {"fairgpu.io/queue": "ghost"}
    ghosts = [pod_info(f"g{j}", "b", labels=ghost, **size) for j in range(8)]
    pending = [pod_info(f"b{j}", "b", created=10 + j, **size) for j in range(8)]
    eng = engine(config)
    for now in (10.0, 11.0):  # the second cycle meets the ghosts again
        eng.cycle(state, [*ghosts, *(p for p in pending if p.uid not in state.placements)], now)
    held = Counter(state.pods[uid].namespace for uid in state.placements)
    assert held == {"a": 4, "b": 4}


def test_history_makes_a_recent_heavy_user_yield() -> None:
    def who_gets_the_last_gpu(half_life: float) -> str:
        eng = engine({"history": {"halfLifeSeconds": half_life, "weight": 0.5}})
        state = cluster(node_info("n1", gpus=4))
        hog = [pod_info(f"a{j}", "a", created=j) for j in range(4)]
        eng.cycle(state, hog, 0.0)
        for p in hog:  # A used the whole cluster for a while, then finished
            state.release(p.uid)
        eng.cycle(state, [], 100.0)
        state.assign(pod_info("b-run", "b"), 0, (0,), started=100.0)
        state.assign(pod_info("a-run", "a"), 0, (1,), started=100.0)
        state.assign(pod_info("c-run", "c"), 0, (2,), started=100.0)
        res = eng.cycle(
            state, [pod_info("a-next", "a", created=1), pod_info("b-next", "b", created=2)], 101.0
        )
        return res.binds[0].pod.namespace

    assert who_gets_the_last_gpu(0) == "a"  # instantaneous: equal shares, older pod first
    assert who_gets_the_last_gpu(300) == "b"


def test_fair_shares_helper_reports_demand_capped_shares() -> None:
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8))
    eng = engine({"queues": [{"name": "a", "weight": 3}]})
    pending = [pod_info(f"a{j}", "a") for j in range(20)] + [pod_info("b0", "b")]
    shares = eng.fair_shares(state, pending)
    assert shares == {"a": pytest.approx(15000), "b": pytest.approx(1000)}


def test_kube_default_orders_by_priority_then_age() -> None:
    state = cluster(node_info("n1", gpus=2))
    pending = [
        pod_info("old", "a", created=0),
        pod_info("vip", "b", priority=5, created=9),
        pod_info("new", "c", created=1),
    ]
    res = engine(ordering="kube-default").cycle(state, pending, 0.0)
    assert [b.pod.name for b in res.binds] == ["vip", "old"]


def qos_pod(name: str, qos: str, **kw: Any) -> Any:
    return pod_info(name, "a", qos=qos, **kw)


def test_within_queue_preemption_picks_minimal_victims() -> None:
    placed = [
        (qos_pod("g", QOS_GUARANTEED, priority=1), "n1", 0.0),
        (qos_pod("bu", QOS_BURSTABLE, priority=1), "n1", 0.0),
        (qos_pod("be-old", QOS_BEST_EFFORT, priority=1), "n1", 0.0),
        (qos_pod("be-new", QOS_BEST_EFFORT, priority=1), "n1", 5.0),
        (qos_pod("two", QOS_BEST_EFFORT, priority=0, gpus=2), "n2", 0.0),
        (qos_pod("hi", QOS_BEST_EFFORT, priority=50), "n2", 0.0),
        (qos_pod("hi2", QOS_BEST_EFFORT, priority=50), "n2", 0.0),
    ]
    state = cluster(node_info("n1", gpus=4), node_info("n2", gpus=4), placed=placed)
    res = engine().cycle(state, [qos_pod("urgent", QOS_BEST_EFFORT, priority=10)], 10.0)
    # n2's only victim would have priority 0 but one victim is enough on either node; the
    # lower-priority victim wins. Among equal priorities BestEffort, newest goes first.
    assert [e.pod.name for e in res.evictions] == ["two"]
    assert res.binds[0].node_name == "n2" and res.binds[0].wait_for == ("a/two",)
    state2 = cluster(node_info("n1", gpus=4), placed=placed[:4])
    res2 = engine().cycle(state2, [qos_pod("urgent", QOS_BEST_EFFORT, priority=10)], 10.0)
    assert [e.pod.name for e in res2.evictions] == ["be-new"]


@pytest.mark.parametrize(
    "config",
    [
        {"preemption": {"enabled": False}},
        {"queues": [{"name": "a", "preemption": {"withinQueue": "Never"}}]},
        {"preemption": {"minRuntimeSeconds": 60}},
    ],
)
def test_preemption_switches(config: dict[str, Any]) -> None:
    state = cluster(node_info("n1", gpus=1), placed=[(pod_info("low", "a"), "n1", 0.0)])
    res = engine(config).cycle(state, [pod_info("high", "a", priority=100)], 10.0)
    assert not res.evictions and not res.binds
    assert engine().cycle(state, [pod_info("high", "a", priority=100)], 10.0).evictions


def test_non_preemptible_queue_is_never_reclaimed() -> None:
    placed = [(pod_info(f"a{j}", "a"), "n1", 0.0) for j in range(4)]
    config = {"queues": [{"name": "a", "preemption": {"preemptible": False}}]}
    state = cluster(node_info("n1", gpus=4), placed=placed)
    assert not engine(config).cycle(state, [pod_info("b0", "b")], 10.0).evictions
    state = cluster(node_info("n1", gpus=4), placed=placed)
    res = engine(NO_CHURN_GUARDS).cycle(state, [pod_info("b0", "b")], 10.0)
    assert [e.kind for e in res.evictions] == ["reclaim"]


def test_reclaim_stops_at_the_fair_point_and_never_flows_back() -> None:
    placed = [(pod_info(f"a{j}", "a", created=j), "n1", 0.0) for j in range(8)]
    state = cluster(node_info("n1", gpus=8), placed=placed)
    eng = engine(NO_CHURN_GUARDS)
    pending = [pod_info(f"b{j}", "b", created=10 + j) for j in range(8)]
    res = eng.cycle(state, pending, 10.0)
    assert gpus_by_namespace(state) == {"a": 4, "b": 4}
    victims = [e.pod for e in res.evictions]
    assert len(victims) == 4 and all(v.namespace == "a" for v in victims)
    # Same state, the victims pending again: A must not take anything back from B.
    again = eng.cycle(state, victims + [p for p in pending if p.uid not in state.placements], 10.0)
    assert not again.evictions and not again.binds
