"""Shortcuts of the scheduling cycle give exactly what the rules they stand for give.

Each test compares a shortcut with the rule written out plainly (the form it replaced), on
random states (hypothesis): the backfill mask of a pod with GPUs built one value per
reservation, the reclaimable pods of a queue and the retry time of those held back only by
time found in one pass, the room a victim pool frees computed once per pool and cluster
state in a cycle, the gang screen's bound as held-back victims come free computed for every
moment at once, and a job's needed vector kept on the job while what it reads stays.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairgpu.cluster.state import ClusterState, Placement
from fairgpu.engine.actions.admit import _needed
from fairgpu.engine.actions.gang_screen import (
    COLUMNS,
    _add_victims,
    bound_over_time,
    members_bound,
)
from fairgpu.engine.actions.reclaim import reverses
from fairgpu.engine.actions.reserve import protected_until
from fairgpu.engine.actions.victim_eligibility import (
    HeldCauses,
    ReclaimEligibility,
    eligible_victim,
)
from fairgpu.engine.engine import Engine
from fairgpu.engine.gang import Reservation, backfill_mask, declared_runtime
from fairgpu.engine.jobs import Job
from fairgpu.engine.memo import CycleMemo
from fairgpu.engine.session import Session
from fairgpu.engine.victim_cost import declared_ends, time_to_fit
from fairgpu.model.pod import CPU, MEMORY, PodInfo
from fairgpu.tenancy.resolve import Tenant
from tests.builders import cluster, node_info, pod_info

NODES = 6
GPUS = 4


def _nodes() -> ClusterState:
    return cluster(*(node_info(f"n{i}", gpus=GPUS, cpu=16_000) for i in range(NODES)))


# ---- backfill masks -------------------------------------------------------------------------


def _mask_as_written(
    pod: PodInfo,
    state: ClusterState,
    reservations: list[Reservation],
    drain: dict[int, float],
    now: float,
) -> np.ndarray:
    """The backfill rule written out per node (the form the shortcut replaced)."""
    n = state.size
    mask = np.ones(n, dtype=bool)
    runtime = declared_runtime(pod)
    for res in reservations:
        nodes = res.nodes[res.nodes < n]
        if nodes.size == 0:
            continue
        ok = np.zeros(nodes.size, dtype=bool)
        if runtime is not None:
            start = max(drain.get(int(i), math.inf) for i in nodes)
            ok |= now + runtime <= start
        if pod.gpu.count == 0:
            alloc = state.allocatable[nodes]
            req = state.requested[nodes]
            ok |= (alloc[:, 0] - req[:, 0] - pod.requests.get(CPU, 0) >= res.cpu) & (
                alloc[:, 1] - req[:, 1] - pod.requests.get(MEMORY, 0) >= res.memory
            )
        mask[nodes] = ok
    return mask


@st.composite
def backfill_cases(draw: st.DrawFn) -> tuple[Any, ...]:
    state = _nodes()
    for i in range(draw(st.integers(0, 8))):
        p = pod_info(f"r{i}", "r", gpus=draw(st.integers(0, 2)), cpu=draw(st.integers(0, 8000)))
        state.assign(p, draw(st.integers(0, NODES - 1)), tuple(range(p.gpu.count)))
    free = list(range(NODES + 2))  # slots beyond the cluster are ignored
    reservations = []
    for k in range(draw(st.integers(0, 3))):
        nodes = draw(st.lists(st.sampled_from(free), min_size=0, max_size=3, unique=True))
        free = [i for i in free if i not in nodes]
        reservations.append(
            Reservation(
                f"q/job{k}",
                "q",
                np.array(nodes, dtype=np.intp),
                0.0,
                cpu=float(draw(st.integers(0, 20_000))),
                memory=float(draw(st.integers(0, 2**40))),
            )
        )
    times = st.one_of(st.floats(0, 5000), st.just(math.inf))
    drain = {i: draw(times) for i in range(NODES) if draw(st.booleans())}
    duration = draw(st.one_of(st.none(), st.floats(0, 4000).map(lambda x: round(x, 1))))
    pod = pod_info(
        "p",
        "a",
        gpus=draw(st.integers(0, 2)),
        cpu=draw(st.integers(0, 16_000)),
        duration=duration,
    )
    return pod, state, reservations, drain, draw(st.floats(0, 1000))


@settings(max_examples=300, deadline=None)
@given(backfill_cases())
def test_backfill_mask_is_the_rule_per_node(case: tuple[Any, ...]) -> None:
    """Pods with and without GPUs, with and without a declared run time, reservations that
    drain, never drain or reach past the cluster's slots."""
    pod, state, reservations, drain, now = case
    got = backfill_mask(pod, state, reservations, drain, now)
    assert np.array_equal(got, _mask_as_written(pod, state, reservations, drain, now))


