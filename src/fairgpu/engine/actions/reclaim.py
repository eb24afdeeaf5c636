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
   reclaim --, and Q is below its own. A starved Q -- holding at most ``band x`` its own
   share, apart from the members of the job it places (:func:`band_for`) -- is judged with
   no band: it is not near its share. Otherwise the band kept a small queue out for good
   beside one flooding the cluster (a quarter of a GPU asked of 8: its share 3.1%, the
   flood's 96.9% with a margin of 4.8%), or beside two that each held half of 32 GPUs (half
   a GPU above their shares, the margin 0.8 GPU): it waited until their pods ended of
   themselves, however long they ran. (On the fairness benchmark's realistic suite no move
   changed.)
3. Q stays at or below its fair share after the move,
4. ``key(Q) < key(V)`` before the move and ``key(Q) <= key(V)`` after it (victims removed,
   preemptor added), where ``key`` is :func:`reclaim_key` -- (borrowing beyond nominal
   quota?, department share, queue share), instantaneous, without history; the queue share
   breaks a tie only inside one department (:func:`comes_before`).

**Relocation.** Victims that run elsewhere at once (:mod:`~fairgpu.engine.actions.relocate`:
pods of a queue Q may not reclaim from, which fit now on nodes Q's pod may not use) leave their
queue holding what it held: such a move is judged by rules 3-4 alone
(:func:`reclaim_refusal`'s ``moved``).

**A gang is one preemptor.** ``vec`` is everything Q holds more once the move is done: for a
member of a pod group, the members the group still needs, not the member alone
(:meth:`~fairgpu.engine.actions.preempt.FairVictims._end_vector`). The group starts whole or
not at all; judged alone, a member could keep Q within its share while its siblings, landing
on free GPUs or on the room its victims' torn-down group leaves, take Q above it -- on the
built-in demo (seed 2) two gangs started by reclaim took their queues to 1.17x and 1.49x
their share that way, before this rule. What the rules read *before* the move -- V within
its quota or borrowing (the quota rule, rule 1), V above the band (2), Q below its share and
first in order (2, 4), Q starved -- is read as the queues stood before the group's first
member landed (:data:`Before`): otherwise the first members' victims move the line for the
rest, and a group within its nominal quota had three of four members placed and the fourth
refused, its lender then at its quota (fairness benchmark, demo seeds 0-7: lowest share
ratio .704/.740/.762 -> .768/.755/.777 on seeds 0, 2 and 4, the others unchanged; mean
useful allocation 72.07 -> 71.87%, lost GPU time 1.53 -> 1.67% of capacity).

**Pool-aware shares.** In the fair cycle the shares come from :func:`deserved_shares` with the
session: a queue with GPU work is judged by the GPUs it holds against its pool-aware fair share
(:func:`~fairgpu.tenancy.pool_share.pool_fair_shares`: weighted max-min over the pools its held
and pending pods may use, the computation the simulator's report uses), both as fractions of
the cluster's GPUs. A training queue confined to the A100 pools is then over or under its share
of those pools, whatever the L4 pool does; ``key`` compares the same held amounts (weighted),
so rule 4 keeps max-min's order: the preemptor never ends up with more than the victim. Queues
without GPU work keep the dominant-resource shares of the whole cluster. The argument below
holds for either measure: it only uses that each queue is judged by one measure ``held``
against one ``share``.

**Coarse jobs stay below their share.** Rule 3 keeps a queue whose waiting jobs are all larger
than what it lacks below its share (the fairness benchmark's "locked" deficit: about half of
the lowest tenant's on the built-in demo). Letting such a move end above the share was
measured on ``benchmarks/fairness`` (demo seeds 0-7, the pool, flood and flexible-and-confined
mixes; means of useful allocation, lost GPU time, lowest share ratio: 72.66%, 1.32%, 0.747
with the rules above), in place of rules 3 and 4 after the move when the preemptor would end
above its share: the move raises the lower of the two queues' share ratios (the victim's
after it above the preemptor's before it -- a leximin step, so no cycle) and the GPUs in use
grow, 72.85%, 1.42%, 0.750 -- flexible-and-confined 76.1 -> 80.7% useful, 0.707 -> 0.741, but
the demo's lowest ratio down on three seeds of eight (0.721/0.762/0.589 -> 0.627/0.742/0.533);
with the preemptor's ratio after it at most the victim's after it, 72.36%, 1.37%, 0.739; at
most the victim's before it, 71.88%, 1.39%, 0.731; the leximin step alone took the pool mix's
lowest ratio from 0.841 to 0.640 and the demo's (seed 2) useful allocation from 76.1 to 66.4%.
A queue that overshoots holds the extra for a training job's hours, and the queues it took
from are the ones then locked below their shares. Keeping each victim queue at 0.9x its share
or more after the move (with the leximin step and the GPUs in use growing, as above): demo
seeds 0/1/2 lowest ratio .768/.721/.755 -> .776/.648/.718 (seed 2 lost GPU time 1.32 ->
3.07%), the demo under departments .756 -> .814, flexible-and-confined useful 76.09 -> 71.68%
and lowest .707 -> .593 -- whenever a training job ended, the flexible queue's waiting pods
took its node and the next training job reclaimed it (15 preemptions instead of 5).
Paying for the overshoot in advance does not change that (deficit round robin: a queue earns
credit, its shortfall x time, while below its share -- or only while every waiting job of it
is larger than its gap --, may end above its share when the credit covers the excess x the
job's declared run time, spends it, and its job is protected from reclaim for that time):
demo seeds 0/1/2 lowest ratio .704/.721/.740 -> .770/.603/.702 (the largest queue, 0.92x
its share, spent its credit and took seed 1's lowest to 0.60x), lost GPU time on seed 0 1.31
-> 3.41%, flexible-and-confined useful 76.1 -> 78.3% but lost 0.9 -> 4.0%, pool mix unchanged
within 0.02; capping the credit at 180 or 720 share-seconds changed none of that. Letting
the preemptor end above its share when it ends nearer it than it stood (the overshoot less
than the shortfall) and every victim queue at or above its own share after the move, rule 4
after the move then waived (the victim cannot take back: it is not below its share): demo
seeds 0/1/2 lowest ratio .768/.721/.755 -> .699/.627/.731, seed 2 useful 74.7 -> 68.8%, the
other mixes unchanged -- flexible-and-confined too: there the training queue's job needs a
node on which the flexible queue holds five pods, and taking them leaves that queue below
its share.

No preemption cycles (under the same state: the victims pending again, nothing else
changed). After a quota-guarantee move Q is within its nominal quota, so V can take nothing
back: the quota rule needs Q borrowing, the fair-share rule (1) refuses a queue within its
quota. After a fair-share move, reclaiming back would need ``key(V) < key(Q)``, contradicting
(4), and Q above its share (by the band, or at all for a starved V), contradicting (3)
(the move turns Q's pending demand into usage and V's usage into pending demand, so neither
share changes).

No flipping over time. Shares move as work arrives and ends, so the argument above does not
bound what happens a few cycles later; three settings of
:class:`~fairgpu.tenancy.config.Preemption` do: a reclaim victim must have run at least
``reclaimMinRuntimeSeconds``; the band (``reclaimToleranceBand``) keeps a queue near its
share out of reach; and the GPUs (node, device) a reclaim freed or took are recorded in
:class:`~fairgpu.engine.session.EngineState` at the cycle's ``now``, and for
``reclaimCooldownSeconds`` no pod placed on them since is a reclaim victim. So no reclaim
over the same GPUs can follow a reclaim -- in the opposite direction or any other -- within
the cooldown: the second reclaim's victims sit on GPUs the first one recorded. A GPU shared
by fractions changes tenant by the part: a pod that shared it before the reclaim (beside the
victim) kept its part and stays a victim like any other
(:func:`~fairgpu.engine.actions.victim_eligibility.cooling`); its queue taking the moved
part back is still a reversal on the node (below). Holding every pod on the GPU back kept a
starved queue from a quarter that never moved, for the whole cooldown.

The same holds per node and direction (:func:`reverses`): after Q reclaimed from V on node N,
V takes none of Q's pods on N by reclaim for ``reclaimCooldownSeconds`` (the bound included),
not even those on other GPUs of N that Q got without a reclaim (a GPU freed by a pod that
ended). Otherwise the node would change hands back between the same two queues within the
cooldown -- what the fairness benchmark counts as a reversal (on the built-in demo, seed 0,
once the reservation rule of :mod:`~fairgpu.engine.actions.reserve` changed the schedule: a
queue took four GPUs of a node, 572 s later the other took back a fifth).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping

import numpy as np

from fairgpu.cluster.state import COL_GPU_MILLI
from fairgpu.engine.actions.order import Lanes
from fairgpu.engine.session import EngineState, Session
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.book import QueueBook
from fairgpu.tenancy.config import DIM_GPU, Preemption
from fairgpu.tenancy.fairshare import hierarchical_fair_shares
from fairgpu.tenancy.pool_share import Describe

# (borrowing beyond nominal?, department share, queue share, department): see reclaim_key.
ReclaimKey = tuple[int, float, float, str]
# Per queue, what the cycle changed before the move being judged that the move must be judged
# without: a gang is one preemptor, so its later members are judged as the queues stood
# before its first landed (its own queue without the members placed, each victim queue with
# what earlier members took back). Empty for a pod alone.
Before = Mapping[str, np.ndarray]
EPS = 1e-9


def reclaim_key(
    book: QueueBook, queue: str, deltas: Mapping[str, np.ndarray] | None = None
) -> ReclaimKey:
    """The order reclaim respects: (borrowing beyond nominal?, department share, queue
    share, department), instantaneous; ``deltas`` applies hypothetical changes (queue ->
    vector). Compare keys with :func:`comes_before`: the queue share breaks a tie only
    between queues of one department."""
    d = (deltas or {}).get(queue)
    return (
        0 if book.within_nominal(queue, d) else 1,
        book.top_share(queue, deltas),
        book.queue_share(queue, d),
        book.queue_limits(queue).parent,
    )


def comes_before(a: ReclaimKey, b: ReclaimKey) -> bool:
    """Does key ``a`` come strictly before ``b`` in reclaim order? By borrowing, then by
    department share; by queue share only inside one department (a queue without one is
    its own top level). Two departments at the same share are level whatever their queues
    hold: a queue's share is weighed by its weight inside its department, which says nothing
    about another department's queues -- comparing them let a starved department's gang
    "pass" a victim department it only drew level with."""
    if a[:2] != b[:2]:
        return a[:2] < b[:2]
    return a[3] == b[3] and a[2] < b[2]


class PoolShares(dict[str, float]):
    """Fair shares per queue, as fractions of the cluster: for the queues in ``gpu_queues``
    their pool-aware GPU share (compared with the GPUs they hold), for the others their
    whole-cluster dominant-resource share (compared with their dominant share)."""

    def __init__(self, shares: Mapping[str, float], gpu_queues: set[str], gpu_cap: float):
        super().__init__(shares)
        self.gpu_queues = gpu_queues
        self.gpu_cap = gpu_cap


def held(
    book: QueueBook, deserved: Mapping[str, float], queue: str, delta: np.ndarray | None = None
) -> float:
    """What ``queue`` holds (``delta`` added) in the unit of its share in ``deserved``."""
    used = book.used(queue) if delta is None else book.used(queue) + delta
    if isinstance(deserved, PoolShares) and queue in deserved.gpu_queues:
        return float(used[DIM_GPU]) / max(deserved.gpu_cap, EPS)
    return book.dominant(used)


def share_key(
    book: QueueBook,
    deserved: Mapping[str, float],
    queue: str,
    deltas: Mapping[str, np.ndarray] | None = None,
) -> ReclaimKey:
    """:func:`reclaim_key` in the unit of ``deserved`` (:func:`held`): (borrowing beyond
    nominal?, department's held ÷ its weight, queue's held ÷ its weight, department);
    compared with :func:`comes_before`."""
    if not isinstance(deserved, PoolShares):
        return reclaim_key(book, queue, deltas)
    deltas = deltas or {}
    mine = held(book, deserved, queue, deltas.get(queue)) / book.weight(queue)
    top = mine
    parent = book.queue_limits(queue).parent
    if parent:
        # A sibling the move gives its first pods is in ``deltas``, not yet in the book.
        siblings = {q for q in {*book.usage, *deltas} if book.queue_limits(q).parent == parent}
        siblings.add(queue)
        total = sum(held(book, deserved, q, deltas.get(q)) for q in siblings)
        top = total / book.parent_weight(parent)
    return (0 if book.within_nominal(queue, deltas.get(queue)) else 1, top, mine, parent)


def below_share(
    book: QueueBook, deserved: Mapping[str, float], queue: str, before: Before | None = None
) -> bool:
    """Does ``queue`` hold less than its fair share (as it stood ``before``)?"""
    return held(book, deserved, queue, _at(before, queue)) < deserved.get(queue, 0.0) - EPS


def _at(before: Before | None, queue: str) -> np.ndarray | None:
    return None if before is None else before.get(queue)


def quota_guarantee(
    book: QueueBook, queue: str, vec: np.ndarray, other: str, before: Before | None = None
) -> bool:
    """The quota rule: ``queue`` stays within its nominal quota with ``vec`` added and
    ``other`` borrows beyond its own (as it stood ``before``)."""
    return book.within_nominal(queue, vec) and not book.within_nominal(other, _at(before, other))


def above_band(
    book: QueueBook,
    deserved: Mapping[str, float],
    queue: str,
    band: float,
    before: Before | None = None,
) -> bool:
    """``queue`` holds (as it stood ``before``) more than ``(1 + band) x`` its fair share."""
    mine = held(book, deserved, queue, _at(before, queue))
    return mine > deserved.get(queue, 0.0) * (1.0 + band) + EPS


def band_for(
    band: float, book: QueueBook, deserved: Mapping[str, float], queue: str, before: Before | None
) -> float:
    """The tolerance band ``queue``'s reclaims are judged with (rule 2): ``band``, or 0
    while ``queue`` is starved -- holding at most ``band x`` its fair share as it stood
    ``before`` the job being placed (a gang is one preemptor; None: as it stands)."""
    owed = deserved.get(queue, 0.0)
    mine = held(book, deserved, queue, _at(before, queue))
    return 0.0 if owed > EPS and mine <= band * owed + EPS else band


def reclaim_refusal(
    book: QueueBook,
    queue: str,
    vec: np.ndarray,
    victims: list[PodInfo],
    deserved: Mapping[str, float] | None = None,
    band: float = 0.0,
    moved: Container[str] = (),
    before: Before | None = None,
) -> str | None:
    """None if ``queue`` may take ``vec`` by evicting ``victims`` (the rules of the module
    docstring; victims of ``queue`` itself are not judged here), else the rule that refuses.
    ``before``: the queues as they stood before the preemptor's job began (:data:`Before`).
    ``victims`` is everything that goes: the fair victim search hands in every member of a
    pod group the move breaks, so the rule sees the real end state.
    Without ``deserved``, fair shares are computed from usage alone (``vec`` as ``queue``'s
    only pending demand). ``moved``: victims that run elsewhere at once
    (:mod:`~fairgpu.engine.actions.relocate`): their queue keeps what they hold, and a queue
    all of whose victims move is judged by the relocation rule."""
    by_queue: dict[str, np.ndarray] = {}
    for v in victims:
        entry = book.entries.get(v.uid)
        if entry is None:
            return f"victim {v.key} is not accounted to any queue"
        q = entry.tenant.queue
        if q != queue:
            kept = by_queue.get(q, np.zeros_like(vec))
            by_queue[q] = kept if v.uid in moved else kept - entry.vec
    if not by_queue:
        return None
    if deserved is None:
        deserved = usage_shares(book, queue, vec)
    deltas = dict(by_queue)
    deltas[queue] = vec.copy()
    for v_queue in sorted(by_queue):
        if quota_guarantee(book, queue, vec, v_queue, before):
            continue
        # No change to v_queue's holding: every victim of it runs elsewhere.
        moving = not by_queue[v_queue].any()
        why = _fair_refusal(book, deserved, band, queue, v_queue, deltas, moving, before)
        if why is not None:
            return why
    return None


def refused_whatever_the_victims(
    book: QueueBook,
    queue: str,
    vec: np.ndarray,
    other: str,
    deserved: Mapping[str, float],
    band: float = 0.0,
    relocating: bool = False,
    before: Before | None = None,
) -> str | None:
    """The rule that refuses ``queue`` taking ``vec`` by evicting any pods of ``other``,
    when it does not depend on which pods: the quota rule does not apply and one of rules
    1-3, or 4 before the move, fails (:func:`reclaim_refusal` names it so for every such
    move); None when some victims might pass. ``relocating``: the victims run elsewhere
    (:mod:`~fairgpu.engine.actions.relocate`), so only the preemptor's rules apply."""
    if quota_guarantee(book, queue, vec, other, before):
        return None
    if relocating:
        return _preemptor_aside(book, deserved, queue, other, vec, before)
    return _victims_aside(book, deserved, band, queue, other, vec, before)


def _victims_aside(
    book: QueueBook,
    deserved: Mapping[str, float],
    band: float,
    queue: str,
    other: str,
    vec: np.ndarray,
    before: Before | None = None,
) -> str | None:
    """Rules 1-3 of the fair-share reclaim for victims of ``other``, and 4 before the move:
    none depends on which victims. Rules 1, 2 and 4 read the queues as they stood
    ``before``; rule 3 the preemptor's end state."""
    if book.within_nominal(other, _at(before, other)):
        return f"queue {other!r} is within its nominal quota"
    if not above_band(book, deserved, other, band, before):
        # A starved preemptor is judged with no band (band_for): say so plainly.
        margin = f" by more than the band ({band:g})" if band else ""
        return (
            f"queue {other!r} is not above its fair share{margin}: "
            f"it holds {held(book, deserved, other, _at(before, other)):.1%} of the cluster, "
            f"its fair share is {deserved.get(other, 0.0):.1%}"
        )
    return _preemptor_aside(book, deserved, queue, other, vec, before)


def _preemptor_aside(
    book: QueueBook,
    deserved: Mapping[str, float],
    queue: str,
    other: str,
    vec: np.ndarray,
    before: Before | None = None,
) -> str | None:
    """Rule 3 of the fair-share reclaim, and 4 before the move: what the preemptor's queue
    must meet whoever the victims are (below its share and first in order as the queues
    stood ``before``; within its share at the end)."""
    after = held(book, deserved, queue, vec)
    if not below_share(book, deserved, queue, before):
        return f"queue {queue!r} is not below its fair share"
    if after > deserved.get(queue, 0.0) + EPS:
        return f"queue {queue!r} would exceed its fair share after the move"
    mine = share_key(book, deserved, queue, before)
    if not comes_before(mine, share_key(book, deserved, other, before)):
        return f"queue {queue!r} does not come before {other!r} in reclaim order"
    return None


def _fair_refusal(
    book: QueueBook,
    deserved: Mapping[str, float],
    band: float,
    queue: str,
    other: str,
    deltas: dict[str, np.ndarray],
    relocating: bool = False,
    before: Before | None = None,
) -> str | None:
    """Rules 1-4 of the fair-share reclaim for victims of ``other``; rules 3-4 only when
    they all run elsewhere (``relocating``: :mod:`~fairgpu.engine.actions.relocate`),
    ``other`` keeping what it holds."""
    vec = deltas[queue]
    if relocating:
        why = _preemptor_aside(book, deserved, queue, other, vec, before)
    else:
        why = _victims_aside(book, deserved, band, queue, other, vec, before)
    return why if why is not None else _order_after(book, deserved, queue, other, deltas)


def _order_after(
    book: QueueBook,
    deserved: Mapping[str, float],
    queue: str,
    other: str,
    deltas: dict[str, np.ndarray],
) -> str | None:
    """Rule 4 after the move: ``queue`` does not pass ``other`` in reclaim order."""
    theirs = share_key(book, deserved, other, deltas)
    if comes_before(theirs, share_key(book, deserved, queue, deltas)):
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
    book: QueueBook,
    deserved: Mapping[str, float],
    queue: str,
    other: str,
    band: float = 0.0,
    before: Before | None = None,
) -> bool:
    """The queue-level pre-screen: the quota rule could apply (``queue`` within its nominal
    quota, ``other`` borrowing), or the fair-share rule could (``other`` outside its quota and
    above its share by more than ``band``, ``queue`` below its own, ``key(queue) <
    key(other)``) -- the queues as they stood ``before`` the preemptor's job."""
    mine = share_key(book, deserved, queue, before)
    theirs = share_key(book, deserved, other, before)
    if not comes_before(mine, theirs):
        return False
    if mine[0] == 0 and theirs[0] == 1:
        return True
    if theirs[0] == 0:
        return False
    below = below_share(book, deserved, queue, before)
    return below and above_band(book, deserved, other, band, before)


def note_reclaims(
    state: EngineState, queue: str, flows: Iterable[tuple[str, str]], now: float
) -> None:
    """``queue`` reclaimed from each ``(node, victim queue)`` of ``flows`` at ``now``."""
    for node, victim in flows:
        state.reclaimed[(node, queue, victim)] = now


def reverses(
    state: EngineState, node: str, victim: str, queue: str, now: float, cfg: Preemption
) -> bool:
    """Would ``queue`` reclaiming pods of ``victim`` on ``node`` undo, within
    ``reclaimCooldownSeconds``, a reclaim ``victim`` made from ``queue`` on that node? (Then
    the victim is held back until the cooldown has passed; old entries are forgotten here.)"""
    when = state.reclaimed.get((node, victim, queue))
    if when is None:
        return False
    if now - when <= cfg.reclaim_cooldown_seconds:
        return True
    del state.reclaimed[(node, victim, queue)]
    return False


def usage_shares(book: QueueBook, queue: str, vec: np.ndarray) -> dict[str, float]:
    """Fair shares when nothing is pending but ``vec`` for ``queue``."""
    demand = {q: book.dominant(u) for q, u in book.usage.items()}
    demand[queue] = book.dominant(book.used(queue) + vec)
    return _shares(book, demand)


def deserved_shares(
    book: QueueBook, queues: Lanes, session: Session | None = None
) -> dict[str, float]:
    """Each queue's fair share as a fraction of the cluster, capped by its demand (what it
    holds plus everything it has pending). Without ``session``: two-level weighted max-min
    of dominant-resource shares over the whole cluster. With it: :class:`PoolShares` --
    queues with GPU work get their pool-aware GPU share (:func:`pool_gpu_shares`), the
    others their dominant share of what the GPU queues' demand leaves."""
    if session is None:
        return _shares(book, _dominant_demand(book, queues))
    gpu_cap = float(book.capacity[DIM_GPU])
    gpu = pool_gpu_shares(session, queues) if gpu_cap > 0 else {}
    # Queues that hold or want GPUs are judged by their pool-aware shares, also when none
    # of their pods fits any pool (each is owed nothing then, not a share of the cluster).
    wanted = session.state.pool_demand.queue_demand() if gpu_cap > 0 else {}
    if not wanted:
        return _shares(book, _dominant_demand(book, queues))
    demand = _dominant_demand(book, queues, skip=set(wanted))
    demand.update({q: m / gpu_cap for q, m in wanted.items()})
    shares = _shares(book, demand)
    shares.update({q: gpu.get(q, 0) / gpu_cap for q in wanted})
    return PoolShares(shares, set(wanted), gpu_cap)


def _dominant_demand(
    book: QueueBook, queues: Lanes, skip: set[str] | None = None
) -> dict[str, float]:
    """Dominant share of what each queue (except ``skip``) holds plus has pending."""
    skip = skip or set()
    demand: dict[str, float] = {}
    for q, users in queues.items():
        if q in skip:
            continue
        vec = book.used(q).copy()
        for lst in users.values():
            for job in lst:
                if job.tenant.error is not None:
                    continue  # its queue does not exist: never tried, it wants nothing
                for p in job.pods:
                    vec += book.pending_vector(p)
        demand[q] = book.dominant(vec)
    for q, used in book.usage.items():
        if q not in demand and q not in skip:
            demand[q] = book.dominant(used)
    return demand


def pool_gpu_shares(session: Session, queues: Lanes) -> dict[str, int]:
    """Each queue's pool-aware fair share of GPUs (milli): weighted max-min over the pools
    its held and pending GPU pods may use (their load-independent filters), updated
    incrementally (:class:`~fairgpu.tenancy.pool_share.PoolDemandIndex`). Queue weights;
    departments share first by their own weights, then each department's amount is shared
    among its queues (:func:`~fairgpu.tenancy.pool_share.hierarchical_pool_shares`), as
    the reclaim order compares departments before queues (:func:`share_key`); never above
    what a queue or department may hold (:meth:`~fairgpu.tenancy.book.QueueBook.gpu_caps`)."""
    cluster, book, scheduler = session.cluster, session.book, session.scheduler
    n = cluster.size
    index = session.state.pool_demand
    gpus = np.where(cluster.active[:n], cluster.gpu_count[:n], 0)
    index.reset((id(cluster), cluster.static_version), gpus, cluster.allocatable[:n, COL_GPU_MILLI])
    pending = session.pending_pods  # kept by the engine's backlog, else from the lanes
    if pending is None:
        pending = {
            p.uid: p
            for users in queues.values()
            for jobs in users.values()
            for j in jobs
            for p in j.pods
        }

    def describe(uid: str) -> tuple[str, object, Callable[[], np.ndarray], int] | None:
        pod = pending.get(uid) or cluster.pods.get(uid)
        if pod is None or not pod.gpu.count:
            return None
        entry = book.entries.get(uid)
        tenant = book.resolver.resolve(pod)
        if entry is None and tenant.error is not None:
            # Pending with no queue to take it (its queue does not exist): it is never
            # tried, so it wants nothing -- counted, it took a share from every real queue.
            return None
        milli = entry.vec[DIM_GPU] if entry is not None else book.pending_vector(pod)[DIM_GPU]
        least = pod.gpu.count  # nodes with at least as many GPUs (a share: on each of them)

        def mask() -> np.ndarray:
            return scheduler.static_mask(pod, cluster)[:n] & (gpus >= least)

        return tenant.queue, (pod.static_key(), least), mask, int(milli)

    _update_demand(session, pending, describe)
    demand = index.queue_demand()
    weight, parent = _hierarchy(book, demand)
    return index.shares(weight, parent, book.gpu_caps(demand))


def _update_demand(session: Session, pending: Mapping[str, PodInfo], describe: Describe) -> None:
    """Tell the pool demand index which pods hold or want GPUs: by what the book and the
    engine's backlog added and removed since the last cycle when ``pending`` is the
    backlog's own pods (:meth:`~fairgpu.tenancy.pool_share.PoolDemandIndex.follow`), else
    by every uid. The changes are taken in every cycle, so they never pile up."""
    book, backlog, index = session.book, session.backlog, session.state.pool_demand
    held = book.entries
    touched = book.touched.take()
    waiting = backlog.touched.take() if backlog is not None else None
    if backlog is None or pending is not backlog.pods:
        index.update(pending.keys() | held.keys(), describe)
        return
    changed = None if touched is None or waiting is None else touched | waiting
    basis = (book, backlog)
    if not index.follow(basis, changed, lambda uid: uid in pending or uid in held, describe):
        index.update(pending.keys() | held.keys(), describe, basis)


def _hierarchy(
    book: QueueBook, queues: Mapping[str, int]
) -> tuple[dict[str, float], dict[str, str]]:
    """The weights of ``queues`` and of their departments, and each queue's department (for
    :func:`~fairgpu.tenancy.pool_share.hierarchical_pool_shares`)."""
    weight: dict[str, float] = {}
    parent: dict[str, str] = {}
    for q in queues:
        weight[q] = book.weight(q)
        dept = book.queue_limits(q).parent
        if dept:
            parent[q] = dept
            weight[dept] = book.parent_weight(dept)
    return weight, parent


def _shares(book: QueueBook, demand: dict[str, float]) -> dict[str, float]:
    return hierarchical_fair_shares(
        1.0,
        demand,
        book.weight,
        lambda q: book.queue_limits(q).parent,
        book.parent_weight,
    )
