"""Speed of one FGD-protocol run (one policy, one seed) on openb_pod_list_default.

Runs the policy under test and, in the same invocation, the cheap best-fit baseline, each in a
fresh process (so peak RSS is per run), and prints one JSON object: wall seconds, peak RSS,
arrivals per second, the ratio to the baseline and the 30 s target.

Usage: ``python benchmarks/fgd_speed/run.py [--policy fairgpu-frag] [--seed 42]``.
"""

from __future__ import annotations

import os

# Tiny matrix products per pod: BLAS worker threads only add contention.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path
from typing import Any

from fairgpu.engine.policies import DEFAULT_POLICY

ROOT = Path(__file__).resolve().parents[2]
OPENB = ROOT.parent / "shared" / "traces" / "openb"
TARGET_SECONDS = 30.0


def _run(args: tuple[str, str, str, int]) -> dict[str, Any]:
    from fairgpu.sim.protocols.fgd import run_fgd_protocol

    pod_csv, node_csv, policy_name, seed = args
    started = time.perf_counter()
    result = run_fgd_protocol(pod_csv, node_csv, policy_name, seed)
    wall = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "policy": policy_name,
        "seed": seed,
        "arrivals": result.arrivals,
        "wall_seconds": round(wall, 2),
        "arrivals_per_second": round(result.arrivals / wall, 1),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "gpu_allocation_at_130": round(result.gpu_allocation_at[130], 3),
    }


def main() -> int:
    """Measure and print the JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument("--baseline", default="best-fit")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--pods", type=Path, default=OPENB / "openb_pod_list_default.csv")
    parser.add_argument("--nodes", type=Path, default=OPENB / "openb_node_list_gpu_node.csv")
    opts = parser.parse_args()
    if not opts.pods.is_file():
        print(f"trace not found: {opts.pods}", file=sys.stderr)
        return 2
    ctx = mp.get_context("spawn")  # a fresh interpreter per run: RSS is that run's own
    runs = {}
    for name in (opts.policy, opts.baseline):
        with ctx.Pool(1) as pool:
            runs[name] = pool.apply(_run, ((str(opts.pods), str(opts.nodes), name, opts.seed),))
    mine, base = runs[opts.policy], runs[opts.baseline]
    print(
        json.dumps(
            {
                "benchmark": "fgd_speed",
                "trace": opts.pods.name,
                "run": mine,
                "baseline": base,
                "ratio_to_baseline": round(mine["wall_seconds"] / base["wall_seconds"], 2),
                "target_seconds": TARGET_SECONDS,
                "target_met": mine["wall_seconds"] <= TARGET_SECONDS,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
