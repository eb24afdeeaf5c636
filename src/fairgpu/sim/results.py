"""Turning a :class:`SimulationResult` into what people read: summary.json, pods.csv, a table."""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairgpu.cluster.state import COL_GPU_MILLI
from fairgpu.model.gpu import GpuRequest
from fairgpu.sim.accounting import (
    RunAttempt,
    evictions_by_kind,
    gang_stats,
    reversals,
    work_totals,
)
from fairgpu.sim.simulator import PodRecord, SimulationResult, percentile, time_average
from fairgpu.sim.workload import BatchJob
from fairgpu.tenancy.pool_share import PoolDemand, hierarchical_pool_shares, node_pools

if TYPE_CHECKING:
    from fairgpu.cluster.state import ClusterState
    from fairgpu.engine.engine import Engine
    from fairgpu.engine.scheduler import Scheduler
    from fairgpu.model.pod import PodInfo


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def tenant_table(result: SimulationResult) -> dict[str, dict[str, Any]]:
    """Per tenant: pods, time-averaged GPU share of capacity and of what was allocated, waits."""
    tl = result.timeline
    capacity = max(result.gpu_capacity_milli, 1)
    total_alloc = time_average(tl.time, [float(v) for v in tl.gpu_allocated_milli], result.end_time)
    by_tenant: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    for rec in result.records:
        counts[rec.tenant] += 1
        if rec.wait is not None:
            by_tenant[rec.tenant].append(rec.wait)
    out: dict[str, dict[str, Any]] = {}
    for tenant in sorted(counts):
        series = tl.tenant_gpu_milli.get(tenant, [])
        avg = time_average(tl.time, [float(v) for v in series], result.end_time) if series else 0.0
        waits = by_tenant.get(tenant, [])
        out[tenant] = {
            "pods": counts[tenant],
            "started": len(waits),
            "gpu_share_of_capacity_pct": _round(100.0 * avg / capacity),
            "gpu_share_of_allocated_pct": _round(100.0 * avg / total_alloc if total_alloc else 0.0),
            "wait_p50_s": _round(percentile(waits, 50)),
            "wait_p99_s": _round(percentile(waits, 99)),
        }
    return out


def job_table(jobs: Iterable[BatchJob], result: SimulationResult) -> dict[str, dict[str, Any]]:
    """Per batch/v1 Job: its completions (pods to succeed), the pods its controller created
    in the run, those that succeeded, when it was created, its first pod's start, when it
    finished -- its last pod succeeded (None if it did not within the run) -- and when and
    why it failed (None unless its evicted pods exceeded its ``backoffLimit``); for a child
    Job of a JobSet, ``jobset`` and how often that JobSet restarted (the counts are then the
    last attempt's: a restart creates its Jobs again, with new pods)."""
    records = {r.pod.uid: r for r in result.records}
    restarts: dict[str, int] = {}
    for _, jobset, _ in result.jobset_restarts:
        restarts[jobset] = restarts.get(jobset, 0) + 1
    out: dict[str, dict[str, Any]] = {}
    for job in jobs:
        created = [records[uid] for uid in job.pods if uid in records]
        succeeded = [r.end for r in created if r.end is not None]
        starts = [r.start for r in created if r.start is not None]
        out[job.key] = {
            "completions": len(job.pods),
            "pods_created": len(created),
            "succeeded": len(succeeded),
            "arrival_s": _round(min((r.arrival for r in created), default=None)),
            "first_start_s": _round(min(starts, default=None)),
            "finished_s": _round(max(succeeded)) if len(succeeded) == len(job.pods) else None,
            "failed_s": _round(failed[0]) if (failed := result.failed_jobs.get(job.key)) else None,
            "failed_reason": failed[1] if failed else None,
            "jobset": job.jobset or None,
            "jobset_restarts": restarts.get(job.jobset, 0) if job.jobset else None,
        }
    return out


