"""Volume plugins' cost: what pods with claims pay, and that pods without claims pay nothing.

Two measurements, each a ratio inside one run (this machine is shared and noisy):

1. ``no_claims``: the decision-latency stream (5 000 nodes, 20 000 resident pods, pods without
   volumes) scheduled by the ``spread`` policy with and without the four volume filters,
   rounds interleaved; the placements must be identical.
2. ``local_volumes``: 5 000 nodes with two local volumes each (a WaitForFirstConsumer class);
   pods with one unbound claim each, placed one after the other (each takes a volume).

    python benchmarks/volume_latency/run.py [--nodes 5000] [--stream 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "decision_latency"))
sys.path.insert(0, str(ROOT))

import synthetic  # noqa: E402

from fairgpu.engine.policies import policy  # noqa: E402
from fairgpu.engine.profile import Profile  # noqa: E402
from fairgpu.engine.scheduler import Scheduler  # noqa: E402
from tests.builders import cluster, k8s_node, k8s_pod  # noqa: E402
from tests.engine.volume_builders import claims, load, pv_doc, pvc_doc, sc_doc  # noqa: E402

VOLUME_PLUGINS = {"VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone"}


def _without_volumes(profile: Profile) -> Profile:
    return profile.model_copy(
        update={
            "filters": [f for f in profile.filters if f not in VOLUME_PLUGINS],
            "pre_filters": [f for f in profile.pre_filters if f not in VOLUME_PLUGINS],
        }
    )


def _ms(lat: np.ndarray) -> dict[str, float]:
    return {
        "p50_ms": round(float(np.percentile(lat, 50)), 3),
        "p99_ms": round(float(np.percentile(lat, 99)), 3),
        "mean_ms": round(float(lat.mean()), 3),
    }


def no_claims(nodes: int, stream_size: int, rounds: int) -> dict[str, object]:
    """The same stream with and without the volume filters, rounds interleaved."""
    state, _ = synthetic.build(nodes, nodes * 4)
    stream = synthetic.pods(stream_size, seed=9, start=10**7)
    gc.collect()
    gc.freeze()
    lat: dict[bool, list[float]] = {True: [], False: []}
    picks: dict[bool, list[str]] = {}
    for _ in range(rounds):
        for with_volumes in (False, True):
            profile = policy("spread")
            sched = Scheduler(profile if with_volumes else _without_volumes(profile), seed=0)
            chosen = []
            for p in stream:
                t0 = time.perf_counter()
                result = sched.schedule(p, state)
                lat[with_volumes].append((time.perf_counter() - t0) * 1000)
                chosen.append(result.node_name)
            picks[with_volumes] = chosen
    gc.unfreeze()
    with_v, without = np.array(lat[True]), np.array(lat[False])
    return {
        "with_volume_plugins": _ms(with_v),
        "without": _ms(without),
        "mean_ratio": round(float(with_v.mean() / without.mean()), 3),
        "same_placements": picks[True] == picks[False],
    }


def local_volumes(nodes: int, pods: int) -> dict[str, object]:
    """Pods with one WaitForFirstConsumer claim among two local volumes per node."""
    state = cluster(*[k8s_node(f"n{i}") for i in range(nodes)])
    docs = [
        pv_doc(f"pv{i}-{k}", node=f"n{i}", size=f"{k + 1}Gi") for i in range(nodes) for k in (0, 1)
    ]
    load(state, sc_doc("local"), *docs, *[pvc_doc(f"c{j}") for j in range(pods)])
    sched = Scheduler(Profile())
    lat = []
    for j in range(pods):
        p = k8s_pod(f"p{j}", volumes=claims(f"c{j}"))
        t0 = time.perf_counter()
        result = sched.schedule(p, state)
        lat.append((time.perf_counter() - t0) * 1000)
        assert result.ok and result.node is not None
        state.assign(p, result.node)
    first = lat[0]
    return {
        "volumes": len(docs),
        "pods": pods,
        "first_ms": round(first, 3),
        **_ms(np.array(lat[1:])),
    }


def main() -> None:
    """Run both measurements and print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--stream", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--claim-pods", type=int, default=200)
    args = parser.parse_args()
    out = {
        "benchmark": "volume_latency",
        "nodes": args.nodes,
        "no_claims": no_claims(args.nodes, args.stream, args.rounds),
        "local_volumes": local_volumes(args.nodes, args.claim_pods),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
