"""batch/v1 Jobs as a simulator workload: the pods the Job controller would create.

A Job runs ``spec.completions`` pods to success, at most ``spec.parallelism`` at a time (both
default to 1; without ``completions`` -- a work queue -- ``parallelism`` pods run and the Job
is done when they are). The controller creates the first ``min(parallelism, completions)``
pods when the Job is created and one more each time one succeeds, until ``completions`` have;
pods of an Indexed Job take the completion indexes in order. A suspended Job
(``spec.suspend: true``, as a queueing controller leaves it until admitted) has no pods.

:func:`expand_job` turns one Job document into its pods' documents -- named
``<job>-<index>``, labelled and owned as the controller labels and owns them (``job-name``,
``controller-uid``, the completion index), with the Job's ``fairgpu.io/arrival-seconds`` and
``fairgpu.io/duration-seconds`` when its template has none -- and how many of them the Job's
creation makes; the simulator creates the others as pods succeed
(:mod:`fairgpu.sim.job_controller`). A pod that is preempted waits again as the same pod
(the controller's replacement), but, as on a cluster, the eviction counts as a failed pod
against ``backoffLimit`` unless the Job's ``podFailurePolicy`` says what to do with a
disrupted pod (:mod:`~fairgpu.model.job_failures`): with ``backoffLimit: 0`` and no such rule
the first preemption fails the Job. ``activeDeadlineSeconds`` counts from the Job's creation,
waiting included: a Job still running (or waiting) then fails (``DeadlineExceeded``). Pods
never fail by themselves here, so exit-code rules for crashes change nothing. An Indexed Job
may limit failures per index (``backoffLimitPerIndex``; a ``FailIndex`` rule fails the index at
once): a failed index is not retried, more than ``maxFailedIndexes`` of them fail the Job, and
a Job whose indexes all succeeded or failed, some failed, fails then (``FailedIndexes``); its
Job-wide ``backoffLimit`` then defaults to unlimited, as the API server sets it.

The API server's own validation of what this reads is repeated, so a Job it would refuse is
refused here with the field named (:class:`~fairgpu.sim.workloads.kube_yaml.WorkloadError`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairgpu.model.job_failures import DEFAULT_BACKOFF_LIMIT, PolicyError, disruption_action
from fairgpu.model.pod import ANN_ACTUAL_RUN, ANN_ARRIVAL, ANN_DURATION

#: ``spec.backoffLimit`` as the API server defaults it beside ``backoffLimitPerIndex``.
UNLIMITED_BACKOFF = 2**31 - 1

# Labels (and the annotation) the Job controller puts on its pods.
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
LABEL_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LABEL_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
LEGACY_LABELS = ("job-name", "controller-uid")


class JobError(ValueError):
    """A Job the API server would refuse; the message names the Job and the field."""


@dataclass(frozen=True, slots=True)
class ExpandedJob:
    """One Job (``namespace/name``): its pods' documents in completion-index order, of which
    the first ``first`` exist from its creation on; ``suspended``: it has none;
    ``backoff_limit`` and ``on_disruption``: how an evicted pod counts
    (:class:`~fairgpu.sim.workload.BatchJob`)."""

    key: str
    pods: list[dict[str, Any]]
    first: int
    suspended: bool
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    on_disruption: str = "Count"
    active_deadline: float | None = None
    uid: str = ""
    jobset: str = ""  # the key of the JobSet it is a child of
    replicated: str = ""  # its replicated Job there
    per_index: int | None = None  # backoffLimitPerIndex
    max_failed_indexes: int | None = None


@dataclass(frozen=True, slots=True)
class Controller:
    """What every workload controller's object starts with: its metadata and spec, its
    namespace, and how an error names it (``<file>: <Kind> <namespace>/<name>``)."""

    meta: dict[str, Any]
    spec: dict[str, Any]
    namespace: str
    where: str

    @classmethod
    def of(cls, path: Path, doc: dict[str, Any], kind: str) -> Controller:
        """``doc`` (read from ``path``) as a ``kind``; it must have a name."""
        meta = doc.get("metadata") or {}
        name = meta.get("name")
        if not name:
            raise JobError(f"{path}: {kind} without metadata.name")
        namespace = meta.get("namespace") or "default"
        return cls(meta, doc.get("spec") or {}, namespace, f"{path}: {kind} {namespace}/{name}")


def whole_number(obj: dict[str, Any], key: str, default: int, minimum: int, field: str) -> int:
    """``obj[key]`` (``default`` when absent), a whole number >= ``minimum``; raises
    :class:`JobError` naming ``field`` (``<where>: <path>``) otherwise."""
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise JobError(f"{field}: must be a whole number >= {minimum}")
    return value


def pass_timing(owner: dict[str, Any], annotations: dict[str, Any]) -> None:
    """Copy the controller's ``fairgpu.io/arrival-seconds``, ``fairgpu.io/duration-seconds``
    and ``fairgpu.io/actual-run-seconds`` (``owner``: its metadata) into ``annotations`` (of
    the object it makes) where those are not set: users write them once, on the Deployment or
    the Job."""
    given = owner.get("annotations") or {}
    for key in (ANN_ARRIVAL, ANN_DURATION, ANN_ACTUAL_RUN):
        if key in given and key not in annotations:
            annotations[key] = given[key]


def expand_job(path: Path, doc: dict[str, Any]) -> ExpandedJob:
    """The pods the Job controller would create for the Job ``doc`` (read from ``path``)."""
    c = Controller.of(path, doc, "Job")
    meta, spec, namespace, where = c.meta, c.spec, c.namespace, c.where
    name = meta["name"]
    given = _count(spec, "parallelism", where)
    parallelism = 1 if given is None else given
    completions = _count(spec, "completions", where)
    indexed = _completion_mode(spec, completions, where)
    template = spec.get("template") or {}
    _check_restart_policy(template, where)
    total = parallelism if completions is None else completions
    suspended = spec.get("suspend") is True
    uid = str(meta.get("uid") or f"job/{namespace}/{name}")
    pods = (
        []
        if suspended
        else [job_pod_document(meta, template, uid, i, indexed) for i in range(total)]
    )
    first = total if completions is None else min(parallelism, total)
    limit = _count(spec, "backoffLimit", where)
    per_index, max_failed = _index_limits(spec, indexed, completions, where)
    if limit is None:
        # As the API server defaults it: with per-index limits the Job-wide one is unlimited.
        limit = UNLIMITED_BACKOFF if per_index is not None else DEFAULT_BACKOFF_LIMIT
    action = _disruption_action(spec, where)
    if action == "FailIndex" and per_index is None:
        raise JobError(
            f"{where}: spec.podFailurePolicy: the FailIndex action needs backoffLimitPerIndex"
        )
    return ExpandedJob(
        f"{namespace}/{name}",
        pods,
        first,
        suspended,
        limit,
        action,
        _deadline(spec, where),
        uid,
        per_index=per_index,
        max_failed_indexes=max_failed,
    )


def _index_limits(
    spec: dict[str, Any], indexed: bool, completions: int | None, where: str
) -> tuple[int | None, int | None]:
    """``spec.backoffLimitPerIndex`` and ``spec.maxFailedIndexes``, checked as the API server
    does: both only for an Indexed Job, the second only with the first and at most
    ``completions``."""
    per_index = _count(spec, "backoffLimitPerIndex", where)
    max_failed = _count(spec, "maxFailedIndexes", where)
    if per_index is not None and not indexed:
        raise JobError(f"{where}: spec.backoffLimitPerIndex: requires completionMode Indexed")
    if max_failed is not None:
        if per_index is None:
            raise JobError(f"{where}: spec.maxFailedIndexes: requires backoffLimitPerIndex")
        if completions is not None and max_failed > completions:
            raise JobError(f"{where}: spec.maxFailedIndexes: must be at most completions")
    return per_index, max_failed


def _disruption_action(spec: dict[str, Any], where: str) -> str:
    """:func:`~fairgpu.model.job_failures.disruption_action`, its error naming the Job."""
    try:
        return disruption_action(spec.get("podFailurePolicy"))
    except PolicyError as error:
        raise JobError(f"{where}: {error}") from None


def _deadline(spec: dict[str, Any], where: str) -> float | None:
    """``spec.activeDeadlineSeconds``: a whole number > 0, or None."""
    value = spec.get("activeDeadlineSeconds")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise JobError(f"{where}: spec.activeDeadlineSeconds: must be a whole number > 0")
    return float(value)


def _count(spec: dict[str, Any], field: str, where: str) -> int | None:
    """``spec.<field>``: a whole number >= 0, or None when absent."""
    value = spec.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise JobError(f"{where}: spec.{field}: must be a whole number >= 0, not {value!r}")
    return value


def _completion_mode(spec: dict[str, Any], completions: int | None, where: str) -> bool:
    """Whether the Job is Indexed (which needs ``completions``, as the API server says)."""
    mode = spec.get("completionMode") or "NonIndexed"
    if mode not in ("NonIndexed", "Indexed"):
        raise JobError(f"{where}: spec.completionMode: must be NonIndexed or Indexed, not {mode!r}")
    if mode == "Indexed" and completions is None:
        raise JobError(f"{where}: spec.completions: required when completionMode is Indexed")
    return mode == "Indexed"


def _check_restart_policy(template: dict[str, Any], where: str) -> None:
    """A Job's pods may not restart for ever: the API server requires Never or OnFailure."""
    policy = (template.get("spec") or {}).get("restartPolicy")
    if policy not in ("Never", "OnFailure"):
        raise JobError(
            f"{where}: spec.template.spec.restartPolicy: must be Never or OnFailure, not {policy!r}"
        )


def job_pod_document(
    meta: dict[str, Any], template: dict[str, Any], uid: str, index: int, indexed: bool
) -> dict[str, Any]:
    """The pod of completion ``index`` of the Job with metadata ``meta``, pod template
    ``template`` and uid ``uid``, as the controller creates it."""
    name = meta["name"]
    pod_meta = copy.deepcopy(template.get("metadata") or {})
    pod_meta["name"] = f"{name}-{index}"
    pod_meta["namespace"] = meta.get("namespace") or "default"
    labels = pod_meta.setdefault("labels", {})
    for key, value in ((LABEL_JOB_NAME, name), (LABEL_CONTROLLER_UID, uid)):
        labels[key] = value
    labels.update(zip(LEGACY_LABELS, (name, uid), strict=True))
    annotations = pod_meta.setdefault("annotations", {})
    if indexed:
        labels[LABEL_COMPLETION_INDEX] = str(index)
        annotations[LABEL_COMPLETION_INDEX] = str(index)
    pass_timing(meta, annotations)
    pod_meta["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True}
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_meta,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }
