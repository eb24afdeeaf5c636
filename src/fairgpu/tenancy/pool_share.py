"""Pool-aware fair shares: a tenant's share of only the GPUs its work can actually use.

A cluster of node pools (training, inference, hybrid; several GPU models) is not one pot: a
training job cannot use an L4 inference node, and sharing all GPUs as if it could promises a
tenant a share that no scheduler can give. Here each *demand* names the pools it may use (from
its pods' load-independent filters: node pools, GPU models, selectors, taints) and the
fair shares are the **weighted max-min fair allocation subject to those pool constraints**:

- progressive filling: every tenant that still wants more rises at the same weighted level
  ``w_t * level`` (never above its demand) while some assignment of every tenant's amount to
  pools it may use still fits every pool's capacity (checked as a maximum flow
  source -> tenant -> demand class -> pool -> sink);
- when the level cannot rise further, the tenants that cannot grow (their demand is met, or
  they only use pools that are now full) keep their amount, and the others continue.

Within one contended pool whose tenants can use nothing else, this is the ordinary weighted
water-filling; a tenant confined to one pool gets no share of the others; spare capacity of a
pool goes to whoever can use it. The sum of the shares never exceeds what some placement (of
divisible amounts) achieves. Departments share first, then their tenants
(:func:`hierarchical_pool_shares`). Not modelled: gangs' all-or-nothing, fragmentation of
whole GPUs across nodes.

Amounts are integers of ``resolution`` units (milli-GPU in the simulator's reports).

Speed: with few pools (at most :data:`CUT_POOLS`) feasibility is checked by enumerating the
network's cuts instead of running a maximum flow -- by max-flow/min-cut the targets fit iff
for every set ``S`` of pools ``cap(S) >= sum_t max(0, target_t - out_t(S))``, where
``out_t(S)`` is how much of tenant ``t``'s demand may use a pool outside ``S`` -- one small
numpy expression per check, cheap enough for every scheduling cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from operator import is_

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import maximum_flow

# Up to this many pools, feasibility is checked over the 2**pools cuts (see the docstring).
CUT_POOLS = 10
# Up to this many (cut, tenant) entries, the cuts are checked without numpy (_Cuts.fits).
SMALL_CUTS = 64


@dataclass(frozen=True, slots=True)
class PoolDemand:
    """``amount`` wanted by ``tenant`` that may run on any pool in ``pools``."""

    tenant: str
    pools: frozenset[str]
    amount: int


class _Network:
    """source -> tenant -> (tenant, pools) class -> pool -> sink, with tenant edges set later."""

    def __init__(self, capacity: Mapping[str, int], classes: dict[tuple[str, frozenset[str]], int]):
        self.tenants = sorted({t for t, _ in classes})
        pools = sorted({p for _, ps in classes for p in ps if capacity.get(p, 0) > 0})
        nt, nc = len(self.tenants), len(classes)
        self.sink = 1 + nt + nc + len(pools)
        tix = {t: 1 + i for i, t in enumerate(self.tenants)}
        pix = {p: 1 + nt + nc + i for i, p in enumerate(pools)}
        big = int(sum(classes.values()) + 1)
        edges: list[tuple[int, int, int]] = []
        for k, ((tenant, ps), amount) in enumerate(sorted(classes.items(), key=_class_key)):
            c = 1 + nt + k
            edges.append((tix[tenant], c, int(amount)))
            edges.extend((c, pix[p], big) for p in ps if p in pix)
        edges.extend((i, self.sink, int(capacity[p])) for p, i in pix.items())
        rows, cols, caps = (list(x) for x in zip(*edges, strict=True)) if edges else ([], [], [])
        self._rows, self._cols, self._caps = rows, cols, caps
        self._tix = tix

    def flow(self, target: Mapping[str, int]) -> int:
        """The maximum flow when tenant ``t`` may send at most ``target[t]``."""
        rows = [0] * len(self.tenants) + self._rows
        cols = [self._tix[t] for t in self.tenants] + self._cols
        caps = [int(target.get(t, 0)) for t in self.tenants] + self._caps
        n = self.sink + 1
        graph = csr_array(
            (np.asarray(caps, dtype=np.int32), (np.asarray(rows), np.asarray(cols))), shape=(n, n)
        )
        return int(maximum_flow(graph, 0, self.sink).flow_value)

    def fits(self, target: Mapping[str, int]) -> bool:
        """True when every tenant's target can be placed at once."""
        return self.flow(target) >= sum(target.values())


