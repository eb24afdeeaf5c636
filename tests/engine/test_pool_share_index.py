"""Pool-aware fair shares every cycle: the cut oracle agrees with the maximum flow (small
cut tables read without numpy too), and the demand index pays only for pods that
changed."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgpu.tenancy import pool_share
from fairgpu.tenancy.pool_share import PoolDemand, PoolDemandIndex, pool_fair_shares
from fairgpu.tenancy.touched import TouchedUids

POOLS = ["p0", "p1", "p2", "p3"]


@st.composite
def instances(draw: st.DrawFn) -> tuple[dict[str, int], list[PoolDemand], dict[str, float]]:
    pools = POOLS[: draw(st.integers(1, len(POOLS)))]
    capacity = {p: draw(st.integers(0, 40)) for p in pools}
    demands = []
    for tenant in "xyzw"[: draw(st.integers(1, 4))]:
        for _ in range(draw(st.integers(1, 3))):
            usable = draw(st.sets(st.sampled_from(pools), min_size=1))
            demands.append(PoolDemand(tenant, frozenset(usable), draw(st.integers(0, 50))))
    weight = {t: float(draw(st.integers(1, 4))) for t in "xyzw"}
    return capacity, demands, weight


@pytest.mark.parametrize(
    "form",
    [("CUT_POOLS", -1), ("SMALL_CUTS", -1)],
    ids=["maximum flow", "cut table with numpy"],
)
@settings(max_examples=150, deadline=None)
@given(case=instances())
def test_the_cut_oracle_gives_the_shares_the_other_forms_give(
    form: tuple[str, int],
    case: tuple[dict[str, int], list[PoolDemand], dict[str, float]],
) -> None:
    """The default check (<= 4 pools x 4 tenants: a small cut table read without numpy)
    against the maximum flow, and against the same table read with numpy."""
    capacity, demands, weight = case
    fast = pool_fair_shares(capacity, demands, weight)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pool_share, *form)
        other = pool_fair_shares(capacity, demands, weight)
    assert fast == other


def test_the_index_describes_each_pod_once_and_follows_removals() -> None:
    # Nodes 0-1 form pool a, node 2 pool b (by which masks admit them).
    index = PoolDemandIndex()
    gpus = np.array([8, 8, 4])
    index.reset("v1", gpus, gpus * 1000)
    masks = {"a": np.array([True, True, False]), "b": np.array([False, False, True])}
    pods = {f"x{i}": ("x", "a", 1000) for i in range(50)} | {"y0": ("y", "b", 4000)}
    pods["cpu-only"] = ("y", "", 0)
    described: list[str] = []

    def describe(uid: str):  # type: ignore[no-untyped-def]
        described.append(uid)
        queue, pool, milli = pods[uid]
        return (queue, pool, lambda: masks[pool], milli) if milli else None

    index.update(set(pods), describe)
    assert len(described) == 52
    del pods["cpu-only"]  # a pod without GPUs leaves: nothing to subtract
    assert index.capacity == {"p0": 16000, "p1": 4000}
    assert index.shares({}) == {"x": 16000, "y": 4000}
    # The same backlog again: nothing described; ten pods gone: only the sums change.
    index.update(set(pods), describe)
    assert len(described) == 52
    left = {u for u in pods if u not in {f"x{i}" for i in range(40)}}
    index.update(left, describe)
    assert len(described) == 52
    assert index.queue_demand() == {"x": 10000, "y": 4000}
    assert index.shares({}) == {"x": 10000, "y": 4000}
    # New nodes (another version): everything is described afresh.
    index.reset("v2", gpus, gpus * 1000)
    index.update(left, describe)
    assert len(described) == 52 + len(left)


@settings(max_examples=300, deadline=None)
@given(instances())
def test_no_tenant_below_its_demand_is_left_room_it_could_take_alone(
    case: tuple[dict[str, int], list[PoolDemand], dict[str, float]],
) -> None:
    """Max-min fair shares leave no pool with room that a tenant still wanting more may use:
    no such tenant could take more than the integer rounding alone (a unit per tenant)."""
    capacity, demands, weight = case
    shares = pool_fair_shares(capacity, demands, weight)
    want: dict[str, int] = {}
    classes: dict[tuple[str, frozenset[str]], int] = {}
    for d in demands:
        if d.amount > 0:
            want[d.tenant] = want.get(d.tenant, 0) + d.amount
            classes[(d.tenant, d.pools)] = classes.get((d.tenant, d.pools), 0) + d.amount
    if not classes:
        return
    net = pool_share._Network(capacity, classes)
    for tenant, wanted in want.items():
        more = shares.get(tenant, 0) + len(want) + 1
        if more <= wanted:
            assert not net.fits({**shares, tenant: more}), (tenant, shares)


@settings(max_examples=300, deadline=None)
@given(case=instances(), scale=st.sampled_from([1, 1000]), grow=st.integers(-40, 60))
def test_a_kept_answer_is_a_fresh_solve_up_to_its_rounding(
    case: tuple[dict[str, int], list[PoolDemand], dict[str, float]], scale: int, grow: int
) -> None:
    """When only one tenant's demand moves, the answer kept for the old demands (if
    ``_same_answer`` keeps it) is what a fresh solve gives, up to one unit of its rounding."""
    capacity, demands, weight = case
    capacity = {p: c * scale for p, c in capacity.items()}
    demands = [PoolDemand(d.tenant, d.pools, d.amount * scale) for d in demands]
    before = pool_fair_shares(capacity, demands, weight)
    moved = demands[0]
    now = [PoolDemand(moved.tenant, moved.pools, max(0, moved.amount + grow * scale))]
    now += demands[1:]
    kept = pool_share._same_answer(demands, now, before)
    if kept is None:
        return
    fresh = pool_fair_shares(capacity, now, weight)
    assert kept.keys() == fresh.keys()
    assert all(abs(kept[t] - fresh[t]) <= 1 for t in kept)


def test_the_index_solves_again_only_when_a_capped_demand_is_not_all_that_moved() -> None:
    """Pool a (16 GPUs) is shared by x (a flood: one class, far above its share) and y; the
    flood asking one pod fewer keeps the answer without a solve; y's demand moving (y is at
    its demand) or x's falling near its share needs one."""
    index = PoolDemandIndex()
    gpus = np.array([8, 8])
    index.reset("v1", gpus, gpus * 1000)
    mask = np.array([True, True])
    pods = {f"x{i}": ("x", 1000) for i in range(40)} | {"y0": ("y", 4000)}

    def describe(uid: str) -> tuple[str, object, object, int]:
        queue, milli = pods[uid]
        return queue, "a", lambda: mask, milli

    solves: list[int] = []
    with pytest.MonkeyPatch.context() as mp:
        real = pool_share.pool_fair_shares
        mp.setattr(
            pool_share, "pool_fair_shares", lambda *a, **k: solves.append(1) or real(*a, **k)
        )
        index.update(pods.keys(), describe)
        assert index.shares({}) == {"x": 12000, "y": 4000} and len(solves) == 1
        index.update(pods.keys() - {"x0"}, describe)  # the flood: one pod fewer
        assert index.shares({}) == {"x": 12000, "y": 4000} and len(solves) == 1
        pods["y1"] = ("y", 2000)  # y asks more: its share moves
        index.update(pods.keys() - {"x0"}, describe)
        assert index.shares({}) == {"x": 10000, "y": 6000} and len(solves) == 2
        left = {"y0", "y1"} | {f"x{i}" for i in range(30, 40)}  # x: 10 GPUs, its share
        index.update(left, describe)
        assert index.shares({}) == {"x": 10000, "y": 6000} and len(solves) == 3


