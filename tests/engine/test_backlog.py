"""The backlog kept between cycles and reports of changes only: the same decisions and the
same last reasons as grouping every cycle afresh, and every event that could let a failed
pod fit is seen (a pod completes, a node is added, a pod is handed in anew or deleted, a
PodGroup is registered)."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairgpu.engine.actions.order import kube_default_order, lanes
from fairgpu.engine.backlog import Backlog, PendingChanges
from fairgpu.engine.decisions import CycleResult
from fairgpu.engine.engine import Engine
from fairgpu.engine.jobs import build_jobs
from fairgpu.model.pod import PodInfo
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import PodArrival, Workload
from tests.builders import cluster, node_info, pod_info


def flood(n: int, ns: str = "a", gpus: int = 1, **kw: Any) -> list[PodInfo]:
    """``n`` identical pods of ``ns`` created in order."""
    return [pod_info(f"{ns}-{i}", ns, gpus=gpus, created=i * 1e-3, **kw) for i in range(n)]


def reasons(result: CycleResult) -> dict[str, str]:
    return {u.pod.uid: u.reason for u in result.unschedulable}


# ---- events a kept backlog must see ------------------------------------------------------------


def test_failed_pods_start_when_a_running_pod_completes() -> None:
    """A backlog that failed for want of GPUs is tried again once one frees up."""
    running = pod_info("r", "b", gpus=4)
    state = cluster(node_info("n0", gpus=4), placed=[(running, "n0")])
    engine = Engine()
    pending = flood(50)
    first = engine.cycle(state, pending, 1.0)
    assert not first.binds and len(first.unschedulable) == 50
    state.release(running.uid)
    second = engine.cycle(state, pending, 2.0)
    assert [b.pod.name for b in second.binds] == ["a-0", "a-1", "a-2", "a-3"]


def test_failed_pods_start_when_a_node_is_added() -> None:
    state = cluster(node_info("n0", gpus=1), placed=[(pod_info("r", "b"), "n0")])
    engine = Engine(ordering="kube-default")
    pending = flood(20)
    assert not engine.cycle(state, pending, 1.0).binds
    state.add_node(node_info("n1", gpus=2))
    assert [b.pod.name for b in engine.cycle(state, pending, 2.0).binds] == ["a-0", "a-1"]


def test_a_pod_handed_in_anew_is_judged_by_its_new_object() -> None:
    """An adapter hands in an updated pod as a new object with the same uid: what the
    backlog kept about the old one (its ask) must not be read for it."""
    state = cluster(node_info("n0", gpus=2))
    for ordering in ("fair", "kube-default"):
        engine = Engine(ordering=ordering)  # type: ignore[arg-type]
        big = pod_info("p", "a", gpus=4)
        assert not engine.cycle(state, [big], 1.0).binds
        small = pod_info("p", "a", gpus=1)
        assert [b.pod for b in engine.cycle(state, [small], 2.0).binds] == [small]
        state.release(small.uid)


def test_a_pod_no_longer_pending_is_not_placed() -> None:
    state = cluster(node_info("n0", gpus=1), placed=[(pod_info("r", "b"), "n0")])
    engine = Engine()
    pending = flood(3)
    engine.cycle(state, pending, 1.0)
    state.release("b/r")
    got = engine.cycle(state, pending[1:], 2.0)  # a-0 was deleted meanwhile
    assert [b.pod.name for b in got.binds] == ["a-1"]


def test_a_pending_pod_already_placed_is_skipped() -> None:
    """The live cache may still list a pod it has just assumed as pending."""
    placed = pod_info("a-0", "a")
    state = cluster(node_info("n0", gpus=2), placed=[(placed, "n0")])
    got = Engine().cycle(state, [placed, pod_info("a-1", "a", created=1.0)], 1.0)
    assert [b.pod.name for b in got.binds] == ["a-1"]


def test_a_podgroup_registered_later_starts_its_gang() -> None:
    state = cluster(node_info("n0", gpus=4))
    engine = Engine()
    members = [pod_info(f"g-{i}", "a", group="g", created=i * 1e-3) for i in range(3)]
    first = engine.cycle(state, members, 1.0)
    assert not first.binds and "minMember unknown" in first.unschedulable[0].reason
    engine.set_pod_group("a", "g", 3)
    assert len(engine.cycle(state, members, 2.0).binds) == 3


# ---- reports of changes only -------------------------------------------------------------------


def test_unchanged_reasons_are_not_repeated_but_changes_are() -> None:
    running = pod_info("r", "b", gpus=1)
    state = cluster(node_info("n0", gpus=1), placed=[(running, "n0")])
    engine = Engine()
    engine.report_unchanged = False
    pending = flood(30)
    first = reasons(engine.cycle(state, pending, 1.0))
    assert len(first) == 30
    assert engine.cycle(state, pending, 2.0).unschedulable == []
    # A new node too small for the pods changes the reason (node counts): reported again.
    state.add_node(node_info("n1", gpus=0))
    third = reasons(engine.cycle(state, pending, 3.0))
    assert len(third) == 30 and third != first
    # A pod handed in anew is reported though its reason is the same.
    again = [pod_info("a-0", "a", created=0.0), *pending[1:]]
    assert [u.pod.name for u in engine.cycle(state, again, 4.0).unschedulable] == ["a-0"]
    engine.report_unchanged = True
    assert len(engine.cycle(state, again, 5.0).unschedulable) == 30


# ---- the kept backlog groups as a fresh grouping does ------------------------------------------

POOL = [
    pod_info(
        f"p{i}",
        ("a", "b")[i % 2],
        gpus=1 + i % 3,
        priority=(0, 5)[i % 5 == 0],
        created=float(i % 7),
        user=f"u{i % 3}",
        group="g" if i % 6 == 0 else None,
        min_member=2 if i % 6 == 0 else None,
    )
    for i in range(24)
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.integers(0, len(POOL) - 1)), min_size=1, max_size=6))
def test_kept_lanes_equal_a_fresh_grouping(steps: list[set[int]]) -> None:
    """After any sequence of pending sets, the kept lanes (fair) and line (kube-default)
    hold the jobs a fresh grouping gives, in the same order."""
    engine = Engine()
    book, resolver = engine.book, engine.resolver
    grouped, line = Backlog(grouped=True), Backlog(grouped=False)
    for step in steps:
        pending = [POOL[i] for i in sorted(step)]
        grouped.sync(pending, resolver)
        line.sync(pending, resolver)
        annotation = engine.tenancy.gang.min_member_annotation
        got, keys, pods = grouped.cycle_lanes(resolver, book, annotation, CycleResult())
        jobs = build_jobs(pending, resolver, book, annotation, CycleResult())
        want = lanes(jobs)
        assert _keys(got) == _keys(want)
        assert set(keys) == {j.key for j in jobs}
        assert dict(pods) == {p.uid: p for j in jobs for p in j.pods}
        assert [j.key for j in line.line()] == [p.uid for p in kube_default_order(pending)]


def _keys(lns: dict[str, dict[str, list[Any]]]) -> dict[tuple[str, str], list[Any]]:
    """Each lane's jobs: key, members needed and member uids."""
    return {
        (q, u): [(j.key, j.need, [p.uid for p in j.pods]) for j in js]
        for q, users in lns.items()
        for u, js in users.items()
    }


def test_a_waiting_groups_job_is_kept_while_its_members_and_running_count_stay() -> None:
    """The job of a pod group is built again only when its pending members, its running
    members or its minMember change (so what it caches lasts while it waits)."""
    engine = Engine()
    engine.set_pod_group("a", "g", 3)
    book, resolver, backlog = engine.book, engine.resolver, engine.backlog
    annotation = engine.tenancy.gang.min_member_annotation
    members = [pod_info(f"g-{i}", "a", group="g", created=i * 1e-3) for i in range(4)]
    state = cluster(node_info("n0", gpus=8))

    def job(pending: list[PodInfo]) -> Any:
        backlog.sync(pending, resolver)
        book.sync(state)
        got, _, _ = backlog.cycle_lanes(resolver, book, annotation, CycleResult())
        (only,) = [j for users in got.values() for js in users.values() for j in js]
        return only

    first = job(members[:3])
    assert job(members[:3]) is first and first.need == 3
    grown = job(members)  # a member arrived
    assert grown is not first and len(grown.pods) == 4
    state.assign(members[0], 0)  # one runs: two more are needed, from the three pending
    fewer = job(members[1:])
    assert fewer is not grown and (fewer.need, len(fewer.pods)) == (2, 3)
    assert job(members[1:]) is fewer
    engine.set_pod_group("a", "g", 4)  # a new minMember: the backlog starts afresh
    assert job(members[1:]).need == 3


def _workload(seed: int, flood_size: int, gangs: int, serve: int) -> Workload:
    """A small mix of the benchmark's kinds of work: a flood of one-GPU pods with varied
    run times, gangs of whole nodes and fractional pods."""
    import random

    rng = random.Random(seed)
    arrivals = []
    for i in range(flood_size):
        run = float(rng.choice([60, 200, 600, 1500]))
        declared = rng.choice([None, run])  # some declare their run time, some do not
        p = pod_info(f"a-{i}", "a", created=i * 1e-3, duration=declared, user=f"u{i % 2}")
        arrivals.append(PodArrival(p, 0.0, run))
    groups: dict[str, int] = {}
    for g in range(gangs):
        at, size = rng.uniform(1, 900), rng.randint(2, 3)
        groups[f"b/g{g}"] = size
        run = float(rng.choice([300, 900]))
        for m in range(size):
            p = pod_info(f"g{g}-{m}", "b", gpus=4, created=at, group=f"g{g}", duration=run)
            arrivals.append(PodArrival(p, at, run))
    for k in range(serve):
        at = rng.uniform(1, 900)
        p = pod_info(f"s{k}", "c", gpus=1, milli=rng.choice([250, 500]), created=at)
        arrivals.append(PodArrival(p, at, float(rng.choice([100, 700]))))
    nodes = [node_info(f"n{i}", gpus=4) for i in range(4)]
    return Workload("mix", nodes, arrivals, pod_groups=groups)


def _outcome(ordering: str, wl: Workload, kept: bool) -> dict[str, tuple[Any, ...]]:
    engine = Engine(ordering=ordering)  # type: ignore[arg-type]
    engine.register_pod_groups(wl.pod_groups)
    sim = Simulation(wl, engine, until=2500.0, track_fragmentation=False)
    engine.keep_backlog = kept
    result = sim.run()
    return {r.pod.uid: (r.start, r.node, r.preempted, r.reason) for r in result.records}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10_000),
    st.integers(5, 60),
    st.integers(0, 4),
    st.integers(0, 8),
    st.sampled_from(["fair", "kube-default"]),
)
def test_kept_backlog_and_changed_reports_decide_as_a_fresh_grouping(
    seed: int, flood_size: int, gangs: int, serve: int, ordering: str
) -> None:
    """A simulation whose engine keeps its backlog and reports only changed reasons gives
    every pod the same starts, nodes, preemptions and last reason as one whose engine groups
    the pending pods afresh and reports every pod in every cycle."""
    kept = _outcome(ordering, _workload(seed, flood_size, gangs, serve), kept=True)
    fresh = _outcome(ordering, _workload(seed, flood_size, gangs, serve), kept=False)
    assert kept == fresh


