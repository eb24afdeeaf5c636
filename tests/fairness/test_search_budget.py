"""What a fair cycle spends on preemption searches, counted by the engine rather than timed:
every search (gang members included) counts against the cycle's budget, a failed gang shape
is not tried again in the cycle, a gang that cannot fit even with every eligible victim
evicted is not tried at all, a whole-GPU reprieve that leaves too few idle devices costs no
attempt, and backfill masks are computed once per reservation class, unchanged."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.actions.allocate import allowed
from fairgpu.engine.actions.preempt import MAX_PREEMPTION_ATTEMPTS, FairVictims
from fairgpu.engine.actions.reserve import allowed_nodes, reservation_drain
from fairgpu.engine.engine import Engine
from fairgpu.engine.gang import Reservation
from fairgpu.engine.jobs import Job
from fairgpu.engine.preemption import find_preemption
from fairgpu.engine.scheduler import Scheduler
from fairgpu.model.pod import PodInfo
from tests.builders import cluster, node_info, pod_info

NOW = 10_000.0


def _count(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> list[Any]:
    """Record every call of ``cls.name`` (its first argument after self)."""
    calls: list[Any] = []
    real = getattr(cls, name)

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[0] if args else None)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counting)
    return calls


def half_blocked_cluster() -> ClusterState:
    """Node ``a``: four low-priority one-GPU pods (victims) beside four high-priority ones.
    Node ``b``: every device half taken by a high-priority share, so whole GPUs never fit
    there though half its compute is free. A 4-GPU pod can preempt on ``a`` only once."""
    low = [pod_info(f"low-{i}", "t", priority=0) for i in range(4)]
    high = [pod_info(f"high-{i}", "t", priority=100) for i in range(4)]
    state = cluster(
        node_info("a", gpus=8),
        node_info("b", gpus=8),
        placed=[(p, "a", 0.0) for p in low + high],
    )
    b = state.node_index["b"]
    for d in range(8):
        share = pod_info(f"share-{d}", "t", milli=500, priority=100)
        state.assign(share, b, (d,), started=0.0)
    return state


def gangs(count: int, distinct: bool) -> list[PodInfo]:
    """``count`` gangs of two 4-GPU members at priority 50; ``distinct``: each asks a
    different CPU amount (so no memo can answer one from another)."""
    pods = []
    for g in range(count):
        cpu = 1000 + (g if distinct else 0)
        for m in range(2):
            pods.append(
                pod_info(
                    f"g{g}-{m}",
                    "t",
                    gpus=4,
                    cpu=cpu,
                    priority=50,
                    group=f"g{g}",
                    min_member=2,
                    created=g + m * 1e-3,
                )
            )
    return pods


def test_every_search_counts_against_the_budget_gangs_included(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thirty gangs of different shapes each search twice (the first member finds victims
    on ``a``, the second none): the cycle runs at most the budget's searches."""
    searches = _count(monkeypatch, FairVictims, "plan")
    res = Engine().cycle(half_blocked_cluster(), gangs(30, distinct=True), NOW)
    assert not res.binds and not res.evictions
    assert len(searches) == MAX_PREEMPTION_ATTEMPTS
    assert all("only 1 of 2 needed members" in u.reason for u in res.unschedulable[:2])


def test_a_failed_gang_shape_is_not_tried_again_in_the_cycle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Twenty identical gangs cost the first one's two searches and schedule calls; each is
    reported with the reason its own attempt would give."""
    searches = _count(monkeypatch, FairVictims, "plan")
    pods = gangs(20, distinct=False)
    res = Engine().cycle(half_blocked_cluster(), pods, NOW)
    assert not res.binds and not res.evictions
    assert len(searches) == 2
    assert {u.pod.uid for u in res.unschedulable} == {p.uid for p in pods}
    reasons = {u.reason.split(": ", 1)[1] for u in res.unschedulable}
    assert len(reasons) == 1 and "only 1 of 2 needed members fit together" in reasons.pop()


def test_a_gang_that_cannot_fit_with_every_victim_evicted_is_not_tried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two 8-GPU members where evicting every eligible pod frees four GPUs on ``a`` and
    none on ``b``: no attempt, no search, and the reason says why."""
    schedules = _count(monkeypatch, Scheduler, "schedule")
    searches = _count(monkeypatch, FairVictims, "plan")
    pods = [
        pod_info(f"big-{m}", "t", gpus=8, priority=50, group="big", min_member=2) for m in range(2)
    ]
    res = Engine().cycle(half_blocked_cluster(), pods, NOW)
    assert not res.binds and not schedules and not searches
    reason = res.unschedulable[0].reason
    assert "only 0 of 2 needed members fit together" in reason
    assert "nvidia.com/gpu" in reason and "every pod it may preempt evicted" in reason


