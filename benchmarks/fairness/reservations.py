"""Starvation reservations in the realistic mixes: how many were made, used and expired, and
how many GPU-hours they held idle, beside the mixes' own figures (:mod:`mixes`).

A reservation is *used* when its job starts while it holds, *expired* when it ends while
the job is still pending, *left* when the job left the queue otherwise. Idle GPU-hours: whole
idle GPUs on held nodes, integrated from one cycle to the next (the engine's view after each
cycle, its own binds included), split by how the reservation ended.

Why the idle GPUs on held nodes stayed idle while GPU pods of other jobs were pending
(``idle_with_pending_gpu_hours``, :func:`idle_reasons`): after each cycle, for each idle whole
GPU on a held node, the first of ``shape`` (no such pod passes the node's load-independent
filters and fits its idle GPUs), ``runtime_unknown`` (those that fit declare no run time),
``ends_after_start`` (all of them end after the held job's expected start, the latest drain of
its nodes; ``ends_before_node_drain`` counts the GPUs where one would still end before *that*
node's own drain -- a per-node backfill rule would fill only those), ``allowed_gang`` (one
would end in time but belongs to a gang, which needs room for all its members at once),
``allowed`` (a pod alone would end in time and was not placed: another rule held it).
Separately: ``on_fully_idle_nodes`` (the part on nodes already empty, waiting for the
reservation's other nodes) and ``all_nodes_idle_job_not_started`` (every held node empty
and the job still pending). ``expired_why`` counts expired reservations by whether their
hold had ended (``hold_end``) or they were dropped earlier (``dropped_early``: their queue
came up to its share while another was below).

Across the whole cluster (``idle_gpus_pct_of_capacity``, :func:`idle_causes`): after each
cycle, the whole idle GPUs on nodes some pending GPU pod may use (its load-independent
filters), as % of the capacity-time of the run, by cause: ``reserved`` (the node is held for
a job), ``shape`` (no such pod fits the node's idle GPUs), ``fits_not_placed`` (one would fit
by GPU count; another rule held it).

Usage: ``python benchmarks/fairness/reservations.py [--mix NAME ...] [--demo-seeds N ...]
[--seed N] [--flood-scale F] [--ordering fair|kube-default]``; prints one JSON object per mix.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import mixes

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.engine.gang import Reservation, declared_runtime
from fairgpu.model.pod import PodInfo


class _Held:
    __slots__ = ("hold_end", "idle_gpus", "idle_s", "nodes", "since")

    def __init__(self, since: float, nodes: np.ndarray) -> None:
        self.since = since
        self.nodes = nodes
        self.idle_s = 0.0
        self.idle_gpus = 0
        self.hold_end = math.inf


class ReservationLog:
    """Follows ``engine.reservations`` from cycle to cycle."""

    def __init__(self) -> None:
        self.held: dict[str, _Held] = {}
        self.ended: dict[str, list[float]] = {"used": [], "expired": [], "left": []}
        self.made = 0
        self.jobs: set[str] = set()
        self.last: float | None = None
        self.idle_now = 0.0
        self.why: dict[str, float] = {}  # GPU-seconds by reason (see the module docstring)
        self._why_now: dict[str, int] = {}
        self.expired_why: dict[str, int] = {"hold_end": 0, "dropped_early": 0}
        self.idle: dict[str, float] = {}  # GPU-seconds idle on usable nodes, by cause
        self._idle_now: dict[str, int] = {}
        self.gpus = 0

    def after_cycle(
        self,
        engine: Engine,
        cluster: ClusterState,
        pending: list[PodInfo],
        res: CycleResult,
        now: float,
    ) -> None:
        """Account the time since the last cycle, then the reservations' changes."""
        if self.last is not None:
            for h in self.held.values():
                h.idle_s += h.idle_gpus * (now - self.last)
            for why, gpus in self._why_now.items():
                self.why[why] = self.why.get(why, 0.0) + gpus * (now - self.last)
            for why, gpus in self._idle_now.items():
                self.idle[why] = self.idle.get(why, 0.0) + gpus * (now - self.last)
        self.last = now
        started = {self._key(engine, b.pod) for b in res.binds}
        waiting = {self._key(engine, p) for p in pending} - started
        current = engine.reservations
        for key in list(self.held):
            h = self.held[key]
            r = current.get(key)
            if r is not None and r.since == h.since:
                continue
            how = "used" if key in started else "expired" if key in waiting else "left"
            if how == "expired":
                self.expired_why["hold_end" if now > h.hold_end else "dropped_early"] += 1
            self.ended[how].append(h.idle_s)
            del self.held[key]
        for key, r in current.items():
            if key not in self.held:
                self.held[key] = _Held(r.since, r.nodes.copy())
                self.made += 1
                self.jobs.add(key)
        for key, h in self.held.items():
            nodes = h.nodes[h.nodes < cluster.size]
            h.idle_gpus = int(cluster.idle_devices[nodes].sum())
            h.hold_end = _hold_end(engine, current[key])
        bound = {b.pod.uid for b in res.binds}
        still = [p for p in pending if p.uid not in bound and p.gpu.count]
        self._why_now = idle_reasons(engine, cluster, still, now)
        self._idle_now = idle_causes(engine, cluster, still)
        self.gpus = int(cluster.gpu_count[: cluster.size][cluster.active[: cluster.size]].sum())

    @staticmethod
    def _key(engine: Engine, pod: PodInfo) -> str:
        ref = engine.pod_group(pod)
        return ref.key if ref is not None else pod.uid

    def summary(self) -> dict[str, Any]:
        """Counts and idle GPU-hours by how each reservation ended."""
        still = [h.idle_s for h in self.held.values()]
        idle = {k: round(sum(v) / 3600.0, 2) for k, v in self.ended.items()}
        idle["held_at_end"] = round(sum(still) / 3600.0, 2)
        return {
            "made": self.made,
            "jobs": len(self.jobs),
            "used": len(self.ended["used"]),
            "expired": len(self.ended["expired"]),
            "left": len(self.ended["left"]),
            "held_at_end": len(still),
            "idle_gpu_hours": idle,
            "idle_gpu_hours_total": round(sum(idle.values()), 2),
            "expired_why": dict(self.expired_why),
            "idle_with_pending_gpu_hours": {k: round(v / 3600.0, 2) for k, v in self.why.items()},
            "idle_gpu_seconds_by_cause": {k: round(v, 1) for k, v in self.idle.items()},
        }