def test_followers_judged_from_the_cycles_class_table_decide_as_judged_one_by_one(
    monkeypatch: Any,
) -> None:
    """Settled followers take their backfill mask and outcome key from a table kept per
    cycle (signature, user, reservations, backfill class): every pod gets the same start, node,
    preemptions and last reason as when each run of followers computes them afresh -- and
    the table is actually read (runs of followers meet reservations here)."""
    from fairgpu.engine.actions import settle

    read = 0
    kept = settle._Classes._class_keys

    def counted(self: Any, other: Any, k: int) -> Any:
        nonlocal read
        key = (other.sig, other.tenant.user, self.s.memo.reservation_keys(), k)
        read += key in self.s.memo.judged
        return kept(self, other, k)

    def afresh(self: Any, other: Any, k: int) -> Any:
        mine = settle.allowed(self.s, other, other.pods[0])
        return mine, self.admission.outcome_key(self.s, other)

    for seed in (1, 2, 3):
        wl = (seed, 60, 4, 6)
        monkeypatch.setattr(settle._Classes, "_class_keys", counted)
        table = _outcome("fair", _workload(*wl), kept=True)
        monkeypatch.setattr(settle._Classes, "_class_keys", afresh)
        assert table == _outcome("fair", _workload(*wl), kept=True)
    assert read > 0


def test_runs_of_followers_settled_at_once_decide_as_followers_judged_one_by_one(
    monkeypatch: Any,
) -> None:
    """While reservations hold nodes, a run of followers is settled at once -- one outcome
    repeated when the whole run is of one backfill class --: every pod gets the start, node,
    preemptions and last reason it gets when each follower is judged by itself (and the
    repeated outcome is actually used here)."""
    from fairgpu.engine.actions import settle

    repeated = 0
    accept = settle._RunJudge.accept

    def counted(self: Any, lane: Any, start: int, end: int) -> int:
        nonlocal repeated
        n = accept(self, lane, start, end)
        repeated += n > 0 and isinstance(self.outcomes, itertools.repeat)
        return n

    make = settle._Classes.__init__

    def one_by_one(self: Any, *args: Any) -> None:
        make(self, *args)
        self.by_class = None  # each follower judged by itself (_settle_one_by_one)

    for seed in (1, 2, 3):
        wl = (seed, 60, 4, 6)
        with monkeypatch.context() as m:
            m.setattr(settle._RunJudge, "accept", counted)
            at_once = _outcome("fair", _workload(*wl), kept=True)
        with monkeypatch.context() as m:
            m.setattr(settle._Classes, "__init__", one_by_one)
            assert at_once == _outcome("fair", _workload(*wl), kept=True)
    assert repeated > 0


# ---- an adapter that hands in what changed decides as one that hands in everything ---------

GATED = [
    pod_info(f"gated{i}", "a", created=float(i), scheduling_gates=("example.com/wait",))
    for i in range(2)
]


def _changes(source: object, before: list[PodInfo], after: list[PodInfo]) -> PendingChanges:
    """What changed from ``before`` to ``after``, by object."""
    was, now = {id(p): p for p in before}, {id(p): p for p in after}
    added = [p for i, p in now.items() if i not in was]
    removed = [p for i, p in was.items() if i not in now]
    return PendingChanges(source, added, removed)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sets(st.integers(0, len(POOL) + len(GATED) - 1)), min_size=1, max_size=8),
    st.sampled_from(["fair", "kube-default"]),
    st.integers(0, 3),
)
def test_engine_fed_changes_decides_as_one_fed_every_pod(
    steps: list[set[int]], ordering: str, reset_at: int
) -> None:
    """Two engines see the same pending pods (gated pods and pod group members among them)
    and the same cluster: one is told what changed since its last call, the other is not.
    As the simulator does, a pod placed leaves the pending pods and an evicted one comes
    back. Every cycle both place, evict and report alike -- also after the backlog is
    dropped (a PodGroup registered) between two calls."""
    pool = POOL + GATED
    fed, full = Engine(ordering=ordering), Engine(ordering=ordering)  # type: ignore[arg-type]
    fed.report_unchanged = full.report_unchanged = False
    nodes = [node_info("n0", gpus=4), node_info("n1", gpus=2)]
    state_fed, state_full = cluster(*nodes), cluster(*nodes)
    source = object()
    before: list[PodInfo] = []
    for k, step in enumerate(steps):
        if k == reset_at:
            for engine in (fed, full):
                engine.set_pod_group("b", "late", 2)
        pending = [p for p in (pool[i] for i in sorted(step)) if p.uid not in state_full.placements]
        got = fed.cycle(state_fed, pending, float(k), _changes(source, before, pending))
        want = full.cycle(state_full, pending, float(k))
        assert _decisions(got) == _decisions(want)
        before = pending


