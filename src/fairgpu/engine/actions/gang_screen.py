"""Gang screen: how many members of a gang could fit at most, before any attempt is made.

A gang's attempt places its members one by one, each through a plain attempt and, failing
that, a preemption search, and throws everything away when a member fails. A gang that
cannot start repeats those searches every cycle, and they cost far more than the rest of
the cycle. :func:`members_bound` gives an upper bound on how many identical members can be
placed together from the cycle's committed state, counting every pod the victim policy
could evict for them as gone: if it is below what the gang needs, no attempt can succeed,
so none is made.

Why it is an upper bound: a member needs its CPU, memory, a pod slot and its GPU compute on
one node that passes its load-independent filters and that reservations leave it (the
``mask`` the attempt itself uses); on a node, members can use at most what is free plus
what evicting every eligible victim there would free; the victims a later member may take
are a subset of the first member's (the preemptor's share only grows, its victims' only
shrink, and pods placed in the cycle are never victims). Per-device GPU fit, GPU memory,
inter-pod constraints and the reclaim rule only refuse more.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import numpy as np

from fairgpu.cluster.state import COL_CPU, COL_GPU_MILLI, COL_MEMORY, COL_PODS, ClusterState
from fairgpu.engine.session import Session
from fairgpu.model.pod import PodInfo

T = TypeVar("T")

# The resources the bound counts, and how a shortage of each is named in a pending reason.
COLUMNS = (COL_CPU, COL_MEMORY, COL_PODS, COL_GPU_MILLI)
NAMES = ("cpu", "memory", "pods", "nvidia.com/gpu")
# Cluster column -> index in COLUMNS, -1 for columns the bound does not count (pod slots
# are counted once per pod, not from requests).
_COLUMN_INDEX = np.full(max(COLUMNS) + 1, -1, dtype=np.intp)
for _i, _c in enumerate(COLUMNS):
    if _c != COL_PODS:
        _COLUMN_INDEX[_c] = _i


def members_bound(
    session: Session, pod: PodInfo, mask: np.ndarray | None, victims: Iterable[str]
) -> tuple[int, str]:
    """At most how many copies of ``pod`` fit together on the nodes ``mask`` leaves (None:
    all) if every pod in ``victims`` (uids) were evicted, and the resource that limits
    them most ("" when none is asked for)."""
    cluster = session.cluster
    nodes = session.scheduler.static_mask(pod, cluster)
    if mask is not None:
        nodes = nodes & mask
    asked, copies, most = _copies(session, pod, _victim_room(session, victims))
    if not np.count_nonzero(nodes):
        return 0, ""
    per_node = np.where(nodes, most, 0.0)
    limiting = asked[int(copies[nodes].sum(axis=0).argmin())]
    return int(np.add.reduce(per_node)), NAMES[limiting]


def copies_per_node(session: Session, pod: PodInfo, victims: Iterable[str]) -> np.ndarray:
    """Per node, how many copies of ``pod`` its free room holds if every pod in ``victims``
    (uids) were evicted -- the count :func:`members_bound` sums, before any filter."""
    return _copies(session, pod, _victim_room(session, victims))[2]


def bound_over_time(
    session: Session,
    pod: PodInfo,
    mask: np.ndarray | None,
    victims: Iterable[str],
    later: Mapping[str, float],
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`members_bound` as time passes, if every pod of ``victims`` and each pod of
    ``later`` (uid -> when) from its moment on were evicted: the moments, soonest first, and
    the bound from each on. A pod of ``later`` at ``inf`` never counts.

    A pod coming free adds its requests to its node's row, and only that node's copies
    change (a node holds as many copies as its scarcest asked resource allows; the bound is
    the sum over the nodes): the bound at each moment is the bound now plus every change
    so far, computed for all pods at once."""
    cluster = session.cluster
    nodes = session.scheduler.static_mask(pod, cluster)
    if mask is not None:
        nodes = nodes & mask
    room = _victim_room(session, victims)
    asked, _, most = _copies(session, pod, room)
    base = float(np.where(nodes, most, 0.0).sum())
    times, where, rows = _coming_free(session, later)
    keep = nodes[where]
    times, where, rows = times[keep], where[keep], rows[keep]
    if not times.size:
        return times, np.zeros(0)
    # Each pod's node row with it and every earlier pod of its node added: group the pods
    # by node (stable, so time order stays inside a group) and sum within the groups.
    by_node = np.argsort(where, kind="stable")
    grouped, added = where[by_node], rows[by_node]
    sums = np.cumsum(added, axis=0)
    first = np.r_[True, grouped[1:] != grouped[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(grouped.size), 0))
    after = room[grouped] + sums - (sums[start] - added[start])
    ask = _ask(*cluster.request_vector(pod))
    copies = np.floor(np.maximum(after[:, asked], 0.0) / ask[asked]).min(axis=1)
    previous = np.where(first, most[grouped], np.r_[0.0, copies[:-1]])
    gain = np.empty(len(grouped))
    gain[by_node] = copies - previous
    return times, base + np.cumsum(gain)