# ---- reclaimable pods and the retry time ----------------------------------------------------


@st.composite
def reclaim_cases(draw: st.DrawFn) -> dict[str, Any]:
    """Pods of queue ``a`` running from random times, some not bound or terminating, some
    placed in the cycle; GPUs that changed tenant, earlier reclaims by ``a`` from ``b`` and
    pods protected by the reservation they started from, at random times."""
    pods = []
    for i in range(draw(st.integers(0, 12))):
        pods.append(
            (
                i,
                draw(st.integers(0, NODES - 1)),
                draw(st.floats(0, 1000)),
                draw(st.booleans()) or draw(st.booleans()),  # bound, mostly
                draw(st.integers(0, 5)) == 0,  # terminating, rarely
            )
        )
    times = st.floats(0, 1000)
    devices = st.tuples(st.integers(0, NODES - 1), st.integers(0, GPUS - 1))
    return {
        "pods": pods,
        "changed": draw(st.dictionaries(devices, times, max_size=6)),
        "reclaimed": draw(st.dictionaries(st.integers(0, NODES - 1), times, max_size=4)),
        "protected": draw(st.dictionaries(st.integers(0, 11), times, max_size=4)),
        "placed_now": draw(st.sets(st.integers(0, 11), max_size=3)),
        "now": draw(st.floats(200, 1400)),
    }


def _session(case: dict[str, Any]) -> tuple[Session, list[str]]:
    """A fresh session over the case's state (each side effect lands in its own copy)."""
    state = _nodes()
    used = [0] * NODES
    uids = []
    for i, node, started, bound, terminating in case["pods"]:
        p = pod_info(f"a{i}", "a", gpus=1 if used[node] < GPUS else 0)
        pl = state.assign(p, node, tuple(range(used[node], used[node] + p.gpu.count)), started)
        used[node] += p.gpu.count
        pl.bound, pl.terminating = bound, terminating
        uids.append(p.uid)
    session = Engine().session(state, case["now"])  # reclaimCooldownSeconds 600
    st_ = session.state
    st_.tenant_changed.update({(f"n{n}", d): t for (n, d), t in case["changed"].items()})
    st_.reclaimed.update({(f"n{n}", "a", "b"): t for n, t in case["reclaimed"].items()})
    st_.protected.update({f"a/a{i}": t for i, t in case["protected"].items()})
    session.placed_now.update(f"a/a{i}" for i in case["placed_now"])
    return session, uids


def _cooling(session: Session, uid: str) -> bool:
    """Does the pod sit on a GPU that changed tenant within the cooldown, at or before the
    pod started (the part it holds is what changed)?"""
    pl = session.cluster.placements[uid]
    cooldown = session.tenancy.preemption.reclaim_cooldown_seconds
    return any(session.now - t < cooldown for t in _changes_for(session, pl))


def _changes_for(session: Session, pl: Placement) -> list[float]:
    """When each GPU of ``pl`` changed tenant, where that was at or before ``pl`` started."""
    changed = session.state.tenant_changed
    name = session.cluster.node(pl.node).name
    times = [changed.get((name, d)) for d in pl.devices]
    return [t for t in times if t is not None and t <= pl.started]


def _protected(session: Session, uid: str) -> bool:
    """Is the pod protected by the reservation it started from? (A cycle is asked for when
    the protection ends.)"""
    until = protected_until(session, uid)
    if until is not None:
        session.out.retry_no_later_than(until)
    return until is not None


def _node_of(session: Session, uid: str) -> str:
    return session.cluster.node(session.cluster.placements[uid].node).name


