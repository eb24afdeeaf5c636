"""Memory: 5 000 nodes + 50 000 pods resident in one ClusterState (target <= 1 GiB peak RSS).

Builds the same synthetic cluster as the latency benchmark, decoding every Node and Pod through
the production path, and reports peak RSS (``resource.getrusage``). The baseline, measured in
the same run before anything is built, is the interpreter with fairgpu imported, so the
difference is what the resident cluster costs. Prints one JSON object.

    python benchmarks/memory/run.py [--nodes 5000] [--pods 50000]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "decision_latency"))

import synthetic

from fairgpu.cluster.state import ClusterState

TARGET_MIB = 1024


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    """Build the cluster and print peak RSS against the target."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    args = parser.parse_args()

    baseline = peak_rss_mib()
    t0 = time.perf_counter()
    state = ClusterState(max_devices=8, capacity=args.nodes)
    for node in synthetic.nodes(args.nodes):
        state.add_node(node)
    placed = synthetic.fill(state, args.pods)
    seconds = time.perf_counter() - t0
    peak = peak_rss_mib()
    print(
        json.dumps(
            {
                "benchmark": "memory",
                "nodes": args.nodes,
                "resident_pods": placed,
                "build_seconds": round(seconds, 1),
                "baseline_rss_mib": round(baseline, 1),
                "peak_rss_mib": round(peak, 1),
                "cluster_cost_mib": round(peak - baseline, 1),
                "kib_per_pod": round((peak - baseline) * 1024 / max(placed, 1), 2),
                "target_mib": TARGET_MIB,
                "pass": peak <= TARGET_MIB and placed == args.pods,
            }
        )
    )


if __name__ == "__main__":
    main()
