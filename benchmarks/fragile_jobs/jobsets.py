"""Fragile JobSets: what costing a JobSet as a whole, when one eviction fails its child Job,
buys and costs.

A JobSet's child Job that fails restarts the whole JobSet (its ``failurePolicy``; without
one the JobSet fails): every pod of it starts over (:mod:`fairgpu.sim.jobset_controller`).
The scheduler costs a pod of such a Job as every running pod of its JobSet
(:mod:`fairgpu.engine.fragile_jobs`), reading the ``jobset.sigs.k8s.io/jobset-name`` label.
One workload, simulated three times in the same run: ``aware`` (the label on the pods, as the
JobSet controller puts it), ``job_only`` (the label removed: only the leader's own Job is
costed as a whole -- what the scheduler did before it read the label), and ``kube_default``
ordering (the baseline of every policy).

Cluster: 6 nodes x 8 GPUs, one pool. Queue ``train`` submits 24 JobSets, one every ~10
minutes: a leader Job (one 2-GPU pod) and a workers Job (three 2-GPU pods at once), both
``backoffLimit: 0`` as distributed training sets them, about an hour each,
``failurePolicy: {maxRestarts: 2}``. Queue
``serve`` sends three waves of 24 one-GPU pods (at 30 min, 2 h and 4 h; 30-60 minutes
each), which take back their share from ``train`` by reclaim. Until 6 h.

Prints one JSON object: per run the JobSet restarts and failures, GPU-hours lost (by outcome),
useful allocation, ``serve``'s wait (p50, p99), preemptions by kind, reversals within 10
minutes; then the ``aware / job_only`` ratios.

Usage: ``python benchmarks/fragile_jobs/jobsets.py [--seed 0] [--results FILE]``
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np
from run import UNTIL, compare, costs, node, pod, serve_waves

from fairgpu.engine.engine import Engine
from fairgpu.engine.fragile_jobs import LABEL_JOBSET
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import BatchJob, JobSetPolicy, PodArrival, Workload
from fairgpu.tenancy import parse_config

JOBSETS, WORKERS, GPUS, MAX_RESTARTS = 24, 3, 2, 2


def workload(seed: int, labelled: bool) -> Workload:
    """The nodes, JobSets and pods of the module docstring; ``labelled`` False: the JobSet
    label left off the pods (the JobSets behave the same)."""
    rng = np.random.default_rng(seed)
    arrivals: list[PodArrival] = []
    jobs: list[BatchJob] = []
    jobsets: dict[str, JobSetPolicy] = {}
    at = 0.0
    for j in range(JOBSETS):
        name = f"llm-{j}"
        key = f"train/{name}"
        jobsets[key] = JobSetPolicy(key, True, MAX_RESTARTS)
        d = float(rng.lognormal(np.log(3600), 0.3))  # the JobSet's pods run together
        for replicated, count, limit in (("leader", 1, 0), ("workers", WORKERS, 0)):
            job = f"{name}-{replicated}-0"
            uid = f"job/train/{job}"
            uids = []
            for i in range(count):
                p = pod(f"{job}-{i}", "train", at, GPUS, d, owner=uid)  # same run time
                if labelled:
                    p = dataclasses.replace(p, labels={**p.labels, LABEL_JOBSET: name})
                arrivals.append(PodArrival(p, at, d))
                uids.append(p.uid)
            jobs.append(
                BatchJob(f"train/{job}", count, tuple(uids), limit, uid=uid, jobset=key,
                         replicated=replicated)
            )  # fmt: skip
        at += float(rng.exponential(600))
    arrivals.extend(serve_waves(rng))
    nodes = [node(i) for i in range(6)]
    return Workload("fragile-jobsets", nodes, arrivals, jobs=jobs, jobsets=jobsets)


def measure(seed: int, labelled: bool, ordering: str = "fair") -> dict[str, Any]:
    """One simulation of the workload."""
    tenancy = parse_config({"queues": [{"name": "train"}, {"name": "serve"}]})
    engine = Engine(policy(DEFAULT_POLICY), seed, tenancy=tenancy, ordering=ordering)  # type: ignore[arg-type]
    wl = workload(seed, labelled)
    result = Simulation(wl, engine, seed=seed, until=UNTIL).run()
    failed = {j.jobset for j in wl.jobs if j.key in result.failed_jobs}
    ended = {r.pod.uid for r in result.records if r.end is not None}
    finished = {
        key
        for key in wl.jobsets
        if all(set(j.pods) <= ended for j in result.jobs if j.jobset == key)
    }
    return {
        "jobset_restarts": len(result.jobset_restarts),
        "jobsets_failed": len(failed),
        "jobsets_finished": len(finished - failed),
        **costs(result),
    }


def main(argv: list[str] | None = None) -> int:
    return compare("fragile-jobsets", argv, __doc__, measure, "job_only")


if __name__ == "__main__":
    sys.exit(main())