def _rules_as_written(session: Session, pool: list[str], min_run: float) -> list[str]:
    """Each rule asked per pod, then the retry time of pods held back by time (the form the
    one-pass shortcut replaced)."""
    cfg = session.tenancy.preemption
    ok = sorted(
        u
        for u in pool
        if eligible_victim(session, u, min_run)
        and not _cooling(session, u)
        and not reverses(session.state, _node_of(session, u), "a", "b", session.now, cfg)
        and not _protected(session, u)
    )
    if len(ok) < len(pool):
        placements, changed = session.cluster.placements, session.state.tenant_changed
        for uid in pool:
            pl = placements.get(uid)
            if pl is None or not pl.bound or pl.terminating or uid in session.placed_now:
                continue
            when = pl.started + min_run
            if changed:
                cooled = max(_changes_for(session, pl), default=-np.inf)
                when = max(when, cooled + cfg.reclaim_cooldown_seconds)
            if when > session.now:
                session.out.retry_no_later_than(float(when))
    return ok


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reclaim_cases())
def test_reclaimable_pods_in_one_pass_are_the_rules_per_pod(case: dict[str, Any]) -> None:
    """The same victims, the same retry time, the same expired reclaims forgotten."""
    min_run = 120.0
    plain, uids = _session(case)
    want = _rules_as_written(plain, uids, min_run)
    fast, _ = _session(case)
    causes = HeldCauses()
    got, soonest = ReclaimEligibility(fast).reclaimable(uids, "a", "b", min_run, {}, causes)
    if len(got) < len(uids) and soonest < np.inf:
        fast.out.retry_no_later_than(float(soonest))  # as _reclaim_sets asks for it
    assert got == want
    assert fast.out.retry_at == plain.out.retry_at
    assert fast.state.reclaimed == plain.state.reclaimed
    # Each pod held back is counted under the first rule that holds it (the reason's tally).
    checked, _ = _session(case)
    assert causes.counts == _causes_as_written(checked, uids, min_run)


def _causes_as_written(session: Session, pool: list[str], min_run: float) -> dict[str, int]:
    """Per rule, the pods it is the first to hold back: victims by kind (bound, not
    terminating, not placed in this cycle) that some time rule keeps out."""
    cfg = session.tenancy.preemption
    counts: dict[str, int] = {}
    for u in pool:
        pl = session.cluster.placements.get(u)
        if pl is None or not pl.bound or pl.terminating or u in session.placed_now:
            continue
        if session.now - pl.started < min_run:
            cause = "young"
        elif _cooling(session, u):
            cause = "cooling"
        elif reverses(session.state, _node_of(session, u), "a", "b", session.now, cfg):
            cause = "reversal"
        elif _protected(session, u):
            cause = "protected"
        else:
            continue
        counts[cause] = counts.get(cause, 0) + 1
    return counts


# ---- the room a victim pool frees -----------------------------------------------------------


def test_victim_room_is_shared_while_the_cluster_stands_and_redone_after_a_change() -> None:
    """Gangs of several shapes screen against one pool: the room is computed once while
    nothing is placed or released, and afresh (with the change) after."""
    state = _nodes()
    running = [pod_info(f"v{i}", "b", gpus=2) for i in range(4)]
    for i, p in enumerate(running):
        state.assign(p, i, (0, 1))
    session = Engine().session(state, 10.0)
    pool = {p.uid for p in running}
    gang = pod_info("g", "a", gpus=4)
    first = members_bound(session, gang, None, pool)
    assert len(session.memo.rooms) == 1
    room = next(iter(session.memo.rooms.values()))[1]
    assert members_bound(session, gang, None, pool) == first
    assert next(iter(session.memo.rooms.values()))[1] is room  # the same array, not redone

    state.assign(pod_info("x", "c", gpus=4), 5, (0, 1, 2, 3))
    members_bound(session, gang, None, pool)
    assert len(session.memo.rooms) == 2
    fresh = state.free()[:, COLUMNS].astype(float)
    _add_victims(fresh, state, pool)
    newest = list(session.memo.rooms.values())[-1][1]
    assert np.array_equal(newest, fresh)
    assert not np.array_equal(newest, room)  # node 5's GPUs are taken now


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=NODES, max_size=NODES),
    st.lists(st.lists(st.booleans(), min_size=NODES, max_size=NODES), min_size=1, max_size=4),
)
def test_a_gang_screen_read_from_the_cycles_copies_table_is_the_bound_computed_afresh(
    held: list[int], masks: list[list[bool]]
) -> None:
    """Members of several asks screened under several node masks in one cycle (the copies of
    an ask a room holds are kept per room and ask) get the bound of a fresh session."""
    state = _nodes()
    running = [pod_info(f"v{i}", "b", gpus=g) for i, g in enumerate(held) if g]
    for p in running:
        state.assign(p, int(p.name[1:]), tuple(range(p.gpu.count)))
    pool = {p.uid for p in running[::2]}
    asks = [pod_info("g1", "a", gpus=1), pod_info("g4", "a", gpus=4, cpu=12_000)]
    session = Engine().session(state, 10.0)
    for mask in [None, *(np.array(m, dtype=bool) for m in masks)]:
        for pod in asks:
            kept = members_bound(session, pod, mask, pool)
            assert kept == members_bound(Engine().session(state, 10.0), pod, mask, pool)
    assert len(session.memo.copies) == len(asks)


