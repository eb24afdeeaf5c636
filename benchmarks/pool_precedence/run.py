"""Pool precedence: what putting inference first on the hybrid pool buys and what it costs.

One workload, simulated with fair ordering twice in the same run -- without a precedence
rule and with ``{nodes: {example.com/node.usage: hybrid}, preemptor: inference, victims:
training}`` -- (and once more with kube-default ordering, below), the default placement
policy every time. Nodes: a training pool (2 x 8
GPUs), a hybrid pool (2 x 8) and an inference pool (1 x 8), one GPU model. Queue
``research`` (weight 3) submits training jobs of 1, 2 and 4 GPUs all along (median 1 h) and
fills the training and hybrid pools; queue ``product`` (weight 1) runs 6 replicas from the
start, and a traffic spike brings ``--spike`` more at ``t = 1 h`` (30-60 min each). During the
spike ``product`` is above its fair share of the GPUs it may use (weight 1 against 3), so no
share rule gives it the hybrid GPUs: without the rule the spike waits for training to end;
with it, training pods on the hybrid nodes give way.

A third run, the baseline of every policy: ``kube-default`` ordering (kube-scheduler's
priority then age, its priority preemption; no rule), the same workload.

Prints one JSON object: per run the spike replicas' wait (p50, p99, max, how many never
started), the GPU-hours lost to preemption, useful allocation (of the run) and allocation
per pool, preemptions by kind, reversals within 10 minutes, each queue's useful GPU-hours;
then ``with / without`` ratios of the spike's wait p99 and of useful allocation. Served
sooner, the spike runs on hybrid GPUs training would have used and is over before the run
ends: the inference pool then stands idle where, without the rule, the late spike still ran
-- so useful allocation over the run falls by more than the lost GPU-hours, and ``research``
ends with fewer GPU-hours.

Usage: ``python benchmarks/pool_precedence/run.py [--seed 0] [--spike 14]``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.model.gpu import GpuRequest
from fairgpu.model.node import NodeInfo
from fairgpu.model.node_pools import derive_placement
from fairgpu.model.pod import ANN_DURATION, CPU, LABEL_WORKLOAD, MEMORY, PODS, PodInfo
from fairgpu.model.selectors import Taint
from fairgpu.sim.results import accounting_summary
from fairgpu.sim.simulator import Simulation, percentile
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy import parse_config

GI = 2**30
USAGE = "example.com/node.usage"
MODEL = "NVIDIA-A100-SXM4-80GB"
RULE = {"nodes": {USAGE: "hybrid"}, "preemptor": "inference", "victims": "training"}
SPIKE_AT = 3600.0
UNTIL = 4 * 3600.0


def node(name: str, pool: str) -> NodeInfo:
    """An 8-GPU node of ``pool``, labelled and tainted as node pools are."""
    return NodeInfo(
        name=name,
        labels={USAGE: pool, "nvidia.com/gpu.product": MODEL},
        taints=(Taint(USAGE, pool, "NoSchedule"),),
        allocatable={CPU: 128_000, MEMORY: 1024 * GI, PODS: 110},
        gpu_count=8,
        gpu_memory_mib=81920,
        gpu_model=MODEL,
    )


def pod(name: str, queue: str, kind: str, at: float, gpus: int, duration: float) -> PodArrival:
    """A pod of workload type ``kind`` (its pools derived) declaring its run time."""
    p = PodInfo(
        name=name,
        namespace=queue,
        uid=f"{queue}/{name}",
        labels={LABEL_WORKLOAD: kind},
        annotations={ANN_DURATION: f"{duration:.1f}"},
        requests={CPU: 4000, MEMORY: 16 * GI, PODS: 1},
        gpu=GpuRequest(gpus),
        created=at,
        scheduler_name="fairgpu",
    )
    return PodArrival(derive_placement(p), at, duration)


def workload(seed: int, spike: int) -> Workload:
    """The nodes and arrivals described in the module docstring."""
    rng = np.random.default_rng(seed)
    nodes = [node(f"train-{i}", "training") for i in range(2)]
    nodes += [node(f"hybrid-{i}", "hybrid") for i in range(2)]
    nodes += [node("infer-0", "inference")]
    arrivals = []
    at = 0.0
    for j in range(120):
        gpus = int(rng.choice([1, 1, 2, 4]))
        d = float(rng.lognormal(np.log(3600), 0.5))
        arrivals.append(pod(f"train-{j:03d}", "research", "training", at, gpus, d))
        at += float(rng.exponential(90))
    for j in range(6):
        arrivals.append(pod(f"base-{j}", "product", "inference", 0.0, 1, UNTIL))
    for j in range(spike):
        d = float(rng.uniform(1800, 3600))
        arrivals.append(pod(f"spike-{j:02d}", "product", "inference", SPIKE_AT + j, 1, d))
    return Workload("pool-precedence", nodes, arrivals)


def measure(seed: int, spike: int, rule: bool, ordering: str = "fair") -> dict[str, Any]:
    """One simulation, with or without the rule, in ``ordering``."""
    config: dict[str, Any] = {"queues": [{"name": "research", "weight": 3}, {"name": "product"}]}
    if rule:
        config["preemption"] = {"poolPrecedence": [RULE]}
    tenancy = parse_config(config)
    engine = Engine(policy(DEFAULT_POLICY), seed, tenancy=tenancy, ordering=ordering)  # type: ignore[arg-type]
    result = Simulation(workload(seed, spike), engine, seed=seed, until=UNTIL).run()
    acc = accounting_summary(result)
    spikes = [r for r in result.records if r.pod.name.startswith("spike-")]
    waits = [r.start - r.arrival for r in spikes if r.start is not None]
    kinds: dict[str, int] = {}
    held: dict[str, float] = {}
    for a in result.runs:
        if a.outcome == "preempted":
            kinds[a.cause] = kinds.get(a.cause, 0) + 1
        pool = a.node.split("-")[0]
        end = a.end if a.end is not None else result.end_time
        held[pool] = held.get(pool, 0.0) + (end - a.start) * a.gpu.count
    gpus = {"train": 16, "hybrid": 16, "infer": 8}
    return {
        "spike_wait_p50_s": round(percentile(waits, 50) or 0.0, 1),
        "spike_wait_p99_s": round(percentile(waits, 99) or 0.0, 1),
        "spike_wait_max_s": round(max(waits, default=0.0), 1),
        "spike_never_started": len(spikes) - len(waits),
        "lost_gpu_hours": acc["lost_gpu_hours"],
        "lost_pct_of_capacity": acc["lost_pct_of_capacity"],
        "useful_allocation_pct": acc["useful_allocation_pct"],
        "allocation_pct_by_pool": {
            p: round(100.0 * held.get(p, 0.0) / (g * result.end_time), 2) for p, g in gpus.items()
        },
        "preemptions_by_kind": kinds,
        "reversals_10min": acc["reversals"]["10min"],
        "useful_gpu_hours_by_queue": {
            q: round(pct / 100.0 * 40 * result.end_time / 3600.0, 2)
            for q, pct in acc["tenant_useful_pct"].items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spike", type=int, default=14, help="replicas the spike brings")
    ap.add_argument("--results", type=Path, help="also write the JSON here")
    args = ap.parse_args(argv)
    without = measure(args.seed, args.spike, rule=False)
    with_rule = measure(args.seed, args.spike, rule=True)
    kube = measure(args.seed, args.spike, rule=False, ordering="kube-default")

    def ratio(key: str) -> float | None:
        base = without[key]
        return None if not base else round(with_rule[key] / base, 3)

    out = {
        "scenario": "pool-precedence",
        "seed": args.seed,
        "spike": args.spike,
        "without_rule": without,
        "with_rule": with_rule,
        "kube_default": kube,
        "ratio_with_over_without": {
            "spike_wait_p99": ratio("spike_wait_p99_s"),
            "useful_allocation": ratio("useful_allocation_pct"),
        },
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.results:
        args.results.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
