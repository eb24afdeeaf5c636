"""A held preemptor (placed, unbound, waiting for its own victims: one of the engine's
``displaceable`` pods) is displaced -- never evicted -- by a pod the victim rules allow to
preempt it were it running, before any running pod; not by a pod of equal or lower priority
of its queue, nor by another queue's pod the reclaim rules refuse."""

from __future__ import annotations

import pytest

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info

ORDERINGS = ["fair", "kube-default"]
NO_MIN_RUN = {"preemption": {"reclaimMinRuntimeSeconds": 0}}


def _held(state: ClusterState, pod: PodInfo, engine: Engine) -> None:
    """Record ``pod`` as the live cache does while it waits for its victims."""
    state.placements[pod.uid].bound = False
    engine.displaceable = frozenset({pod.uid})


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_higher_priority_pod_takes_a_held_preemptors_place_before_any_running_pod(
    ordering: str,
) -> None:
    # n1: the held p1 (priority 2) and a running pod of priority 0 -- the cheaper victim by
    # priority, but evicting it loses work and taking p1's place loses none.
    p1, low = pod_info("p1", priority=2), pod_info("low", priority=0)
    state = cluster(node_info("n1", gpus=2), placed=[(p1, "n1", 5.0), (low, "n1", 0.0)])
    engine = Engine(ordering=ordering)
    _held(state, p1, engine)
    out = engine.cycle(state, [pod_info("p2", priority=10, created=1.0)], 10.0)
    assert out.evictions == []  # p1 is unbound: an Eviction would delete it
    assert [(d.pod.name, d.preemptor.name) for d in out.displaced] == [("p1", "p2")]
    assert [(b.pod.name, b.node_name, b.wait_for) for b in out.binds] == [("p2", "n1", (p1.uid,))]
    assert p1.uid not in state.placements and low.uid in state.placements
    assert engine.preemptions == 0  # nothing that ran was stopped


@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize("priority", [2, 1])
def test_equal_or_lower_priority_pod_does_not_displace(ordering: str, priority: int) -> None:
    p1, keep = pod_info("p1", priority=2), pod_info("keep", priority=50)
    state = cluster(node_info("n1", gpus=2), placed=[(p1, "n1", 5.0), (keep, "n1", 0.0)])
    engine = Engine(ordering=ordering)
    _held(state, p1, engine)
    out = engine.cycle(state, [pod_info("p2", priority=priority, created=1.0)], 10.0)
    assert out.displaced == [] and out.evictions == [] and out.binds == []
    assert p1.uid in state.placements


def _two_queues(p1_queue: str) -> tuple[ClusterState, PodInfo]:
    """n1 (3 GPUs): the held p1 of queue ``p1_queue`` and a running a1 of queue a (both
    priority 0), and b0 of queue b (priority 1000)."""
    p1 = pod_info("p1", p1_queue, priority=0)
    a1 = pod_info("a1", "a", priority=0)
    b0 = pod_info("b0", "b", priority=1000)
    placed = [(p1, "n1", 5.0), (a1, "n1", 0.0), (b0, "n1", 0.0)]
    return cluster(node_info("n1", gpus=3), placed=placed), p1


def test_another_queue_displaces_a_held_preemptor_only_as_reclaim_allows() -> None:
    # Queue a holds two of three GPUs, above its third: c, holding nothing, may reclaim from
    # it, and takes the held p1's place rather than evict a1.
    state, p1 = _two_queues("a")
    engine = Engine(tenancy=parse_config(NO_MIN_RUN))
    _held(state, p1, engine)
    out = engine.cycle(state, [pod_info("c0", "c", created=1.0)], 10.0)
    assert out.evictions == []
    assert [(d.pod.name, d.preemptor.name) for d in out.displaced] == [("p1", "c0")]


def test_high_priority_of_another_queue_does_not_bypass_reclaim_rules() -> None:
    # b already holds its third: its priority-1000 pod may not take a's held p1 (priority
    # only orders work inside a queue), nor b0 (equal priority).
    state, p1 = _two_queues("a")
    engine = Engine(tenancy=parse_config(NO_MIN_RUN))
    _held(state, p1, engine)
    out = engine.cycle(state, [pod_info("b1", "b", priority=1000, created=1.0)], 10.0)
    assert out.displaced == [] and out.evictions == [] and out.binds == []
    assert p1.uid in state.placements


def test_reclaim_min_runtime_protects_a_held_preemptor_as_a_running_pod() -> None:
    # The same move as above but reclaimMinRuntimeSeconds (default 60 s) counts from when p1
    # was placed (5 s): too young to be reclaimed at 10 s, as a running pod would be.
    state, p1 = _two_queues("a")
    engine = Engine()
    _held(state, p1, engine)
    out = engine.cycle(state, [pod_info("c0", "c", created=1.0)], 10.0)
    assert out.displaced == [] and out.evictions == []


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_one_displacement_per_node_and_cycle(ordering: str) -> None:
    # h1, h2 held on n1, h3 (a higher priority: the dearer place to take) on n2: two pods
    # take places on both nodes, not two on n1 (the adapter hands a displaced pod's victims
    # to the one pod that took its place).
    held = [pod_info(f"h{i}", priority=2 if i < 3 else 5) for i in (1, 2, 3)]
    nodes = (node_info("n1", gpus=2), node_info("n2", gpus=1))
    state = cluster(*nodes, placed=[(held[0], "n1"), (held[1], "n1"), (held[2], "n2")])
    engine = Engine(ordering=ordering)
    for p in held:
        state.placements[p.uid].bound = False
    engine.displaceable = frozenset(p.uid for p in held)
    pending = [pod_info(f"x{i}", priority=10, created=float(i)) for i in (1, 2)]
    out = engine.cycle(state, pending, 10.0)
    assert out.evictions == [] and len(out.displaced) == 2
    assert sorted(b.node_name for b in out.binds) == ["n1", "n2"]