def never_started(records: Iterable[PodRecord], limit: int = 10) -> list[dict[str, Any]]:
    """Why the pods that never started did not: each distinct last reason (a malformed
    field, a node none fits, a rule) with how many pods it held back and the first of them,
    most pods first, at most ``limit`` reasons. A pod that failed for good before it started
    (its deadline passed, or its Job or pod group gave up) is counted under that."""
    by_reason: dict[str, list[str]] = {}
    for r in records:
        if r.failed_at is not None:
            reason = "failed for good before it started (deadline, or its Job or group gave up)"
        else:
            reason = r.reason or "no reason reported (it arrived as the replay ended)"
        by_reason.setdefault(reason, []).append(r.pod.key)
    ranked = sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [{"reason": k, "pods": len(v), "example": v[0]} for k, v in ranked[:limit]]


def summarize(result: SimulationResult, params: dict[str, Any]) -> dict[str, Any]:
    """The headline figures and run parameters written to ``summary.json``."""
    tl = result.timeline
    capacity = max(result.gpu_capacity_milli, 1)
    alloc = [float(v) for v in tl.gpu_allocated_milli]
    waits = [r.wait for r in result.records if r.wait is not None]
    never = [r for r in result.records if r.start is None]
    return {
        "parameters": params,
        "policy": result.policy,
        "seed": result.seed,
        "pods": len(result.records),
        "pods_started": len(waits),
        "pods_completed": sum(1 for r in result.records if r.end is not None),
        "pods_never_started": len(never),
        "never_started": never_started(never),
        # Failed for good: past their activeDeadlineSeconds, deleted with their failed Job,
        # or their pod group gave up too often.
        "pods_failed": sum(1 for r in result.records if r.failed_at is not None),
        "gpu_capacity": capacity / 1000.0,
        "gpu_allocation_avg_pct": _round(
            100.0 * time_average(tl.time, alloc, result.end_time) / capacity
        ),
        "gpu_allocation_peak_pct": _round(100.0 * max(alloc, default=0.0) / capacity),
        "wait_p50_s": _round(percentile(waits, 50)),
        "wait_p90_s": _round(percentile(waits, 90)),
        "wait_p99_s": _round(percentile(waits, 99)),
        "simulated_seconds": _round(result.end_time),
        "preemptions": result.preemptions,
        "preemptions_by_kind": evictions_by_kind(result.runs),
        "scheduling_cycles": result.cycles,
        "tenants": tenant_table(result),
    }


def kinds_text(summary: dict[str, Any], sep: str = ", ") -> str:
    """``summary``'s preemptions by kind, e.g. ``reclaim 41, priority 21`` ("" if none)."""
    kinds = summary.get("preemptions_by_kind") or {}
    return sep.join(f"{k} {n}" for k, n in kinds.items())


def preemptions_text(summary: dict[str, Any]) -> str:
    """The preemption count of ``summary`` with its kinds, e.g. ``62 (reclaim 41, priority
    21)``."""
    parts = kinds_text(summary)
    return f"{summary.get('preemptions')} ({parts})" if parts else str(summary.get("preemptions"))


POD_COLUMNS = [
    "name",
    "namespace",
    "tenant",
    "user",
    "node",
    "gpu_devices",
    "gpu_request",
    "arrival",
    "start",
    "end",
    "wait",
    "preempted",
    "unschedulable_reason",
]


def _gpu_text(gpu: GpuRequest) -> str:
    if gpu.count == 0:
        return ""
    if gpu.is_whole:
        return str(gpu.count)
    mem = f"/{gpu.memory_mib}Mi" if gpu.memory_mib else ""
    each = f"{gpu.count}x" if gpu.count > 1 else ""
    return f"{each}{gpu.milli}m{mem}"


