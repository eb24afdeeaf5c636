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

MatchCache = dict[tuple[str, object, DeviceInfo], bool]


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
    taken: set[DeviceKey] = field(default_factory=set)
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
        """One result tuple per claim (in claim order), or None if they do not all fit."""
        self.node = node
        self.in_use = in_use
        self.state = _State(
            used={k: dict(v) for k, v in in_use.counters.items() if k in node.counters},
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
        """Class and request selectors all select ``device`` (cached per device)."""
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
                raise AllocationError(str(error)) from None
            self.cache[key] = hit
        return hit

    # ---- search ---------------------------------------------------------------------------
    def _unit(self, u: int) -> bool:
        if u == len(self.units):
            return True
        ci, req = self.units[u]
        return any(self._request(u, ci, alt) for alt in req.alternatives or (req,))

    def _request(self, u: int, ci: int, req: RequestInfo) -> bool:
        cands = [d for d in self.node.devices if self.matches(req, d)]
        if req.mode == MODE_ALL:
            return self._all(u, ci, req, cands)
        if len(cands) < req.count:
            return False
        if self.policy == FRAGMENTATION_AWARE:
            cands = self._preferred(cands)
        return self._pick(u, ci, req, cands, 0, req.count)

    def _all(self, u: int, ci: int, req: RequestInfo, cands: list[DeviceInfo]) -> bool:
        if not cands:
            return False  # the API: "at least one device must exist on the node"
        for d in cands:
            if (d.driver, d.pool) in self.node.incomplete:
                raise AllocationError(
                    f"claim {self.claims[ci].key}, request {req.result_name}: asks for all "
                    f"devices, but resource pool {d.driver}/{d.pool} is currently being updated"
                )
        done: list[DeviceInfo] = []
        for d in cands:
            if not self._take(ci, req, d):
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
            if not self._take(ci, req, d):
                continue
            if self._pick(u, ci, req, cands, i + 1, left - 1):
                return True
            self._drop(ci, req, d)
        return False

    # ---- taking one device -----------------------------------------------------------------
    def _free(self, d: DeviceInfo) -> bool:
        if d.key in self.in_use.devices or d.key in self.state.taken:
            return False
        for set_name, amounts in d.consumes.items():
            ck = (d.driver, d.pool, set_name)
            total = self.node.counters.get(ck, {})
            used = self.state.used.get(ck, {})
            for counter, amount in amounts.items():
                if amount > total.get(counter, 0) - used.get(counter, 0):
                    return False
        return True

    def _take(self, ci: int, req: RequestInfo, d: DeviceInfo) -> bool:
        if not req.admin and not self._free(d):
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
                return False
            con.value = value if con.count == 0 else con.value
            con.count += 1
            applied.append(con)
        if not req.admin:
            self.state.taken.add(d.key)
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
        if not req.admin:
            self.state.taken.discard(d.key)
            self._count(d, -1)

    def _count(self, d: DeviceInfo, sign: int) -> None:
        for set_name, amounts in d.consumes.items():
            used = self.state.used.setdefault((d.driver, d.pool, set_name), {})
            for counter, amount in amounts.items():
                used[counter] = used.get(counter, 0) + sign * amount

    # ---- fragmentation-aware order ---------------------------------------------------------
    def _preferred(self, cands: list[DeviceInfo]) -> list[DeviceInfo]:
        """Candidates in our preferred order (see the module doc); stable, so devices that
        compare equal keep kube-scheduler's order."""
        free = [d for d in cands if self._free(d)]
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
        self.state.taken.add(d.key)
        try:
            return sum(1 for o in before if not self._free(o))
        finally:
            self.state.taken.discard(d.key)
            self._count(d, -1)
