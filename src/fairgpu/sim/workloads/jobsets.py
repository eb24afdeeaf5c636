"""JobSets (``jobset.x-k8s.io``) as a simulator workload: the Jobs their controller creates.

A JobSet holds ``spec.replicatedJobs``; each one is ``replicas`` copies (default 1) of a Job
template, created as Jobs named ``<jobset>-<replicatedJob>-<index>`` whose pods carry the
JobSet's labels (``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``, ``job-index``).
Each child Job then runs as a batch/v1 Job (:mod:`~fairgpu.sim.workloads.kube_jobs`), so
its pods are paced by its own parallelism and completions. A suspended JobSet creates none.

Not replayed: ``startupPolicy: InOrder`` (every replicated Job starts at once here, as with
``AnyOrder``), success and failure policies (pods fail here only by eviction: a child Job that
fails by its ``backoffLimit`` fails alone, where the JobSet controller would fail or restart
the whole JobSet -- the scheduler itself costs such an eviction as the whole JobSet's, see
:mod:`fairgpu.engine.fragile_jobs`), and the exclusive
placement a JobSet's ``alpha.jobset.sigs.k8s.io/exclusive-topology`` annotation asks its
webhook for (write the pod affinity it would inject into the template to replay it).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from fairgpu.engine.fragile_jobs import LABEL_JOBSET
from fairgpu.sim.workloads.kube_jobs import (
    Controller,
    ExpandedJob,
    JobError,
    expand_job,
    pass_timing,
)

LABEL_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_JOB_INDEX = "jobset.sigs.k8s.io/job-index"


def expand_jobset(path: Path, doc: dict[str, Any]) -> tuple[list[ExpandedJob], bool]:
    """The child Jobs of the JobSet ``doc`` (read from ``path``), expanded, and whether it
    is suspended (then it has none)."""
    c = Controller.of(path, doc, "JobSet")
    meta, spec, namespace, where = c.meta, c.spec, c.namespace, c.where
    replicated = spec.get("replicatedJobs")
    if not isinstance(replicated, list) or not replicated:
        raise JobError(f"{where}: spec.replicatedJobs: must be a non-empty list")
    if spec.get("suspend") is True:
        return [], True
    jobs = []
    for i, rjob in enumerate(replicated):
        field = f"spec.replicatedJobs[{i}]"
        if not isinstance(rjob, dict) or not rjob.get("name"):
            raise JobError(f"{where}: {field}.name: required")
        replicas = rjob.get("replicas", 1)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise JobError(f"{where}: {field}.replicas: must be a whole number >= 0")
        for index in range(replicas):
            child = _child_job(meta, namespace, rjob, index)
            jobs.append(expand_job(path, child))
    return jobs, False


def _child_job(
    meta: dict[str, Any], namespace: str, rjob: dict[str, Any], index: int
) -> dict[str, Any]:
    """Job ``index`` of replicated Job ``rjob``, as the JobSet controller creates it: the
    JobSet's labels on it and on its pod template, its timing annotations passed down."""
    template = copy.deepcopy(rjob.get("template") or {})
    labels = {
        LABEL_JOBSET: meta["name"],
        LABEL_REPLICATED_JOB: rjob["name"],
        LABEL_JOB_INDEX: str(index),
    }
    job_meta = template.setdefault("metadata", {})
    job_meta["name"] = f"{meta['name']}-{rjob['name']}-{index}"
    job_meta["namespace"] = namespace
    job_meta.setdefault("labels", {}).update(labels)
    pass_timing(meta, job_meta.setdefault("annotations", {}))
    pod_template = template.setdefault("spec", {}).setdefault("template", {})
    pod_template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    return {"apiVersion": "batch/v1", "kind": "Job", **template}
