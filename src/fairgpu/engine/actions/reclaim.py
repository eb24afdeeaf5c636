"""Reclaim: when a queue may take resources back from another queue.

A queue below its fair share (dominant-share units, weighted max-min capped by demand) may
preempt pods of a queue above its own; a queue within its nominal quota may preempt a queue
borrowing beyond its quota.

No preemption cycles: queue Q may reclaim victims from queue V only if ``key(Q) < key(V)``
before the move and ``key(Q) <= key(V)`` after it (victims removed, preemptor added), where
``key`` is :func:`reclaim_key` -- (borrowing beyond nominal quota?, department share, queue
share), instantaneous, without history. Reclaiming back from the state just produced would
need ``key(V) < key(Q)`` there, contradicting ``key(Q) <= key(V)``: a victim's queue can never
reclaim what was just taken under the same state.
"""

from __future__ import annotations

import numpy as np

from fairgpu.engine.actions.order import Lanes
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.book import QueueBook
from fairgpu.tenancy.fairshare import hierarchical_fair_shares

ReclaimKey = tuple[int, float, float]


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


def reclaim_allowed(book: QueueBook, queue: str, vec: np.ndarray, victims: list[PodInfo]) -> bool:
    """May ``queue`` take ``vec`` by evicting ``victims`` of other queues? (The rule in the
    module docstring; victims of ``queue`` itself are not judged here.)"""
    by_queue: dict[str, np.ndarray] = {}
    for v in victims:
        entry = book.entries.get(v.uid)
        if entry is None:
            return False
        q = entry.tenant.queue
        if q == queue:
            continue
        by_queue[q] = by_queue.get(q, np.zeros_like(vec)) - entry.vec
    if not by_queue:
        return True
    deltas = dict(by_queue)
    deltas[queue] = vec.copy()
    for v_queue in by_queue:
        if not reclaim_key(book, queue) < reclaim_key(book, v_queue):
            return False
        if not reclaim_key(book, queue, deltas) <= reclaim_key(book, v_queue, deltas):
            return False
    return True


def may_reclaim_from(book: QueueBook, deserved: dict[str, float], queue: str, other: str) -> bool:
    """Reclaim needs the preemptor's queue below its fair share and the victim's above its
    own -- or the preemptor within its nominal quota and the victim borrowing -- and the
    pairwise order of :func:`reclaim_key` (which is what rules out cycles)."""
    mine, theirs = reclaim_key(book, queue), reclaim_key(book, other)
    if not mine < theirs:
        return False
    if mine[0] == 0 and theirs[0] == 1:
        return True
    below = book.dominant(book.used(queue)) < deserved.get(queue, 0.0) - 1e-9
    above = book.dominant(book.used(other)) > deserved.get(other, 0.0) + 1e-9
    return below and above


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
    return hierarchical_fair_shares(
        1.0,
        demand,
        book.weight,
        lambda q: book.queue_limits(q).parent,
        book.parent_weight,
    )