# ---- following what the keepers changed ------------------------------------------------------
_QUEUES = {
    f"u{i}": ("xyz"[i % 3], "ab"[i % 2], 1000 * (1 + i % 4) * (i % 5 != 0)) for i in range(12)
}


def _describe(uid: str):  # type: ignore[no-untyped-def]
    queue, pool, milli = _QUEUES[uid]
    mask = np.array([pool == "a", pool == "a", pool == "b"])
    return (queue, pool, lambda: mask, milli) if milli else None


def _state(index: PoolDemandIndex) -> tuple[object, ...]:
    # Masks are numbered as found (set order): each pod is compared by its mask's pools.
    pods = {
        uid: (queue, index._usable.get(mid), milli)
        for uid, (queue, mid, milli) in index._pods.items()
    }
    return pods, index.demands(), index.queue_demand(), index.capacity


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.lists(
            st.tuples(st.sampled_from(sorted(_QUEUES)), st.sampled_from(["pending", "held"])),
            max_size=8,
        ),
        min_size=1,
        max_size=12,
    )
)
def test_an_index_that_follows_changes_holds_what_one_given_every_uid_holds(
    steps: list[list[tuple[str, str]]],
) -> None:
    """Pods come and go between two keepers (pending and held; a pod may start, be evicted
    and come back between two cycles): the index told only the touched uids holds, cycle by
    cycle, what an index told every uid holds."""
    pending: dict[str, int] = {}
    held: dict[str, int] = {}
    touched_p, touched_h = TouchedUids(), TouchedUids()
    keepers = {"pending": (pending, touched_p), "held": (held, touched_h)}
    gpus = np.array([8, 8, 4])
    following, full = PoolDemandIndex(), PoolDemandIndex()
    basis = (pending, held)
    for i, toggles in enumerate(steps):
        for uid, where in toggles:  # each toggle adds the pod there, or removes it
            table, touched = keepers[where]
            if table.pop(uid, None) is None:
                table[uid] = 1
            touched.note(uid)
        for index in (following, full):
            index.reset("v1", gpus, gpus * 1000)
        a, b = touched_p.take(), touched_h.take()
        changed = None if a is None or b is None else a | b
        followed = following.follow(basis, changed, lambda u: u in pending or u in held, _describe)
        assert followed == (i > 0)  # the first cycle has nothing to follow
        if not followed:
            following.update(pending.keys() | held.keys(), _describe, basis)
        full.update(pending.keys() | held.keys(), _describe)
        assert _state(following) == _state(full)


