"""The session's pieces on their own: the statement, the queue book it keeps in step with the
cluster, and victim search."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.actions.kube_default_victims import KubeDefaultVictims
from fairgpu.engine.actions.order import FairOrder, KubeDefaultOrder, lanes
from fairgpu.engine.actions.preempt import FairVictims
from fairgpu.engine.actions.reserve import note_torn_down
from fairgpu.engine.actions.victim_eligibility import HeldBack, eligible_victim
from fairgpu.engine.engine import Engine
from fairgpu.engine.jobs import Job
from fairgpu.engine.session import Session
from fairgpu.tenancy import parse_config
from fairgpu.tenancy.book import QueueBook
from fairgpu.tenancy.resolve import TenantResolver
from tests.builders import cluster, node_info, pod_info


def book_state(book: QueueBook) -> dict[str, Any]:
    """Everything the book accounts, comparable with ``==``."""
    return {
        "entries": sorted(book.entries),
        "usage": {q: v.tolist() for q, v in book.usage.items() if v.any()},
        "users": {k: v.tolist() for k, v in book.user_usage.items() if v.any()},
        "ns": {k: v.tolist() for k, v in book.ns_usage.items() if v.any()},
        "pods": {q: sorted(u) for q, u in book.queue_pods.items() if u},
    }


def cluster_state(state: ClusterState) -> dict[str, Any]:
    """Every placement and the per-node load, comparable with ``==``."""
    return {
        "placements": {u: (p.node, p.devices, p.started) for u, p in state.placements.items()},
        "requested": state.requested[: state.size].tolist(),
        "free": state.device_milli_free[: state.size].tolist(),
    }


def fresh_book(engine: Engine, state: ClusterState) -> dict[str, Any]:
    """What a book rebuilt from scratch out of ``state`` holds."""
    book = QueueBook(engine.tenancy, TenantResolver(engine.tenancy))
    book.sync(state)
    return book_state(book)


def setup() -> tuple[Engine, ClusterState, Session]:
    running = [(pod_info(f"a{i}", "a"), "n1", 0.0) for i in range(4)]
    running += [(pod_info(f"b{i}", "b", gpus=2), "n2", 0.0) for i in range(2)]
    state = cluster(node_info("n1", gpus=4), node_info("n2", gpus=4), placed=running)
    engine = Engine()
    return engine, state, engine.session(state, 100.0)


def test_discard_restores_cluster_and_book_exactly() -> None:
    engine, state, s = setup()
    before_cluster, before_book = cluster_state(state), book_state(s.book)
    stmt = s.statement()
    assert stmt.evict(state.pods["a/a0"], None)
    assert stmt.evict(state.pods["b/b1"], None)
    stmt.assign(pod_info("x", "c", gpus=2), 1, (2, 3))
    stmt.assign(pod_info("y", "c"), 0, (0,))
    assert cluster_state(state) != before_cluster
    assert book_state(s.book) == fresh_book(engine, state)  # in step while open
    stmt.discard()
    assert cluster_state(state) == before_cluster
    assert book_state(s.book) == before_book
    assert not s.out.binds and not s.out.evictions and not s.placed_now


def test_commit_emits_evictions_then_binds_and_keeps_book_in_step() -> None:
    engine, state, s = setup()
    stmt = s.statement()
    x = pod_info("x", "c", gpus=2)
    stmt.evict(state.pods["b/b0"], x, "room for x", "reclaim")
    stmt.assign(x, 1, (0, 1))
    stmt.commit()
    assert [(e.pod.uid, e.preemptor, e.reason, e.kind) for e in s.out.evictions] == [
        ("b/b0", x, "room for x", "reclaim")
    ]
    assert [(b.pod.uid, b.node_name, b.devices, b.wait_for) for b in s.out.binds] == [
        ("c/x", "n2", (0, 1), ("b/b0",))
    ]
    assert book_state(s.book) == fresh_book(engine, state)
    assert s.placed_now == {"c/x"}
    stmt.discard()  # nothing left to undo after a commit
    assert "c/x" in state.placements


def test_evicting_a_pod_that_is_not_placed_changes_nothing() -> None:
    _, state, s = setup()
    before_cluster, before_book = cluster_state(state), book_state(s.book)
    assert not s.statement().evict(pod_info("ghost", "a"), None)
    assert cluster_state(state) == before_cluster and book_state(s.book) == before_book


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7), st.booleans()), max_size=12))
def test_any_mix_of_steps_keeps_book_and_cluster_in_step(steps: list[Any]) -> None:
    """Whatever a statement does, committed or discarded, the book equals one rebuilt from
    the cluster."""
    engine, state, s = setup()
    stmt = s.statement()
    for i, (place, slot, commit) in enumerate(steps):
        if place:
            node_idx, dev = divmod(slot, 4)
            if state.device_milli_free[node_idx, dev] >= 1000:
                stmt.assign(pod_info(f"p{i}", "c"), node_idx, (dev,))
        else:
            uids = sorted(state.placements)
            if uids:
                stmt.evict(state.pods[uids[slot % len(uids)]], None)
        if commit:
            stmt.commit()
        assert book_state(s.book) == fresh_book(engine, state)
    stmt.discard()
    assert book_state(s.book) == fresh_book(engine, state)


def test_queue_book_usage_and_shares() -> None:
    _, state, s = setup()
    book = s.book
    # n1 holds 4 one-GPU pods of a, n2 two two-GPU pods of b: 8 GPUs in all.
    assert book.used("a")[0] == book.used("b")[0] == 4000
    assert book.queue_share("a") == pytest.approx(0.5)
    assert book.user_share("a", "") == book.user_share("a", "")
    stmt = s.statement()
    stmt.evict(state.pods["a/a0"], None)
    assert book.queue_share("a") == pytest.approx(3 / 8)
    assert book.queue_pods["a"] == {"a/a1", "a/a2", "a/a3"}
    stmt.discard()
    assert book.queue_share("a") == pytest.approx(0.5)


def test_quota_admission_counts_what_the_statement_placed() -> None:
    config = parse_config({"mode": "static", "queues": [{"name": "a", "quota": {"gpu": 2}}]})
    engine = Engine(tenancy=config)
    state = cluster(node_info("n1", gpus=4))
    s = engine.session(state, 0.0)
    one = s.book.pending_vector(pod_info("p", "a"))
    assert s.book.admit("a", one) is None
    stmt = s.statement()
    stmt.assign(pod_info("p0", "a"), 0, (0,))
    stmt.assign(pod_info("p1", "a"), 0, (1,))
    assert s.book.admit("a", one)  # over the quota now
    stmt.discard()
    assert s.book.admit("a", one) is None


def test_victim_eligibility() -> None:
    config = parse_config({"preemption": {"minRuntimeSeconds": 60}})
    engine = Engine(tenancy=config)
    state = cluster(
        node_info("n1", gpus=4),
        placed=[(pod_info("old", "a"), "n1", 0.0), (pod_info("young", "a"), "n1", 90.0)],
    )
    s = engine.session(state, 100.0)
    assert eligible_victim(s, "a/old", 60)
    assert not eligible_victim(s, "a/young", 60)  # ran 10 s < 60 s
    assert not eligible_victim(s, "a/missing", 0)  # not placed
    s.statement().assign(pod_info("new", "a"), 0, (2,))
    s.placed_now.add("a/old")
    assert not eligible_victim(s, "a/old", 0)  # placed in this cycle
    assert not eligible_victim(s, "a/new", 0)


def test_fair_victims_reclaim_from_the_queue_above_its_share_only() -> None:
    # a holds all 8 GPUs; b and c want some: a is the only queue above its share.
    state = cluster(
        node_info("n1", gpus=8),
        placed=[(pod_info(f"a{i}", "a", priority=i), "n1", 0.0) for i in range(8)],
    )
    engine = Engine()
    s = engine.session(state, 1000.0)
    job_b = Job("b/x", [pod_info("x", "b", gpus=2)], engine.tenant(pod_info("x", "b")))
    pending = [job_b, Job("c/y", [pod_info("y", "c", gpus=4)], engine.tenant(pod_info("y", "c")))]
    from fairgpu.engine.actions.reclaim import deserved_shares

    victims = FairVictims(s, deserved_shares(s.book, lanes(pending)))
    sets = victims.candidate_sets(job_b, job_b.pods[0])
    assert sets == [sorted(f"a/a{i}" for i in range(8))]
    plan = victims.plan(s, job_b, job_b.pods[0], None)
    assert plan is not None
    # The fewest victims, lowest priority first.
    assert sorted(v.uid for v in plan.victims) == ["a/a0", "a/a1"]
    assert all(victims.kind(job_b, v) == "reclaim" for v in plan.victims)
    # A pod of a itself may only take lower priority from its own queue.
    job_a = Job("a/z", [pod_info("z", "a", priority=3)], engine.tenant(pod_info("z", "a")))
    own = victims.candidate_sets(job_a, job_a.pods[0])
    assert own == [["a/a0", "a/a1", "a/a2"]]


def test_kube_default_victims_take_lower_priority_anywhere() -> None:
    state = cluster(
        node_info("n1", gpus=2),
        placed=[
            (pod_info("lo", "a", priority=1), "n1", 0.0),
            (pod_info("hi", "b", priority=9), "n1", 0.0),
        ],
    )
    engine = Engine(ordering="kube-default")
    s = engine.session(state, 0.0)
    victims = KubeDefaultVictims(s)
    x = pod_info("x", "c", priority=5)
    job = Job(x.uid, [x], engine.tenant(x))
    assert victims.may_preempt(x) and not victims.may_preempt(pod_info("y", "c", priority=1))
    plan = victims.plan(s, job, x, None)
    assert plan is not None and [v.uid for v in plan.victims] == ["a/lo"]
    assert victims.kind(job, plan.victims[0]) == "priority"


def test_queue_orders() -> None:
    engine = Engine()
    state = cluster(node_info("n1", gpus=8), placed=[(pod_info("a0", "a", gpus=4), "n1", 0.0)])
    s = engine.session(state, 0.0)
    pods = [
        pod_info("a1", "a", priority=9),
        pod_info("b1", "b", created=5.0),
        pod_info("b2", "b", created=1.0),
    ]
    kube = KubeDefaultOrder(s, pods)
    assert [kube.pop().key for _ in range(3)] == ["a/a1", "b/b2", "b/b1"]  # type: ignore[union-attr]
    assert kube.pop() is None
    jobs = [Job(p.uid, [p], engine.tenant(p)) for p in pods]
    fair = FairOrder(s, lanes(jobs))
    first = fair.pop()
    assert first is not None and first.key == "b/b2"  # b holds nothing, a holds half
    s.statement().assign(pod_info("b9", "b", gpus=8 - 4), 0, (4, 5, 6, 7))
    fair.update({"b"})
    second = fair.pop()
    assert second is not None and second.key == "a/a1"  # now b holds as much as a
    assert np.isclose(s.book.queue_share("a"), s.book.queue_share("b"))


def test_a_queue_without_nominal_quota_is_unlimited_and_admits_anything() -> None:
    """Dynamic mode: a queue without a nominal quota skips the quota checks (nothing caps
    it: a borrowing limit bounds only what goes beyond a quota); one with a quota, or any
    queue in static mode, is checked -- and refused when over."""
    config = parse_config(
        {
            "queues": [
                {"name": "free"},
                {"name": "capped", "quota": {"gpu": 2}, "borrowingLimit": {"gpu": 0}},
                {"name": "no-quota", "borrowingLimit": {"gpu": 1}},
            ]
        }
    )
    book = QueueBook(config, TenantResolver(config))
    big = np.zeros_like(book.used("free"))
    big[:] = 1e9
    assert book.unlimited("free") and book.unlimited("unconfigured")
    assert book.never_fits("free", big) is None and book.admit("free", big) is None
    assert not book.unlimited("capped") and book.never_fits("capped", big) is not None
    assert book.unlimited("no-quota") and book.admit("no-quota", big) is None
    static = parse_config({"mode": "static", "queues": [{"name": "free"}]})
    assert not QueueBook(static, TenantResolver(static)).unlimited("free")


def test_dominant_share_counts_only_resources_the_cluster_has_and_follows_its_capacity() -> None:
    config = parse_config({})
    book = QueueBook(config, TenantResolver(config))
    vec = np.array([1.0, 8.0, 1.0, 0.0])
    book.capacity = np.array([10.0, 0.0, 5.0, 0.0])  # no memory, no GPUs
    assert book.dominant(vec) == 0.2
    book.capacity = np.array([10.0, 10.0, 5.0, 1.0])  # nodes joined: a new capacity
    assert book.dominant(vec) == 0.8
    book.capacity = np.zeros(4)
    assert book.dominant(vec) == 0.0


def test_reclaimable_pods_are_worked_out_again_when_a_reclaim_or_the_queue_changes() -> None:
    """Queue a's pods that queue b may reclaim, kept within a cycle: the same answer while
    nothing it reads changed; after a committed reclaim that made the GPU a's pod a1 holds
    change tenant (a shared GPU; a1 placed there at this instant, by an earlier cycle), a1
    is held back by the cooldown; after one of a's pods is evicted, it is gone from the
    answer. No minimum run, so only those rules are asked."""
    running = [(pod_info(f"a{i}", "a"), "n1", 1000.0 if i == 1 else 0.0) for i in range(3)]
    state = cluster(node_info("n1", gpus=4), placed=running)
    engine = Engine()
    session = engine.session(state, 1000.0)
    victims = FairVictims(session, {"a": 0.25, "b": 0.25})
    first = victims.eligibility.kept("a", "b", 0.0, HeldBack())
    assert first[0] == ["a/a0", "a/a1", "a/a2"]
    assert victims.eligibility.kept("a", "b", 0.0, HeldBack())[0] is first[0]  # kept
    # A reclaim by b commits (its victims' and its own GPUs change tenant): a1's GPU too.
    device = state.placements["a/a1"].devices[0]
    b0 = pod_info("b0", "b")
    victims._moves[b0.uid] = [("n1", device)]
    victims._flows[b0.uid] = set()
    victims.placed(b0)
    held = HeldBack()
    assert victims.eligibility.kept("a", "b", 0.0, held)[0] == ["a/a0", "a/a2"]
    assert held.pods == {"a/a1": 1600.0}
    stmt = session.statement()
    stmt.evict(state.pods["a/a0"], None, "test", "reclaim")
    assert victims.eligibility.kept("a", "b", 0.0, HeldBack())[0] == ["a/a2"]


def test_only_a_group_left_with_no_member_running_counts_as_torn_down() -> None:
    """An elastic group (3 members, minMember 2) that loses one member still runs: no
    restart protection is owed; evicting every member tears it down."""
    members = [pod_info(f"g{i}", "a", group="g", min_member=2) for i in range(3)]
    state = cluster(node_info("n1", gpus=4), placed=[(p, "n1", 0.0) for p in members])
    engine = Engine()
    session = engine.session(state, 100.0)
    stmt = session.statement()
    stmt.evict(members[0], None, "test", "reclaim")
    note_torn_down(session, [members[0]])
    assert session.state.torn_down == set()
    for p in members[1:]:
        stmt.evict(p, None, "test", "reclaim")
    note_torn_down(session, members[1:])
    assert session.state.torn_down == {"a/g"}


@pytest.mark.parametrize("keep_backlog", [True, False])
def test_a_torn_down_group_that_is_gone_is_forgotten(keep_backlog: bool) -> None:
    """A torn-down group is remembered while a pod of it is pending; once none is pending
    and none runs (deleted), it is forgotten -- with or without the engine's kept backlog --,
    so a group re-created under the same name later is not protected at its first start."""
    state = cluster(node_info("n1", gpus=4))
    engine = Engine()
    engine.keep_backlog = keep_backlog
    engine.state.torn_down = {"a/g"}
    member = pod_info("g0", "a", gpus=8, group="g", min_member=1)  # fits nowhere: stays pending
    engine.cycle(state, [member], 100.0)
    assert engine.state.torn_down == {"a/g"}
    engine.cycle(state, [], 200.0)
    assert engine.state.torn_down == set()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.sampled_from("ab")), max_size=30))
def test_lowest_priority_a_queue_holds_follows_adds_and_removes(
    steps: list[tuple[bool, int, str]],
) -> None:
    """``holds_lower_priority`` answers as a scan of the queue's placed pods would, after
    any sequence of pods added and removed (the outcome memo keys on it)."""
    config = parse_config({})
    book = QueueBook(config, TenantResolver(config))
    placed: dict[str, Any] = {}
    for k, (add, priority, queue) in enumerate(steps):
        if add or not placed:
            p = pod_info(f"p{k}", queue, priority=priority)
            book.add(p.uid, p, np.zeros(4))
            placed[p.uid] = p
        else:
            uid = sorted(placed)[priority % len(placed)]
            book.remove(uid)
            del placed[uid]
        for q in "ab":
            held = [p.priority for p in placed.values() if p.namespace == q]
            for prio in range(7):
                assert book.holds_lower_priority(q, prio) == any(h < prio for h in held)