def _hold_end(engine: Engine, res: Reservation) -> float:
    """:func:`fairgpu.engine.actions.reserve.hold_end` from the reservation alone."""
    cfg = engine.tenancy
    floor = res.since + cfg.gang.timeout_seconds
    if not math.isfinite(res.drain):
        return floor
    return max(floor, res.drain + cfg.starvation.drain_grace_seconds)


def _drain(engine: Engine, cluster: ClusterState, node: int) -> float:
    """When ``node`` is expected to be empty (declared run times, else observed ones)."""
    latest = 0.0
    for uid, pod in cluster.node_pods[node].items():
        runtime = declared_runtime(pod)
        if runtime is None:
            runtime = engine.state.runtimes.expected(engine.resolver.resolve(pod).queue)
            if runtime is None:
                return math.inf
        latest = max(latest, cluster.placements[uid].started + runtime)
    return latest


def _job_key(engine: Engine, pod: PodInfo) -> str:
    ref = engine.pod_group(pod)
    return ref.key if ref is not None else pod.uid


def idle_reasons(
    engine: Engine, cluster: ClusterState, pending: list[PodInfo], now: float
) -> dict[str, int]:
    """Idle whole GPUs on held nodes after a cycle, by why none of the ``pending`` GPU pods
    of other jobs backfilled them (see the module docstring for the reasons)."""
    out: dict[str, int] = {}
    n = cluster.size
    masks: dict[object, np.ndarray] = {}
    for key, res in engine.reservations.items():
        nodes = [int(i) for i in res.nodes if i < n]
        idle = {i: int(cluster.idle_devices[i]) for i in nodes}
        others = [p for p in pending if _job_key(engine, p) != key]
        if not any(idle.values()) or not others:
            continue
        drains = {i: _drain(engine, cluster, i) for i in nodes}
        start = max(drains.values())
        for i in (i for i in nodes if idle[i]):
            why = _why_idle(engine, cluster, others, masks, i, idle[i], start - now)
            out[why] = out.get(why, 0) + idle[i]
            if (
                why == "ends_after_start"
                and _shortest(others, cluster, masks, engine, i, idle[i]) <= drains[i] - now
            ):
                out["ends_before_node_drain"] = out.get("ends_before_node_drain", 0) + idle[i]
        full = sum(idle[i] for i in nodes if idle[i] == int(cluster.gpu_count[i]))
        out["on_fully_idle_nodes"] = out.get("on_fully_idle_nodes", 0) + full
        if full == sum(int(cluster.gpu_count[i]) for i in nodes):
            out["all_nodes_idle_job_not_started"] = (
                out.get("all_nodes_idle_job_not_started", 0) + full
            )
    return out


