"""Weighted max-min fair shares (capped by demand), two-level, and dominant resource shares.

``weighted_max_min`` is progressive filling: capacity is split in proportion to weight among
the queues that still want more; a queue whose demand is met drops out and its unused part is
split again among the rest. :func:`hierarchical_fair_shares` does that first between
departments (a top-level queue counts as its own department) and then between the queues of
each department. These are the reference numbers reports print beside what each queue got.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from fairgpu.tenancy.config import TenancyConfig


def weighted_max_min(
    capacity: float, demand: Mapping[str, float], weight: Mapping[str, float]
) -> dict[str, float]:
    """Each key's weighted max-min fair share of ``capacity``, never above its demand.

    Keys missing from ``weight`` weigh 1. Demands and capacity must be non-negative.
    """
    share = {k: 0.0 for k in demand}
    active = {k for k, d in demand.items() if d > 0}
    left = max(0.0, float(capacity))
    while active and left > 1e-12:
        total_w = sum(weight.get(k, 1.0) for k in active)
        # The first queue to be satisfied bounds this round's fill level.
        level = min((demand[k] - share[k]) / weight.get(k, 1.0) for k in active)
        step = min(level, left / total_w)
        for k in sorted(active):
            share[k] += step * weight.get(k, 1.0)
            if share[k] >= demand[k] - 1e-9:
                share[k] = float(demand[k])
                active.discard(k)
        left -= step * total_w
        if step < level:
            break  # capacity exhausted before anyone else was satisfied
    return share


def hierarchical_fair_shares(
    capacity: float,
    demand: Mapping[str, float],
    queue_weight: Callable[[str], float],
    parent_of: Callable[[str], str],
    parent_weight: Callable[[str], float],
    caps: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Two-level weighted max-min shares of ``capacity`` for the leaf queues in ``demand``;
    ``caps``: the most a queue, or a department's queues together, may ever hold (a share
    is never above it)."""
    caps = caps or {}
    demand = {q: min(d, caps.get(q, math.inf)) for q, d in demand.items()}
    groups: dict[str, list[str]] = {}
    for q in demand:
        top = parent_of(q) or q
        groups.setdefault(top, []).append(q)
    top_demand = {
        g: min(sum(demand[q] for q in qs), caps.get(g, math.inf)) for g, qs in groups.items()
    }
    top_weight = {
        g: (parent_weight(g) if parent_of(qs[0]) else queue_weight(qs[0]))
        for g, qs in groups.items()
    }
    top_share = weighted_max_min(capacity, top_demand, top_weight)
    out: dict[str, float] = {}
    for g, qs in groups.items():
        if len(qs) == 1 and not parent_of(qs[0]):
            out[qs[0]] = top_share[g]
            continue
        inner = weighted_max_min(
            top_share[g], {q: demand[q] for q in qs}, {q: queue_weight(q) for q in qs}
        )
        out.update(inner)
    return out


def fair_shares(
    config: TenancyConfig,
    capacity: float,
    demand: Mapping[str, float],
    nominal: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Per queue, the fair share of one resource (e.g. GPUs) under ``config``.

    Dynamic mode: two-level weighted max-min of ``capacity`` capped by demand. Static mode:
    ``min(demand, nominal)`` where a nominal quota is given (``nominal``: queue -> amount in the
    same unit; missing queues fall back to their weighted share).
    """
    weights = {q.name: q.weight for q in config.queues}
    parents = {q.name: q.parent or "" for q in config.queues}

    def qw(q: str) -> float:
        return weights.get(q, 1.0)

    def parent(q: str) -> str:
        return parents.get(q, "")

    if config.mode == "static" and nominal:
        capped = {q: min(d, nominal.get(q, math.inf)) for q, d in demand.items()}
        rest = {q: d for q, d in demand.items() if q not in nominal}
        if rest:
            left = capacity - sum(v for q, v in capped.items() if q in nominal)
            capped.update(hierarchical_fair_shares(max(0.0, left), rest, qw, parent, qw))
        return capped
    return hierarchical_fair_shares(capacity, demand, qw, parent, qw)


def dominant_share(usage: Sequence[float], capacity: Sequence[float]) -> float:
    """Max over resources of usage / capacity (resources with no capacity ignored)."""
    best = 0.0
    for u, c in zip(usage, capacity, strict=True):
        if c > 0:
            s = u / c
            if s > best:
                best = s
    return best


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n * sum x^2); 1.0 = perfectly equal."""
    xs = [float(v) for v in values]
    if not xs:
        return 1.0
    sq = sum(x * x for x in xs)
    if sq == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sq)


def fair_share_series(
    config: TenancyConfig, capacity: float, demand: Mapping[str, Sequence[float]]
) -> dict[str, list[float]]:
    """Per queue, the fair share at every sample of a demand time series.

    ``demand`` maps each queue to its demand (e.g. milli-GPU asked by its arrived, unfinished
    pods) at the same sample instants; the result has the same layout. Time-average it with
    the sample widths to print "fair share" beside what each queue got.
    """
    queues = list(demand)
    length = len(next(iter(demand.values()), []))
    out: dict[str, list[float]] = {q: [] for q in queues}
    for k in range(length):
        shares = fair_shares(config, capacity, {q: float(demand[q][k]) for q in queues})
        for q in queues:
            out[q].append(shares.get(q, 0.0))
    return out
