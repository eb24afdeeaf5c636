"""Gang-aware, work-aware preemption: a pod group is one victim, victims are chosen by the work
they lose, the reclaim rule sees the real end state, and a large gang is not torn down for a
small pod when waiting is cheaper."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgpu.cluster.state import ClusterState, Placement
from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.engine.preemption import find_preemption
from fairgpu.engine.victim_cost import (
    RunningGangs,
    VictimCost,
    _copies_per_node,
    copies_on_node,
    declared_ends,
    lost_work,
    remaining,
    time_to_fit,
    waiting_is_cheaper,
)
from fairgpu.model.gpu import GpuRequest
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy import parse_config
from fairgpu.tenancy.resolve import LABEL_POD_GROUP
from tests.builders import cluster, node_info, pod_info

# Two queues, reclaim on; the tolerance band and the cooldown at their defaults.
QUEUES = {"queues": [{"name": "a", "namespaces": ["a"]}, {"name": "b", "namespaces": ["b"]}]}


def engine(**preemption: Any) -> Engine:
    return Engine(tenancy=parse_config({**QUEUES, "preemption": {"enabled": True, **preemption}}))


def member(name: str, group: str, min_member: int, gpus: int, **kw: Any) -> PodInfo:
    return pod_info(name, "a", gpus=gpus, group=group, min_member=min_member, **kw)


def evicted(res: CycleResult) -> list[tuple[str, str]]:
    return sorted((e.pod.name, e.kind) for e in res.evictions)


# ---- the cost model ------------------------------------------------------------------------
def test_lost_work_is_gpus_times_seconds_run() -> None:
    whole = pod_info("w", gpus=2)
    share = pod_info("s", gpus=1, milli=250)
    state = cluster(node_info("n1", gpus=4), placed=[(whole, "n1", 100.0)])
    state.assign(share, 0, (3,), started=40.0)
    assert lost_work([whole.uid, share.uid], state, 160.0) == 2 * 60.0 + 0.25 * 120.0
    assert lost_work(["gone"], state, 160.0) == 0.0


def test_remaining_is_the_declared_end_less_the_time_run() -> None:
    pl = Placement(0, started=100.0)
    assert remaining(pod_info("d", duration=300), pl, 250.0) == 150.0
    assert remaining(pod_info("d", duration=300), pl, 500.0) == 0.0  # overdue
    assert remaining(pod_info("u"), pl, 250.0) is None


def test_waiting_is_cheaper_compares_the_preemptors_delay_with_the_loss() -> None:
    # A one-GPU pod near its end (ran 600 s, 60 s left): wait for it rather than kill it.
    assert waiting_is_cheaper(loss=600.0, gpus=1.0, wait=60.0)
    # It has more left than it has run: killing loses less than waiting costs.
    assert not waiting_is_cheaper(loss=60.0, gpus=1.0, wait=600.0)
    assert not waiting_is_cheaper(loss=1e9, gpus=1.0, wait=math.inf)  # unknown: go ahead


def _gangs(members: dict[str, set[str]], mins: dict[str, int | None]) -> RunningGangs:
    of = {u: k for k, us in members.items() for u in us}
    return RunningGangs(members, lambda u: of.get(u, ""), mins.get)


def test_a_rigid_group_is_one_victim_an_elastic_one_loses_members_beyond_min_member() -> None:
    state = ClusterState()
    cost = VictimCost(state, _gangs({"rigid": {"r0", "r1", "r2"}, "el": {"e0", "e1", "e2"}},
                                    {"rigid": 3, "el": 2}), 0.0)  # fmt: skip
    assert cost.closure(["r1"]) == ["r1", "r0", "r2"]
    assert cost.closure(["e1"]) == ["e1"]  # one member beyond minMember 2 may go alone
    assert cost.closure(["e1", "e2"]) == ["e1", "e2", "e0"]  # below minMember: all go
    assert cost.closure(["x"]) == ["x"]
    assert cost.units(["r0", "r1", "x", "e0"]) == 3
    assert cost.admissible("r0", {"r0", "r1", "r2"}) and not cost.admissible("r0", {"r0", "r1"})
    assert cost.admissible("e0", {"e0"})  # it has slack: its siblings need not be eligible


def test_members_that_ran_to_completion_count_toward_a_groups_slack() -> None:
    # minMember 2: one member finished, two run -- one of them may go alone; a rigid group
    # (minMember unknown) stays one victim whatever finished.
    members = {"el": {"e1", "e2"}, "rigid": {"r1", "r2"}}
    of = {u: k for k, us in members.items() for u in us}
    done = {"el": {"e0"}, "rigid": {"r0"}}
    gangs = RunningGangs(members, lambda u: of.get(u, ""), {"el": 2}.get, done)
    assert gangs.slack("el") == 1 and gangs.slack("el", leaving=1) == 0
    assert gangs.slack("rigid") == 0 and gangs.slack("rigid", leaving=1) == -1
    cost = VictimCost(ClusterState(), gangs, 0.0)
    assert cost.closure(["e1"]) == ["e1"]
    assert cost.closure(["e1", "e2"]) == ["e1", "e2"]  # members of one group: both go
    assert _gangs(members, {"el": 2}).slack("el") == 0  # without the finished one: none may


def test_floor_is_the_cheapest_fractional_cover_of_the_gpus_needed() -> None:
    cheap = pod_info("cheap", gpus=1)  # 1 GPU x 100 s
    dear = pod_info("dear", gpus=2)  # 2 GPUs x 1 000 s: 1 000 per GPU
    g0, g1 = member("g0", "g", 2, 1), member("g1", "g", 2, 1)  # one group, 2 x 500 s here
    placed = [(cheap, "n1", 900.0), (dear, "n1", 0.0), (g0, "n1", 500.0), (g1, "n1", 500.0)]
    state = cluster(node_info("n1", gpus=5), placed=placed)
    gangs = _gangs({"a/g": {g0.uid, g1.uid}}, {"a/g": 2})
    cost = VictimCost(state, gangs, 1000.0)
    pods = [cheap, dear, g0, g1]
    # Per GPU: cheap 100, the group 1 000 shared by its two members (500 each), dear 1 000.
    assert cost.floor(pods, 0.0) == (-math.inf, 100.0)
    assert cost.floor(pods, 2.0) == (-math.inf, 100.0 + 500.0)
    assert cost.floor(pods, 4.0) == (-math.inf, 100.0 + 1000.0 + 1000.0)


def test_a_search_leaves_every_kept_unit_cost_as_computed_afresh() -> None:
    """A search releases and restores the pods it tries on each node; the unit costs it kept
    on the way are what a fresh cost model gives after it (a group's, shared by members)."""
    cheap = pod_info("cheap", gpus=1)
    g0, g1 = member("g0", "g", 2, 2), member("g1", "g", 2, 2)
    placed = [(cheap, "n1", 900.0), (g0, "n1", 500.0), (g1, "n2", 100.0)]
    state = cluster(node_info("n1", gpus=4), node_info("n2", gpus=2), placed=placed)
    gangs = _gangs({"a/g": {g0.uid, g1.uid}}, {"a/g": 2})
    cost = VictimCost(state, gangs, 1000.0)
    eligible = [cheap.uid, g0.uid, g1.uid]
    plan = find_preemption(
        pod_info("want", "b", gpus=4), state, Engine().scheduler, eligible, cost=cost
    )
    assert plan is not None and cost._units  # the search kept some
    fresh = VictimCost(state, gangs, 1000.0)
    for uid in eligible:
        assert cost.unit_cost(uid) == fresh.unit_cost(uid)
    assert cost.unit_cost(g0.uid) == 2 * 500.0 + 2 * 900.0  # the whole group's work


def test_time_to_fit_follows_declared_ends() -> None:
    placed = [
        (pod_info("soon", gpus=1, duration=100), "n1", 0.0),
        (pod_info("late", gpus=1, duration=900), "n1", 0.0),
        (pod_info("open", gpus=2), "n2", 0.0),
    ]
    state = cluster(node_info("n1", gpus=2), node_info("n2", gpus=2), placed=placed)
    every = np.ones(state.size, dtype=bool)
    assert time_to_fit(pod_info("one", gpus=1), 1, state, every, 40.0) == 60.0
    assert time_to_fit(pod_info("two", gpus=2), 1, state, every, 40.0) == 860.0
    assert time_to_fit(pod_info("two", gpus=2), 2, state, every, 40.0) == math.inf
    only_n2 = np.array([False, True])
    assert time_to_fit(pod_info("one", gpus=1), 1, state, only_n2, 40.0) == math.inf
    # Fractional asks count the shares each device frees.
    quarter = pod_info("q", gpus=1, milli=250)
    assert time_to_fit(quarter, 4, state, every, 40.0) == 60.0


# ---- victim choice -------------------------------------------------------------------------
def _gang_or_pod() -> tuple[ClusterState, PodInfo]:
    """Queue a: a 3 x 4-GPU gang on n1-n3 started at 500 s, and two 2-GPU pods on n4 started
    at 0; queue b (empty) wants 2 GPUs at 1 000 s. One member of the gang looks like one
    newer victim (count 1, as one pod on n4) but costs the whole gang: 12 GPUs x 500 s."""
    placed: list[Any] = [(member(f"g{i}", "g", 3, 4), f"n{i + 1}", 500.0) for i in range(3)]
    placed += [(pod_info(f"p{i}", "a", gpus=2), "n4", 0.0) for i in range(2)]
    nodes = [node_info(f"n{i}", gpus=4) for i in range(1, 5)]
    return cluster(*nodes, placed=placed), pod_info("want", "b", gpus=2)


def test_a_gang_member_costs_the_whole_gang() -> None:
    state, want = _gang_or_pod()
    res = engine().cycle(state, [want], 1000.0)
    # p0 and p1 lose 2 GPUs x 1 000 s each; one gang member would lose 12 x 500.
    assert len(res.evictions) == 1 and res.evictions[0].pod.name in ("p0", "p1")
    assert res.binds[0].node_name == "n4"


def test_a_broken_gang_is_evicted_whole_and_its_other_members_restart() -> None:
    # Only the gang's nodes: a member goes, the rest with it (not left holding GPUs).
    placed: list[Any] = [(member(f"g{i}", "g", 3, 4), f"n{i + 1}", 0.0) for i in range(3)]
    placed.append((pod_info("young", "a", gpus=4), "n4", 990.0))  # too young to reclaim
    nodes = [node_info(f"n{i}", gpus=4) for i in range(1, 5)]
    state = cluster(*nodes, placed=placed)
    res = engine().cycle(state, [pod_info("want", "b", gpus=2)], 1000.0)
    kinds = dict(evicted(res))
    assert sorted(kinds) == ["g0", "g1", "g2"]
    assert sorted(kinds.values()) == ["gang-restart", "gang-restart", "reclaim"]
    assert not any(state.pods[u].name.startswith("g") for u in state.placements)


def test_reclaim_rule_is_judged_with_the_whole_gang_gone() -> None:
    # a: a 3 x 4-GPU gang; b: 4 GPUs and a 4-GPU pod pending (fair share 8 each). Counting
    # one member (4 GPUs) leaves a = 8 >= b = 8; with the whole gang gone a holds 0 < 8.
    placed: list[Any] = [(member(f"g{i}", "g", 3, 4), f"n{i + 1}", 0.0) for i in range(3)]
    placed.append((pod_info("mine", "b", gpus=4), "n4", 0.0))
    nodes = [node_info(f"n{i}", gpus=4) for i in range(1, 5)]
    state = cluster(*nodes, placed=placed)
    res = engine().cycle(state, [pod_info("want", "b", gpus=4)], 1000.0)
    assert not res.evictions and not res.binds
    assert "would pass 'a' in reclaim order after the move" in res.unschedulable[0].reason


def test_a_move_the_reclaim_rule_refuses_whatever_the_victims_is_not_searched(
    monkeypatch: Any,
) -> None:
    """b holds 3 of 8 GPUs (its share 4) and wants 2 more: whichever of a's pods went, b
    would exceed its share, so no victim search runs -- and the reason names the rule, as
    the search's refused plans would."""
    from fairgpu.engine.actions import preempt

    searches = 0
    search = preempt.find_preemption

    def counted(*args: Any, **kw: Any) -> Any:
        nonlocal searches
        searches += 1
        return search(*args, **kw)

    monkeypatch.setattr(preempt, "find_preemption", counted)
    placed: list[Any] = [(pod_info(f"a{i}", "a", gpus=1), "n1", 0.0) for i in range(4)]
    placed.append((pod_info("a4", "a", gpus=1), "n2", 0.0))
    placed.append((pod_info("b0", "b", gpus=3), "n2", 0.0))
    state = cluster(node_info("n1", gpus=4), node_info("n2", gpus=4), placed=placed)
    res = engine().cycle(state, [pod_info("want", "b", gpus=2)], 1000.0)
    assert not res.evictions and not res.binds
    assert "reclaim refused: queue 'b' would exceed its fair share after the move" in (
        res.unschedulable[0].reason
    )
    assert searches == 0


def test_an_elastic_group_loses_only_a_member_beyond_min_member() -> None:
    # Four 1-GPU members, minMember 2, one per node; b wants one GPU.
    placed: list[Any] = [(member(f"e{i}", "e", 2, 1), f"n{i}", 0.0) for i in range(4)]
    state = cluster(*[node_info(f"n{i}", gpus=1) for i in range(4)], placed=placed)
    res = engine().cycle(state, [pod_info("want", "b", gpus=1)], 1000.0)
    assert len(res.evictions) == 1 and res.evictions[0].kind == "reclaim"
    assert sum(state.pods[u].name.startswith("e") for u in state.placements) == 3


# ---- waiting is cheaper --------------------------------------------------------------------
def _big_gang_small_pod(declared: bool) -> tuple[ClusterState, PodInfo]:
    """a: a 2 x 4-GPU gang that ran an hour on n1-n2 and 8 GPUs of pods 10 s old on n3 (too
    young to reclaim); b: one GPU on n4, which (when ``declared``) ends in 60 s; b wants one
    more GPU."""
    placed: list[Any] = [(member(f"g{i}", "g", 2, 4), f"n{i + 1}", 0.0) for i in range(2)]
    placed += [(pod_info(f"y{i}", "a", gpus=1), "n3", 3590.0) for i in range(8)]
    placed.append((pod_info("ends", "b", gpus=1, duration=3660 if declared else None), "n4", 0.0))
    nodes = [node_info("n1"), node_info("n2"), node_info("n3", gpus=8), node_info("n4", gpus=1)]
    return cluster(*nodes, placed=placed), pod_info("small", "b", gpus=1)


def test_a_large_gang_is_not_torn_down_for_a_small_pod_when_waiting_is_cheaper() -> None:
    state, small = _big_gang_small_pod(declared=True)
    res = engine().cycle(state, [small], 3600.0)
    assert not res.evictions and not res.binds
    assert "waiting is cheaper" in res.unschedulable[0].reason
    # Without a declared end nothing says waiting is short: the gang goes, whole.
    state, small = _big_gang_small_pod(declared=False)
    res = engine().cycle(state, [small], 3600.0)
    assert [name for name, _ in evicted(res)] == ["g0", "g1"]


def _one_victim(duration: float) -> ClusterState:
    """a: a one-GPU pod on n1 that ran 100 s of ``duration``, and one on n2 too young to
    reclaim; b wants one GPU."""
    placed = [
        (pod_info("old", "a", gpus=1, duration=duration), "n1", 0.0),
        (pod_info("young", "a", gpus=1), "n2", 90.0),
    ]
    return cluster(node_info("n1", gpus=1), node_info("n2", gpus=1), placed=placed)


def test_a_pod_with_more_left_than_it_has_run_is_killed_rather_than_waited_for() -> None:
    # Killing loses 100 GPU-seconds; waiting would cost 9 900.
    state = _one_victim(duration=10_000)
    res = engine().cycle(state, [pod_info("small", "b", gpus=1)], 100.0)
    assert evicted(res) == [("old", "reclaim")]
    # Near its end (100 s run, 50 s left) it is waited for.
    state = _one_victim(duration=150)
    res = engine().cycle(state, [pod_info("small", "b", gpus=1)], 100.0)
    assert not res.evictions and "waiting is cheaper" in res.unschedulable[0].reason


# ---- property: evictions never leave a group partial ---------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    gangs=st.lists(
        st.tuples(st.integers(2, 4), st.integers(1, 4), st.floats(0, 900)), min_size=1, max_size=3
    ),
    singles=st.lists(st.floats(0, 900), max_size=6),
    want=st.integers(1, 4),
)
def test_evictions_never_leave_a_group_below_min_member(
    gangs: list[tuple[int, int, float]], singles: list[float], want: int
) -> None:
    """Whatever is running, after a cycle every pod group touched by an eviction either
    keeps at least minMember running or has no member left."""
    nodes = [node_info(f"n{i}", gpus=4) for i in range(6)]
    state = cluster(*nodes)
    free = {i: 4 for i in range(6)}

    def put(pod: PodInfo, started: float) -> bool:
        for i in range(6):
            if free[i] >= pod.gpu.count:
                devices = tuple(4 - free[i] + d for d in range(pod.gpu.count))
                state.assign(pod, i, devices, started=started)
                free[i] -= pod.gpu.count
                return True
        return False

    groups: dict[str, int] = {}
    for k, (size, gpus, started) in enumerate(gangs):
        mins = max(1, size - k % 2)  # odd gangs are elastic: one member beyond minMember
        groups[f"k{k}"] = mins
        for m in range(size):
            put(member(f"k{k}-{m}", f"k{k}", mins, gpus), started)
    for j, started in enumerate(singles):
        put(pod_info(f"s{j}", "a", gpus=1), started)
    before = {u: state.pods[u] for u in state.placements}
    res = engine(reclaimMinRuntimeSeconds=0).cycle(state, [pod_info("w", "b", gpus=want)], 1000.0)
    gone = {e.pod.uid for e in res.evictions}
    for key, mins in groups.items():
        members = [u for u, p in before.items() if p.labels.get(LABEL_POD_GROUP) == key]
        left = [u for u in members if u not in gone]
        if len(left) < len(members):
            assert len(left) >= mins or not left, (key, len(left), mins)