def write_pods_csv(result: SimulationResult, path: Path) -> None:
    """One row per pod: identity, tenant/user, node and devices, timing, unschedulable reason."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(POD_COLUMNS)
        for rec in sorted(result.records, key=lambda r: (r.arrival, r.pod.key)):
            writer.writerow(
                [
                    rec.pod.name,
                    rec.pod.namespace,
                    rec.tenant,
                    rec.user,
                    rec.node,
                    ",".join(str(d) for d in rec.devices),
                    _gpu_text(rec.pod.gpu),
                    rec.arrival,
                    "" if rec.start is None else rec.start,
                    "" if rec.end is None else rec.end,
                    "" if rec.wait is None else round(rec.wait, 3),
                    rec.preempted,
                    rec.reason if rec.start is None else "",
                ]
            )


def write_summary(summary: dict[str, Any], path: Path) -> None:
    """Pretty-printed JSON."""
    path.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")


RUN_COLUMNS = [
    "namespace",
    "name",
    "tenant",
    "user",
    "group",
    "node",
    "devices",
    "gpu_request",
    "start",
    "end",
    "outcome",
    "cause",
    "preemptor",
    "preemptor_tenant",
    "work_start",
]


def write_runs_csv(result: SimulationResult, path: Path) -> None:
    """One row per run attempt (see :mod:`fairgpu.sim.accounting`), in the order they ended."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(RUN_COLUMNS)
        for a in sorted(result.runs, key=lambda a: (a.seq, a.start)):
            writer.writerow(
                [
                    a.namespace,
                    a.name,
                    a.tenant,
                    a.user,
                    a.group,
                    a.node,
                    ",".join(str(d) for d in a.devices),
                    _gpu_text(a.gpu),
                    a.start,
                    a.end,
                    a.outcome,
                    a.cause,
                    a.preemptor,
                    a.preemptor_tenant,
                    a.work_start,
                ]
            )


REVERSAL_WINDOWS = {"same_cycle": 0.0, "10min": 600.0, "1h": 3600.0}


def accounting_summary(result: SimulationResult) -> dict[str, Any]:
    """Useful and lost GPU-hours (by outcome and preemption kind), reversals and gang figures."""
    capacity_s = result.gpu_capacity_milli / 1000.0 * max(result.end_time, 1e-9)
    work = work_totals(result.runs)
    arrival = {r.pod.uid: r.arrival for r in result.records}
    gangs = gang_stats(result.runs, arrival)
    waits = gangs.pop("gang_wait_s")
    lost = sum(work["lost"].values())
    return {
        "useful_gpu_hours": _round(work["useful"] / 3600.0),
        "lost_gpu_hours": _round(lost / 3600.0),
        "lost_pct_of_capacity": _round(100.0 * lost / capacity_s),
        "lost_pct_of_allocated": _round(100.0 * lost / max(lost + work["useful"], 1e-9)),
        "useful_allocation_pct": _round(100.0 * work["useful"] / capacity_s),
        "lost_gpu_hours_by_outcome": {k: _round(v / 3600.0) for k, v in work["lost"].items()},
        "preempted_gpu_hours_by_kind": {
            k: _round(v / 3600.0) for k, v in sorted(work["preempted_by_kind"].items())
        },
        "run_attempts": len(result.runs),
        "reversals": {k: reversals(result.runs, w) for k, w in REVERSAL_WINDOWS.items()},
        "gang_restarts": sum(1 for a in result.runs if a.outcome == "gang-restart"),
        **gangs,
        "gang_wait_p50_s": _round(percentile(waits, 50)),
        "gang_wait_p99_s": _round(percentile(waits, 99)),
        "tenant_useful_pct": {
            t: _round(100.0 * v / capacity_s) for t, v in sorted(work["tenants"].items())
        },
    }


@dataclass(slots=True)
class ShareTimeline:
    """Per tenant on an even time grid (milli-GPU): pool-aware fair share, useful allocation,
    and whether it was backlogged (had GPU work pending that some pool could run)."""

    times: np.ndarray
    fair: dict[str, np.ndarray]
    useful: dict[str, np.ndarray]
    backlogged: dict[str, np.ndarray]
    pools: dict[str, int]


def pool_eligibility(
    cluster: ClusterState, scheduler: Scheduler | None, pods: list[PodInfo]
) -> tuple[dict[str, int], dict[str, frozenset[str]]]:
    """Pools (capacity in milli-GPU) and, per GPU pod uid, the pools it may use.

    A pod may use a node when the scheduler's load-independent filters pass it there
    (``Scheduler.static_mask``: pools, GPU models, selectors, taints) and the node has at least
    as many GPUs as one replica asks; without a scheduler every GPU node is one pool.
    """
    capacity, eligible, _ = pool_layout(cluster, scheduler, pods)
    return capacity, eligible


