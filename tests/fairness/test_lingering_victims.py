"""Where evicted pods terminate gracefully (the live adapter's ``victims_linger``), what a
victim holds beyond its preemptor's room stays held until the victim is gone: no pod placed
after the preemption, in the same cycle or a later one, shares a device or node room with it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fairgpu.cluster.state import ClusterState, Placement
from fairgpu.engine.engine import Engine
from fairgpu.engine.lingering import hold_remainders
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info

ORDERINGS = ["fair", "kube-default"]


def _two_gpu_victim(linger: bool, ordering: str) -> tuple[Engine, ClusterState]:
    """n1 (2 GPUs) runs ``big`` (2 GPUs, priority 0); nothing else has GPUs."""
    big = pod_info("big", gpus=2, priority=0)
    state = cluster(node_info("n1", gpus=2), placed=[(big, "n1", 0.0)])
    engine = Engine(ordering=ordering)
    engine.victims_linger = linger
    return engine, state


def _one_gpu_pods() -> tuple[PodInfo, PodInfo]:
    """high and other: one GPU each, priority 100, in that order."""
    return (
        pod_info("high", gpus=1, priority=100, created=1.0),
        pod_info("other", gpus=1, priority=100, created=2.0),
    )


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_the_gpu_a_victim_keeps_is_not_given_to_another_pod(ordering: str) -> None:
    engine, state = _two_gpu_victim(True, ordering)
    high, other = _one_gpu_pods()
    out = engine.cycle(state, [high, other], 100.0)
    assert [e.pod.name for e in out.evictions] == ["big"]
    assert [(b.pod.name, b.wait_for) for b in out.binds] == [("high", ("default/big",))]
    # big terminates on both GPUs: one is high's once big is gone, the other still big's.
    rest = state.placements["default/big"]
    assert rest.remainder and rest.terminating and len(rest.devices) == 1
    assert set(rest.devices) | set(state.placements["default/high"].devices) == {0, 1}
    assert (state.device_milli_free[0, :2] == 0).all()
    # Nor in the next cycle while big terminates; once it is gone, other fits.
    assert engine.cycle(state, [other], 110.0).binds == []
    state.release("default/big")
    assert [b.pod.name for b in engine.cycle(state, [other], 120.0).binds] == ["other"]


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_without_lingering_the_freed_gpu_is_used_at_once(ordering: str) -> None:
    # The simulator: an evicted pod is gone at once, so its other GPU is free.
    engine, state = _two_gpu_victim(False, ordering)
    out = engine.cycle(state, list(_one_gpu_pods()), 100.0)
    assert sorted(b.pod.name for b in out.binds) == ["high", "other"]
    assert "default/big" not in state.placements


def test_node_room_beyond_the_preemptors_ask_stays_held() -> None:
    # A victim of 6 CPUs for a preemptor of 2: 4 CPUs stay held; a victim on another node
    # (a gang member torn down with its group) keeps all it had.
    state = cluster(node_info("n1", gpus=0, cpu=8000), node_info("n2", gpus=0, cpu=8000))
    near = pod_info("near", cpu=6000)
    far = pod_info("far", cpu=3000)
    took = pod_info("took", cpu=2000)
    for p, node in ((near, 0), (far, 1)):
        state.assign(p, node)
    placed = {p.uid: state.release(p.uid)[1] for p in (near, far)}  # type: ignore[index]
    where = state.assign(took, 0)
    hold_remainders(state, [(near, placed[near.uid]), (far, placed[far.uid])], [(took, where)])
    assert state.pods[near.uid].requests["cpu"] == 4000
    assert state.pods[far.uid].requests["cpu"] == 3000
    assert state.placements[near.uid].terminating and state.placements[far.uid].terminating
    cpu = state.resources.index("cpu")
    assert list(state.requested[:2, cpu]) == [6000, 3000]


def test_a_shared_gpu_keeps_the_compute_its_preemptor_does_not_take() -> None:
    # A victim with 600 milli of device 0, a preemptor of 250 there: 350 stays held.
    state = cluster(node_info("n1", gpus=1))
    victim = pod_info("v", gpus=1, milli=600)
    taker = pod_info("t", gpus=1, milli=250)
    state.assign(victim, 0, (0,))
    _, where = state.release(victim.uid)  # type: ignore[misc]
    hold_remainders(state, [(victim, where)], [(taker, state.assign(taker, 0, (0,)))])
    assert state.placements[victim.uid].device_milli == 350
    assert int(state.device_milli_free[0, 0]) == WHOLE - 600
    assert np.all(state.device_milli_free[0, :1] >= 0)


ASKS = st.one_of(
    st.tuples(st.just("whole"), st.integers(1, 2), st.just(0)),
    st.tuples(st.just("shared"), st.sampled_from([250, 500, 600]), st.sampled_from([0, 4096])),
    st.tuples(st.just("none"), st.just(0), st.just(0)),
)


def _ask(name: str, ask: tuple[str, int, int], cpu: int) -> PodInfo:
    kind, a, b = ask
    if kind == "whole":
        return pod_info(name, gpus=a, cpu=cpu)
    if kind == "shared":
        return pod_info(name, gpus=1, milli=a, gpu_memory_mib=b, cpu=cpu)
    return pod_info(name, gpus=0, cpu=cpu)


def _fit_devices(state: ClusterState, p: PodInfo) -> tuple[int, ...] | None:
    """Devices of node 0 ``p`` fits on now (the first that do), or None."""
    if not p.gpu.count:
        return ()
    need = WHOLE if p.gpu.is_whole else p.gpu.milli
    mem = state.device_memory_for(p, 0)
    free = [
        d
        for d in range(int(state.gpu_count[0]))
        if state.device_milli_free[0, d] >= need and state.device_memory_free[0, d] >= mem
    ]
    return tuple(free[: p.gpu.count]) if len(free) >= p.gpu.count else None


@settings(max_examples=150, deadline=None)
@given(
    victims=st.lists(st.tuples(ASKS, st.integers(500, 8000)), min_size=1, max_size=3),
    takers=st.lists(st.tuples(ASKS, st.integers(500, 8000)), min_size=1, max_size=2),
)
def test_remainders_hold_what_victims_hold_now_and_the_preemptors_later(
    victims: list[tuple[tuple[str, int, int], int]],
    takers: list[tuple[tuple[str, int, int], int]],
) -> None:
    """Whatever the shapes: on every device and for the node's CPU, what the cluster state
    counts after the preemption is at least what the victims hold now and at least what the
    pods placed in their room (a preemptor, and a pod group's other members) will hold, and
    no more than both together."""
    state = cluster(node_info("n1", gpus=4))
    placed: list[tuple[PodInfo, Placement]] = []
    for i, (ask, cpu) in enumerate(victims):
        v = _ask(f"v{i}", ask, cpu)
        devices = _fit_devices(state, v)
        if devices is not None:
            placed.append((v, state.assign(v, 0, devices)))
    assume(placed)
    now_milli, now_mem = state.device_milli_free[0].copy(), state.device_memory_free[0].copy()
    now_cpu = int(state.requested[0, state.resources.index("cpu")])
    for v, _ in placed:
        state.release(v.uid)
    taken: list[tuple[PodInfo, Placement]] = []
    for i, (ask, cpu) in enumerate(takers):
        p = _ask(f"p{i}", ask, cpu)
        devices = _fit_devices(state, p)
        assume(devices is not None)
        taken.append((p, state.assign(p, 0, devices or ())))
    later_milli, later_mem = state.device_milli_free[0].copy(), state.device_memory_free[0].copy()
    later_cpu = int(state.requested[0, state.resources.index("cpu")])
    hold_remainders(state, placed, taken)
    mem_total = state.device_memory_total[0]
    for free, now, later, total in (
        (state.device_milli_free[0], now_milli, later_milli, WHOLE),
        (state.device_memory_free[0], now_mem, later_mem, mem_total),
    ):
        used, used_now, used_later = total - free, total - now, total - later
        assert (used >= np.maximum(used_now, used_later)).all(), (used, used_now, used_later)
        assert (used <= used_now + used_later).all(), (used, used_now, used_later)
    cpu = int(state.requested[0, state.resources.index("cpu")])
    assert max(now_cpu, later_cpu) <= cpu <= now_cpu + later_cpu
    assert all(state.placements[v.uid].terminating for v, _ in placed)


def test_every_pod_a_preemption_places_on_a_victims_node_waits_for_it() -> None:
    # Queue a holds both 8-GPU nodes: a gang of two 4-GPU members on n1 (the cheapest
    # victims: it started last) and eight 1-GPU pods on n2. Queue b's gang of two 4-GPU
    # members reclaims its share: b0's plan evicts a0 and tears a1 down with its group, and
    # b1 is placed on the GPUs a1 holds while it terminates -- so b1 waits for it too (its
    # bind posted at once would share those GPUs with a1, still running on the node).
    ga = [pod_info(f"a{i}", "a", gpus=4, group="ga", min_member=2) for i in range(2)]
    ones = [pod_info(f"o{i}", "a") for i in range(8)]
    placed = [(p, "n1", 50.0) for p in ga] + [(p, "n2", 0.0) for p in ones]
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8), placed=placed)
    guards = {"preemption": {"reclaimMinRuntimeSeconds": 0, "minRuntimeSeconds": 0}}
    engine = Engine(tenancy=parse_config(guards))
    engine.victims_linger = True
    gb = [pod_info(f"b{i}", "b", gpus=4, group="gb", min_member=2) for i in range(2)]
    out = engine.cycle(state, gb, 100.0)
    assert sorted(e.pod.name for e in out.evictions) == ["a0", "a1"]
    assert sorted(b.pod.name for b in out.binds) == ["b0", "b1"]
    for bind in out.binds:
        assert {"a/a0", "a/a1"} <= set(bind.wait_for), bind
    # No device is counted twice: the new members hold what they take, the victims' remainders
    # nothing beyond (both terminate on exactly the GPUs and room b's members take).
    assert (state.device_milli_free[0, :8] == 0).all()
    rest = [state.placements[u] for u in ("a/a0", "a/a1")]
    assert all(r.remainder and r.terminating and not r.devices for r in rest)
    assert not any(state.pods[u].requests.get("cpu") for u in ("a/a0", "a/a1"))


def test_what_a_victim_keeps_counts_for_its_queues_limit_while_it_terminates() -> None:
    # Queue a may hold 4 GPUs and holds them: two 2-GPU pods of priority 0 on n1. high (1
    # GPU, priority 100) takes the place of one of them, which terminates holding its other
    # GPU (both, when high lands on n2). other (1 GPU, priority 100) must not take their
    # place in the limit -- on n2, where it fits -- until the victim is gone: in the API, a
    # would then hold more than 4.
    config = parse_config({"queues": [{"name": "a", "namespaces": ["a"], "limit": {"gpu": 4}}]})
    low = [pod_info(f"low{i}", "a", gpus=2, priority=0) for i in range(2)]
    state = cluster(
        node_info("n1", gpus=8), node_info("n2", gpus=8), placed=[(p, "n1", 0.0) for p in low]
    )
    engine = Engine(tenancy=config)
    engine.victims_linger = True
    high = pod_info("high", "a", gpus=1, priority=100, created=1.0)
    other = pod_info("other", "a", gpus=1, priority=100, created=2.0)
    out = engine.cycle(state, [high], 100.0)
    [victim] = [e.pod.uid for e in out.evictions]
    assert [b.pod.name for b in out.binds] == ["high"]
    rest = state.placements[victim]  # what the victim keeps while it terminates
    assert rest.remainder and rest.terminating and rest.devices
    assert engine.book.used("a")[0] == (2 + 1 + len(rest.devices)) * WHOLE
    refused = engine.cycle(state, [other], 110.0)
    assert refused.binds == [] and "above its limit of 4 GPU" in refused.unschedulable[0].reason
    state.release(victim)  # gone
    assert [b.pod.name for b in engine.cycle(state, [other], 120.0).binds] == ["other"]


def test_a_victim_of_another_queue_still_counts_for_its_own_queues_limit() -> None:
    # Queue a (limit 4) holds n1's four GPUs; b reclaims two of them (its share of n1, the
    # only node its pods may use), taking their devices -- the victims terminate holding
    # nothing the cluster could give anyone. a's limit is not free for them yet: a pod of a
    # that fits on n2 waits until they are gone, or a would hold 5 in the API.
    config = parse_config(
        {
            "preemption": {"reclaimMinRuntimeSeconds": 0, "minRuntimeSeconds": 0},
            "queues": [
                {"name": "a", "namespaces": ["a"], "limit": {"gpu": 4}},
                {"name": "b", "namespaces": ["b"]},
            ],
        }
    )
    only_n1 = (("pool", "one"),)
    held = [pod_info(f"a{i}", "a", node_selector=only_n1) for i in range(4)]
    state = cluster(
        node_info("n1", gpus=4, labels={"pool": "one"}),
        node_info("n2", gpus=4),
        placed=[(p, "n1", 0.0) for p in held],
    )
    engine = Engine(tenancy=config)
    engine.victims_linger = True
    b = [pod_info(f"b{i}", "b", node_selector=only_n1, created=1.0) for i in range(2)]
    out = engine.cycle(state, b, 100.0)
    victims = sorted(e.pod.uid for e in out.evictions)
    assert len(victims) == 2 and all(e.kind == "reclaim" for e in out.evictions)
    assert engine.book.used("a")[0] == 2 * WHOLE  # the victims keep no GPU in the cluster
    more = pod_info("a-more", "a", created=2.0)
    refused = engine.cycle(state, [more], 110.0)
    assert refused.binds == [] and "above its limit of 4 GPU" in refused.unschedulable[0].reason
    for uid in victims:  # gone
        state.release(uid)
    assert [b.pod.name for b in engine.cycle(state, [more], 120.0).binds] == ["a-more"]


def test_a_victim_put_back_whole_is_counted_whole_again() -> None:
    # As above, but high's preemption is given up (the live scheduler puts the victim back
    # whole, still terminating): queue a's book counts the victim's two GPUs, not what its
    # remainder kept, nor that beside them.
    config = parse_config({"queues": [{"name": "a", "namespaces": ["a"], "limit": {"gpu": 4}}]})
    low = [pod_info(f"low{i}", "a", gpus=2, priority=0) for i in range(2)]
    state = cluster(node_info("n1", gpus=8), placed=[(p, "n1", 0.0) for p in low])
    devices = {uid: pl.devices for uid, pl in state.placements.items()}
    engine = Engine(tenancy=config)
    engine.victims_linger = True
    out = engine.cycle(state, [pod_info("high", "a", gpus=1, priority=100)], 100.0)
    [victim] = [e.pod for e in out.evictions]
    [before] = out.binds  # high
    state.release(before.pod.uid)  # high gives up
    state.release(victim.uid)
    back = state.assign(victim, 0, devices[victim.uid], started=0.0)
    back.bound = back.terminating = True
    engine.cycle(state, [], 110.0)
    assert engine.book.used("a")[0] == 4 * WHOLE and not engine.book.leaving