class _Cuts:
    """The same feasibility question as :class:`_Network`, answered over all pool cuts."""

    def __init__(self, capacity: Mapping[str, int], classes: dict[tuple[str, frozenset[str]], int]):
        self.tenants = sorted({t for t, _ in classes})
        pools = sorted({p for _, ps in classes for p in ps if capacity.get(p, 0) > 0})
        bit = {p: 1 << i for i, p in enumerate(pools)}
        subsets = np.arange(1 << len(pools))
        cap = np.zeros(subsets.size, dtype=np.int64)
        for p, b in bit.items():
            cap[(subsets & b) != 0] += int(capacity[p])
        tix = {t: i for i, t in enumerate(self.tenants)}
        # out[S, t]: demand of t that may use some pool outside S.
        out = np.zeros((subsets.size, len(self.tenants)), dtype=np.int64)
        for (tenant, ps), amount in classes.items():
            mask = sum(bit[p] for p in ps if p in bit)
            out[(subsets & mask) != mask, tix[tenant]] += int(amount)
        self._cap, self._out = cap, out
        # A small table (few pools and tenants: the usual case, checked about 30 times per
        # solve) is read with Python integers -- numpy's per-call cost is most of a check
        # there; the same sums, exact either way.
        small = out.size <= SMALL_CUTS
        self._rows = list(zip(cap.tolist(), out.tolist(), strict=True)) if small else None

    def fits(self, target: Mapping[str, int]) -> bool:
        """True when every tenant's target can be placed at once."""
        if self._rows is not None:
            wants = [int(target.get(t, 0)) for t in self.tenants]
            for cap, outs in self._rows:
                forced = 0
                for w, o in zip(wants, outs, strict=True):
                    if w > o:
                        forced += w - o
                if forced > cap:
                    return False
            return True
        want = np.array([int(target.get(t, 0)) for t in self.tenants], dtype=np.int64)
        forced_all = np.maximum(want[None, :] - self._out, 0).sum(axis=1)
        return bool((forced_all <= self._cap).all())


def _class_key(item: tuple[tuple[str, frozenset[str]], int]) -> tuple[str, tuple[str, ...]]:
    (tenant, pools), _ = item
    return tenant, tuple(sorted(pools))


class _Together:
    """A feasibility check with one more constraint: ``members`` together get at most
    ``total`` (a department's limit, shared by its tenants)."""

    def __init__(self, net: _Network | _Cuts, members: Set[str], total: int) -> None:
        self.net, self.members, self.total = net, members, total

    def fits(self, target: Mapping[str, int]) -> bool:
        """True when the targets fit the pools and the members' sum fits ``total``."""
        together = sum(int(v) for t, v in target.items() if t in self.members)
        return together <= self.total and self.net.fits(target)


