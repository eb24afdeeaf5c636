"""Where evicted pods terminate gracefully (the live adapter's ``victims_linger``), what a
victim holds beyond its preemptor's room stays held until the victim is gone: no pod placed
after the preemption, in the same cycle or a later one, shares a device or node room with it."""

from __future__ import annotations

import numpy as np
import pytest

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.engine.lingering import hold_remainders
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import PodInfo
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
    hold_remainders(state, [(near, placed[near.uid]), (far, placed[far.uid])], took, where)
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
    hold_remainders(state, [(victim, where)], taker, state.assign(taker, 0, (0,)))
    assert state.placements[victim.uid].device_milli == 350
    assert int(state.device_milli_free[0, 0]) == WHOLE - 600
    assert np.all(state.device_milli_free[0, :1] >= 0)
