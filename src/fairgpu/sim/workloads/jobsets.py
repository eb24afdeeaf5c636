"""JobSets (``jobset.x-k8s.io``) as a simulator workload: the Jobs their controller creates.

A JobSet holds ``spec.replicatedJobs``; each one is ``replicas`` copies (default 1) of a Job
template, created as Jobs named ``<jobset>-<replicatedJob>-<index>`` whose pods carry the
JobSet's labels (``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``, ``job-index``).
Each child Job then runs as a batch/v1 Job (:mod:`~fairgpu.sim.workloads.kube_jobs`), so
its pods are paced by its own parallelism and completions. A suspended JobSet creates none.
``spec.failurePolicy`` (:func:`failure_policy`) decides what a failed child Job does -- the
JobSet fails, restarts or recreates that Job (:mod:`fairgpu.sim.jobset_controller`).

Not replayed: ``startupPolicy: InOrder`` (every replicated Job starts at once here, as with
``AnyOrder``), the success policy (a JobSet ends when its Jobs do), ``restartStrategy`` (a
restart creates the Jobs again at once), and the exclusive
placement a JobSet's ``alpha.jobset.sigs.k8s.io/exclusive-topology`` annotation asks its
webhook for (write the pod affinity it would inject into the template to replay it).
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

from fairgpu.engine.fragile_jobs import LABEL_JOBSET
from fairgpu.sim.workload import JobSetPolicy
from fairgpu.sim.workloads.kube_jobs import (
    Controller,
    ExpandedJob,
    JobError,
    expand_job,
    pass_timing,
)

#: The actions a JobSet failure-policy rule may take (:mod:`fairgpu.sim.jobset_controller`).
FAILURE_ACTIONS = (
    "FailJobSet",
    "RestartJobSet",
    "RestartJobSetAndIgnoreMaxRestarts",
    "RecreateJob",
)

LABEL_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_JOB_INDEX = "jobset.sigs.k8s.io/job-index"


def expand_jobset(path: Path, doc: dict[str, Any]) -> tuple[list[ExpandedJob], bool, JobSetPolicy]:
    """The child Jobs of the JobSet ``doc`` (read from ``path``), expanded, whether it is
    suspended (then it has none), and its failure policy."""
    c = Controller.of(path, doc, "JobSet")
    meta, spec, namespace, where = c.meta, c.spec, c.namespace, c.where
    replicated = spec.get("replicatedJobs")
    if not isinstance(replicated, list) or not replicated:
        raise JobError(f"{where}: spec.replicatedJobs: must be a non-empty list")
    policy = failure_policy(f"{namespace}/{meta['name']}", spec.get("failurePolicy"), where)
    if spec.get("suspend") is True:
        return [], True, policy
    jobs = []
    for i, rjob in enumerate(replicated):
        field = f"spec.replicatedJobs[{i}]"
        if not isinstance(rjob, dict) or not rjob.get("name"):
            raise JobError(f"{where}: {field}.name: required")
        replicas = rjob.get("replicas", 1)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise JobError(f"{where}: {field}.replicas: must be a whole number >= 0")
        for index in range(replicas):
            child = expand_job(path, _child_job(meta, namespace, rjob, index))
            jobs.append(dataclasses.replace(child, jobset=policy.key, replicated=rjob["name"]))
    return jobs, False, policy


def failure_policy(key: str, given: Any, where: str) -> JobSetPolicy:
    """The JobSet ``key``'s ``spec.failurePolicy`` (``given``; None: it has none), checked
    as the JobSet webhook does."""
    if given is None:
        return JobSetPolicy(key)
    field = "spec.failurePolicy"
    if not isinstance(given, dict):
        raise JobError(f"{where}: {field}: must be an object")
    limit = given.get("maxRestarts", 0)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise JobError(f"{where}: {field}.maxRestarts: must be a whole number >= 0")
    rules = []
    for i, rule in enumerate(given.get("rules") or []):
        at = f"{field}.rules[{i}]"
        action = rule.get("action") if isinstance(rule, dict) else None
        if action not in FAILURE_ACTIONS:
            raise JobError(f"{where}: {at}.action: must be one of {', '.join(FAILURE_ACTIONS)}")
        reasons = _names(rule.get("onJobFailureReasons"), f"{where}: {at}.onJobFailureReasons")
        targets = _names(rule.get("targetReplicatedJobs"), f"{where}: {at}.targetReplicatedJobs")
        rules.append((action, reasons, targets))
    return JobSetPolicy(key, True, limit, tuple(rules))


def _names(value: Any, where: str) -> frozenset[str]:
    """A list of names (absent: empty, matching any)."""
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise JobError(f"{where}: must be a list of names")
    return frozenset(value)


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