def pool_fair_shares(
    capacity: Mapping[str, int],
    demands: Iterable[PoolDemand],
    weight: Mapping[str, float] | None = None,
    fixed: Mapping[str, int] | None = None,
    caps: Mapping[str, int] | None = None,
    together: tuple[Set[str], int] | None = None,
) -> dict[str, int]:
    """Each tenant's weighted max-min fair share of ``capacity`` (pool -> amount) under the
    pool constraints of its ``demands``; never above its total demand nor its cap in
    ``caps`` (the most it may ever hold: a share beyond it no scheduler could give).
    Tenants missing from ``weight`` weigh 1. The tenants in ``fixed`` get that amount (at
    most their demand; it must fit) and the others share what is left around them.
    ``together``: a set of tenants and the most they get together."""
    weight = weight or {}
    caps = caps or {}
    classes: dict[tuple[str, frozenset[str]], int] = {}
    for d in demands:
        if d.amount > 0:
            key = (d.tenant, frozenset(d.pools))
            classes[key] = classes.get(key, 0) + int(d.amount)
    want: dict[str, int] = {}
    for (tenant, _), amount in classes.items():
        want[tenant] = want.get(tenant, 0) + amount
    for tenant, cap in caps.items():
        if tenant in want:
            want[tenant] = min(want[tenant], int(cap))
    if not want:
        return {}
    share = {t: min(int(v), want[t]) for t, v in (fixed or {}).items() if t in want}
    pools = {p for _, ps in classes for p in ps}
    pooled: _Network | _Cuts = (
        _Cuts(capacity, classes) if len(pools) <= CUT_POOLS else _Network(capacity, classes)
    )
    net = pooled if together is None else _Together(pooled, *together)
    if net.fits({**want, **share}):
        return {**want, **share}
    active = sorted(t for t in want if t not in share)
    level = 0.0
    while active:
        w = {t: max(float(weight.get(t, 1.0)), 1e-9) for t in active}
        level = _highest_level(net, share, active, want, w, level)
        target = _targets(share, active, want, w, level)
        frozen = _frozen(net, target, active, want, 1)
        if not frozen:
            # Each could still grow by one unit alone, yet the level cannot rise: tenants
            # sharing a full pool, each alone fitting the unit or so rounding left there.
            # Those are frozen by a step as large as the tenants growing together; the others
            # (pools with room) go on rising.
            frozen = _frozen(net, target, active, want, len(active))
        for t in frozen or active:  # no one can grow even so: integer rounding, stop here
            share[t] = target[t]
        active = [t for t in active if t not in share]
    return share


