"""A pod let onto a held node because it declared it would end first is evicted once it
outlives that declaration by drainGraceSeconds -- declaring short cannot buy held GPUs --
while pods that made no such promise are left alone."""

from __future__ import annotations

from typing import Any

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info

GRACE = 100.0


def engine(**starvation: Any) -> Engine:
    config = {
        "preemption": {"enabled": False},
        "starvation": {"reserveAfterSeconds": 0, "drainGraceSeconds": GRACE, **starvation},
    }
    return Engine(tenancy=parse_config(config))


def held_node() -> tuple[ClusterState, PodInfo]:
    """n1 (8 GPUs) runs ``long`` (4 GPUs, declared 2 000 s, since t=0); ``big`` (8 GPUs)
    waits: n1 is held for it from t=10."""
    state = cluster(
        node_info("n1", gpus=8),
        placed=[(pod_info("long", "busy", gpus=4, duration=2000), "n1", 0.0)],
    )
    return state, pod_info("big", "wait", gpus=8)


def run(eng: Engine, state: ClusterState, pending: list[PodInfo], now: float) -> list[str]:
    """One cycle (the engine applies its decisions to ``state``): the names of the pods it
    evicted for overrunning."""
    result = eng.cycle(state, pending, now)
    return [e.pod.name for e in result.evictions if e.kind == "backfill-overrun"]


def test_a_backfilled_pod_that_outlives_its_declared_run_time_is_evicted() -> None:
    state, big = held_node()
    eng = engine()
    assert eng.cycle(state, [big], 10.0).reserved == {"wait/big": ["n1"]}
    liar = pod_info("liar", "other", gpus=1, duration=300)  # ends by 320 s, it says
    assert run(eng, state, [big, liar], 20.0) == []
    assert "other/liar" in state.placements
    assert run(eng, state, [big], 20.0 + 300 + GRACE - 1) == []  # within the grace
    result = eng.cycle(state, [big], 20.0 + 300 + GRACE + 1)
    [evicted] = result.evictions
    assert (evicted.pod.name, evicted.kind) == ("liar", "backfill-overrun")
    assert "declared it would end by" in evicted.reason and "held for wait/big" in evicted.reason


def test_pods_that_made_no_promise_stay() -> None:
    """``long`` started before the reservation; a pod without a declared run time never
    backfilled (it went to n2, which nobody holds); with the rule off the liar stays."""
    state = cluster(
        node_info("n1", gpus=8),
        node_info("n2", gpus=8),
        placed=[
            (pod_info("long", "busy", gpus=4, duration=100), "n1", 0.0),
            (pod_info("open", "busy", gpus=8), "n2", 0.0),
        ],
    )
    eng = engine()
    big = pod_info("big", "wait", gpus=8)
    assert eng.cycle(state, [big], 10.0).reserved == {"wait/big": ["n1"]}
    assert run(eng, state, [big], 10.0 + 100 + GRACE + 50) == []  # long overran: not held to it
    off = engine(evictBackfillOverruns=False)
    state, big = held_node()
    off.cycle(state, [big], 10.0)
    run(off, state, [big, pod_info("liar", "other", gpus=1, duration=300)], 20.0)
    assert "other/liar" in state.placements
    assert run(off, state, [big], 1000.0) == []


def test_a_pod_without_a_declared_run_time_on_a_held_node_stays() -> None:
    """A pod that declares no run time can still arrive on a held node after the hold --
    live, another scheduler binds it there; the cycle goes on and leaves it alone (it made
    no promise to break). The cycle used to stop on it with an assertion."""
    state, big = held_node()
    eng = engine()
    assert eng.cycle(state, [big], 10.0).reserved == {"wait/big": ["n1"]}
    stranger = pod_info("stranger", "other", gpus=1)
    state.assign(stranger, state.node_index["n1"], (7,), started=20.0)
    assert run(eng, state, [big], 1000.0) == []
    assert "other/stranger" in state.placements


def test_a_pod_placed_in_the_cycle_before_the_hold_began_is_not_held_to_it() -> None:
    """``early`` goes first in the cycle that then reserves n1 for ``big`` (same time
    stamp): it was not let on by its run time, so overrunning it is no broken promise."""
    state, big = held_node()
    eng = engine()
    early = pod_info("early", "wait", gpus=1, duration=100, priority=10)
    result = eng.cycle(state, [big, early], 10.0)
    assert [b.pod.name for b in result.binds] == ["early"]
    assert result.reserved == {"wait/big": ["n1"]}
    assert run(eng, state, [big], 10.0 + 100 + GRACE + 1) == []
    assert "wait/early" in state.placements


def test_a_pod_already_terminating_is_not_evicted_again() -> None:
    """Live, an evicted pod stays on its node, terminating, until its containers stop: it is
    going already, and each cycle until then must not evict it again."""
    state, big = held_node()
    eng = engine()
    eng.cycle(state, [big], 10.0)
    run(eng, state, [big, pod_info("liar", "other", gpus=1, duration=300)], 20.0)
    state.mark_terminating("other/liar", True)
    assert run(eng, state, [big], 1000.0) == []
