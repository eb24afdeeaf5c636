"""Engine cycle over a crowded cluster, with and without the failure memo, in one run.

300 nodes with every GPU taken and 3 000 pending pods of every kind (CPU only, 1-8 whole GPUs,
shares with and without GPU memory; five CPU sizes; eight namespaces), so nothing fits and
every pod needs a reason. The engine skips a pod whose ask already failed in the cycle (same
shape, or a bigger GPU ask within the failed one's CPU and memory ceiling) and hands on that
pod's reason; this measures what that saves and checks that every reason is the same as the
one computed without the shortcut. Prints one JSON object.

    python benchmarks/decision_latency/failure_memo.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine import memo as memo_keys
from fairgpu.engine.engine import Engine
from fairgpu.model.gpu import GpuRequest
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import CPU, MEMORY, PODS, PodInfo

GI = 2**30


def crowded(seed: int) -> tuple[ClusterState, list[PodInfo]]:
    """The full cluster and the pending pods (deterministic in ``seed``)."""
    rng = np.random.default_rng(seed)
    state = ClusterState(max_devices=8)
    for i in range(300):
        alloc = {CPU: 64_000, MEMORY: 512 * GI, PODS: 110}
        state.add_node(NodeInfo(f"n{i}", allocatable=alloc, gpu_count=8, gpu_memory_mib=16384))
    for i in range(300):
        for d in range(8):
            uid = f"r{i}-{d}"
            requests = {CPU: 4000, MEMORY: GI, PODS: 1}
            busy = PodInfo(uid, f"ns{d}", uid, requests=requests, gpu=GpuRequest(1))
            state.assign(busy, i, (d,), started=0.0)
    pending = []
    for j in range(3000):
        kind = int(rng.integers(3))
        cpu = int(rng.choice([1000, 2000, 4000, 8000, 16000]))
        if kind == 0:
            gpu, cpu = GpuRequest(), 70_000  # more CPU than any node has
        elif kind == 1:
            gpu = GpuRequest(int(rng.choice([1, 2, 4, 8])))
        else:
            milli = int(rng.choice([100, 200, 300, 500]))
            gpu = GpuRequest(1, milli, int(rng.choice([0, 2048, 4096])))
        requests = {CPU: cpu, MEMORY: GI, PODS: 1}
        pending.append(
            PodInfo(f"p{j}", f"ns{j % 8}", f"p{j}", requests=requests, gpu=gpu, created=float(j))
        )
    return state, pending


def one_cycle(seed: int) -> tuple[float, dict[str, str]]:
    state, pending = crowded(seed)
    engine = Engine()
    t0 = time.perf_counter()
    result = engine.cycle(state, pending, 10.0)
    return time.perf_counter() - t0, {u.pod.name: u.reason for u in result.unschedulable}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ask, memo = memo_keys.ask, memo_keys.memo_key
    with_memo, without, same = [], [], True
    for r in range(args.rounds):
        memo_keys.ask, memo_keys.memo_key = ask, memo
        seconds, fast = one_cycle(r)
        with_memo.append(seconds)
        memo_keys.ask = lambda *a: None  # type: ignore[assignment]
        memo_keys.memo_key = lambda *a: None  # type: ignore[assignment]
        seconds, slow = one_cycle(r)
        without.append(seconds)
        same = same and fast == slow
    memo_keys.ask, memo_keys.memo_key = ask, memo
    a, b = float(np.median(with_memo)), float(np.median(without))
    print(
        json.dumps(
            {
                "benchmark": "failure_memo",
                "nodes": 300,
                "pending": 3000,
                "cycle_s_with_memo": round(a, 4),
                "cycle_s_without": round(b, 4),
                "speedup": round(b / a, 2),
                "reasons_identical": same,
            }
        )
    )


if __name__ == "__main__":
    main()
