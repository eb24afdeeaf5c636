"""Kubeflow training jobs (``kubeflow.org``: PyTorchJob, TFJob, MPIJob, XGBoostJob,
PaddleJob, JAXJob) as a simulator workload: their replicas' pods, started as one gang.

A training job lists replica types (``spec.pytorchReplicaSpecs: {Master: ..., Worker:
...}``), each ``replicas`` pods (default 1) of one template. Its operator creates them all
at once, named ``<job>-<type>-<index>`` (the type in lower case) and labelled
``training.kubeflow.org/job-name``, ``replica-type``, ``replica-index`` (and ``job-role:
master`` on the Master, Chief or Launcher); with gang scheduling on -- what a distributed
run needs, and what a GPU cluster runs it with -- it also creates a PodGroup named after
the job, ``minMember`` the job's ``runPolicy.schedulingPolicy.minAvailable`` or else all of
its replicas, and its pods name that group (``scheduling.x-k8s.io/pod-group``). Here the
same: its pods start together or not at all. A pod template that names a pod group itself
keeps it. The job's ``fairgpu.io/arrival-seconds`` and ``fairgpu.io/duration-seconds`` reach
pods whose template has none. ``runPolicy.suspend: true``: no pods.

Not replayed: elastic policies (the group does not grow or shrink), success and clean-up
policies (each pod runs its declared run time).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairgpu.sim.workloads.kube_jobs import Controller, JobError, pass_timing
from fairgpu.tenancy.resolve import GROUP_KEYS, LABEL_COSCHEDULING

# Kind -> the field of its spec that holds its replica types.
REPLICA_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
}
GROUP = "kubeflow.org"
_LEADERS = ("master", "chief", "launcher")  # created first; job-role: master


@dataclass(frozen=True, slots=True)
class TrainingJob:
    """A training job's pods' documents, its pod group (``namespace/name``, minMember; None
    when it has no pods) and whether it is suspended."""

    pods: list[dict[str, Any]]
    group: tuple[str, int] | None
    suspended: bool


def is_training_job(doc: dict[str, Any]) -> bool:
    """Whether ``doc`` is one of the Kubeflow training jobs this module reads."""
    api = str(doc.get("apiVersion") or "")
    return doc.get("kind") in REPLICA_SPECS and api.split("/")[0] == GROUP


def expand_training_job(path: Path, doc: dict[str, Any]) -> TrainingJob:
    """The pods the training operator would create for ``doc`` (read from ``path``)."""
    kind = str(doc["kind"])
    c = Controller.of(path, doc, kind)
    meta, spec, namespace, where = c.meta, c.spec, c.namespace, c.where
    name = meta["name"]
    field = REPLICA_SPECS[kind]
    replica_specs = spec.get(field)
    if not isinstance(replica_specs, dict) or not replica_specs:
        raise JobError(f"{where}: spec.{field}: must map replica types to replica specs")
    run_policy = spec.get("runPolicy") or {}
    if run_policy.get("suspend") is True:
        return TrainingJob([], None, True)
    group = _pod_group_name(replica_specs, name)
    pods = []
    for rtype in sorted(replica_specs, key=lambda t: (t.lower() not in _LEADERS, t)):
        rspec = replica_specs[rtype]
        replicas = rspec.get("replicas", 1) if isinstance(rspec, dict) else None
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise JobError(f"{where}: spec.{field}.{rtype}.replicas: must be a whole number >= 0")
        for index in range(replicas):
            pods.append(_pod(kind, meta, namespace, rspec, rtype, index, group))
    if not pods:
        return TrainingJob([], None, False)
    return TrainingJob(
        pods, (f"{namespace}/{group}", _min_member(run_policy, len(pods), where)), False
    )


def _pod_group_name(replica_specs: dict[str, Any], name: str) -> str:
    """The pod group its pods join: one a template names itself, else the job's name."""
    for rspec in replica_specs.values():
        named = _named_group(((rspec or {}).get("template") or {}).get("metadata") or {})
        if named:
            return named
    return name


def _named_group(meta: dict[str, Any]) -> str:
    """The pod group a pod template's labels or annotations name ("" if none)."""
    for key in GROUP_KEYS:
        for where in ("labels", "annotations"):
            value = (meta.get(where) or {}).get(key)
            if value:
                return str(value)
    return ""


def _min_member(run_policy: dict[str, Any], total: int, where: str) -> int:
    """``runPolicy.schedulingPolicy.minAvailable``, else every replica."""
    value = (run_policy.get("schedulingPolicy") or {}).get("minAvailable")
    if value is None:
        return total
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= total:
        raise JobError(
            f"{where}: spec.runPolicy.schedulingPolicy.minAvailable: must be a whole number "
            f"from 1 to its {total} replicas, not {value!r}"
        )
    return value


def _pod(
    kind: str,
    meta: dict[str, Any],
    namespace: str,
    rspec: dict[str, Any],
    rtype: str,
    index: int,
    group: str,
) -> dict[str, Any]:
    """Replica ``index`` of type ``rtype``, as the operator creates it."""
    name = meta["name"]
    template = rspec.get("template") or {}
    pod_meta = copy.deepcopy(template.get("metadata") or {})
    pod_meta["name"] = f"{name}-{rtype.lower()}-{index}"
    pod_meta["namespace"] = namespace
    labels = pod_meta.setdefault("labels", {})
    labels.update(
        {
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/operator-name": f"{kind.lower()}-controller",
            "training.kubeflow.org/replica-type": rtype.lower(),
            "training.kubeflow.org/replica-index": str(index),
        }
    )
    if rtype.lower() in _LEADERS:
        labels["training.kubeflow.org/job-role"] = "master"
    if not _named_group(pod_meta):
        labels[LABEL_COSCHEDULING] = group
    pass_timing(meta, pod_meta.setdefault("annotations", {}))
    uid = str(meta.get("uid") or f"{kind.lower()}/{namespace}/{name}")
    pod_meta["ownerReferences"] = [
        {"apiVersion": f"{GROUP}/v1", "kind": kind, "name": name, "uid": uid, "controller": True}
    ]
    spec = copy.deepcopy(template.get("spec") or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}
