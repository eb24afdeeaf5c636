"""Pool precedence: on the hybrid pool inference goes before training, whatever the shares
(:mod:`fairgpu.engine.actions.pool_precedence`), and training never takes it back there."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from test_stability import STEP, PoolFlips, _assert_no_reversal, pool_flips, replay

from fairgpu.api.errors import InvalidObjectError
from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.kube.explain import _order, freed_nodes
from fairgpu.model.node_pools import derive_placement, workload_type
from fairgpu.model.pod import LABEL_WORKLOAD, PodInfo
from fairgpu.sim.accounting import RunLog
from fairgpu.sim.simulator import PodRecord
from fairgpu.tenancy import parse_config
from tests.builders import USAGE_KEY, cluster, pod_info, pool_node

RULE = {"nodes": {USAGE_KEY: "hybrid"}, "preemptor": "inference", "victims": "training"}


def work(kind: str, name: str, ns: str, gpus: int = 1, duration: float | None = None) -> PodInfo:
    """A pod of workload type ``kind``: its own pool and the hybrid one."""
    pod = pod_info(name, ns, gpus=gpus, labels={LABEL_WORKLOAD: kind}, duration=duration)
    return derive_placement(pod)


def engine(rules: bool, **weights: float) -> Engine:
    cfg: dict[str, Any] = {"queues": [{"name": q, "weight": w} for q, w in weights.items()]}
    if rules:
        cfg["preemption"] = {"poolPrecedence": [RULE]}
    return Engine(tenancy=parse_config(cfg))


def three_pools(train_on_hybrid: int, serve_on_hybrid: int, started: float = 0.0) -> ClusterState:
    """A training, a hybrid and an inference node of 8 GPUs; ``train`` fills the training
    node, ``serve`` the inference node, and each holds the given number of one-GPU pods
    on the hybrid node (running since ``started``)."""
    placed: list[tuple[PodInfo, str, float]] = []
    for i in range(8):
        placed.append((work("training", f"t{i}", "train"), "t0", 0.0))
        placed.append((work("inference", f"s{i}", "serve"), "i0", 0.0))
    for i in range(train_on_hybrid):
        placed.append((work("training", f"th{i}", "train"), "h0", started))
    for i in range(serve_on_hybrid):
        placed.append((work("inference", f"sh{i}", "serve"), "h0", started))
    nodes = [pool_node("t0", "training"), pool_node("h0", "hybrid"), pool_node("i0", "inference")]
    return cluster(*nodes, placed=placed)


def moves(res: CycleResult) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    return (
        [(e.pod.name, e.kind) for e in res.evictions],
        [(b.pod.name, b.node_name) for b in res.binds],
    )


def test_inference_takes_a_hybrid_gpu_from_training_below_its_share() -> None:
    """train (weight 3) holds the training node and the hybrid one, its share with 8 more
    training pods waiting; serve holds the inference node, its share too. No share rule
    lets serve's ninth replica in; the rule does: one training pod on the hybrid node goes
    (the least work lost: the youngest)."""
    pending = [work("inference", "s8", "serve")]
    pending += [work("training", f"tp{i}", "train") for i in range(8)]
    res = engine(False, train=3, serve=1).cycle(three_pools(8, 0), pending, 1000.0)
    assert moves(res) == ([], [])
    state = three_pools(8, 0)
    state.placements["train/th3"].started = 500.0  # ran least: the cheapest victim
    res = engine(True, train=3, serve=1).cycle(state, pending, 1000.0)
    assert moves(res) == ([("th3", "precedence")], [("s8", "h0")])
    assert res.evictions[0].reason == "preempted by serve/s8 (precedence) on h0"


def test_training_never_takes_a_hybrid_gpu_back_from_inference() -> None:
    """serve holds 16 GPUs against a share of 12, train 8 and waits for more: the reclaim
    rule lets train take a replica's hybrid GPU -- unless the rule puts inference first
    there; then train waits (the hybrid GPUs cannot change hands back and forth)."""
    pending = [work("training", f"tp{i}", "train") for i in range(8)]
    pending += [work("inference", f"sp{i}", "serve") for i in range(8)]
    res = engine(False, train=1, serve=1).cycle(three_pools(0, 8), pending, 1000.0)
    evicted, bound = moves(res)
    assert evicted and {k for _, k in evicted} == {"reclaim"}
    assert all(node == "h0" for name, node in bound if name.startswith("tp"))
    res = engine(True, train=1, serve=1).cycle(three_pools(0, 8), pending, 1000.0)
    assert moves(res) == ([], [])


def test_training_pods_are_victims_only_after_the_reclaim_minimum_run() -> None:
    """Training pods on the hybrid node started 20 s ago: not victims before they ran
    ``reclaimMinRuntimeSeconds`` (60 s); a cycle is asked for then, and then one goes."""
    pending = [work("inference", "s8", "serve")]
    pending += [work("training", f"tp{i}", "train") for i in range(8)]
    eng = engine(True, train=3, serve=1)
    res = eng.cycle(three_pools(8, 0, started=980.0), pending, 1000.0)
    assert moves(res) == ([], [])
    assert res.retry_at == 1040.0
    res = eng.cycle(three_pools(8, 0, started=980.0), pending, 1040.0)
    evicted, bound = moves(res)
    assert [k for _, k in evicted] == ["precedence"] and bound == [("s8", "h0")]


def test_waiting_is_cheaper_than_killing_a_pod_about_to_end() -> None:
    """Every training pod on the hybrid node ends in 60 s after running 1 000 s: the
    replica waits for one (waiting 60 GPU-seconds, killing would lose 1 000)."""
    pending = [work("inference", "s8", "serve")]
    pending += [work("training", f"tp{i}", "train") for i in range(8)]
    nodes = [pool_node("t0", "training"), pool_node("h0", "hybrid"), pool_node("i0", "inference")]
    placed = [(work("training", f"t{i}", "train"), "t0", 0.0) for i in range(8)]
    placed += [(work("inference", f"s{i}", "serve"), "i0", 0.0) for i in range(8)]
    placed += [(work("training", f"th{i}", "train", duration=1060.0), "h0", 0.0) for i in range(8)]
    res = engine(True, train=3, serve=1).cycle(cluster(*nodes, placed=placed), pending, 1000.0)
    assert moves(res) == ([], [])
    why = next(u.reason for u in res.unschedulable if u.pod.name == "s8")
    assert "waiting is cheaper" in why


def test_a_queue_that_is_not_preemptible_gives_nothing() -> None:
    cfg = {
        "queues": [
            {"name": "train", "weight": 3, "preemption": {"preemptible": False}},
            {"name": "serve", "weight": 1},
        ],
        "preemption": {"poolPrecedence": [RULE]},
    }
    pending = [work("inference", "s8", "serve")]
    res = Engine(tenancy=parse_config(cfg)).cycle(three_pools(8, 0), pending, 1000.0)
    assert moves(res) == ([], [])


def test_only_the_rules_nodes_and_kinds() -> None:
    """A rule for another pool, or a pod of another kind: nothing moves."""
    other = {**RULE, "nodes": {USAGE_KEY: "edge"}}
    cfg = {
        "queues": [{"name": "train", "weight": 3}, {"name": "serve", "weight": 1}],
        "preemption": {"poolPrecedence": [other]},
    }
    pending = [work("inference", "s8", "serve")]
    res = Engine(tenancy=parse_config(cfg)).cycle(three_pools(8, 0), pending, 1000.0)
    assert moves(res) == ([], [])
    unlabelled = derive_placement(pod_info("s8", "serve", labels={LABEL_WORKLOAD: "batch"}))
    res = engine(True, train=3, serve=1).cycle(three_pools(8, 0), [unlabelled], 1000.0)
    assert moves(res)[0] == []


@pytest.mark.parametrize(
    ("rule", "field", "says"),
    [
        ({**RULE, "nodes": {}}, "preemption.poolPrecedence[0].nodes", "at least 1 item"),
        (
            {**RULE, "victims": "inference"},
            "preemption.poolPrecedence[0].victims",
            "field preemption.poolPrecedence[0].victims: must differ from preemptor",
        ),
        ({**RULE, "preemptor": ""}, "preemption.poolPrecedence[0].preemptor", "at least 1"),
        ({**RULE, "pool": "hybrid"}, "preemption.poolPrecedence[0].pool", "not permitted"),
    ],
)
def test_bad_rules_name_the_field(rule: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidObjectError) as err:
        parse_config({"preemption": {"poolPrecedence": [rule]}})
    assert field in str(err.value) and says in str(err.value)


def test_a_precedence_eviction_is_a_preempted_run() -> None:
    log = RunLog(lambda p: p.namespace)
    victim = work("training", "th0", "train")
    log.start(PodRecord(victim, "train", "", 0.0, None), 0.0, "h0", (0,), "")
    log.stop(victim.uid, 100.0, "precedence", work("inference", "s8", "serve"))
    (run,) = log.close(200.0)
    assert (run.outcome, run.cause, run.preemptor) == ("preempted", "precedence", "serve/s8")


@settings(max_examples=40, deadline=None)
@given(flips=pool_flips(12))
def test_the_hybrid_nodes_never_change_hands_back(flips: PoolFlips) -> None:
    """Random arrivals of training, inference and go-anywhere work on a training, a hybrid
    and an inference node, inference first on the hybrid one: no training pod ever evicts
    an inference pod there, and no move -- precedence, reclaim or relocation -- is reversed
    over the same GPUs within the cooldown."""
    config = flips.config(poolPrecedence=[RULE])
    nodes = [pool_node(n, n, gpus=4) for n in ("training", "hybrid", "inference")]
    moves = replay(Engine(tenancy=parse_config(config)), nodes, flips.arrivals(), STEP)
    for m in moves:
        assert m.victim is not None and m.preemptor is not None
        on_hybrid = any(n == "hybrid" for n, _ in m.victim_gpus)
        kinds_of = (workload_type(m.preemptor), workload_type(m.victim))
        assert not (on_hybrid and kinds_of == ("training", "inference")), m
        if m.kind == "precedence":
            assert on_hybrid and kinds_of == ("inference", "training"), m
    _assert_no_reversal(moves, flips.cooldown)


def test_explain_names_the_rule_both_ways() -> None:
    """``fairgpu explain``: the replica may take a training pod's hybrid GPU although no
    share rule allows it (the move is not vetoed as a reclaim), and a training pod is told
    that the rule keeps it from the replicas there."""
    eng = engine(True, train=3, serve=1)
    state = three_pools(8, 0)
    spike = work("inference", "s8", "serve")
    pending = [spike, *(work("training", f"tp{i}", "train") for i in range(8))]
    _, rules = _order(eng, state, pending, spike, 1000.0)
    freed = freed_nodes(eng, spike, state, ["h0"], 1000.0, rules)
    [victim] = freed[0]["would_have_to_go"]
    assert victim["pod"].startswith("train/th") and victim["preemptible_by_rules"], victim
    eng = engine(True, train=1, serve=1)
    state = three_pools(0, 8)
    tp = work("training", "tp0", "train")
    _, rules = _order(eng, state, [tp], tp, 1000.0)
    assert rules.why_not("serve/sh0") == (
        "a pool precedence rule puts its workload type first on this node"
    )
    _, rules = _order(engine(False, train=1, serve=1), state, [tp], tp, 1000.0)
    assert rules.why_not("serve/sh0") is None


def test_a_reservation_for_training_does_not_hold_the_hybrid_node_against_inference() -> None:
    """train's 8-GPU job waits below its share and gets the hybrid node held (its four
    training pods end first); a replica that declares no run time may not backfill there --
    unless the rule puts inference first on the hybrid pool."""

    def second_cycle(rules: bool) -> CycleResult:
        cfg: dict[str, Any] = {"starvation": {"reserveAfterSeconds": 0}}
        if rules:
            cfg["preemption"] = {"poolPrecedence": [RULE]}
        eng = Engine(tenancy=parse_config(cfg))
        nodes = [pool_node(n, u) for n, u in (("t0", "training"), ("h0", "hybrid"))]
        nodes.append(pool_node("i0", "inference"))
        placed = [(work("training", f"t{i}", "train"), "t0", 0.0) for i in range(8)]
        placed += [
            (work("training", f"th{i}", "train", duration=1000.0), "h0", 0.0) for i in range(4)
        ]
        placed += [(work("inference", f"s{i}", "serve"), "i0", 0.0) for i in range(8)]
        state = cluster(*nodes, placed=placed)
        big = work("training", "big", "train", gpus=8)
        first = eng.cycle(state, [big], 100.0)
        assert first.reserved == {"train/big": ["h0"]}
        return eng.cycle(state, [big, work("inference", "s8", "serve")], 101.0)

    res = second_cycle(False)
    assert moves(res) == ([], [])
    why = next(u.reason for u in res.unschedulable if u.pod.name == "s8")
    assert "held for other jobs" in why
    assert moves(second_cycle(True)) == ([], [("s8", "h0")])
