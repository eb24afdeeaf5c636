"""GPU allocation on the openb traces: every placement policy beside the published figures.

For each openb pod list in ../shared/traces/openb and each policy, runs the published FGD
experiment protocol (``fairgpu.sim.protocols.fgd``) for seeds 42..51 and reports GPU allocation
at 100/110/120/130% arrival, averaged over the seeds, next to
../shared/reference/fgd_gpu_allocation.csv (the published means of the same protocol).

Prints the table on stderr and one JSON object on stdout. Targets: our best policy >= FGD on
every list, and >= 96.0% at 130% on openb_pod_list_default.

Usage::

    python benchmarks/gpu_allocation/run.py [--lists default,gpushare40] \
        [--policies best-fit,fgd] [--seeds 42-51] [--workers 2] [--out result.json] \
        [--reuse benchmarks/gpu_allocation/results.json]

``results.json`` holds the last full run (the published baselines, fgd, fairgpu-frag-lex,
fairgpu-frag-gaps and fairgpu-frag-plan; seeds 42..51) with its per-seed runs: ``--reuse`` it
to rerun only a changed policy (runs are deterministic).
"""

from __future__ import annotations

import os

# Tiny matrix products per pod: BLAS worker threads only add contention between the workers.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import math
import multiprocessing as mp
import signal
import sys
import time
from pathlib import Path
from typing import Any

from fairgpu.engine.policies import DEFAULT_POLICY, GPU_SHARING_POLICIES
from fairgpu.sim.protocols.fgd import (
    PUBLISHED_NAMES,
    REPORTED_PERCENTS,
    SEEDS,
    reference_figures,
    run_fgd_protocol,
)

ROOT = Path(__file__).resolve().parents[2]
OPENB = ROOT.parent / "shared" / "traces" / "openb"
REFERENCE = ROOT.parent / "shared" / "reference" / "fgd_gpu_allocation.csv"
NODE_LIST = "openb_node_list_gpu_node.csv"
TARGET_DEFAULT_130 = 96.0


def _job(args: tuple[str, str, int, str]) -> dict[str, Any]:
    pod_csv, policy_name, seed, node_csv = args
    result = run_fgd_protocol(pod_csv, node_csv, policy_name, seed)
    return {
        "workload": result.workload,
        "policy": policy_name,
        "tie_break": result.tie_break,
        "seed": seed,
        "seconds": result.seconds,
        "failed": result.failed,
        "alloc": {p: result.gpu_allocation_at.get(p, math.nan) for p in REPORTED_PERCENTS},
    }