def hierarchical_pool_shares(
    capacity: Mapping[str, int],
    demands: Iterable[PoolDemand],
    weight: Mapping[str, float] | None = None,
    parent: Mapping[str, str] | None = None,
    caps: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """:func:`pool_fair_shares` over two levels: the departments (``parent``: tenant -> its
    department, weighted by ``weight`` like the tenants) and the tenants without one share
    ``capacity`` by weighted max-min under their tenants' pool constraints; then each
    department's amount is split among its tenants by weighted max-min, every other tenant
    and department held at what it got (departments already split, tenant by tenant).
    ``caps``: the most a tenant, or a department's tenants together, may ever hold.

    Flattening the departments into leaf weights (a department's weight split among its
    tenants) differs once a tenant's demand caps it: what it leaves goes to every tenant in
    proportion, not to its siblings first. Two departments of equal weight over 4 GPUs, each
    with a tenant asking a quarter of a GPU beside one that floods: flattened, the flooders'
    shares are 2.1 and 1.4 GPUs (leaf weights 1/2 and 1/3), where each department is owed 2
    and each flooder 1.75 -- and the reclaim order, which compares departments first, then
    refused a starved tenant its quarter from either flooder. With no department this is
    :func:`pool_fair_shares`."""
    demands = [d for d in demands if d.amount > 0]
    parent = parent or {}
    caps = caps or {}
    if not any(parent.get(d.tenant) for d in demands):
        return pool_fair_shares(capacity, demands, weight, caps=caps)

    def top(tenant: str) -> str:
        return parent.get(tenant) or tenant

    # A department's demand is its tenants', each within its own cap; its cap is its own.
    outer = pool_fair_shares(
        capacity,
        [PoolDemand(top(d.tenant), d.pools, d.amount) for d in _capped(demands, caps)],
        weight,
        caps=caps,
    )
    members: dict[str, set[str]] = {}
    for d in demands:
        members.setdefault(top(d.tenant), set()).add(d.tenant)
    share: dict[str, int] = {}
    split: set[str] = set()
    for group in sorted(members):
        inner = members[group]
        if len(inner) == 1:
            share[next(iter(inner))] = outer.get(group, 0)
            split.add(group)
            continue
        held: dict[str, int] = {}
        around: list[PoolDemand] = []
        for d in demands:
            owner = top(d.tenant)
            if owner == group:
                around.append(d)
            elif owner in split:
                around.append(d)
                held[d.tenant] = share[d.tenant]
            else:
                around.append(PoolDemand(owner, d.pools, d.amount))
                held[owner] = outer.get(owner, 0)
        limit = (inner, outer.get(group, 0)) if group in caps else None
        got = pool_fair_shares(capacity, around, weight, fixed=held, caps=caps, together=limit)
        share.update({t: got.get(t, 0) for t in inner})
        split.add(group)
    return share


def _capped(demands: Sequence[PoolDemand], caps: Mapping[str, int]) -> list[PoolDemand]:
    """``demands`` with each capped tenant's scaled down to its cap, in proportion over its
    sets of pools (which of them its cap binds in is not known before the split)."""
    total: dict[str, int] = {}
    for d in demands:
        total[d.tenant] = total.get(d.tenant, 0) + d.amount
    out = []
    for d in demands:
        cap = caps.get(d.tenant)
        if cap is not None and cap < total[d.tenant]:
            d = PoolDemand(d.tenant, d.pools, int(d.amount * cap / total[d.tenant]))
        out.append(d)
    return out


def _frozen(
    net: _Network | _Cuts | _Together,
    target: Mapping[str, int],
    active: Sequence[str],
    want: Mapping[str, int],
    step: int,
) -> list[str]:
    """The active tenants whose demand is met or that cannot grow by ``step`` units alone."""
    return [
        t for t in active if target[t] >= want[t] or not net.fits({**target, t: target[t] + step})
    ]


def _targets(
    share: Mapping[str, int],
    active: Sequence[str],
    want: Mapping[str, int],
    w: Mapping[str, float],
    level: float,
) -> dict[str, int]:
    out = dict(share)
    for t in active:
        out[t] = min(want[t], int(w[t] * level))
    return out


def _highest_level(
    net: _Network | _Cuts | _Together,
    share: Mapping[str, int],
    active: Sequence[str],
    want: Mapping[str, int],
    w: Mapping[str, float],
    low: float,
) -> float:
    """The highest weighted level (bisection) at which the active tenants still all fit."""
    high = max(want[t] / w[t] for t in active)
    if net.fits(_targets(share, active, want, w, high)):
        return high
    step = 0.5 / max(w.values())  # below one unit for every tenant
    while high - low > step:
        mid = (low + high) / 2
        if net.fits(_targets(share, active, want, w, mid)):
            low = mid
        else:
            high = mid
    return low


def node_pools(
    masks: Sequence[np.ndarray], gpus: np.ndarray
) -> tuple[list[np.ndarray], dict[int, frozenset[str]]]:
    """Split nodes into pools by which of ``masks`` (one boolean array over nodes per distinct
    placement constraint) admit them.

    Returns the pools (index arrays of nodes with GPUs and the same admitting masks) and, per
    mask index, the frozenset of pool ids (``"p0"``, ``"p1"``, ...) it may use.
    """
    if not masks:
        return [], {}
    table = np.stack([np.asarray(m, dtype=bool) for m in masks])  # masks x nodes
    signatures: dict[bytes, list[int]] = {}
    for node in np.flatnonzero(gpus > 0):
        signatures.setdefault(table[:, node].tobytes(), []).append(int(node))
    pools = [np.asarray(nodes) for _, nodes in sorted(signatures.items(), key=lambda kv: kv[1])]
    usable = {
        m: frozenset(f"p{i}" for i, nodes in enumerate(pools) if table[m, nodes[0]])
        for m in range(len(masks))
    }
    return pools, usable


#: A pod's (queue, mask key, mask computed lazily, GPU milli) by uid, or None: no GPU pod.
Describe = Callable[[str], tuple[str, object, Callable[[], np.ndarray], int] | None]


class PoolDemandIndex:
    """The GPU demand of every queue per set of pools it may use, kept across scheduling
    cycles so that a cycle pays only for the pods that arrived, started or left since the
    last one (plus set differences over uids at C speed).

    A pod's pools come from its load-independent node mask (``mask_of(pod)``, cached by
    ``key_of(pod)``); pools are the classes of GPU nodes admitted by the same masks
    (:func:`node_pools`), re-derived when a new mask appears or the nodes change
    (``version``).
    """

    def __init__(self) -> None:
        self._clear(None, np.zeros(0), np.zeros(0))

    def _clear(self, version: object, gpus: np.ndarray, milli: np.ndarray) -> None:
        self._version = version
        self._gpus, self._milli = gpus, milli
        self._masks: list[np.ndarray] = []
        self._by_bytes: dict[bytes, int] = {}
        self._by_key: dict[object, int] = {}
        self._usable: dict[int, frozenset[str]] = {}
        self.capacity: dict[str, int] = {}
        self._pods: dict[str, tuple[str, int, int]] = {}  # uid -> (queue, mask id, milli)
        # What the last :meth:`update` was told the pods came from (see :meth:`follow`).
        self._basis: tuple[object, ...] | None = None
        self._sums: dict[tuple[str, int], int] = {}
        self._cache: dict[tuple[object, ...], dict[str, int]] = {}
        self._last: tuple[list[PoolDemand], tuple[object, ...], dict[str, int]] | None = None

    def __getstate__(self) -> dict[str, object]:
        # A copy (the engine's state shipped to the forecasting process) follows no keepers:
        # they stay behind, and the copy's first update is given every uid.
        return {**self.__dict__, "_basis": None}

    def reset(self, version: object, gpus: np.ndarray, milli: np.ndarray) -> None:
        """Nodes as they are now: GPUs and GPU milli per node slot (0 where inactive). A new
        ``version`` forgets every pod and mask."""
        if version != self._version:
            self._clear(version, gpus, milli)

    def _mask_id(self, key: object, mask: Callable[[], np.ndarray]) -> int:
        got = self._by_key.get(key)
        if got is None:
            bits = np.asarray(mask(), dtype=bool)
            got = self._by_bytes.setdefault(bits.tobytes(), len(self._masks))
            if got == len(self._masks):
                self._masks.append(bits)
                self._partition()
            self._by_key[key] = got
        return got

    def _partition(self) -> None:
        pools, self._usable = node_pools(self._masks, self._gpus)
        self._cache.clear()
        self._last = None
        self.capacity = {f"p{i}": int(self._milli[nodes].sum()) for i, nodes in enumerate(pools)}

    def update(
        self, uids: Set[str], describe: Describe, basis: tuple[object, ...] | None = None
    ) -> None:
        """The pods that hold or want GPUs now are ``uids``; ``describe(uid)`` gives a new
        one's queue, mask key, mask (lazily) and GPU milli (None: not a GPU pod).
        ``basis``: the keepers ``uids`` came from, whose changes :meth:`follow` may then
        take instead of all uids (None: the uids came from nowhere that keeps them)."""
        for uid in self._pods.keys() - uids:
            self._drop(uid)
        for uid in uids - self._pods.keys():
            self._add(uid, describe)
        self._basis = basis

    def follow(
        self,
        basis: tuple[object, ...],
        touched: Iterable[str] | None,
        present: Callable[[str], bool],
        describe: Describe,
    ) -> bool:
        """:meth:`update` by the uids ``touched`` (added to or removed from the keepers
        ``basis``, by identity) since the last update, when that update was given the uids
        of the same keepers; ``present(uid)``: is it there now. False, changing nothing,
        when the last update was given other uids or ``touched`` is None (unknown).

        Exactly what :meth:`update` with every uid would do: a uid whose presence changed
        was added or removed since, so it is among ``touched``, and a pod the index holds
        keeps its first description in both (a pending pod that starts keeps its entry)."""
        last = self._basis
        if (
            touched is None
            or last is None
            or len(last) != len(basis)
            or not all(map(is_, last, basis))
        ):
            return False
        pods = self._pods
        for uid in touched:
            if present(uid):
                if uid not in pods:
                    self._add(uid, describe)
            elif uid in pods:
                self._drop(uid)
        return True

    def _add(self, uid: str, describe: Describe) -> None:
        got = describe(uid)
        if got is None:
            self._pods[uid] = ("", -1, 0)
            return
        queue, key, mask, milli = got
        mid = self._mask_id(key, mask)
        self._pods[uid] = (queue, mid, milli)
        self._sums[(queue, mid)] = self._sums.get((queue, mid), 0) + milli

    def _drop(self, uid: str) -> None:
        queue, mid, milli = self._pods.pop(uid)
        if mid >= 0:  # a pod without GPUs was never summed
            self._sums[(queue, mid)] -= milli

    def demands(self) -> list[PoolDemand]:
        """Each queue's GPU demand per set of pools (pods no pool can run left out)."""
        merged: dict[tuple[str, frozenset[str]], int] = {}
        for (queue, mid), milli in self._sums.items():
            pools = self._usable.get(mid, frozenset())
            if milli > 0 and queue and pools:
                merged[(queue, pools)] = merged.get((queue, pools), 0) + milli
        return [PoolDemand(q, p, a) for (q, p), a in sorted(merged.items(), key=_class_key)]

    def shares(
        self,
        weight: Mapping[str, float],
        parent: Mapping[str, str] | None = None,
        caps: Mapping[str, int] | None = None,
    ) -> dict[str, int]:
        """:func:`hierarchical_pool_shares` of the current demands (the last few answers
        cached: between cycles the demands often come back to an earlier state), or the last
        answer when only demands it capped below what they ask have moved
        (:func:`_same_answer`: a tenant capped below its demand leaves its department capped
        too, so the argument holds at both levels; a cap only lowers what a tenant asks)."""
        demands = self.demands()
        weights = (
            tuple(sorted(weight.items())),
            tuple(sorted((parent or {}).items())),
            tuple(sorted((caps or {}).items())),
        )
        key = (tuple(demands), weights)
        got = self._cache.get(key)
        if got is None and self._last is not None and self._last[1] == weights:
            got = _same_answer(self._last[0], demands, self._last[2])
        if got is None:
            if len(self._cache) >= 64:
                self._cache.clear()
            got = self._cache[key] = hierarchical_pool_shares(
                self.capacity, demands, weight, parent, caps
            )
        self._last = (demands, weights, got)
        return got

    def queue_demand(self) -> dict[str, int]:
        """Each queue's GPU milli held or pending, whatever the pools."""
        out: dict[str, int] = {}
        for (queue, _), milli in self._sums.items():
            if queue and milli > 0:
                out[queue] = out.get(queue, 0) + milli
        return out


#: How far (in units) a tenant's demand must stay above its share, before and after it
#: moves, for :func:`_same_answer` to keep the share: more than the solve's rounding.
CAPPED_MARGIN = 1000


def _same_answer(
    before: Sequence[PoolDemand], now: Sequence[PoolDemand], share: Mapping[str, int]
) -> dict[str, int] | None:
    """``share`` (the answer for ``before``) when it is also the answer for ``now``, else
    None.

    It is when the demands differ only in amounts of tenants that have one demand (one set
    of pools) and ask more than their share, before and after, by :data:`CAPPED_MARGIN`:
    such a tenant's share is set by the pools it shares, not by its demand, and the
    max-min fair allocation depends on a demand only through the smaller of it and the
    share (the allocation stays feasible and every tenant stays bottlenecked where it was).
    A flood's queue asks for one pod fewer each cycle, far above its share: no solve. A
    fresh solve can differ from the kept answer by its own rounding (one unit, the
    bisection's step), never more."""
    if len(before) != len(now):
        return None
    classes: dict[str, int] = {}
    for d in now:
        classes[d.tenant] = classes.get(d.tenant, 0) + 1
    for old, new in zip(before, now, strict=True):
        if old.tenant != new.tenant or old.pools != new.pools:
            return None
        if old.amount != new.amount:
            got = share.get(new.tenant, 0)
            if classes[new.tenant] != 1 or min(old.amount, new.amount) < got + CAPPED_MARGIN:
                return None
    return dict(share)