@settings(max_examples=40, deadline=None)
@given(
    pods=st.lists(
        st.tuples(
            st.integers(1, 4), st.floats(0, 990), st.none() | st.floats(1, 5000), st.booleans()
        ),
        min_size=1,
        max_size=12,
    ),
    want=st.integers(1, 4),
)
def test_a_pod_alone_never_kills_more_work_than_waiting_would_cost(
    pods: list[tuple[int, float, float | None, bool]], want: int
) -> None:
    """Whatever runs (queue a, some in pod groups, some declaring their run time), when b's
    pod alone evicts, the work lost is less than its GPUs x the time declared run times need
    to free room for it, measured before the cycle (pods long overdue not counted)."""
    state = cluster(*[node_info(f"n{i}", gpus=4) for i in range(4)])
    free = [4] * 4
    for j, (gpus, started, duration, grouped) in enumerate(pods):
        node = next((i for i in range(4) if free[i] >= gpus), None)
        if node is None:
            continue
        extra: dict[str, Any] = {"group": f"k{j % 2}", "min_member": 1} if grouped else {}
        pod = pod_info(f"p{j}", "a", gpus=gpus, duration=duration, **extra)
        state.assign(pod, node, tuple(range(4 - free[node], 4 - free[node] + gpus)), started)
        free[node] -= gpus
    now = 1000.0
    small = pod_info("w", "b", gpus=want)
    # Pods overdue by more than drainGraceSeconds (default 120) are not expected to end.
    grace = parse_config({}).starvation.drain_grace_seconds
    ends = declared_ends(state, now, grace)
    wait = time_to_fit(small, 1, state, np.ones(state.size, dtype=bool), now, lambda: ends)
    before = {u: (state.pods[u], state.placements[u]) for u in state.placements}
    res = engine(reclaimMinRuntimeSeconds=0).cycle(state, [small], now)
    if res.evictions:
        loss = sum(
            before[e.pod.uid][1].device_milli / 1000 * len(before[e.pod.uid][1].devices)
            * (now - before[e.pod.uid][1].started)
            for e in res.evictions
        )  # fmt: skip
        assert not waiting_is_cheaper(loss, want, wait), (loss, wait)