def idle_causes(engine: Engine, cluster: ClusterState, pending: list[PodInfo]) -> dict[str, int]:
    """Whole idle GPUs after a cycle on nodes some of the ``pending`` GPU pods may use, by
    cause (see the module docstring)."""
    held = {int(i) for r in engine.reservations.values() for i in r.nodes if i < cluster.size}
    masks: dict[object, np.ndarray] = {}
    out: dict[str, int] = {}
    for i, _ in cluster.active_nodes():
        idle = int(cluster.idle_devices[i])
        if not idle:
            continue
        usable = _fits(engine, cluster, pending, masks, i, 10**9)  # the node's pool, any size
        if not usable:
            continue
        why = (
            "reserved"
            if i in held
            else "fits_not_placed"
            if _fits(engine, cluster, usable, masks, i, idle)
            else "shape"
        )
        out[why] = out.get(why, 0) + idle
    return out


def _fits(
    engine: Engine, cluster: ClusterState, pods: list[PodInfo], masks: dict, node: int, idle: int
) -> list[PodInfo]:
    """The pods that pass ``node``'s load-independent filters and fit its ``idle`` GPUs."""
    out = []
    for p in pods:
        key = p.static_key()
        if key not in masks:
            masks[key] = engine.scheduler.static_mask(p, cluster)
        if masks[key][node] and (p.gpu.count if p.gpu.is_whole else 1) <= idle:
            out.append(p)
    return out


def _shortest(
    pods: list[PodInfo], cluster: ClusterState, masks: dict, engine: Engine, node: int, idle: int
) -> float:
    runs = [declared_runtime(p) for p in _fits(engine, cluster, pods, masks, node, idle)]
    return min((r for r in runs if r is not None), default=math.inf)


def _why_idle(
    engine: Engine,
    cluster: ClusterState,
    pods: list[PodInfo],
    masks: dict,
    node: int,
    idle: int,
    until_start: float,
) -> str:
    fit = _fits(engine, cluster, pods, masks, node, idle)
    if not fit:
        return "shape"
    timed = [(p, r) for p in fit if (r := declared_runtime(p)) is not None]
    if not timed:
        return "runtime_unknown"
    in_time = [p for p, r in timed if r <= until_start]
    if not in_time:
        return "ends_after_start"
    return "allowed_gang" if all(engine.pod_group(p) for p in in_time) else "allowed"


def measure(mix: mixes.Mix, ordering: str, seed: int) -> dict[str, Any]:
    """:func:`mixes.measure` with the reservations followed."""
    log = ReservationLog()

    def follow(engine: Engine) -> None:
        inner = engine.cycle

        def cycle(
            cluster: ClusterState, pending: Any, now: float, changes: Any = None
        ) -> CycleResult:
            pending = list(pending)
            res = inner(cluster, pending, now, changes)
            log.after_cycle(engine, cluster, pending, res, now)
            return res

        engine.cycle = cycle  # type: ignore[method-assign]

    out = mixes.measure(mix, ordering, seed, watch=follow)
    out["reservations"] = log.summary()
    capacity = sum(out["pools_gpus"].values()) * out["simulated_s"]
    idle = out["reservations"].pop("idle_gpu_seconds_by_cause")
    out["idle_gpus_pct_of_capacity"] = {
        k: round(100.0 * v / capacity, 2) for k, v in sorted(idle.items()) if capacity > 0
    }
    out.pop("ratios", None)
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure each chosen mix and print one JSON object per mix."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mix", action="append", choices=sorted(mixes.MIXES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--demo-seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--flood-scale", type=float, default=0.25)
    parser.add_argument("--ordering", default="fair")
    args = parser.parse_args(argv)
    for mix in mixes.select(args.mix or ["demo"], args.seed, args.demo_seeds, args.flood_scale):
        row = {"scenario": mix.name, "ordering": args.ordering}
        row.update(measure(mix, args.ordering, args.seed))
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