@st.composite
def release_cases(draw: st.DrawFn) -> tuple[ClusterState, set[str], dict[str, float], Any]:
    """Pods of 1-4 GPUs (and some CPU) on the nodes; some are victims now, some come free
    at a moment (a few at the same one, some never), the rest stay."""
    state = _nodes()
    used = [0] * NODES
    pool: set[str] = set()
    later: dict[str, float] = {}
    for i in range(draw(st.integers(0, 18))):
        node = draw(st.integers(0, NODES - 1))
        gpus = draw(st.integers(1, 4))
        if used[node] + gpus > GPUS:
            continue
        p = pod_info(f"v{i}", "b", gpus=gpus, cpu=draw(st.sampled_from([1000, 6000])))
        state.assign(p, node, tuple(range(used[node], used[node] + gpus)))
        used[node] += gpus
        kind = draw(st.sampled_from(["now", "later", "never", "stays"]))
        if kind == "now":
            pool.add(p.uid)
        elif kind == "later":
            later[p.uid] = float(draw(st.sampled_from([20, 30, 30, 45, 70])))
        elif kind == "never":
            later[p.uid] = math.inf
    mask = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=NODES, max_size=NODES)))
    return state, pool, later, None if mask is None else np.array(mask, dtype=bool)


@settings(max_examples=300, deadline=None)
@given(release_cases(), st.sampled_from([1, 2, 4]))
def test_the_bound_over_time_is_the_bound_computed_at_each_moment(
    case: tuple[ClusterState, set[str], dict[str, float], Any], gpus: int
) -> None:
    """From each moment on, the screen's bound with the pods come free by then evicted
    too is what :func:`members_bound` gives for that pool; before the first, the bound now."""
    state, pool, later, mask = case
    pod = pod_info("g", "a", gpus=gpus, cpu=4000)
    times, bounds = bound_over_time(Engine().session(state, 10.0), pod, mask, pool, later)
    assert list(times) == sorted(times)
    assert all(math.isfinite(t) for t in times)
    for t in sorted({*times, 0.0, 100.0}):
        free = pool | {u for u, when in later.items() if when <= t}
        want = members_bound(Engine().session(state, 10.0), pod, mask, free)[0]
        upto = np.flatnonzero(times <= t)
        if upto.size:
            assert bounds[upto[-1]] == want
        else:
            assert want == members_bound(Engine().session(state, 10.0), pod, mask, pool)[0]


# ---- time to fit from the cluster's declared ends -------------------------------------------


@st.composite
def fit_cases(draw: st.DrawFn) -> tuple[ClusterState, PodInfo, np.ndarray, float]:
    """Nodes partly filled by pods that declare run times (or not), a pod asking whole GPUs
    or a share, a random set of nodes it may use."""
    state = _nodes()
    used = [0] * NODES
    for i in range(draw(st.integers(0, 16))):
        node = draw(st.integers(0, NODES - 1))
        gpus = draw(st.integers(1, 2))
        if used[node] + gpus > GPUS:
            continue
        duration = draw(st.one_of(st.none(), st.floats(1, 3000).map(lambda x: round(x, 1))))
        p = pod_info(f"r{i}", "r", gpus=gpus, duration=duration)
        state.assign(p, node, tuple(range(used[node], used[node] + gpus)), draw(st.floats(0, 500)))
        used[node] += gpus
    whole = draw(st.booleans())
    pod = pod_info(
        "p", "a", gpus=draw(st.integers(1, 3)) if whole else 1, milli=1000 if whole else 500
    )
    mask = np.array(draw(st.lists(st.booleans(), min_size=NODES, max_size=NODES)), dtype=bool)
    return state, pod, mask, draw(st.floats(500, 1500))


