"""Structured-parameters allocation of ResourceClaims on one node (kube-scheduler 1.34 rules).

Semantics follow ``k8s.io/dynamic-resource-allocation/structured``:

* a device fits a request if every selector of the request's DeviceClass and of the request
  itself (CEL, ``device.driver/attributes/capacity``) is true; a CEL runtime error (e.g. a
  missing attribute) aborts the attempt;
* ``ExactCount`` takes ``count`` devices; ``All`` takes every matching device reachable from
  the node, which must all be free, at least one (and fails if one of their pools is
  incomplete);
* ``firstAvailable``: the first alternative for which the whole rest of the search succeeds;
* ``matchAttribute`` constraints: all devices of the named requests (all requests if none are
  named) carry the attribute with one value;
* ``adminAccess`` requests may take devices in use and leave them free for others;
* partitionable devices: a device consumes counters of its pool's shared counter sets and
  fits only while every counter has enough left;
* a device is never given twice (in use by another claim, or earlier in this search).

The search is kube-scheduler's backtracking over combinations in device order. What differs
is the order: ``first-fit`` keeps kube-scheduler's (pool, slice, device) order and so takes
the first solution it finds; ``fragmentation-aware`` orders each request's candidates so that
the first solution is the one our placement policy prefers: the smallest device that fits,
on the most-used partitioned GPU (keeping whole GPUs whole), at the partition position that
blocks the fewest other partitions of that GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fairgpu.cluster.dra import CounterKey, DeviceKey, InUse, NodeDevices
from fairgpu.model.dra import (
    MODE_ALL,
    ClaimInfo,
    DeviceClassInfo,
    DeviceInfo,
    DeviceResult,
    RequestInfo,
)

FIRST_FIT = "first-fit"
FRAGMENTATION_AWARE = "fragmentation-aware"
POLICIES = (FIRST_FIT, FRAGMENTATION_AWARE)
# Combinations tried per node before giving up (kube-scheduler bounds it by a timeout).
MAX_STEPS = 20_000

# (class, request selectors, device) -> selected, or the CEL error evaluating them gave.
MatchCache = dict[tuple[str, object, DeviceInfo], bool | str]


class AllocationError(ValueError):
    """The claims cannot be allocated anywhere as written (bad CEL, unknown class, ...)."""


@dataclass(slots=True)
class _Constraint:
    requests: tuple[str, ...]
    attribute: str
    value: object = None
    count: int = 0

    def applies(self, req: RequestInfo) -> bool:
        return (
            not self.requests
            or req.result_name in self.requests
            or (bool(req.parent) and req.parent in self.requests)
        )


@dataclass(slots=True)
class _State:
    # Devices being allocated in this search -> the claims (indices) they go to, admin
    # access included: such a device is off limits to other requests (kube-scheduler's
    # allocatingDevices), and to admin requests of the same claim.
    owners: dict[DeviceKey, set[int]] = field(default_factory=dict)
    used: dict[CounterKey, dict[str, int]] = field(default_factory=dict)
    results: list[list[DeviceResult]] = field(default_factory=list)
    constraints: list[list[_Constraint]] = field(default_factory=list)
    steps: int = 0


class Allocator:
    """Allocates a pod's unallocated claims on one node (see the module doc)."""

    def __init__(
        self,
        claims: list[ClaimInfo],
        classes: Mapping[str, DeviceClassInfo],
        cache: MatchCache,
        policy: str = FRAGMENTATION_AWARE,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown DRA device policy {policy!r}; known: {POLICIES}")
        self.claims = claims
        self.classes = classes
        self.cache = cache
        self.policy = policy
        self.units = [(ci, r) for ci, c in enumerate(claims) for r in c.spec.requests]

    def allocate(self, node: NodeDevices, in_use: InUse) -> list[tuple[DeviceResult, ...]] | None:
        """One result tuple per claim (in claim order), or None if they do not all fit.

        Raises :class:`AllocationError` where kube-scheduler's allocator fails the attempt:
        a CEL runtime error on a device its first-fit search reaches (it evaluates selectors
        lazily, in device order, skipping devices in use), on any device an ``All`` request
        looks at, or an incomplete pool under an ``All`` request."""
        self.node = node
        self.in_use = in_use
        self._check_all_requests()
        self.strict = self.policy == FIRST_FIT
        self.saw_error = False
        found = self._search()
        if self.saw_error and not self.strict:
            # Devices whose selectors failed were skipped; kube-scheduler fails if its own
            # search order reaches one before a solution: replay that order to know.
            self.strict = True
            self._search()
            self.strict = False
            if found is not None:
                self._search()  # restore the policy's choice
                found = [tuple(r) for r in self.state.results]
        return found

    def _check_all_requests(self) -> None:
        """kube-scheduler sizes every ``All`` request (alternatives too) before searching."""
        for ci, req in self.units:
            for alt in req.alternatives or (req,):
                if alt.mode != MODE_ALL:
                    continue
                for driver, pool in sorted(self.node.incomplete):
                    raise AllocationError(
                        f"claim {self.claims[ci].key}, request {alt.result_name}: asks for all "
                        f"devices, but resource pool {driver}/{pool} is currently being updated"
                    )
                for d in self.node.devices:
                    self.matches(alt, d)

    def _search(self) -> list[tuple[DeviceResult, ...]] | None:
        self.state = _State(
            used={k: dict(v) for k, v in self.in_use.counters.items() if k in self.node.counters},
            results=[[] for _ in self.claims],
            constraints=[
                [_Constraint(reqs, attr) for reqs, attr in c.spec.constraints] for c in self.claims
            ],
        )
        if not self._unit(0):
            return None
        return [tuple(r) for r in self.state.results]

    # ---- matching -------------------------------------------------------------------------
    def matches(self, req: RequestInfo, device: DeviceInfo) -> bool:
        """Class and request selectors all select ``device`` (cached per device); raises
        :class:`AllocationError` on a CEL runtime error."""
        hit = self._match(req, device)
        if isinstance(hit, str):
            raise AllocationError(hit)
        return hit

    def _selected(self, req: RequestInfo, device: DeviceInfo) -> bool:
        """Like :meth:`matches`, but a device whose selectors fail is skipped (remembered)."""
        hit = self._match(req, device)
        if isinstance(hit, str):
            self.saw_error = True
            return False
        return hit

    def _match(self, req: RequestInfo, device: DeviceInfo) -> bool | str:
        key = (req.class_name, req.selectors, device)
        hit = self.cache.get(key)
        if hit is None:
            cls = self.classes.get(req.class_name)
            if cls is None:
                raise AllocationError(
                    f"request {req.result_name}: device class {req.class_name} does not exist"
                )
            try:
                variables = device.cel_input()
                hit = all(s.evaluate(variables) for s in (*cls.selectors, *req.selectors))
            except ValueError as error:
                hit = str(error)
            self.cache[key] = hit
        return hit

    # ---- search ---------------------------------------------------------------------------
    def _unit(self, u: int) -> bool:
        if u == len(self.units):
            return True
        ci, req = self.units[u]
        return any(self._request(u, ci, alt) for alt in req.alternatives or (req,))

    def _request(self, u: int, ci: int, req: RequestInfo) -> bool:
        if req.mode == MODE_ALL:
            return self._all(u, ci, req, [d for d in self.node.devices if self.matches(req, d)])
        # kube-scheduler skips devices in use before it evaluates selectors, so a CEL error
        # on a device in use does not count. In strict (kube order) mode selectors are
        # evaluated as the search reaches each device.
        usable = [d for d in self.node.devices if self._usable(ci, req, d)]
        if self.strict:
            return self._pick(u, ci, req, usable, 0, req.count)
        cands = [d for d in usable if self._selected(req, d)]
        if len(cands) < req.count:
            return False
        cands = self._preferred(ci, req, cands)
        return self._pick(u, ci, req, cands, 0, req.count)

    def _all(self, u: int, ci: int, req: RequestInfo, cands: list[DeviceInfo]) -> bool:
        if not cands:
            return False  # the API: "at least one device must exist on the node"
        done: list[DeviceInfo] = []
        for d in cands:
            if not self._take(ci, req, d, must=True):
                break
            done.append(d)
        else:
            if self._unit(u + 1):
                return True
        for d in reversed(done):
            self._drop(ci, req, d)
        return False

    def _pick(
        self, u: int, ci: int, req: RequestInfo, cands: list[DeviceInfo], start: int, left: int
    ) -> bool:
        if left == 0:
            return self._unit(u + 1)
        for i in range(start, len(cands) - left + 1):
            self.state.steps += 1
            if self.state.steps > MAX_STEPS:
                return False
            d = cands[i]
            if self.strict and not self.matches(req, d):
                continue
            if not self._take(ci, req, d):
                continue
            if self._pick(u, ci, req, cands, i + 1, left - 1):
                return True
            self._drop(ci, req, d)
        return False

    # ---- taking one device -----------------------------------------------------------------
    def _usable(self, ci: int, req: RequestInfo, d: DeviceInfo) -> bool:
        """Not in use for this request: admin access may share devices, but not one this
        claim is already getting."""
        if req.admin:
            return ci not in self.state.owners.get(d.key, ())
        return d.key not in self.in_use.devices and not self.state.owners.get(d.key)

    def _free(self, d: DeviceInfo) -> bool:
        if d.key in self.in_use.devices or self.state.owners.get(d.key):
            return False
        return self._counters_left(d)

    def _counters_left(self, d: DeviceInfo) -> bool:
        """Every counter ``d`` consumes has enough left (admin access too: kube-scheduler
        charges its counters while it searches)."""
        for set_name, amounts in d.consumes.items():
            ck = (d.driver, d.pool, set_name)
            total = self.node.counters.get(ck, {})
            used = self.state.used.get(ck, {})
            for counter, amount in amounts.items():
                if amount > total.get(counter, 0) - used.get(counter, 0):
                    return False
        return True

    def _take(self, ci: int, req: RequestInfo, d: DeviceInfo, must: bool = False) -> bool:
        if not self._usable(ci, req, d) or not self._counters_left(d):
            return False
        applied: list[_Constraint] = []
        for con in self.state.constraints[ci]:
            if not con.applies(req):
                continue
            value = d.attributes.get(con.attribute)
            same = (type(value), value) == (type(con.value), con.value)
            if value is None or (con.count and not same):
                for c in applied:
                    c.count -= 1
                if must:  # kube-scheduler: a claim whose constraint cannot hold all devices
                    raise AllocationError(
                        f"claim {self.claims[ci].key}, request {req.result_name}: cannot add "
                        f"device {d.driver}/{d.pool}/{d.name} because a claim constraint "
                        "would not be satisfied"
                    )
                return False
            con.value = value if con.count == 0 else con.value
            con.count += 1
            applied.append(con)
        self.state.owners.setdefault(d.key, set()).add(ci)
        self._count(d, +1)
        self.state.results[ci].append(
            DeviceResult(req.result_name, d.driver, d.pool, d.name, req.admin)
        )
        return True

    def _drop(self, ci: int, req: RequestInfo, d: DeviceInfo) -> None:
        self.state.results[ci].pop()
        for con in self.state.constraints[ci]:
            if con.applies(req):
                con.count -= 1
        self.state.owners[d.key].discard(ci)
        self._count(d, -1)

    def _count(self, d: DeviceInfo, sign: int) -> None:
        for set_name, amounts in d.consumes.items():
            used = self.state.used.setdefault((d.driver, d.pool, set_name), {})
            for counter, amount in amounts.items():
                used[counter] = used.get(counter, 0) + sign * amount

    # ---- fragmentation-aware order ---------------------------------------------------------
    def _preferred(self, ci: int, req: RequestInfo, cands: list[DeviceInfo]) -> list[DeviceInfo]:
        """Candidates in our preferred order (see the module doc); stable, so devices that
        compare equal keep kube-scheduler's order. First fit keeps that order."""
        if self.policy == FIRST_FIT:
            return cands
        free = [d for d in cands if self._usable(ci, req, d) and self._counters_left(d)]
        keyed = sorted(((self._fragment_key(d), i) for i, d in enumerate(free)))
        return [free[i] for _, i in keyed]

    def _fragment_key(self, d: DeviceInfo) -> tuple[float, float, int]:
        if not d.consumes:
            return (0.0, 0.0, 0)
        size = left = 0.0
        for set_name, amounts in d.consumes.items():
            ck = (d.driver, d.pool, set_name)
            total = self.node.counters.get(ck, {})
            used = self.state.used.get(ck, {})
            for counter, amount in amounts.items():
                cap = total.get(counter, 0) or 1
                size += amount / cap
                left += (cap - used.get(counter, 0) - amount) / cap
        return (round(size, 6), round(left, 6), self._blocked(d))

    def _blocked(self, d: DeviceInfo) -> int:
        """How many other free devices sharing ``d``'s counter sets would no longer fit."""
        group = {
            id(o): o
            for set_name in d.consumes
            for o in self.node.groups.get((d.driver, d.pool, set_name), ())
            if o is not d
        }
        before = [o for o in group.values() if self._free(o)]
        self._count(d, +1)
        self.state.owners.setdefault(d.key, set()).add(-1)
        try:
            return sum(1 for o in before if not self._free(o))
        finally:
            self.state.owners[d.key].discard(-1)
            self._count(d, -1)
