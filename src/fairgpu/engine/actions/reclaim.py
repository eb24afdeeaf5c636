"""Reclaim: when a queue may take resources back from another queue.

Two rules, each judged per victim queue V for a preemptor queue Q taking ``vec``:

**Nominal quota is a guarantee.** Q may evict pods of V if Q stays within its nominal quota
after the move (``vec`` added) and V is borrowing beyond its own nominal quota. Nothing else
is asked of the end state: the victim's job may be larger than Q's gap, or V's last job, and
the victim search (:func:`~fairgpu.engine.preemption.find_preemption`) picks the cheapest set.

**Fair share, with a tolerance band.** Otherwise Q may evict pods of V only if

1. V is not within its nominal quota (what a queue holds inside its quota is never taken by
   the fair-share rule),
2. V holds more than ``(1 + band) x`` its fair share (:func:`deserved_shares`) -- a queue a
   little above its share is left alone, so rounding (one pod more or less) never starts a
   reclaim --, and Q is below its own,
3. Q stays at or below its fair share after the move,
4. ``key(Q) < key(V)`` before the move and ``key(Q) <= key(V)`` after it (victims removed,
   preemptor added), where ``key`` is :func:`reclaim_key` -- (borrowing beyond nominal
   quota?, department share, queue share), instantaneous, without history.

No preemption cycles (under the same state: the victims pending again, nothing else
changed). After a quota-guarantee move Q is within its nominal quota, so V can take nothing
back: the quota rule needs Q borrowing, the fair-share rule (1) refuses a queue within its
quota. After a fair-share move, reclaiming back would need ``key(V) < key(Q)``, contradicting
(4), and Q above ``(1 + band) x`` its share, contradicting (3) (the move turns Q's pending
demand into usage and V's usage into pending demand, so neither share changes).

No flipping over time. Shares move as work arrives and ends, so the argument above does not
bound what happens a few cycles later; three settings of
:class:`~fairgpu.tenancy.config.Preemption` do: a reclaim victim must have run at least
``reclaimMinRuntimeSeconds``; the band (``reclaimToleranceBand``) keeps a queue near its
share out of reach; and the GPUs (node, device) a reclaim freed or took are recorded in
:class:`~fairgpu.engine.session.EngineState` at the cycle's ``now``, and for
``reclaimCooldownSeconds`` no pod on them is a reclaim victim. So no reclaim over the same
GPUs can follow a reclaim -- in the opposite direction or any other -- within the cooldown:
the second reclaim's victims sit on GPUs the first one recorded.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fairgpu.engine.actions.order import Lanes
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.book import QueueBook
from fairgpu.tenancy.fairshare import hierarchical_fair_shares

ReclaimKey = tuple[int, float, float]
EPS = 1e-9


def reclaim_key(
    book: QueueBook, queue: str, deltas: dict[str, np.ndarray] | None = None
) -> ReclaimKey:
    """The order reclaim respects: (borrowing beyond nominal?, department share, queue
    share), instantaneous; ``deltas`` applies hypothetical changes (queue -> vector)."""
    d = (deltas or {}).get(queue)
    return (
        0 if book.within_nominal(queue, d) else 1,
        book.top_share(queue, deltas),
        book.queue_share(queue, d),
    )


def quota_guarantee(book: QueueBook, queue: str, vec: np.ndarray, other: str) -> bool:
    """The quota rule: ``queue`` stays within its nominal quota with ``vec`` added and
    ``other`` borrows beyond its own."""
    return book.within_nominal(queue, vec) and not book.within_nominal(other)


def above_band(book: QueueBook, deserved: Mapping[str, float], queue: str, band: float) -> bool:
    """``queue`` holds more than ``(1 + band) x`` its fair share."""
    return book.dominant(book.used(queue)) > deserved.get(queue, 0.0) * (1.0 + band) + EPS


def reclaim_refusal(
    book: QueueBook,
    queue: str,
    vec: np.ndarray,
    victims: list[PodInfo],
    deserved: Mapping[str, float] | None = None,
    band: float = 0.0,
) -> str | None:
    """None if ``queue`` may take ``vec`` by evicting ``victims`` (the rules of the module
    docstring; victims of ``queue`` itself are not judged here), else the rule that refuses.
    ``victims`` is everything that goes: the fair victim search hands in every member of a
    pod group the move breaks, so the rule sees the real end state.
    Without ``deserved``, fair shares are computed from usage alone (``vec`` as ``queue``'s
    only pending demand)."""
    by_queue: dict[str, np.ndarray] = {}
    for v in victims:
        entry = book.entries.get(v.uid)
        if entry is None:
            return f"victim {v.key} is not accounted to any queue"
        q = entry.tenant.queue
        if q != queue:
            by_queue[q] = by_queue.get(q, np.zeros_like(vec)) - entry.vec
    if not by_queue:
        return None
    if deserved is None:
        deserved = usage_shares(book, queue, vec)
    deltas = dict(by_queue)
    deltas[queue] = vec.copy()
    for v_queue in sorted(by_queue):
        if quota_guarantee(book, queue, vec, v_queue):
            continue
        why = _fair_refusal(book, deserved, band, queue, v_queue, deltas)
        if why is not None:
            return why
    return None


def _fair_refusal(
    book: QueueBook,
    deserved: Mapping[str, float],
    band: float,
    queue: str,
    other: str,
    deltas: dict[str, np.ndarray],
) -> str | None:
    """Rules 1-4 of the fair-share reclaim for victims of ``other``."""
    if book.within_nominal(other):
        return f"queue {other!r} is within its nominal quota"
    if not above_band(book, deserved, other, band):
        return f"queue {other!r} is not above its fair share by more than the band ({band:g})"
    mine = book.dominant(book.used(queue))
    after = book.dominant(book.used(queue) + deltas[queue])
    if not mine < deserved.get(queue, 0.0) - EPS:
        return f"queue {queue!r} is not below its fair share"
    if after > deserved.get(queue, 0.0) + EPS:
        return f"queue {queue!r} would exceed its fair share after the move"
    if not reclaim_key(book, queue) < reclaim_key(book, other):
        return f"queue {queue!r} does not come before {other!r} in reclaim order"
    if not reclaim_key(book, queue, deltas) <= reclaim_key(book, other, deltas):
        return f"queue {queue!r} would pass {other!r} in reclaim order after the move"
    return None


def reclaim_allowed(
    book: QueueBook,
    queue: str,
    vec: np.ndarray,
    victims: list[PodInfo],
    deserved: Mapping[str, float] | None = None,
    band: float = 0.0,
) -> bool:
    """May ``queue`` take ``vec`` by evicting ``victims``? (:func:`reclaim_refusal`)."""
    return reclaim_refusal(book, queue, vec, victims, deserved, band) is None


def may_reclaim_from(
    book: QueueBook, deserved: Mapping[str, float], queue: str, other: str, band: float = 0.0
) -> bool:
    """The queue-level pre-screen: the quota rule could apply (``queue`` within its nominal
    quota, ``other`` borrowing), or the fair-share rule could (``other`` outside its quota and
    above its share by more than ``band``, ``queue`` below its own, ``key(queue) <
    key(other)``)."""
    mine, theirs = reclaim_key(book, queue), reclaim_key(book, other)
    if not mine < theirs:
        return False
    if mine[0] == 0 and theirs[0] == 1:
        return True
    if theirs[0] == 0:
        return False
    below = book.dominant(book.used(queue)) < deserved.get(queue, 0.0) - EPS
    return below and above_band(book, deserved, other, band)


def usage_shares(book: QueueBook, queue: str, vec: np.ndarray) -> dict[str, float]:
    """Fair shares when nothing is pending but ``vec`` for ``queue``."""
    demand = {q: book.dominant(u) for q, u in book.usage.items()}
    demand[queue] = book.dominant(book.used(queue) + vec)
    return _shares(book, demand)


def deserved_shares(book: QueueBook, queues: Lanes) -> dict[str, float]:
    """Each queue's fair share in dominant-share units (cluster = 1): two-level weighted
    max-min, capped by its demand (what it holds plus everything it has pending)."""
    demand: dict[str, float] = {}
    for q, users in queues.items():
        vec = book.used(q).copy()
        for lst in users.values():
            for job in lst:
                for p in job.pods:
                    vec += book.pending_vector(p)
        demand[q] = book.dominant(vec)
    for q, used in book.usage.items():
        if q not in demand:
            demand[q] = book.dominant(used)
    return _shares(book, demand)


def _shares(book: QueueBook, demand: dict[str, float]) -> dict[str, float]:
    return hierarchical_fair_shares(
        1.0,
        demand,
        book.weight,
        lambda q: book.queue_limits(q).parent,
        book.parent_weight,
    )