def test_the_waiting_reason_names_when_room_frees_and_stays_the_same_while_it_waits() -> None:
    """The time is absolute, so a pod that keeps waiting for the same room keeps the same
    reason (an adapter reports a reason only when it changed)."""
    small = pod_info("small", "b", gpus=1)
    at_100 = engine().cycle(_one_victim(duration=150), [small], 100.0).unschedulable[0].reason
    at_120 = engine().cycle(_one_victim(duration=150), [small], 120.0).unschedulable[0].reason
    assert "waiting is cheaper: declared run times free room by t=150 s, and " in at_100
    assert at_120 == at_100


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    nodes=st.integers(1, 5),
    devices=st.integers(1, 8),
    gpu=st.builds(
        GpuRequest,
        count=st.integers(1, 4),
        milli=st.sampled_from([250, 500, 1000]),
        memory_mib=st.sampled_from([0, 0, 4096, 20000]),
    ),
)
def test_copies_of_all_nodes_at_once_are_each_nodes_copies(
    data: st.DataObject, nodes: int, devices: int, gpu: GpuRequest
) -> None:
    """The vectorised count :func:`time_to_fit` starts from equals :func:`copies_on_node`
    row by row, whole and shared asks alike, with and without memory per copy."""
    cells = st.lists(st.integers(-100, 1000), min_size=devices, max_size=devices)
    milli = np.array(data.draw(st.lists(cells, min_size=nodes, max_size=nodes)), dtype=np.int64)
    memory = np.array(
        data.draw(
            st.lists(
                st.lists(st.integers(0, 81920), min_size=devices, max_size=devices),
                min_size=nodes,
                max_size=nodes,
            )
        ),
        dtype=np.int64,
    )
    need = data.draw(st.lists(st.sampled_from([0, 4096, 81920]), min_size=nodes, max_size=nodes))
    pod = pod_info("p", gpus=gpu.count)
    pod.gpu = gpu
    rows = _copies_per_node(pod, milli, memory, need)
    assert rows == [copies_on_node(pod, milli[i], memory[i], need[i]) for i in range(nodes)]