def test_an_index_follows_only_the_keepers_it_was_given_and_a_known_record() -> None:
    """Other keepers, a lost record or new nodes since the last update: ``follow`` refuses
    (the caller then gives every uid)."""
    gpus = np.array([8, 8, 4])
    index = PoolDemandIndex()
    index.reset("v1", gpus, gpus * 1000)
    pending, held = {"u1": 1}, {"u2": 1}
    present = lambda u: u in pending or u in held  # noqa: E731
    index.update(pending.keys() | held.keys(), _describe)  # no keepers named
    assert not index.follow((pending, held), set(), present, _describe)
    index.update(pending.keys() | held.keys(), _describe, (pending, held))
    assert not index.follow((dict(pending), held), set(), present, _describe)  # a copy
    assert not index.follow((pending, held), None, present, _describe)  # record lost
    assert index.follow((pending, held), set(), present, _describe)
    index.reset("v2", gpus, gpus * 1000)  # new nodes: every pod forgotten
    assert not index.follow((pending, held), set(), present, _describe)


def test_a_copy_of_the_index_follows_no_keepers() -> None:
    """The engine's state is pickled for the forecasting process: the copy keeps the pods
    and sums but not the keepers (they stay behind), so it is given every uid first."""
    gpus = np.array([8, 8, 4])
    index = PoolDemandIndex()
    index.reset("v1", gpus, gpus * 1000)
    pending, held = {"u1": 1}, {"u2": 1}
    index.update(pending.keys() | held.keys(), _describe, (pending, held))
    copy = pickle.loads(pickle.dumps(index))
    assert _state(copy) == _state(index)
    present = lambda u: u in pending or u in held  # noqa: E731
    assert not copy.follow((pending, held), set(), present, _describe)
    assert index.follow((pending, held), set(), present, _describe)
