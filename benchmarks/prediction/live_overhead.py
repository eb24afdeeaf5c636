"""Does forecasting slow live scheduling? ``benchmarks/live_throughput`` with it off and on.

The same measurement as :mod:`benchmarks.live_throughput.run` (one real kube-apiserver,
``--nodes`` fake nodes x 8 GPUs; ``fairgpu run`` is paused while ``--pods`` one-GPU pods are
created, resumed, and timed until every pod is bound), run for fairgpu alone with
``--forecast-seconds`` set per mode, the modes interleaved ``--rounds`` times in one
invocation:

* ``off``: 0 (no forecasting process);
* ``default``: 30 (the default; one forecast runs as the scheduler starts);
* ``busy``: 1 (a forecast as soon as the last one ends: the forecasting process lists the
  cluster, forecasts and writes annotations while the scheduler binds).

Prints one JSON object: pods/s per run, the median per mode and its ratio to ``off``
(target: >= 0.90).

    python benchmarks/prediction/live_overhead.py [--nodes 200] [--pods 1500] [--rounds 2]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.live_throughput import run as throughput
from fairgpu.devcluster import ControlPlane, create_nodes, find_binaries, gpu_node_specs

MODES = {"off": 0.0, "default": 30.0, "busy": 1.0}
TARGET = 0.90

#: The benchmark's own start (``start_fairgpu`` is swapped while a mode runs).
_START_FAIRGPU = throughput.start_fairgpu


def with_forecast(seconds: float) -> Any:
    """A ``start_fairgpu`` for :func:`throughput.one_run`: the same command line as
    ``live_throughput`` uses, plus ``--forecast-seconds``."""
    return functools.partial(_START_FAIRGPU, extra=[f"--forecast-seconds={seconds}"])


def main() -> None:
    """Run every mode ``--rounds`` times, interleaved; print one JSON object."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--pods", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    bin_dir = find_binaries()
    if bin_dir is None:
        sys.exit("control-plane binaries not found; run tools/kube/build-control-plane.sh")
    out: dict[str, Any] = {
        "benchmark": "live_throughput, forecasting off vs on",
        "nodes": args.nodes,
        "pods": args.pods,
        "cpus": os.cpu_count(),
        "runs": {m: [] for m in MODES},
    }
    original = throughput.start_fairgpu
    with (
        tempfile.TemporaryDirectory(prefix="fairgpu-fc-") as tmp,
        ControlPlane(bin_dir) as cp,
        cp.client(maxsize=32) as client,
    ):
        create_nodes(client, gpu_node_specs(args.nodes), workers=16, status_in_create=True)
        for _ in range(args.rounds):
            for mode, seconds in MODES.items():
                throughput.start_fairgpu = with_forecast(seconds)
                try:
                    run = throughput.one_run(
                        cp, client, bin_dir, "fairgpu", 0.0, args.pods, Path(tmp), args.timeout
                    )
                finally:
                    throughput.start_fairgpu = original
                print(f"{mode}: {json.dumps(run)}", file=sys.stderr, flush=True)
                out["runs"][mode].append(run)
                time.sleep(1.0)
    off = median(r["pods_per_s"] or 0.0 for r in out["runs"]["off"])
    for mode in MODES:
        rate = median(r["pods_per_s"] or 0.0 for r in out["runs"][mode])
        out[f"{mode}_pods_per_s"] = rate
        out[f"{mode}_ratio"] = round(rate / off, 3) if off else None
    out["target_ratio"] = TARGET
    out["meets_target"] = all((out[f"{m}_ratio"] or 0) >= TARGET for m in MODES if m != "off")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