def pool_layout(
    cluster: ClusterState, scheduler: Scheduler | None, pods: list[PodInfo]
) -> tuple[dict[str, int], dict[str, frozenset[str]], dict[str, str]]:
    """:func:`pool_eligibility`, plus the pool of each GPU node by name."""
    n = cluster.size
    gpus = np.where(cluster.active[:n], cluster.gpu_count[:n], 0)
    masks: list[np.ndarray] = []
    index: dict[bytes, int] = {}
    which: dict[str, int] = {}
    for pod in pods:
        if not pod.gpu.count:
            continue
        mask = np.ones(n, dtype=bool) if scheduler is None else scheduler.static_mask(pod, cluster)
        mask = mask[:n] & (gpus >= pod.gpu.count)
        which[pod.uid] = index.setdefault(mask.tobytes(), len(masks))
        if which[pod.uid] == len(masks):
            masks.append(mask)
    pools, usable = node_pools(masks, gpus)
    milli = cluster.allocatable[:n, COL_GPU_MILLI]
    capacity = {f"p{i}": int(milli[nodes].sum()) for i, nodes in enumerate(pools)}
    node_pool = {cluster.node(int(j)).name: f"p{i}" for i, nodes in enumerate(pools) for j in nodes}
    return capacity, {uid: usable[m] for uid, m in which.items()}, node_pool


def _steps(grid: np.ndarray, spans: list[tuple[float, float, int]]) -> np.ndarray:
    """Sum of ``amount`` over spans ``[start, end)`` that contain each grid point."""
    out = np.zeros(grid.size + 1)
    for start, end, amount in spans:
        out[np.searchsorted(grid, start)] += amount
        out[np.searchsorted(grid, end)] -= amount
    return np.cumsum(out[:-1])


def share_timeline(
    result: SimulationResult,
    capacity: dict[str, int],
    eligible: dict[str, frozenset[str]],
    weight: dict[str, float],
    points: int = 400,
    parent: Mapping[str, str] | None = None,
    caps: Mapping[str, int] | None = None,
) -> ShareTimeline:
    """Pool-aware fair shares (:func:`hierarchical_pool_shares`: ``parent`` names each
    tenant's department, weighed in ``weight`` too; ``caps`` the most a tenant or department
    may hold) of every tenant at ``points`` evenly spaced instants. A pod demands its GPUs
    from arrival to its final end (held or pending); pods no pool can run are left out (no
    scheduler could give them anything)."""
    end = max(result.end_time, 1e-9)
    grid = (np.arange(points) + 0.5) * end / points
    fair, useful, held, total = _share_series(
        result, capacity, eligible, weight, grid, parent=parent, caps=caps
    )
    return ShareTimeline(
        times=grid,
        fair=fair,
        useful=useful,
        backlogged={t: total[t] - held[t] > 0 for t in fair},
        pools=capacity,
    )


Spans = dict[str, list[tuple[float, float, int]]]


def _run_spans(result: SimulationResult) -> tuple[Spans, Spans]:
    """Per tenant, the (start, end, milli-GPU) spans of all run attempts and the useful work
    spans (from the start of the work, see :mod:`fairgpu.sim.rendezvous`)."""
    held: Spans = defaultdict(list)
    useful: Spans = defaultdict(list)
    for a in result.runs:
        held[a.tenant].append((a.start, a.until, a.gpu_milli))
        work = a.useful_span()
        if work is not None:
            useful[a.tenant].append((*work, a.gpu_milli))
    return held, useful