def _coming_free(
    session: Session, later: Mapping[str, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The moments, nodes and requests (:func:`_rows`) of the placed pods of ``later`` with
    a moment, soonest first (ties by uid); once per mapping and cluster state in a cycle
    (gangs whose reservations leave them different nodes share it)."""
    cluster = session.cluster

    def make() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        placements, n = cluster.placements, cluster.size
        timed = sorted(
            (when, uid)
            for uid, when in later.items()
            if math.isfinite(when) and (pl := placements.get(uid)) is not None and pl.node < n
        )
        where, rows = _rows(cluster, [uid for _, uid in timed])
        return np.array([when for when, _ in timed], dtype=float), where, rows

    return _kept(session, session.memo.coming_free, later, make)


def _kept(
    session: Session,
    table: dict[tuple[object, ...], tuple[object, T]],
    of: object,
    make: Callable[[], T],
) -> T:
    """``make()``, computed once per object ``of`` and cluster state in a cycle and kept in
    ``table`` -- by the object's identity, checked on a hit (an id is reused once its object
    is gone)."""
    cluster = session.cluster
    key = (id(of), cluster.load_version, cluster.static_version, cluster.size)
    got = table.get(key)
    if got is not None and got[0] is of:
        return got[1]
    out = make()
    table[key] = (of, out)
    return out


def _copies(
    session: Session, pod: PodInfo, room: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the columns ``pod`` asks, copies of it each node's ``room`` holds per such column,
    and in all), once per room and ask in a cycle: gangs of one shape whose reservations
    leave them different nodes screen against the same room."""
    cols, amounts = session.cluster.request_vector(pod)
    key = (id(room), cols.tobytes(), amounts.tobytes())
    table = session.memo.copies
    got = table.get(key)
    if got is not None and got[0] is room:
        return got[1]
    ask = _ask(cols, amounts)
    asked = (ask > 0).nonzero()[0]
    copies = np.floor(np.maximum(room[:, asked], 0.0) / ask[asked])
    out = (asked, copies, copies.min(axis=1))
    table[key] = (room, out)
    return out


def _ask(cols: np.ndarray, amounts: np.ndarray) -> np.ndarray:
    """What one copy of a pod requesting ``amounts`` of cluster columns ``cols`` takes of
    each of :data:`COLUMNS` (a pod slot at least)."""
    ask = np.zeros(len(COLUMNS))
    _add(ask[None, :], 0, cols, amounts)
    ask[COLUMNS.index(COL_PODS)] = max(ask[COLUMNS.index(COL_PODS)], 1.0)
    return ask


def _victim_room(session: Session, victims: Iterable[str]) -> np.ndarray:
    """Free room per node (:data:`COLUMNS`) with every pod of ``victims`` gone; computed
    once per victim pool object and cluster state in a cycle (gangs of several shapes
    screen against the same pool; the pool is not changed while the cycle holds it). The
    result is shared: callers only read it."""
    cluster = session.cluster

    def make() -> np.ndarray:
        room = cluster.free()[:, COLUMNS].astype(float)
        _add_victims(room, cluster, victims)
        return room

    return _kept(session, session.memo.rooms, victims, make)


def _add_victims(room: np.ndarray, cluster: ClusterState, victims: Iterable[str]) -> None:
    """Add every placed victim's requests (and a pod slot each) to its node's row of
    ``room``, at once: what :func:`_add` does per pod (integer amounts: the sums are exact
    in any order)."""
    where, rows = _rows(cluster, victims)
    if where.size:
        np.add.at(room, where, rows)


def _rows(cluster: ClusterState, uids: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
    """The node and the requests (:data:`COLUMNS`, a pod slot each) of every placed pod of
    ``uids``, in their order."""
    n = cluster.size
    placements, pods = cluster.placements, cluster.pods
    nodes: list[int] = []
    cols: list[np.ndarray] = []
    amounts: list[np.ndarray] = []
    for uid in uids:
        pl = placements.get(uid)
        if pl is None or pl.node >= n:
            continue
        c, a = cluster.request_vector(pods[uid])
        nodes.append(pl.node)
        cols.append(c)
        amounts.append(a)
    rows = np.zeros((len(nodes), len(COLUMNS)))
    if not nodes:
        return np.zeros(0, dtype=np.intp), rows
    rows[:, COLUMNS.index(COL_PODS)] = 1.0
    col = np.concatenate(cols)
    amount = np.concatenate(amounts).astype(float)
    row = np.repeat(np.arange(len(nodes)), [len(c) for c in cols])
    index = _COLUMN_INDEX[np.minimum(col, _COLUMN_INDEX.size - 1)]
    index[col >= _COLUMN_INDEX.size] = -1
    keep = index >= 0
    np.add.at(rows, (row[keep], index[keep]), amount[keep])
    return np.asarray(nodes, dtype=np.intp), rows


def _add(room: np.ndarray, node: int, cols: np.ndarray, amounts: np.ndarray) -> None:
    """Add a pod's requests (cluster columns ``cols``) to row ``node`` of ``room``, which
    holds only :data:`COLUMNS`; a pod slot is counted for every pod."""
    for col, amount in zip(cols.tolist(), amounts.tolist(), strict=True):
        if col in COLUMNS and col != COL_PODS:
            room[node, COLUMNS.index(col)] += amount
    room[node, COLUMNS.index(COL_PODS)] += 1
