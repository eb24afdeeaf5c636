"""Reservations hold until their nodes drain, backfill stays inside the hold, run times are
learned for pods that declare none, and only a queue below its share gets one."""

from __future__ import annotations

from typing import Any

from fairgpu.engine.engine import Engine
from fairgpu.tenancy import parse_config
from fairgpu.tenancy.runtimes import MIN_RUNS, ObservedRuntimes
from tests.builders import cluster, learn_run_time, node_info, pod_info


def _engine(**starvation: Any) -> Engine:
    config = parse_config(
        {
            "preemption": {"enabled": False},
            "gang": {"timeoutSeconds": 600},
            "starvation": {"reserveAfterSeconds": 0, **starvation},
        }
    )
    return Engine(tenancy=config)


def test_a_reservation_lasts_until_its_nodes_drain_not_the_gang_timeout() -> None:
    # n1 is busy until t=2000 (declared); the 8-GPU job waits from t=10.
    state = cluster(
        node_info("n1", gpus=8),
        placed=[(pod_info("long", "busy", gpus=8, duration=2000), "n1", 0.0)],
    )
    eng = _engine(drainGraceSeconds=100)
    big = pod_info("big", "wait", gpus=8)
    assert eng.cycle(state, [big], 10.0).reserved == {"wait/big": ["n1"]}
    # Past the gang timeout (600 s) the same reservation still holds: the node drains at 2000.
    for now in (700.0, 1500.0, 2099.0):
        eng.cycle(state, [big], now)
        assert eng.reservations["wait/big"].since == 10.0, now
    # The node did not drain as declared: after drain + grace the reservation is given up
    # (and the job waits again before the next one).
    eng.cycle(state, [big], 2101.0)
    assert eng.reservations["wait/big"].since == 2101.0


def test_backfill_on_a_node_of_unknown_drain_must_end_within_the_hold() -> None:
    # The pod on n1 declares no run time: the reservation holds for the gang timeout (until
    # 610); a filler that ends by then cannot delay the job, a longer one could.
    state = cluster(node_info("n1", gpus=8), placed=[(pod_info("open", "busy", gpus=4), "n1", 0.0)])
    eng = _engine()
    big = pod_info("big", "wait", gpus=8)
    assert eng.cycle(state, [big], 10.0).reserved
    short = pod_info("short", "other", duration=500.0)
    long = pod_info("long", "other", duration=700.0)
    res = eng.cycle(state, [big, short, long], 20.0)
    assert [b.pod.name for b in res.binds] == ["short"]
    assert any(u.pod is long for u in res.unschedulable)


def test_observed_run_times_stand_in_for_undeclared_ones() -> None:
    runtimes = ObservedRuntimes()

    def watch(uid: str) -> tuple[str, float] | None:
        return None if uid == "declared" else ("q", 0.0)

    # One completion short of MIN_RUNS, plus an evicted pod, one pending again and one that
    # declares its run time: none of those three is a completion.
    done = {f"p{i}" for i in range(MIN_RUNS - 1)}
    everything = done | {"declared", "evicted", "again"}
    runtimes.observe(everything, watch, set(), 0.0)
    runtimes.evicted(["evicted"])
    runtimes.observe(everything, watch, set(), 100.0)
    runtimes.observe(set(), watch, {"again"}, 200.0)
    assert runtimes.expected("q") is None
    # One more completion: seen running last at 200, so it ran 200 s; the median of the
    # others' 100 s wins.
    runtimes.observe({"last"}, watch, set(), 200.0)
    runtimes.observe({"last"}, watch, set(), 200.0)
    runtimes.observe(set(), watch, set(), 300.0)
    assert runtimes.expected("q") == 100.0
    assert runtimes.expected("other-queue") == 100.0  # all queues together


def test_a_held_job_is_told_the_observed_drain() -> None:
    # Pods of queue busy declare nothing; five ran 300 s each, so the pod on n1 (started at
    # 100) is expected to end at 400: the held job is told so.
    state = cluster(node_info("n1", gpus=8))
    eng = _engine()
    learn_run_time(eng, state, "busy", 300.0)
    state.assign(pod_info("open", "busy", gpus=4), 0, (0, 1, 2, 3), started=100.0)
    big = pod_info("big", "wait", gpus=8)
    res = eng.cycle(state, [big], 310.0)
    reason = next(u.reason for u in res.unschedulable if u.pod is big)
    assert reason.endswith("expected free by t=400 s (run times observed there)"), reason


def test_a_queue_at_its_share_gets_no_reservation() -> None:
    # busy and wait share n1 and n2 (16 GPUs): wait already holds its 8 on n2, so its next
    # 8-GPU job is not starving -- no nodes are held for it.
    state = cluster(
        node_info("n1", gpus=8),
        node_info("n2", gpus=8),
        placed=[
            (pod_info("b", "busy", gpus=8, duration=1000), "n1", 0.0),
            (pod_info("w", "wait", gpus=8, duration=1000), "n2", 0.0),
        ],
    )
    eng = _engine()
    res = eng.cycle(
        state, [pod_info("big", "wait", gpus=8), pod_info("more", "busy", gpus=1)], 10.0
    )
    assert res.reserved == {}
    # Below its share (its running pod gone, n2 taken by busy), the same job gets one.
    state.release("wait/w")
    state.assign(pod_info("b2", "busy", gpus=8, duration=1000), 1, tuple(range(8)), started=15.0)
    res = eng.cycle(state, [pod_info("big", "wait", gpus=8)], 20.0)
    assert "wait/big" in res.reserved