def _share_series(
    result: SimulationResult,
    capacity: dict[str, int],
    eligible: dict[str, frozenset[str]],
    weight: dict[str, float],
    grid: np.ndarray,
    capacity_at: list[dict[str, int]] | None = None,
    parent: Mapping[str, str] | None = None,
    caps: Mapping[str, int] | None = None,
) -> tuple[dict[str, np.ndarray], ...]:
    """At each instant of ``grid`` (sorted), per tenant: pool-aware fair share, useful
    allocation, held allocation (every run attempt) and total GPU demand, milli-GPU.
    ``capacity_at``: each instant's pool capacities instead of ``capacity``; ``parent``:
    each tenant's department, ``caps`` the most a tenant or department may hold
    (:func:`hierarchical_pool_shares`)."""
    demand: dict[tuple[str, frozenset[str]], list[tuple[float, float, int]]] = defaultdict(list)
    for rec in result.records:
        pools = eligible.get(rec.pod.uid)
        if pools:
            stop = rec.end if rec.end is not None else math.inf
            demand[(rec.tenant, pools)].append((rec.arrival, stop, rec.pod.gpu.total_milli))
    held, useful = _run_spans(result)
    classes = {key: _steps(grid, spans) for key, spans in demand.items()}
    tenants = sorted({t for t, _ in classes} | set(useful))
    fair = {t: np.zeros(grid.size) for t in tenants}
    cache: dict[tuple, dict[str, int]] = {}
    for k in range(grid.size):
        wants = tuple((t, p, int(v[k])) for (t, p), v in classes.items() if v[k] > 0)
        cap = capacity if capacity_at is None else capacity_at[k]
        memo = (wants, tuple(sorted(cap.items())))
        if memo not in cache:
            demands = [PoolDemand(*w) for w in wants]
            cache[memo] = hierarchical_pool_shares(cap, demands, weight, parent, caps)
        for t, v in cache[memo].items():
            fair[t][k] = v
    total = {
        t: sum((v for (u, _), v in classes.items() if u == t), np.zeros(grid.size)) for t in tenants
    }
    return (
        fair,
        {t: _steps(grid, useful.get(t, [])) for t in tenants},
        {t: _steps(grid, held.get(t, [])) for t in tenants},
        total,
    )


