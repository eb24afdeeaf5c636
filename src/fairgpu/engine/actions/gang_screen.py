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

from collections.abc import Iterable

import numpy as np

from fairgpu.cluster.state import COL_CPU, COL_GPU_MILLI, COL_MEMORY, COL_PODS, ClusterState
from fairgpu.engine.session import Session
from fairgpu.model.pod import PodInfo

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
    if not nodes.any():
        return 0, ""
    per_node = np.where(nodes, most, 0.0)
    limiting = asked[int(np.argmin(copies[nodes].sum(axis=0)))]
    return int(per_node.sum()), NAMES[limiting]


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
    ask = np.zeros(len(COLUMNS))
    _add(ask[None, :], 0, cols, amounts)
    ask[COLUMNS.index(COL_PODS)] = max(ask[COLUMNS.index(COL_PODS)], 1.0)
    asked = np.flatnonzero(ask > 0)
    copies = np.floor(np.maximum(room[:, asked], 0.0) / ask[asked])
    out = (asked, copies, copies.min(axis=1))
    table[key] = (room, out)
    return out


def _victim_room(session: Session, victims: Iterable[str]) -> np.ndarray:
    """Free room per node (:data:`COLUMNS`) with every pod of ``victims`` gone; computed
    once per victim pool object and cluster state in a cycle (gangs of several shapes
    screen against the same pool; the pool is not changed while the cycle holds it). The
    result is shared: callers only read it."""
    cluster = session.cluster
    key = (id(victims), cluster.load_version, cluster.static_version, cluster.size)
    rooms = session.memo.rooms
    got = rooms.get(key)
    if got is not None and got[0] is victims:
        return got[1]
    room = cluster.free()[:, COLUMNS].astype(float)
    _add_victims(room, cluster, victims)
    rooms[key] = (victims, room)
    return room


def _add_victims(room: np.ndarray, cluster: ClusterState, victims: Iterable[str]) -> None:
    """Add every placed victim's requests (and a pod slot each) to its node's row of
    ``room``, at once: what :func:`_add` does per pod (integer amounts: the sums are exact
    in any order)."""
    n = cluster.size
    placements, pods = cluster.placements, cluster.pods
    nodes: list[int] = []
    cols: list[np.ndarray] = []
    amounts: list[np.ndarray] = []
    for uid in victims:
        pl = placements.get(uid)
        if pl is None or pl.node >= n:
            continue
        c, a = cluster.request_vector(pods[uid])
        nodes.append(pl.node)
        cols.append(c)
        amounts.append(a)
    if not nodes:
        return
    where = np.asarray(nodes, dtype=np.intp)
    np.add.at(room[:, COLUMNS.index(COL_PODS)], where, 1.0)
    col = np.concatenate(cols)
    amount = np.concatenate(amounts).astype(float)
    row = np.repeat(where, [len(c) for c in cols])
    index = _COLUMN_INDEX[np.minimum(col, _COLUMN_INDEX.size - 1)]
    index[col >= _COLUMN_INDEX.size] = -1
    keep = index >= 0
    np.add.at(room, (row[keep], index[keep]), amount[keep])


def _add(room: np.ndarray, node: int, cols: np.ndarray, amounts: np.ndarray) -> None:
    """Add a pod's requests (cluster columns ``cols``) to row ``node`` of ``room``, which
    holds only :data:`COLUMNS`; a pod slot is counted for every pod."""
    for col, amount in zip(cols.tolist(), amounts.tolist(), strict=True):
        if col in COLUMNS and col != COL_PODS:
            room[node, COLUMNS.index(col)] += amount
    room[node, COLUMNS.index(COL_PODS)] += 1