@settings(max_examples=300, deadline=None)
@given(fit_cases())
def test_time_to_fit_from_the_whole_cluster_ends_is_the_same(
    case: tuple[ClusterState, PodInfo, np.ndarray, float],
) -> None:
    """Picking a mask's nodes out of the whole cluster's declared ends gives the time that
    walking only those nodes gives."""
    state, pod, mask, now = case
    plain = time_to_fit(pod, 1, state, mask, now)
    shared = time_to_fit(pod, 1, state, mask, now, lambda: declared_ends(state, now))
    assert shared == plain


# ---- a lane's backfill classes --------------------------------------------------------------


def test_lane_classes_follow_the_reservations_of_the_last_backfill_key() -> None:
    """A lane's classes are kept while the set of reservations stays, and computed afresh
    for another set (a held job's own view leaves its reservation out); each set's sorted
    starts are kept for the cycle, unless other reservations come under the same keys."""
    tenant = Tenant(queue="a", user="u")
    lane = [
        Job(p.uid, [p], tenant)
        for p in (pod_info(f"p{i}", "a", duration=d) for i, d in enumerate([10, 100, 1000, 50]))
    ]
    early = Reservation("q/early", "q", np.array([0]), 0.0)
    late = Reservation("q/late", "q", np.array([1]), 0.0)
    drain = {0: 60.0, 1: 500.0}
    memo = CycleMemo()
    memo.backfill_key(lane[0].pods[0], {"q/early": early, "q/late": late}, drain, 0.0, 2)
    keys = memo.reservation_keys()
    both = memo.lane_classes(lane, 0.0)
    assert both.tolist() == [2, 1, 0, 2]  # ends before both starts, the later one, neither
    assert memo.lane_classes(lane, 0.0) is both
    memo.backfill_key(lane[0].pods[0], {"q/late": late}, drain, 0.0, 2)
    assert memo.lane_classes(lane, 0.0).tolist() == [1, 1, 0, 1]
    # Back to both (a held job's view and the others' alternate): that set's sorted starts
    # are the ones kept, not sorted again; other reservations under the same keys are not.
    memo.backfill_key(lane[0].pods[0], {"q/early": early, "q/late": late}, drain, 0.0, 2)
    assert memo.reservation_keys() is keys
    assert memo.lane_classes(lane, 0.0).tolist() == [2, 1, 0, 2]
    other = Reservation("q/late", "q", np.array([1]), 5.0)
    memo.backfill_key(lane[0].pods[0], {"q/early": early, "q/late": other}, drain, 0.0, 2)
    assert memo.reservation_keys() is not keys


def test_a_declared_run_time_is_parsed_once_per_pod_object() -> None:
    """The parsed run time is kept on the pod object; a copy with other annotations
    (``dataclasses.replace``) parses its own."""
    pod = pod_info("p", duration=600.0)
    assert declared_runtime(pod) == 600.0
    pod.annotations["fairgpu.io/duration-seconds"] = "60"  # the kept value is the object's
    assert declared_runtime(pod) == 600.0
    assert declared_runtime(replace(pod, annotations={})) is None
    assert declared_runtime(replace(pod, annotations={"fairgpu.io/duration-seconds": "x"})) is None
    assert declared_runtime(replace(pod, annotations={"fairgpu.io/duration-seconds": "90"})) == 90.0


# ---- a job's needed vector ------------------------------------------------------------------


def test_a_jobs_needed_vector_is_kept_while_the_largest_device_memory_stays() -> None:
    """Admission sums a job's needed members once and keeps the sum on the job; a whole GPU
    is charged the largest device's memory, so a node with larger devices makes it sum
    afresh."""
    state = _nodes()
    session = Engine().session(state, 0.0)
    book = session.book
    pods = [pod_info(f"m{i}", "a", gpus=2, group="g") for i in range(3)]
    job = Job("a/g", pods, Tenant(queue="a", user="u"), need=2)

    def fresh() -> np.ndarray:
        return book.pending_vector(pods[0]) + book.pending_vector(pods[1])

    first = _needed(book, job)
    assert np.array_equal(first, fresh()) and _needed(book, job) is first
    state.add_node(node_info("big", gpus=GPUS, gpu_memory_mib=81920))
    book.sync(state)
    again = _needed(book, job)
    assert again is not first and np.array_equal(again, fresh())
    assert not np.array_equal(again, first)  # 80 GiB per whole GPU now, 16 GiB before
