"""Which placed pods may be preemption victims: only bound, non-terminating ones, in both
orderings; a preemptor whose earlier victims still terminate may be placed but not preempt."""

from __future__ import annotations

import pytest

from fairgpu.cluster.state import Placement
from fairgpu.engine.engine import Engine
from fairgpu.engine.preemption import may_preempt_again, victim_eligible
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info

ORDERINGS = ["fair", "kube-default"]


@pytest.mark.parametrize(
    ("placement", "now", "min_runtime", "expected"),
    [
        (Placement(0, started=0.0), 10.0, 0.0, True),
        (Placement(0, started=0.0, bound=False), 10.0, 0.0, False),
        (Placement(0, started=0.0, terminating=True), 10.0, 0.0, False),
        (Placement(0, started=5.0), 10.0, 10.0, False),  # too young
        (Placement(0, started=0.0), 10.0, 10.0, True),
        (None, 10.0, 0.0, False),
    ],
)
def test_victim_eligible(
    placement: Placement | None, now: float, min_runtime: float, expected: bool
) -> None:
    assert victim_eligible(placement, now, min_runtime) is expected


def _full_node(flag: str) -> tuple:
    """A 2-GPU node held by a priority-0 pod with ``flag`` (unbound or terminating) and a
    bound, running priority-1 pod; a priority-10 pod wants one GPU."""
    low = pod_info("low", priority=0)
    mid = pod_info("mid", priority=1)
    state = cluster(node_info("n1", gpus=2), placed=[(low, "n1", 0.0), (mid, "n1", 0.0)])
    setattr(state.placements[low.uid], flag, flag == "terminating")
    return state, low, mid, pod_info("urgent", priority=10, created=5.0)


@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize("flag", ["bound", "terminating"])
def test_unbound_or_terminating_pod_is_never_a_victim(ordering: str, flag: str) -> None:
    state, low, mid, urgent = _full_node(flag)
    out = Engine(ordering=ordering).cycle(state, [urgent], 100.0)
    # The lowest-priority pod would be chosen if it were a running, bound pod.
    assert [e.pod.name for e in out.evictions] == ["mid"]
    assert [(b.pod.name, b.wait_for) for b in out.binds] == [("urgent", (mid.uid,))]
    assert low.uid in state.placements  # its capacity stays held


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_no_victim_when_every_pod_is_unbound_or_terminating(ordering: str) -> None:
    a, b = pod_info("a", priority=0), pod_info("b", priority=0)
    state = cluster(node_info("n1", gpus=2), placed=[(a, "n1", 0.0), (b, "n1", 0.0)])
    state.placements[a.uid].bound = False  # a preemptor waiting for its own victims
    state.placements[b.uid].terminating = True  # an earlier victim still going
    out = Engine(ordering=ordering).cycle(state, [pod_info("urgent", priority=10)], 100.0)
    assert out.evictions == [] and out.binds == []


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_waiting_preemptor_is_not_the_victim_of_the_next_one(ordering: str) -> None:
    # A chain: p1 preempts v; while p1 waits (not bound), a higher-priority p2 arrives.
    # p1's priority is below that of the other running pod: the cheapest victim, were it bound.
    v, other = pod_info("v", priority=0), pod_info("other", priority=3)
    state = cluster(node_info("n1", gpus=2), placed=[(v, "n1", 0.0), (other, "n1", 0.0)])
    engine = Engine(ordering=ordering)
    first = engine.cycle(state, [pod_info("p1", priority=2)], 10.0)
    assert [e.pod.name for e in first.evictions] == ["v"]
    p1 = first.binds[0].pod
    state.placements[p1.uid].bound = False  # what the live cache records while p1 waits
    second = engine.cycle(state, [pod_info("p2", priority=10, created=1.0)], 11.0)
    assert [e.pod.name for e in second.evictions] == ["other"]
    assert p1.uid in state.placements


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_no_preemption_still_places_but_never_evicts(ordering: str) -> None:
    low = pod_info("low", priority=0)
    state = cluster(node_info("n1", gpus=1), node_info("n2", gpus=1), placed=[(low, "n1", 0.0)])
    engine = Engine(ordering=ordering)
    a, b = pod_info("a", priority=10), pod_info("b", priority=10, created=1.0)
    engine.no_preemption = frozenset({a.uid, b.uid})
    out = engine.cycle(state, [a, b], 10.0)
    assert [x.pod.name for x in out.binds] == ["a"]  # the free GPU on n2
    assert out.evictions == []
    engine.no_preemption = frozenset()
    out = engine.cycle(state, [b], 11.0)
    assert [e.pod.name for e in out.evictions] == ["low"]


def test_may_preempt_again_while_lower_priority_pods_terminate_on_the_nominated_node() -> None:
    gone, keep = pod_info("gone", priority=0), pod_info("keep", priority=50)
    state = cluster(
        node_info("n1", gpus=2),
        node_info("n2", gpus=8),
        placed=[(gone, "n1", 0.0), (keep, "n1", 0.0)],
    )
    urgent = pod_info("urgent", priority=10)
    assert may_preempt_again(urgent, state, "n1")  # nothing terminating yet
    state.placements[gone.uid].terminating = True
    assert not may_preempt_again(urgent, state, "n1")
    assert may_preempt_again(urgent, state, "n2")  # other node
    assert may_preempt_again(urgent, state, "")  # never nominated
    assert may_preempt_again(urgent, state, "no-such-node")
    state.placements[gone.uid].terminating = False
    state.placements[keep.uid].terminating = True  # higher priority: not its victim
    assert may_preempt_again(urgent, state, "n1")


def test_reclaim_chain_never_takes_a_waiting_preemptor() -> None:
    # Queue a holds all four GPUs; b reclaims two; while b's pods wait, c reclaims too. a and
    # b are equally far above their shares and b is tried first: only a's pods may go.
    held = [pod_info(f"a{i}", "a", created=float(i)) for i in range(4)]
    state = cluster(node_info("n1", gpus=4), placed=[(p, "n1", 0.0) for p in held])
    # reclaimMinRuntimeSeconds off: a's pods ran only 10 s (the rule here is about b's).
    engine = Engine(tenancy=parse_config({"preemption": {"reclaimMinRuntimeSeconds": 0}}))
    first = engine.cycle(state, [pod_info(f"b{i}", "b", created=5.0 + i) for i in range(2)], 10.0)
    assert [e.kind for e in first.evictions] == ["reclaim", "reclaim"]
    waiting = {b.pod.uid for b in first.binds}
    for uid in waiting:
        state.placements[uid].bound = False  # waiting for their victims
    second = engine.cycle(state, [pod_info("c0", "c", created=8.0)], 11.0)
    assert [e.pod.namespace for e in second.evictions] == ["a"]
    assert waiting <= set(state.placements)