def test_a_pod_long_past_its_declared_run_time_is_not_waited_for() -> None:
    """Queue ``a`` holds both nodes with pods that declared 60 s (or 950 s) and run on; at
    t=1000 s queue ``b`` needs a node. Taken at their word they free room "now", so waiting
    would always look cheaper than evicting one, and declaring a minute would buy immunity
    from reclaim: a pod overdue by more than drainGraceSeconds (120) no longer counts as
    ending; one overdue by less still does."""

    def evicted_at(declared: float, now: float) -> list[str]:
        hogs = [(pod_info(f"hog{i}", "a", gpus=8, duration=declared), f"n{i}", 0.0) for i in (1, 2)]
        state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8), placed=hogs)
        result = Engine(tenancy=parse_config({})).cycle(state, [pod_info("want", "b", gpus=8)], now)
        return [e.pod.name for e in result.evictions]

    assert evicted_at(60.0, 1000.0) == ["hog1"]
    assert evicted_at(950.0, 1000.0) == []  # 50 s overdue: still expected to end
    assert evicted_at(950.0, 2000.0) == ["hog1"]
    pl = Placement(node=0, started=0.0)
    late = pod_info("late", "a", gpus=1, duration=60)
    assert remaining(late, pl, 100.0, grace=120.0) == 0.0
    assert remaining(late, pl, 200.0, grace=120.0) is None
