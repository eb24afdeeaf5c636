"""LeaderWorkerSet groups: what costing a group as a whole, since one evicted pod restarts all
of it, buys and costs.

Under its default ``restartPolicy`` the LeaderWorkerSet controller recreates a whole group --
the leader and its workers, one model sharded across them -- when any pod of it is deleted
(:mod:`fairgpu.sim.leader_worker_controller`). The scheduler costs a pod of a group as all of
the group's running pods (:mod:`fairgpu.engine.leader_worker_groups`), reading the labels the
controller puts on them. One workload, simulated three times in the same run: ``aware`` (the
labels on the pods), ``blind`` (the labels removed: each pod costed alone, as before; the
controller still recreates the groups), and ``kube_default`` ordering (the baseline of every
policy).

Cluster: 6 nodes x 8 GPUs, one pool. Queue ``llm`` starts 8 LeaderWorkerSet groups, one
every ~5 minutes: a leader and two workers, 2 GPUs each, serving with no declared run time
(until the end). Queue ``serve``
sends three waves of 24 one-GPU pods (at 30 min, 2 h and 4 h; 30-60 minutes each), which
take back their share from ``llm`` by reclaim. Until 6 h.

Prints one JSON object: per run the pods of groups torn down with an evicted sibling
(gang-restart runs), the groups running at the end, GPU-hours lost (by outcome), useful
allocation, ``serve``'s wait (p50, p99), preemptions by kind, reversals within 10 minutes;
then the ``aware / blind`` ratios.

Usage: ``python benchmarks/fragile_jobs/leaderworkersets.py [--seed 0] [--results FILE]``
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np
from run import UNTIL, compare, costs, node, pod, serve_waves

from fairgpu.engine.engine import Engine
from fairgpu.engine.leader_worker_groups import LABEL_GROUP_INDEX, LABEL_NAME
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy import parse_config

GROUPS, SIZE, GPUS = 8, 3, 2


def workload(seed: int, labelled: bool) -> Workload:
    """The nodes, groups and pods of the module docstring; ``labelled`` False: the group
    labels left off the pods (the controller recreates the groups all the same)."""
    rng = np.random.default_rng(seed)
    arrivals: list[PodArrival] = []
    groups: list[tuple[tuple[str, ...], bool]] = []
    at = 0.0
    for g in range(GROUPS):
        uids = []
        for w in range(SIZE):
            name = f"vllm-{g}" if w == 0 else f"vllm-{g}-{w}"
            # Serving replicas declare no run time: they serve until the end.
            p = dataclasses.replace(pod(name, "llm", at, GPUS, 0.0), annotations={})
            if labelled:
                labels = {LABEL_NAME: "vllm", LABEL_GROUP_INDEX: str(g)}
                p = dataclasses.replace(p, labels={**p.labels, **labels})
            arrivals.append(PodArrival(p, at, None))
            uids.append(p.uid)
        groups.append((tuple(uids), False))
        at += float(rng.exponential(300))
    arrivals.extend(serve_waves(rng))
    nodes = [node(i) for i in range(6)]
    return Workload("leader-worker-groups", nodes, arrivals, recreated_groups=groups)


def measure(seed: int, labelled: bool, ordering: str = "fair") -> dict[str, Any]:
    """One simulation of the workload."""
    tenancy = parse_config({"queues": [{"name": "llm"}, {"name": "serve"}]})
    engine = Engine(policy(DEFAULT_POLICY), seed, tenancy=tenancy, ordering=ordering)  # type: ignore[arg-type]
    wl = workload(seed, labelled)
    result = Simulation(wl, engine, seed=seed, until=UNTIL).run()
    restarted = [r for r in result.runs if r.namespace == "llm" and r.outcome == "gang-restart"]
    running = {a.uid for a in result.runs if a.outcome == "running"}
    return {
        "group_pods_torn_down": len(restarted),
        "groups_running_at_end": sum(1 for uids, _ in wl.recreated_groups if set(uids) <= running),
        **costs(result),
    }


def main(argv: list[str] | None = None) -> int:
    return compare("leader-worker-groups", argv, __doc__, measure, "blind")


if __name__ == "__main__":
    sys.exit(main())