def _decisions(res: CycleResult) -> tuple[Any, ...]:
    return (
        [(b.pod.uid, b.node_name, b.devices) for b in res.binds],
        sorted((e.pod.uid, e.kind) for e in res.evictions),
        sorted((u.pod.uid, u.reason) for u in res.unschedulable),
    )


def test_the_simulator_hands_in_changes_and_the_backlog_follows_them(monkeypatch: Any) -> None:
    """After its first cycle the simulator's engine compares no full pending list: every
    later cycle updates the backlog from what changed (pods that arrived, started, were
    evicted) -- and decides as the test above shows."""
    calls: list[int] = []
    real = Backlog.sync

    def counting(self: Backlog, pending: Any, resolver: Any) -> None:
        calls.append(len(pending))
        real(self, pending, resolver)

    monkeypatch.setattr(Backlog, "sync", counting)
    wl = _workload(3, 40, 2, 6)
    engine = Engine()
    engine.register_pod_groups(wl.pod_groups)
    sim = Simulation(wl, engine, until=2500.0, track_fragmentation=False)
    result = sim.run()
    assert sim.cycles > 20 and sum(r.start is not None for r in result.records) > 40
    assert len(calls) == 1


def test_what_is_derived_from_a_kept_lane_lasts_until_the_lane_changes() -> None:
    """Arrays a cycle derives from a lane (run ends, declared run times) are kept with the
    backlog's own lanes across cycles and computed again once the lane changed; a list
    that is not one of its lanes is never served from the store."""
    engine = Engine()
    backlog, resolver = engine.backlog, engine.resolver
    pods = flood(5)
    calls: list[int] = []

    def size(lane: list[Any]) -> int:
        calls.append(len(lane))
        return len(lane)

    backlog.sync(pods, resolver)
    (lane,) = [lst for users in backlog.lanes.values() for lst in users.values()]
    assert backlog.derived(lane, "size", size) == 5
    assert backlog.derived(lane, "size", size) == 5 and calls == [5]
    backlog.sync(pods[:4], resolver)  # one left: the same list, changed
    assert backlog.derived(lane, "size", size) == 4 and calls == [5, 4]
    assert backlog.derived(list(lane), "size", size) == 4 and calls == [5, 4, 4]
    backlog.sync([], resolver)
    backlog.sync(pods[:2], resolver)  # a new lane, perhaps at the old one's address
    (again,) = [lst for users in backlog.lanes.values() for lst in users.values()]
    assert backlog.derived(again, "size", size) == 2 and calls[-1] == 2


def test_the_simulators_pending_pods_note_net_changes_by_object() -> None:
    """A pod set and popped between two calls is no change; one popped and set again is
    both removed and added (it started and came back: the engine takes it afresh); a uid
    set to a new object is the old one removed and the new one added; every way of changing
    the mapping is noted."""
    from fairgpu.sim.simulator import PendingPods

    a, b, c, c2 = (pod_info(n, "q") for n in ("a", "b", "c", "c"))
    pending = PendingPods()
    pending["a"] = a
    pending.update({"b": b})
    pending.setdefault("c", c)
    first = pending.changes()
    assert first.source is pending and _ids(first.added) == _ids([a, b, c]) and not first.removed
    pending.pop("a")
    pending["a"] = a  # popped and set again: gone and back
    pending["x"] = pod_info("x", "q")
    pending.pop("x")  # set and popped: no change
    pending["c"] = c2  # a new object under the same uid
    del pending["b"]
    again = pending.changes()
    assert _ids(again.added) == _ids([a, c2]) and _ids(again.removed) == _ids([a, c, b])
    pending.pop("a")
    pending["a"] = a
    pending.pop("a")  # gone, back and gone again: gone
    assert _ids(pending.changes().removed) == _ids([a]) and "a" not in pending
    pending.clear()
    assert _ids(pending.changes().removed) == _ids([c2]) and not pending


def _ids(pods: Any) -> list[int]:
    return [id(p) for p in pods]
