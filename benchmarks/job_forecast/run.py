"""Job forecasts: predicted starts and Job ends, with and without the pods Jobs are still to
create, against what the run then did.

A batch/v1 Job with more completions than parallelism has only ``parallelism`` pods in the
cluster at a time; its controller creates the next as one succeeds. A forecast that sees
only the pods in the cluster misses the rest of the Job (:mod:`fairgpu.sim.job_backlog`).
One workload is replayed once (the actual run); every ``--every`` seconds of it the state is
copied as a snapshot holds it and forecast twice in the same run:

* ``aware``: the forecast is given each active Job's pods to come, paced by the Job
  controller (what ``fairgpu explain``/``queues``/``what-if`` and the live annotations do);
* ``blind`` (the baseline, as before): only the pods in the cluster. Its Job end is what a
  user could read from it: when the last of the Job's pods now in the cluster ends.

Cluster: 4 nodes x 8 GPUs. Queue ``train`` submits 10 Jobs over the first 90 minutes, one
every ~10 minutes (6-16 completions, 2-4 at a time, 2 GPUs a pod, ~20 minutes each; priority
10) and a low-priority sweep of one-GPU pods (priority 0) behind them; queue ``eval`` sends
one-GPU pods for three hours, one every ~2 minutes (10-30 minutes each). Every pod declares
its true run time; neither forecast knows the arrivals after its instant.

Prints one JSON object: per forecast the relative error ``|predicted - actual| / (actual -
instant)`` of the pending pods' starts (those that waited at least 60 s more), overall and
for ``train``'s pods, and of the active Jobs' ends, p50/p90 and coverage (share that got a
prediction), and the forecasts' mean wall seconds; then the ``aware / blind`` ratios.

With ``--deadlines`` every Job gets an ``activeDeadlineSeconds`` of 1-3 times its waves'
run times, and the baseline is ``deadline_blind`` (the pods to come, but no deadline); a Job
that fails ends when it fails, and ``job_fate_right`` is the share of verdicts on active Jobs
(it ends, or it fails) that came true.

Usage: ``python benchmarks/job_forecast/run.py [--seed 0] [--every 900] [--deadlines]
[--results FILE]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.model.node import NodeInfo
from fairgpu.model.order import pod_identity
from fairgpu.model.pod import ANN_DURATION, PodInfo
from fairgpu.sim.forecast import Forecast, carry_state, forecast, snapshot_cluster
from fairgpu.sim.job_backlog import JobAhead
from fairgpu.sim.learner import Runtimes
from fairgpu.sim.simulator import Simulation, SimulationResult
from fairgpu.sim.workload import BatchJob, PodArrival, Workload
from fairgpu.tenancy import parse_config

sys.path.insert(0, str(Path(__file__).parents[1] / "fairness"))
from builders import gpu_node, gpu_pod

GI = 2**30
MIN_LEFT = 60.0
BUDGET = 10.0


def node(i: int) -> NodeInfo:
    return gpu_node(f"n{i}")


def pod(
    name: str, queue: str, at: float, gpus: int, duration: float, priority: int, owner: str = ""
) -> PodInfo:
    made = gpu_pod(name, queue, at, gpus, priority, annotations={ANN_DURATION: f"{duration:.1f}"})
    return dataclasses.replace(made, owner=owner, owner_kind="Job" if owner else "")


def workload(seed: int, deadlines: bool = False) -> Workload:
    """The nodes, Jobs and pods described in the module docstring; with ``deadlines`` each
    Job has an ``activeDeadlineSeconds`` of 1-3 times its waves' run times."""
    rng = np.random.default_rng(seed)
    arrivals: list[PodArrival] = []
    jobs: list[BatchJob] = []
    at = 0.0
    for j in range(10):
        name, uid = f"job-{j:02d}", f"job/train/job-{j:02d}"
        completions, parallelism = int(rng.integers(6, 17)), int(rng.integers(2, 5))
        uids = []
        for i in range(completions):
            d = float(rng.lognormal(np.log(1200), 0.3))
            p = pod(f"{name}-{i}", "train", at, 2, d, 10, owner=uid)
            arrivals.append(PodArrival(p, at, d))
            uids.append(p.uid)
        limit = None
        if deadlines:  # drawn last, so the workload without deadlines stays the same
            waves = -(-completions // parallelism)
            limit = round(float(rng.uniform(1.0, 3.0)) * waves * 1200)
        jobs.append(
            BatchJob(f"train/{name}", parallelism, tuple(uids), uid=uid, active_deadline=limit)
        )
        at += float(rng.exponential(600))
    for k in range(24):
        t, d = 1800.0 + 120 * k, float(rng.uniform(600, 1800))
        arrivals.append(PodArrival(pod(f"sweep-{k:02d}", "train", t, 1, d, 0), t, d))
    t = 0.0
    for k in range(90):
        t += float(rng.exponential(120))
        d = float(rng.uniform(600, 1800))
        arrivals.append(PodArrival(pod(f"eval-{k:02d}", "eval", t, 1, d, 0), t, d))
    return Workload("job-forecast", [node(i) for i in range(4)], arrivals, jobs=jobs)


def engine(seed: int) -> Engine:
    tenancy = parse_config({"queues": [{"name": "train"}, {"name": "eval"}]})
    return Engine(policy(DEFAULT_POLICY), seed, tenancy=tenancy)


@dataclass(slots=True)
class Probe:
    """Forecasts, aware and blind, at every ``every`` seconds of the actual run."""

    sim: Simulation
    seed: int
    every: float
    # The baseline: "blind" (no pods to come) or "deadline_blind" (pods to come, no deadline).
    base: str = "blind"
    next_at: float = 0.0
    # (instant, uid or Job key, queue, predicted) per forecast kind; kind "pod" or "job"
    rows: dict[str, list[tuple[float, str, str, str, float | None]]] = field(default_factory=dict)
    walls: dict[str, list[float]] = field(default_factory=dict)
    # (Job key, instant, predicted to fail) per forecast kind.
    fates: dict[str, list[tuple[str, float, bool]]] = field(default_factory=dict)

    def __call__(self, _done: int, _total: int) -> None:
        sim = self.sim
        if sim.now < self.next_at or not sim.pending:
            return
        while self.next_at <= sim.now:
            self.next_at += self.every
        pending = sorted(sim.pending.values(), key=pod_identity)
        ahead = sim.jobs.ahead(set(sim.cluster.pods) | set(sim.pending), sim.now)
        for kind in ("aware", self.base):
            cluster = snapshot_cluster(sim.cluster)
            fresh = engine(self.seed)
            fresh.state = carry_state(sim.engine.state, cluster)
            runtimes = Runtimes(lambda p, e=fresh: e.tenant(p).queue, None)
            jobs = {"aware": ahead, "blind": []}.get(kind, [_no_deadline(j) for j in ahead])
            got = forecast(
                cluster, fresh, pending, sim.now, runtimes, budget_s=BUDGET, jobs=jobs,
                job_ends=bool(jobs),
            )  # fmt: skip
            self.walls.setdefault(kind, []).append(got.wall_seconds)
            rows = self.rows.setdefault(kind, [])
            for p in pending:
                rows.append((sim.now, "pod", p.uid, p.namespace, got.start(p.uid)))
            for job in ahead:
                key = job.job.key
                fails = got.job_failures.get(key)
                end = fails.at if fails is not None else got.job_ends.get(key)
                if not jobs:
                    end = self._blind_end(job, got)
                rows.append((sim.now, "job", key, "train", end))
                if jobs and (fails is not None or key in got.job_ends):
                    self.fates.setdefault(kind, []).append((key, sim.now, fails is not None))

    def _blind_end(self, job: JobAhead, got: Forecast) -> float | None:
        """When the last of the Job's pods now in the cluster ends, by the blind forecast."""
        ends = []
        for uid in job.existing:
            rec = self.sim.records[uid]
            start = rec.start if uid in self.sim.cluster.pods else got.start(uid)
            if start is None or rec.duration is None:
                return None
            ends.append(start + rec.duration)
        return max(ends) if ends else None


def _no_deadline(job: JobAhead) -> JobAhead:
    """``job`` as a forecast that ignores its ``activeDeadlineSeconds`` continues it."""
    return dataclasses.replace(job, job=dataclasses.replace(job.job, active_deadline=None))


def truth(result: SimulationResult, jobs: Sequence[BatchJob]) -> tuple[dict, dict]:
    """Each pod's run starts (sorted) and each Job's end (None: did not end; a Job that
    failed ends when it failed)."""
    starts: dict[str, list[float]] = {}
    for attempt in result.runs:
        starts.setdefault(attempt.uid, []).append(attempt.start)
    for times in starts.values():
        times.sort()
    ends = {r.pod.uid: r.end for r in result.records}
    job_end = {}
    for job in jobs:
        if job.key in result.failed_jobs:
            job_end[job.key] = result.failed_jobs[job.key][0]
            continue
        got = [ends.get(u) for u in job.pods]
        job_end[job.key] = None if any(e is None for e in got) else max(got)  # type: ignore[type-var]
    return starts, job_end


def fate_accuracy(fates: list[tuple[str, float, bool]], failed: set[str]) -> float | None:
    """The share of a forecast's verdicts on active Jobs (fail or end) that came true."""
    if not fates:
        return None
    return round(sum((key in failed) == fail for key, _, fail in fates) / len(fates), 3)


def errors(rows: list, starts: dict, job_end: dict, what: str, queue: str | None) -> dict:
    """p50/p90 of ``|predicted - actual| / (actual - instant)`` and the coverage."""
    errs, eligible = [], 0
    for at, kind, key, q, predicted in rows:
        if kind != what or (queue is not None and q != queue):
            continue
        if kind == "pod":
            actual = next((s for s in starts.get(key, ()) if s >= at), None)
        else:
            actual = job_end.get(key)
        if actual is None or actual - at < MIN_LEFT:
            continue
        eligible += 1
        if predicted is not None:
            errs.append(abs(predicted - actual) / (actual - at))
    return {
        "p50": round(float(np.percentile(errs, 50)), 3) if errs else None,
        "p90": round(float(np.percentile(errs, 90)), 3) if errs else None,
        "predictions": eligible,
        "coverage": round(len(errs) / eligible, 3) if eligible else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=float, default=900.0, help="seconds between forecasts")
    ap.add_argument(
        "--deadlines",
        action="store_true",
        help="give every Job an activeDeadlineSeconds; the baseline then ignores it",
    )
    ap.add_argument("--results", type=Path, help="also write the JSON to this file")
    args = ap.parse_args(argv)
    wl = workload(args.seed, args.deadlines)
    sim = Simulation(wl, engine(args.seed), seed=args.seed, track_fragmentation=False)
    base = "deadline_blind" if args.deadlines else "blind"
    probe = Probe(sim, args.seed, args.every, base)
    sim.on_progress = probe
    result = sim.run()
    starts, job_end = truth(result, wl.jobs)
    scenario = "job-forecast-deadlines" if args.deadlines else "job-forecast"
    out: dict[str, Any] = {"scenario": scenario, "seed": args.seed, "every_s": args.every}
    if args.deadlines:
        out["jobs_failed"] = sorted(result.failed_jobs)
    for kind, rows in probe.rows.items():
        walls = probe.walls[kind]
        out[kind] = {
            "pod_starts": errors(rows, starts, job_end, "pod", None),
            "train_pod_starts": errors(rows, starts, job_end, "pod", "train"),
            "job_ends": errors(rows, starts, job_end, "job", None),
            "forecasts": len(walls),
            "wall_s_mean": round(float(np.mean(walls)), 3) if walls else None,
        }
        if args.deadlines:
            out[kind]["job_fate_right"] = fate_accuracy(
                probe.fates.get(kind, []), set(result.failed_jobs)
            )
    ratios = {}
    for part in ("pod_starts", "train_pod_starts", "job_ends"):
        a, b = out["aware"][part]["p50"], out[base][part]["p50"]
        ratios[f"{part}_p50"] = round(a / b, 3) if a is not None and b else None
    a, b = out["aware"]["wall_s_mean"], out[base]["wall_s_mean"]
    ratios["wall"] = round(a / b, 3) if a is not None and b else None
    out[f"ratio_aware_to_{base}"] = ratios
    text = json.dumps(out, indent=2)
    print(text)
    if args.results is not None:
        args.results.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