def test_a_gang_that_fits_after_preemption_is_still_placed() -> None:
    """The screen only skips what cannot fit: a gang of two 4-GPU members where ``a`` holds
    eight low-priority pods starts, evicting them."""
    low = [pod_info(f"low-{i}", "t", priority=0) for i in range(8)]
    state = cluster(node_info("a", gpus=8), placed=[(p, "a", 0.0) for p in low])
    res = Engine().cycle(state, gangs(1, distinct=False), NOW)
    assert len(res.binds) == 2 and len(res.evictions) == 8


def test_whole_gpu_reprieve_without_room_costs_no_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An 8-GPU pod on a node of eight one-GPU pods: all eight are victims, found with one
    scheduling attempt (every reprieve would leave fewer than eight idle devices)."""
    low = [pod_info(f"low-{i}", priority=0) for i in range(8)]
    state = cluster(node_info("a", gpus=8), placed=[(p, "a", 0.0) for p in low])
    scheduler = Engine().scheduler
    schedules = _count(monkeypatch, Scheduler, "schedule")
    plan = find_preemption(
        pod_info("big", gpus=8, priority=10), state, scheduler, [p.uid for p in low]
    )
    assert plan is not None and sorted(v.uid for v in plan.victims) == sorted(p.uid for p in low)
    assert len(schedules) == 1
    assert len(state.placements) == 8  # the cluster is left as it was


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, 1, 2]),  # GPUs asked
            st.one_of(st.none(), st.floats(0, 5000)),  # declared run time
            st.sampled_from(["", "r0", "r1"]),  # the job's own reservation, if any
        ),
        min_size=1,
        max_size=25,
    ),
    st.lists(st.floats(0, 4000), min_size=4, max_size=4),
)
def test_backfill_masks_per_class_equal_the_masks_per_pod(
    asks: list[tuple[int, float | None, str]], ends: list[float]
) -> None:
    """:func:`allowed` (one mask per reservation class) gives every pod exactly what
    :func:`allowed_nodes` computes for it alone."""
    nodes = [node_info(f"n{i}", gpus=2) for i in range(4)]
    running = [pod_info(f"run-{i}", duration=ends[i]) for i in range(4)]
    state = cluster(*nodes, placed=[(p, f"n{i}", 0.0) for i, p in enumerate(running)])
    engine = Engine()
    session = engine.session(state, 100.0)
    session.state.reservations = {
        "r0": Reservation("r0", "q", np.array([0, 1]), 0.0, node_names=["n0", "n1"]),
        "r1": Reservation("r1", "q", np.array([2]), 0.0, node_names=["n2"]),
    }
    session.drain = reservation_drain(session)
    tenant = engine.tenant(running[0])
    for i, (gpus, runtime, own) in enumerate(asks):
        p = pod_info(f"p{i}", gpus=gpus, duration=runtime)
        job = Job(own or p.uid, [p], tenant)
        want = allowed_nodes(session, job, p)
        got = allowed(session, job, p)
        assert (want is None) == (got is None)
        if want is not None and got is not None:
            assert np.array_equal(want, got), (gpus, runtime, own)


def test_backlog_across_backfill_classes_costs_one_attempt_per_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a reservation holds a node, pending pods whose run times alternate between
    ending before it drains and not (two backfill classes) cost one attempt per class, not
    one per change of class along the lane; every pod keeps the reason its class gets."""
    from fairgpu.engine.actions import allocate as allocate_mod

    tries: list[str] = []
    real_try = allocate_mod.try_job

    def counting_try(session, job, rules):  # type: ignore[no-untyped-def]
        tries.append(job.key)
        return real_try(session, job, rules)

    monkeypatch.setattr(allocate_mod, "try_job", counting_try)
    running = [pod_info(f"run-{i}", "a", priority=100, duration=1000.0) for i in range(2)]
    state = cluster(
        node_info("n0", gpus=1),
        node_info("n1", gpus=1),
        placed=[(p, f"n{i}", 0.0) for i, p in enumerate(running)],
    )
    big = pod_info("big", "t", gpus=2, created=0.0)
    backlog = [
        pod_info(f"a-{i}", "a", created=1 + i * 1e-3, duration=10.0 if i % 2 else 5000.0)
        for i in range(200)
    ]
    engine = Engine()
    engine.state.reservations["t/big"] = Reservation(
        "t/big", "t", np.array([0]), 100.0, node_names=["n0"]
    )
    res = engine.cycle(state, [big, *backlog], 100.0)
    assert "t/big" in res.reserved and not res.binds
    assert len([k for k in tries if k.startswith("a/")]) <= 4, len(tries)
    by_uid = {u.pod.uid: u.reason for u in res.unschedulable}
    assert {by_uid[p.uid] for p in backlog[0::2]} == {by_uid[backlog[0].uid]}
    assert {by_uid[p.uid] for p in backlog[1::2]} == {by_uid[backlog[1].uid]}
