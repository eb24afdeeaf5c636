"""Turning a :class:`SimulationResult` into what people read: summary.json, pods.csv, a table."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from fairgpu.sim.simulator import SimulationResult, percentile, time_average


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
        "scheduling_cycles": result.cycles,
        "tenants": tenant_table(result),
    }


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


def _gpu_text(rec: Any) -> str:
    gpu = rec.pod.gpu
    if gpu.count == 0:
        return ""
    if gpu.is_whole:
        return str(gpu.count)
    mem = f"/{gpu.memory_mib}Mi" if gpu.memory_mib else ""
    return f"{gpu.milli}m{mem}"


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
                    _gpu_text(rec),
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