def _load_runs(paths: list[Path]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Per-seed runs of earlier invocations, keyed by (list, policy, seed)."""
    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    for path in paths:
        for run in json.loads(path.read_text()).get("runs", []):
            run["alloc"] = {int(k): float(v) for k, v in run["alloc"].items()}
            out[(run["workload"], run["policy"], int(run["seed"]))] = run
    return out


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
    return out


def _mean_std(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / n
    return mean, math.sqrt(var)


def main() -> int:
    """Run the grid and print the table (stderr) and the JSON summary (stdout)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=Path, default=OPENB)
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    parser.add_argument("--lists", default="", help="comma-separated, e.g. default,cpu050")
    parser.add_argument("--policies", default=",".join(GPU_SHARING_POLICIES))
    parser.add_argument("--seeds", default=f"{SEEDS[0]}-{SEEDS[-1]}")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument(
        "--reuse",
        type=Path,
        action="append",
        default=[],
        help="earlier --out JSON whose per-seed runs are reused instead of rerun (repeatable; "
        "runs are deterministic per list, policy and seed, so only unchanged policies qualify)",
    )
    opts = parser.parse_args()
    if not opts.traces.is_dir():
        print(f"traces not found: {opts.traces}", file=sys.stderr)
        return 2
    if opts.lists:
        lists = [
            f"openb_pod_list_{name.removeprefix('openb_pod_list_')}"
            for name in opts.lists.split(",")
        ]
    else:
        lists = sorted(p.stem for p in opts.traces.glob("openb_pod_list_*.csv"))
    policies = [p for p in opts.policies.split(",") if p]
    seeds = _seeds(opts.seeds)
    node_csv = str(opts.traces / NODE_LIST)
    # Seed-major order: an interrupted run (Ctrl-C) still covers every list and policy.
    jobs = [
        (str(opts.traces / f"{lst}.csv"), pol, seed, node_csv)
        for seed in seeds
        for lst in lists
        for pol in policies
    ]
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    reused = _load_runs(opts.reuse)
    wanted = {(Path(j[0]).stem, j[1], j[2]) for j in jobs}
    for key, run in reused.items():
        if key in wanted:
            runs.append(run)
    jobs = [j for j in jobs if (Path(j[0]).stem, j[1], j[2]) not in reused]
    pool = mp.get_context("fork").Pool(max(1, opts.workers))
    # Ctrl-C or SIGTERM summarises the runs done so far (a background job ignores SIGINT).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    runs_new: list[dict[str, Any]] = []
    try:
        for done, run in enumerate(pool.imap_unordered(_job, jobs), start=1):
            runs.append(run)
            runs_new.append(run)
            print(
                f"[{done}/{len(jobs)}] {run['workload']} {run['policy']} seed={run['seed']} "
                f"130%={run['alloc'][130]:.2f} ({run['seconds']:.1f}s)",
                file=sys.stderr,
                flush=True,
            )
        pool.close()
    except KeyboardInterrupt:  # summarise what finished
        print(f"interrupted after {len(runs)}/{len(jobs)} runs", file=sys.stderr)
        pool.terminate()
    pool.join()
    results: dict[str, dict[str, Any]] = {}
    for lst in lists:
        reference = reference_figures(lst, opts.reference) or {}
        per_list: dict[str, Any] = {}
        for pol in policies:
            mine = [r for r in runs if r["workload"] == lst and r["policy"] == pol]
            if not mine:
                continue
            mean: dict[str, float] = {}
            std: dict[str, float] = {}
            for pct in REPORTED_PERCENTS:
                m, s = _mean_std([r["alloc"][pct] for r in mine])
                mean[str(pct)], std[str(pct)] = round(m, 3), round(s, 3)
            published = reference.get(PUBLISHED_NAMES.get(pol, ""), {})
            ref = {str(p): published[p][0] for p in REPORTED_PERCENTS if p in published} or None
            per_list[pol] = {
                "tie_break": mine[0]["tie_break"],
                "seeds": sorted(r["seed"] for r in mine),
                "mean": mean,
                "std": std,
                "reference": ref,
                "minus_reference": (
                    {k: round(mean[k] - v, 3) for k, v in ref.items()} if ref else None
                ),
                "seconds_mean": round(sum(r["seconds"] for r in mine) / len(mine), 2),
            }
        fgd_ref = reference.get("FGD", {})
        best = max(per_list, key=lambda p: per_list[p]["mean"]["130"]) if per_list else None
        results[lst] = {
            "policies": per_list,
            "fgd_reference": {str(p): fgd_ref[p][0] for p in REPORTED_PERCENTS if p in fgd_ref}
            or None,
            "best_policy": best,
        }
    ours = DEFAULT_POLICY
    beats = {}
    for lst, res in results.items():
        fgd_ref = res["fgd_reference"]
        row = res["policies"].get(ours)
        if fgd_ref and row:
            beats[lst] = all(row["mean"][k] >= v for k, v in fgd_ref.items())
    default_130 = (
        results.get("openb_pod_list_default", {}).get("policies", {}).get(ours, {}).get("mean", {})
    ).get("130")
    summary = {
        "benchmark": "gpu_allocation",
        "protocol": "fgd (../shared/reference/README.md)",
        "seeds": seeds,
        "percents": list(REPORTED_PERCENTS),
        "default_policy": ours,
        "results": results,
        "targets": {
            "default_policy_at_least_fgd": beats,
            "default_130": default_130,
            "default_130_target": TARGET_DEFAULT_130,
            "default_130_met": default_130 is not None and default_130 >= TARGET_DEFAULT_130,
        },
        "runs_done": len(runs),
        "runs_planned": len(jobs) + len(runs) - len(runs_new),
        "runs_reused": len(runs) - len(runs_new),
        "wall_seconds": round(time.perf_counter() - started, 1),
        # Per-seed runs, so that a later invocation can --reuse them.
        "runs": sorted(runs, key=lambda r: (r["workload"], r["policy"], r["seed"])),
    }
    print(_table(results, policies), file=sys.stderr)
    text = json.dumps(summary, indent=1, sort_keys=False)
    if opts.out:
        opts.out.write_text(text + "\n")
    print(text)
    return 0


def _table(results: dict[str, dict[str, Any]], policies: list[str]) -> str:
    lines = []
    header = f"{'list':<26} {'policy':<15}" + "".join(
        f" {f'{p}% ours':>9} {'ref':>6} {'diff':>6}" for p in REPORTED_PERCENTS
    )
    lines.append(header)
    lines.append("-" * len(header))
    for lst, res in results.items():
        for pol in policies:
            row = res["policies"].get(pol)
            if row is None:
                continue
            cells = []
            for pct in REPORTED_PERCENTS:
                ours = row["mean"][str(pct)]
                ref = (row["reference"] or {}).get(str(pct))
                if ref is None and res["fgd_reference"]:  # compare new policies with FGD
                    ref = res["fgd_reference"].get(str(pct))
                    tag = "*"
                else:
                    tag = ""
                if ref is None:
                    cells.append(f" {ours:9.2f} {'-':>6} {'-':>6}")
                else:
                    cells.append(f" {ours:9.2f} {ref:6.2f} {ours - ref:+5.2f}{tag or ' '}")
            lines.append(f"{lst.removeprefix('openb_pod_list_'):<26} {pol:<15}" + "".join(cells))
        lines.append("")
    lines.append("ref = published mean of the same policy; * = no published figure, FGD shown")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