def gang_qualification(
    result: SimulationResult,
    capacity: dict[str, int],
    eligible: dict[str, frozenset[str]],
    weight: dict[str, float],
    parent: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Per pod group that started: its tenant, arrival (first member), GPUs (its members'
    asks together), wait (:func:`~fairgpu.sim.accounting.gang_stats`), and whether its share
    allowed it at arrival: ``qualified`` when the tenant's allocation then (every run
    attempt it held) plus the work of the gang's user queued ahead of it then that started
    before it (``ahead_gpus``, :func:`_queued_ahead`) plus the gang's GPUs is within the tenant's
    pool-aware fair share then (the computation of :func:`share_timeline`, evaluated at the
    arrival instant, with the gang's own demand counted). A gang larger than what its tenant
    lacks must wait for the tenant's other work to end, and a gang behind its own user's
    older work for that work to start, whatever the scheduler does; the gang-wait target is
    about the others. ``parent``: each tenant's department (:func:`share_timeline`)."""
    arrival = {r.pod.uid: r.arrival for r in result.records}
    members: dict[str, dict[str, RunAttempt]] = defaultdict(dict)
    attempts: dict[str, list[RunAttempt]] = defaultdict(list)
    for a in result.runs:
        if a.group:
            members[a.group].setdefault(a.uid, a)
            attempts[a.group].append(a)
    waits = {
        g: max(a.start for a in attempts[g]) - min(arrival.get(u, 0.0) for u in runs)
        for g, runs in members.items()
    }
    gangs = sorted(members)
    at = np.array([min(arrival.get(u, 0.0) for u in members[g]) for g in gangs])
    if not gangs:
        return []
    order = np.argsort(at, kind="stable")
    grid = at[order]
    fair, _, held, _ = _share_series(result, capacity, eligible, weight, grid, parent=parent)
    by_uid = {r.pod.uid: r for r in result.records}
    queued = _queued_ahead(result, eligible)
    out: list[dict[str, Any]] = []
    for k, i in enumerate(order):
        g = gangs[int(i)]
        runs = members[g]
        tenant = next(iter(runs.values())).tenant
        gpus = sum(a.gpu_milli for a in runs.values())
        t = float(grid[k])
        own = sum(a.gpu_milli for a in attempts[g] if a.start <= t < a.until)
        have = float(held.get(tenant, np.zeros(grid.size))[k]) - own  # not its own members
        share = float(fair.get(tenant, np.zeros(grid.size))[k])
        ahead = queued([by_uid[u] for u in runs if u in by_uid], t, t + waits[g])
        out.append(
            {
                "group": g,
                "tenant": tenant,
                "arrival": t,
                "gpus": gpus / 1000.0,
                "held_gpus": have / 1000.0,
                "ahead_gpus": ahead / 1000.0,
                "fair_gpus": share / 1000.0,
                "qualified": have + ahead + gpus <= share + 1,
                "wait_s": waits[g],
            }
        )
    return out


def _queued_ahead(
    result: SimulationResult, eligible: dict[str, frozenset[str]]
) -> Callable[[list[PodRecord], float, float], float]:
    """``ahead(gang, t, started)``: milli-GPUs that the gang's user (of its tenant) had
    queued ahead of it at ``t`` -- pods that arrived before ``t``, were waiting then (not
    running, not ended) and come first in the user's own order (priority at least the
    gang's, then arrival), on pools the gang can use -- and that started before the gang did
    (at ``started``). Fair order serves a user's work in that order, so what its tenant's
    share has room for goes to them first; older work that never went first (it did not
    fit, or never ran) took nothing from the gang and is not counted."""
    # A span ends at the pod's next start (inf: never; its failure: then).
    waits: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for uid, since, until in _waiting_spans(result):
        waits[uid].append((since, until))
    by_user: dict[tuple[str, str], list[PodRecord]] = defaultdict(list)
    for rec in result.records:
        if eligible.get(rec.pod.uid):
            by_user[(rec.tenant, rec.user)].append(rec)

    def ahead(members: list[PodRecord], t: float, started: float) -> float:
        if not members:
            return 0.0
        head = members[0]
        mine = {r.pod.uid for r in members}
        pools = frozenset().union(*(eligible.get(u, frozenset()) for u in mine))
        total = 0.0
        for rec in by_user[(head.tenant, head.user)]:
            if rec.pod.uid in mine or rec.arrival >= t or rec.pod.priority < head.pod.priority:
                continue
            if not eligible[rec.pod.uid] & pools:
                continue
            # Waiting at t and started no later than the gang (at the same instant, fair
            # order put the older first).
            if any(a <= t < b <= started for a, b in waits[rec.pod.uid]):
                total += rec.pod.gpu.total_milli
        return total

    return ahead


def share_ratios(tl: ShareTimeline, capacity_milli: int) -> dict[str, dict[str, Any]]:
    """Per tenant: time-averaged pool-aware fair share and useful share (% of capacity), and
    while backlogged its useful allocation ÷ its fair share (sums over the backlogged grid
    points) and the average shortfall in GPUs."""
    cap = max(capacity_milli, 1)
    out: dict[str, dict[str, Any]] = {}
    for t, fair in tl.fair.items():
        b = tl.backlogged[t]
        fair_b = float(fair[b].sum())
        row: dict[str, Any] = {
            "fair_share_pct": _round(100.0 * float(fair.mean()) / cap),
            "useful_share_pct": _round(100.0 * float(tl.useful[t].mean()) / cap),
            "backlogged_pct_of_time": _round(100.0 * float(b.mean())),
            "useful_over_fair": None,
            "deficit_gpus": None,
        }
        if fair_b > 0:
            row["useful_over_fair"] = round(float(tl.useful[t][b].sum()) / fair_b, 3)
            row["deficit_gpus"] = _round(float((fair[b] - tl.useful[t][b]).mean()) / 1000.0)
        out[t] = row
    return out


def division_ratios(
    result: SimulationResult,
    tl: ShareTimeline,
    eligible: dict[str, frozenset[str]],
    weight: dict[str, float],
    node_pool: dict[str, str],
    parent: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A diagnostic that separates how the GPUs in use were *divided* from how many were
    *used*; targets stay judged on :func:`share_ratios`.

    At each instant of ``tl``'s grid, each pool's capacity is replaced by the GPUs in use
    there (every run attempt then, on that pool's nodes: ``node_pool``) and the pool-aware
    fair shares are computed again over the same demand. Per tenant, while backlogged (as in
    ``tl``): useful allocation ÷ that share of the GPUs in use (sums over the grid points).
    A scheduler that divides what it runs by the shares but leaves GPUs idle scores 1.0 here
    and below 1.0 on :func:`share_ratios`. Beside it: the idle share (GPUs in no run attempt)
    of the pools the pods waiting at each instant may use, averaged over the instants when
    any GPU pod waited.

    ``parent``: each tenant's department, as for ``tl``. Returns ``{"ratios": {tenant:
    ratio}, "min", "max", "idle_pct_while_backlogged"}``.
    """
    grid = tl.times
    spans: Spans = defaultdict(list)
    for a in result.runs:
        pool = node_pool.get(a.node)
        if pool is not None:
            spans[pool].append((a.start, a.until, a.gpu_milli))
    in_use = {p: _steps(grid, spans.get(p, [])) for p in tl.pools}
    capacity_at = [
        {p: min(int(v[k]), tl.pools[p]) for p, v in in_use.items()} for k in range(grid.size)
    ]
    fair, useful, _, _ = _share_series(
        result, tl.pools, eligible, weight, grid, capacity_at, parent
    )
    ratios: dict[str, float] = {}
    for t, share in fair.items():
        b = tl.backlogged.get(t)
        if b is None or float(share[b].sum()) <= 0:
            continue
        ratios[t] = round(float(useful[t][b].sum()) / float(share[b].sum()), 3)
    return {
        "ratios": ratios,
        "min": min(ratios.values(), default=None),
        "max": max(ratios.values(), default=None),
        "idle_pct_while_backlogged": _idle_while_backlogged(result, tl, eligible, in_use),
    }


def locked_deficit(
    result: SimulationResult, tl: ShareTimeline, eligible: dict[str, frozenset[str]]
) -> dict[str, float]:
    """A diagnostic: per tenant, the % of its deficit (fair share less the GPUs its run
    attempts held, summed over the instants of ``tl`` when it was backlogged and below its
    share) that fell at instants when every job it had waiting -- a pod alone, or a pod
    group's waiting members together -- was larger than that deficit.

    No reclaim could close that part: the fair-share reclaim rule lets a queue take GPUs
    only while it stays at or below its share after the move
    (:mod:`~fairgpu.engine.actions.reclaim`, rule 3), so only others' work ending (or idle
    GPUs) could start such a job, and starting it puts the tenant above its share. A tenant
    whose jobs are coarse next to its share -- gangs of 16-32 GPUs against a share of 20 --
    sits below it at such instants under any scheduler that keeps that rule. Targets stay
    judged on :func:`share_ratios`."""
    # Groups as the run attempts name them: members of a group that never started count as
    # pods alone -- smaller jobs, so that group's shortfall is never called locked wrongly.
    group_of = {a.uid: a.group for a in result.runs if a.group}
    jobs: dict[tuple[str, str], list[tuple[float, float, int]]] = defaultdict(list)
    by_uid = {r.pod.uid: r for r in result.records}
    for uid, since, until in _waiting_spans(result):
        rec = by_uid[uid]
        if not eligible.get(uid) or not rec.pod.gpu.total_milli:
            continue
        job = group_of.get(uid) or uid
        jobs[(rec.tenant, job)].append((since, until, rec.pod.gpu.total_milli))
    grid = tl.times
    smallest = {t: np.full(grid.size, np.inf) for t in tl.fair}
    for (tenant, _), spans in jobs.items():
        size = _steps(grid, spans)  # the job's waiting GPUs at each instant
        waiting = size > 0
        if tenant in smallest:
            smallest[tenant] = np.where(
                waiting, np.minimum(smallest[tenant], size), smallest[tenant]
            )
    held, _ = _run_spans(result)
    out: dict[str, float] = {}
    for t, fair in tl.fair.items():
        deficit = np.where(tl.backlogged[t], fair - _steps(grid, held.get(t, [])), 0.0)
        deficit = np.maximum(deficit, 0.0)
        total = float(deficit.sum())
        if total > 0:
            locked = float(deficit[smallest[t] > deficit + 1].sum())
            out[t] = round(100.0 * locked / total, 1)
    return out


def _idle_while_backlogged(
    result: SimulationResult,
    tl: ShareTimeline,
    eligible: dict[str, frozenset[str]],
    in_use: dict[str, np.ndarray],
) -> float | None:
    """% of the capacity of the pools some waiting GPU pod may use that no run attempt
    held, averaged over the instants when any GPU pod waited (see :func:`division_ratios`).
    Only the pools of the pods waiting at that instant count: a pool a tenant used earlier
    but none of its waiting pods can use is not idle for want of scheduling."""
    spans: Spans = defaultdict(list)
    for uid, since, until in _waiting_spans(result):
        for pool in eligible.get(uid, ()):
            spans[pool].append((since, until, 1))
    waiting = {p: _steps(tl.times, spans.get(p, [])) > 0 for p in tl.pools}
    idle: list[float] = []
    for k in range(tl.times.size):
        wanted = [p for p in tl.pools if waiting[p][k]]
        cap = sum(tl.pools[p] for p in wanted)
        if cap > 0:
            used = sum(min(float(in_use[p][k]), tl.pools[p]) for p in wanted)
            idle.append(1.0 - used / cap)
    return _round(100.0 * float(np.mean(idle))) if idle else None


def _waiting_spans(result: SimulationResult) -> list[tuple[str, float, float]]:
    """Per pod, the ``(uid, from, to)`` spans it waited: from its arrival, and from the end
    of each run attempt that did not complete (it queued again), to its next start (if it
    never started again: to when its job failed, else ``inf``)."""
    attempts: dict[str, list[RunAttempt]] = defaultdict(list)
    for a in result.runs:
        attempts[a.uid].append(a)
    out: list[tuple[str, float, float]] = []
    for rec in result.records:
        uid, since = rec.pod.uid, rec.arrival
        for a in sorted(attempts.get(uid, ()), key=lambda a: a.start):
            if a.start > since:
                out.append((uid, since, a.start))
            # queued again after an attempt that did not count; else it waits no more
            since = a.end if a.end is not None and not a.useful else math.inf
        end = math.inf if rec.failed_at is None else rec.failed_at
        if since < end:
            out.append((uid, since, end))
    return out


def add_accounting(
    summary: dict[str, Any], result: SimulationResult, engine: Engine, cluster: ClusterState
) -> ShareTimeline:
    """Add run accounting and pool-aware fair shares to ``summary`` (in place).

    ``summary["accounting"]`` gets :func:`accounting_summary`; each tenant row gets its
    pool-aware ``fair_share_pct`` (replacing any whole-cluster figure), ``useful_share_pct``,
    ``useful_over_fair`` and ``deficit_gpus`` (:func:`share_ratios`), and
    ``deficit_locked_pct`` (:func:`locked_deficit`; None without a shortfall), and a tenant
    in a department its ``department``. ``cluster`` is the
    simulated cluster (for the nodes) and ``engine`` supplies the scheduler's static filters
    and the queue weights.
    """
    summary["accounting"] = accounting_summary(result)
    # Departments are queues too: their weights, and each queue's department.
    weight = {q.name: float(q.weight) for q in engine.tenancy.queues}
    parent = {q.name: q.parent for q in engine.tenancy.queues if q.parent}
    # A pod whose queue does not exist is never tried: it is owed nothing (as in the engine).
    pods = [r.pod for r in result.records if engine.tenant(r.pod).error is None]
    capacity, eligible = pool_eligibility(cluster, engine.scheduler, pods)
    queues = {r.tenant for r in result.records} | (set(weight) - set(parent.values()))
    caps = engine.book.gpu_caps(queues)
    timeline = share_timeline(result, capacity, eligible, weight, parent=parent, caps=caps)
    summary["pools_gpus"] = {p: c / 1000.0 for p, c in capacity.items()}
    locked = locked_deficit(result, timeline, eligible)
    for tenant, row in share_ratios(timeline, result.gpu_capacity_milli).items():
        row["deficit_locked_pct"] = locked.get(tenant)
        summary["tenants"].setdefault(tenant, {}).update(row)
    for tenant, row in summary["tenants"].items():
        if tenant in parent:
            row["department"] = parent[tenant]
    return timeline
