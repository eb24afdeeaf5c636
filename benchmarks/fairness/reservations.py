"""Starvation reservations in the realistic mixes: how many were made, used and expired, and
how many GPU-hours they held idle, beside the mixes' own figures (:mod:`mixes`).

A reservation is *used* when its job starts while it holds, *expired* when it ends while
the job is still pending, *left* when the job left the queue otherwise. Idle GPU-hours: whole
idle GPUs on held nodes, integrated from one cycle to the next (the engine's view after each
cycle, its own binds included), split by how the reservation ended.

Usage: ``python benchmarks/fairness/reservations.py [--mix NAME ...] [--demo-seeds N ...]
[--seed N] [--flood-scale F] [--ordering fair|kube-default]``; prints one JSON object per mix.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import mixes

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.model.pod import PodInfo


class _Held:
    __slots__ = ("idle_gpus", "idle_s", "nodes", "since")

    def __init__(self, since: float, nodes: np.ndarray) -> None:
        self.since = since
        self.nodes = nodes
        self.idle_s = 0.0
        self.idle_gpus = 0


class ReservationLog:
    """Follows ``engine.reservations`` from cycle to cycle."""

    def __init__(self) -> None:
        self.held: dict[str, _Held] = {}
        self.ended: dict[str, list[float]] = {"used": [], "expired": [], "left": []}
        self.made = 0
        self.jobs: set[str] = set()
        self.last: float | None = None
        self.idle_now = 0.0

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
            self.ended[how].append(h.idle_s)
            del self.held[key]
        for key, r in current.items():
            if key not in self.held:
                self.held[key] = _Held(r.since, r.nodes.copy())
                self.made += 1
                self.jobs.add(key)
        for h in self.held.values():
            nodes = h.nodes[h.nodes < cluster.size]
            h.idle_gpus = int(cluster.idle_devices[nodes].sum())

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
        }


def measure(mix: mixes.Mix, ordering: str, seed: int) -> dict[str, Any]:
    """:func:`mixes.measure` with the reservations followed."""
    log = ReservationLog()
    base = mixes.Engine

    class Recording(base):  # type: ignore[misc, valid-type]
        def cycle(self, cluster: ClusterState, pending: Any, now: float) -> CycleResult:
            pending = list(pending)
            res = super().cycle(cluster, pending, now)
            log.after_cycle(self, cluster, pending, res, now)
            return res

    mixes.Engine = Recording  # type: ignore[misc]
    try:
        out = mixes.measure(mix, ordering, seed)
    finally:
        mixes.Engine = base  # type: ignore[misc]
    out["reservations"] = log.summary()
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
    for name in args.mix or ["demo"]:
        if name == "demo":
            chosen = [mixes.demo(s) for s in args.demo_seeds]
        elif name == "flood-gangs-inference":
            chosen = [mixes.flood_gangs_inference(args.seed, args.flood_scale)]
        else:
            chosen = [mixes.MIXES[name](args.seed)]
        for mix in chosen:
            row = {"scenario": mix.name, "ordering": args.ordering}
            row.update(measure(mix, args.ordering, args.seed))
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
