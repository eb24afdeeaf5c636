"""Starvation reservations: which nodes are held, and which work may backfill them."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.actions.reserve import expected_drain, expected_ends, nodes_drain
from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.engine.gang import Reservation, backfill_mask, held_slots, reservation_places
from fairgpu.engine.victim_cost import room_times
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info


def _running(name: str, runtime: float | None, gpus: int = 1) -> PodInfo:
    return pod_info(name, "busy", gpus=gpus, duration=runtime)


def _state():  # type: ignore[no-untyped-def]
    # n1: one long pod (ends at 1000) and 7 idle GPUs; n2: four short pods (end at 50);
    # n3: one pod that never said how long it runs.
    return cluster(
        node_info("n1", gpus=8),
        node_info("n2", gpus=8),
        node_info("n3", gpus=8),
        placed=[
            (_running("long", 1000), "n1", 0.0),
            *((_running(f"short{i}", 50), "n2", 0.0) for i in range(4)),
            (_running("open", None), "n3", 0.0),
        ],
    )


def test_reservation_holds_the_node_that_drains_first() -> None:
    state = _state()
    session = Engine().session(state, 0.0)
    assert [expected_drain(session, i) for i in range(3)] == [1000, 50, np.inf]
    job = [pod_info("big", "wait", gpus=8)]
    everywhere = np.ones(state.size, dtype=bool)
    rank = np.arange(state.size)

    def room(node: int, most: int) -> list[float]:
        return room_times(job[0], state, node, expected_ends(session, node), most)

    places = reservation_places(
        job, state, lambda _: everywhere, np.zeros(state.size, dtype=bool), rank, room
    )
    # n1 has the most idle GPUs, but n2 is empty at 50 s: the job can start there first.
    assert places is not None and places[-1][0] == 50
    assert [x.tolist() for x in held_slots(places)] == [[1], [1]]


def test_backfill_may_use_a_held_node_until_the_last_one_drains() -> None:
    state = _state()
    held = Reservation("wait/big", "wait", np.array([0, 1]), 0.0, cpu=8000.0, memory=0.0)
    drain = {0: 1000.0, 1: 50.0}

    def allowed(runtime: float | None) -> list[bool]:
        mask = backfill_mask(pod_info("fill", "other", duration=runtime), state, [held], drain, 0.0)
        return mask.tolist()

    # The held job starts at 1000 (when n1 drains): a 500 s pod on n2 delays nothing.
    assert allowed(500) == [True, True, True]
    assert allowed(2000) == [False, False, True]
    assert allowed(None) == [False, False, True]


def _starved(state: ClusterState, label: Callable[[float], str] | None = None) -> str:
    config = parse_config(
        {"preemption": {"enabled": False}, "starvation": {"reserveAfterSeconds": 0}}
    )
    eng = Engine(tenancy=config, time_label=label)
    big = pod_info("big", "wait", gpus=8)
    res = eng.cycle(state, [big], 10.0)
    assert not res.binds and res.reserved
    return next(u.reason for u in res.unschedulable if u.pod is big)


def test_a_held_job_is_told_where_and_until_when() -> None:
    reason = _starved(_state())
    # Held on n2, whose four pods declared 50 s: free at t=50 (not "in 40 s": the text stays
    # the same from cycle to cycle, so no new Event each time).
    assert reason.endswith(
        "; GPUs are held for it on n2, expected free by t=50 s (the declared run times there)"
    ), reason
    assert _starved(_state(), lambda t: f"<{t:g}>").endswith(
        "expected free by <50> (the declared run times there)"
    )


def test_a_held_job_on_nodes_without_run_times_is_told_the_end_is_unknown() -> None:
    state = cluster(node_info("n3", gpus=8), placed=[(_running("open", None), "n3", 0.0)])
    assert _starved(state).endswith(
        "; GPUs are held for it on n3, "
        "when they free up is unknown (pods there declare no run time or outran it)"
    )


def test_room_for_members_comes_before_the_node_is_empty() -> None:
    """A 4-GPU member needs half an 8-GPU node: room for one comes when the short pods
    end, for two only when the half-GPU replica beside them ends too."""
    short = [(_running(f"s{i}", 100), "n1", 0.0) for i in range(6)]
    serve = pod_info("serve", "busy", milli=500, duration=5000)
    state = cluster(node_info("n1", gpus=8), placed=[*short, (serve, "n1", 0.0)])
    member = pod_info("m", "wait", gpus=4)
    ends = [(100.0, f"busy/s{i}") for i in range(6)] + [(5000.0, "busy/serve")]
    assert room_times(member, state, 0, ends, 2) == [100.0, 5000.0]
    # What the reservation used to wait for: the node empty.
    assert expected_drain(Engine().session(state, 0.0), 0) == 5000.0
    # A pod whose end is unknown keeps the room it holds unknown too.
    assert room_times(member, state, 0, [(math.inf, "busy/s0")], 2) == [math.inf, math.inf]


def test_a_gang_is_held_until_its_members_have_room_not_until_the_nodes_are_empty() -> None:
    """Two 4-GPU members: n2 has room for one at 200 s, n1 at 300 s; each node is empty
    only at 4 000 and 5 000 s. The gang waits for 300 s, and only pods that end by then
    may use the held nodes."""
    placed = [
        *((_running(f"a{i}", 300), "n1", 0.0) for i in range(7)),
        (pod_info("serve", "busy", milli=500, duration=5000), "n1", 0.0),
        *((_running(f"b{i}", 200), "n2", 0.0) for i in range(4)),
        *((_running(f"c{i}", 4000), "n2", 0.0) for i in range(4)),
    ]
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8), placed=placed)
    config = parse_config(
        {"preemption": {"enabled": False}, "starvation": {"reserveAfterSeconds": 0}}
    )
    eng = Engine(tenancy=config)
    gang = [pod_info(f"g{i}", "wait", gpus=4, group="g", min_member=2) for i in range(2)]
    res = eng.cycle(state, gang, 10.0)
    assert not res.binds and sorted(res.reserved["wait/g"]) == ["n1", "n2"]
    reason = next(u.reason for u in res.unschedulable if u.pod is gang[0])
    assert reason.endswith("expected free by t=300 s (the declared run times there)"), reason
    # Backfill: a 250 s pod ends by then, a 400 s pod does not.
    held = list(eng.reservations.values())
    drain = {0: 300.0, 1: 200.0}
    for runtime, may in ((250, True), (400, False)):
        fill = pod_info("fill", "other", duration=runtime)
        assert backfill_mask(fill, state, held, drain, 10.0).tolist() == [may, may]
    # A pod that would outlast the start is told why the held nodes are not for it.
    late = pod_info("late", "other", duration=400)
    res = eng.cycle(state, [*gang, late], 20.0)
    reason = next(u.reason for u in res.unschedulable if u.pod is late)
    assert reason.startswith("0/2 nodes are available: 2 node(s) held for other jobs"), reason
    # Asked again (a cycle asks three times), the answer follows the node: n1's short pods
    # gone, the gang waits only for n2's (200 s).
    assert nodes_drain(eng.session(state, 20.0), held[0]) == 300.0
    for i in range(7):
        state.release(f"busy/a{i}")
    assert nodes_drain(eng.session(state, 20.0), held[0]) == 200.0


def _nodes() -> list:  # type: ignore[type-arg]
    return [node_info(f"n{i}", gpus=8) for i in range(1, 5)]


def _held_for_wait(eng: Engine) -> CycleResult:
    """Cycle 1 (t=10): queue busy holds 20 of 32 GPUs, queue wait nothing and asks an 8-GPU
    pod that fits nowhere: wait is below its share (16), so nodes are held for it."""
    before = cluster(
        *_nodes(),
        placed=[
            (_running("b1", 1000, gpus=8), "n1", 0.0),
            *((_running(f"b{i}", 1000, gpus=4), f"n{i}", 0.0) for i in (2, 3, 4)),
        ],
    )
    first = eng.cycle(before, [pod_info("big", "wait", gpus=8)], 10.0)
    assert not first.binds and list(first.reserved) == ["wait/big"]
    return first


def _config():  # type: ignore[no-untyped-def]
    return parse_config(
        {"preemption": {"enabled": False}, "starvation": {"reserveAfterSeconds": 0}}
    )


def test_a_reservation_is_dropped_once_its_queue_reaches_its_share_while_another_is_below() -> None:
    """Cycle 2 (t=30): wait's other work runs (it holds 20, busy 12 and asks 8 more): wait is
    above its share (16), busy below it. The nodes held for wait's pod are released -- they
    no longer stand idle draining for a queue that is not behind while one that is waits
    (busy's own large pod gets nodes held instead)."""
    eng = Engine(tenancy=_config())
    _held_for_wait(eng)
    after = cluster(
        *_nodes(),
        placed=[
            (_running("b1", 1000, gpus=8), "n1", 0.0),
            (pod_info("w1", "wait", gpus=8, duration=1000), "n2", 20.0),
            (pod_info("w2", "wait", gpus=4, duration=1000), "n3", 20.0),
            (_running("b3", 1000, gpus=4), "n3", 0.0),
            (pod_info("w3", "wait", gpus=8, duration=1000), "n4", 20.0),
        ],
    )
    big, more = pod_info("big", "wait", gpus=8), pod_info("more", "busy", gpus=8)
    second = eng.cycle(after, [big, more], 30.0)
    assert not second.binds
    assert "wait/big" not in second.reserved and "wait/big" not in eng.reservations
    assert list(second.reserved) == ["busy/more"]  # busy, below its share, may hold nodes now


def test_a_queue_alone_at_its_share_keeps_its_reservation() -> None:
    """The same reservation, but at t=30 wait holds the whole cluster and busy asks nothing:
    wait is at its share and no queue is below its own -- the job starves only behind its
    own queue's work, so its nodes stay held."""
    eng = Engine(tenancy=_config())
    first = _held_for_wait(eng)
    after = cluster(
        *_nodes(),
        placed=[
            (pod_info(f"w{i}", "wait", gpus=8, duration=1000), f"n{i}", 20.0) for i in range(1, 5)
        ],
    )
    second = eng.cycle(after, [pod_info("big", "wait", gpus=8)], 30.0)
    assert second.reserved == first.reserved


def test_a_reservation_its_own_cycle_made_needless_is_dropped_in_that_cycle() -> None:
    """Queue wait (weight 1 of 4: a share of 8 GPUs) holds nothing and its 8-GPU pod fits
    nowhere: nodes are held for it. At t=20 three 4-GPU pods of wait that end long before
    the drain backfill the free GPUs: wait holds 12, above its share, while busy (20 of its
    24) is below its own. The same cycle drops the reservation -- not the next one, which
    the simulator runs only at the next event (live: seconds later), so a cycle's end state
    is one a cycle at the same time with nothing new leaves alone."""
    config = parse_config(
        {
            "preemption": {"enabled": False},
            "starvation": {"reserveAfterSeconds": 0},
            "queues": [{"name": "wait", "weight": 1}, {"name": "busy", "weight": 3}],
        }
    )
    eng = Engine(tenancy=config)
    state = cluster(
        *_nodes(),
        placed=[
            (_running("b1", 1000, gpus=8), "n1", 0.0),
            *((_running(f"b{i}", 1000, gpus=4), f"n{i}", 0.0) for i in (2, 3, 4)),
        ],
    )
    big = pod_info("big", "wait", gpus=8)
    first = eng.cycle(state, [big], 10.0)
    assert not first.binds and list(first.reserved) == ["wait/big"]
    small = [pod_info(f"s{i}", "wait", gpus=4, duration=100) for i in range(3)]
    more = pod_info("more", "busy", gpus=8)
    second = eng.cycle(state, [big, *small, more], 20.0)
    assert sorted(b.pod.name for b in second.binds) == ["s0", "s1", "s2"]
    assert "wait/big" not in eng.reservations
