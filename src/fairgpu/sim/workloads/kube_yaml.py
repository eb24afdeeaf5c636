"""Kubernetes YAML as a simulator workload.

Reads one or more multi-document YAML files (or directories of ``*.yaml``/``*.yml``) holding
Nodes, Namespaces (their labels feed pod affinity's namespaceSelector), Services (their
selectors give pods default spread constraints), Pods, PriorityClasses,
Deployments (expanded to their replicas), StatefulSets (their pods, claims and creation
order: :mod:`~fairgpu.sim.workloads.statefulsets`), LeaderWorkerSets (their groups of a
leader and workers: :mod:`~fairgpu.sim.workloads.leaderworkersets`), batch/v1 Jobs (the
pods their controller creates: :mod:`~fairgpu.sim.workloads.kube_jobs`), JobSets (their Jobs:
:mod:`~fairgpu.sim.workloads.jobsets`), Kubeflow training jobs (their replicas as one gang:
:mod:`~fairgpu.sim.workloads.kubeflow`) and PodGroups (scheduler-plugins
``scheduling.x-k8s.io`` or Volcano ``scheduling.volcano.sh``), and the storage objects pods
mount (PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes with the
VolumeAttachments counted against their limits, and CSIDrivers with the CSIStorageCapacities
that limit dynamic provisioning; in
``Workload.extra["storage"]``), and Dynamic Resource Allocation objects (DeviceClasses,
ResourceSlices, ResourceClaims and templates; in ``Workload.extra["dra"]``). Simulation-only
annotations give each pod its timing: ``fairgpu.io/arrival-seconds`` (default 0) and
``fairgpu.io/duration-seconds`` (default: runs until the end) -- which the pod also declares to
the scheduler; ``fairgpu.io/actual-run-seconds`` makes it run that long instead (a declaration
that is off, as users' estimates are).

A workload may be a cluster's own export (``kubectl get nodes,pods -A -o yaml``): pods that
already ended (``status.phase`` Succeeded or Failed) are left out, and a pod whose
``spec.nodeName`` is set starts on that node when it arrives, as its kubelet admits it
(:meth:`~fairgpu.sim.simulator.Simulation._admit_assigned`).

A malformed pod does not stop the replay: it is kept with its error and reported unschedulable.
A Node field read only for GPU detail that cannot be read (``nvidia.com/gpu.memory: 16Gi``)
keeps the node with a fallback, as the live scheduler does: it is logged once as a warning and
listed in the workload's ``extra["node_problems"]``. A node malformed otherwise, an unreadable
file or invalid YAML raises :class:`WorkloadError`.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fairgpu.api import objects as k8s
from fairgpu.api.dra import DRA_KINDS
from fairgpu.api.errors import InvalidObjectError, RefusedObjectError
from fairgpu.model.dra import DraObject, decode_dra
from fairgpu.model.gpu import DEFAULT_NAMES
from fairgpu.model.node import NodeInfo, node_from_k8s
from fairgpu.model.node_pools import NodePoolConfig, derive_placement
from fairgpu.model.pod import (
    ANN_ACTUAL_RUN,
    ANN_ARRIVAL,
    ANN_DURATION,
    PodInfo,
    bound_pod_holding,
    invalid_pod,
    pod_from_k8s,
)
from fairgpu.model.priority import PriorityClasses
from fairgpu.model.volumes import STORAGE_KINDS, StorageObject, decode_storage
from fairgpu.sim.workload import BatchJob, JobSetPolicy, PodArrival, Workload
from fairgpu.sim.workloads.jobsets import expand_jobset
from fairgpu.sim.workloads.kube_jobs import ExpandedJob, JobError, expand_job, pass_timing
from fairgpu.sim.workloads.kubeflow import expand_training_job, is_training_job
from fairgpu.sim.workloads.leaderworkersets import (
    RECREATE_AFTER_START,
    ExpandedLeaderWorkerSet,
    expand_leaderworkerset,
)
from fairgpu.sim.workloads.statefulsets import expand_statefulset

DEFAULT_POOLS = NodePoolConfig()

log = logging.getLogger("fairgpu.sim.workloads")


class WorkloadError(ValueError):
    """A workload file cannot be used; the message names the file and what is wrong."""


class _Loader(yaml.SafeLoader):
    """YAML 1.1 without implicit timestamps: an unquoted ``creationTimestamp`` stays the RFC
    3339 text the API would send, as every other field of an object does."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in rules if tag != "tag:yaml.org,2002:timestamp"]
    for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out.extend(sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")))
        elif path.exists():
            out.append(path)
        else:
            raise WorkloadError(f"{path}: no such file or directory")
    return out


def read_documents(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """All YAML documents (flattening ``kind: List``) with the file each came from."""
    docs: list[tuple[Path, dict[str, Any]]] = []
    for path in _files(paths):
        try:
            text = path.read_text()
            loaded = list(yaml.load_all(text, Loader=_Loader))  # _Loader is a SafeLoader
        except yaml.YAMLError as error:
            raise WorkloadError(f"{path}: invalid YAML: {error}") from None
        except (OSError, UnicodeDecodeError) as error:
            raise WorkloadError(f"{path}: cannot read: {error}") from None
        for doc in loaded:
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise WorkloadError(f"{path}: every document must be a mapping, got {doc!r:.60}")
            if doc.get("kind") == "List" or (
                isinstance(doc.get("items"), list) and "kind" not in doc
            ):
                docs.extend((path, item) for item in doc["items"] if isinstance(item, dict))
            else:
                docs.append((path, doc))
    return docs


def _seconds(pod: PodInfo, key: str, default: float | None) -> float | None:
    text = pod.annotations.get(key)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise InvalidObjectError(
            f"Pod {pod.key}",
            f"metadata.annotations[{key}]",
            f"{text!r} is not a non-negative number of seconds",
        )
    return value


@dataclass
class _Objects:
    """What a workload's documents hold, by kind, in file order."""

    priority_classes: PriorityClasses = field(default_factory=PriorityClasses)
    pod_groups: dict[str, int] = field(default_factory=dict)
    nodes: list[NodeInfo] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    pod_docs: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)
    jobs: list[tuple[int, ExpandedJob]] = field(default_factory=list)  # (first pod doc, job)
    jobsets: dict[str, JobSetPolicy] = field(default_factory=dict)  # their failure policies
    ordered: list[tuple[int, int]] = field(default_factory=list)  # (first pod doc, pods)
    # LeaderWorkerSet groups one eviction recreates: (first pod doc, pods, after start only)
    recreated: list[tuple[int, int, bool]] = field(default_factory=list)
    # LeaderWorkerSet groups whose workers wait for their leader: (first pod doc, pods)
    fanned: list[tuple[int, int]] = field(default_factory=list)
    loose: set[str] = field(default_factory=set)  # LeaderWorkerSets restarting pods alone
    suspended: list[str] = field(default_factory=list)  # "Job ns/name", "JobSet ns/name"
    finished: int = 0  # pods whose status.phase says they ended: they hold nothing
    storage: list[StorageObject] = field(default_factory=list)  # PVCs, PVs, classes, CSI objects
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> labels
    services: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # ns -> selectors
    dra: list[DraObject] = field(default_factory=list)  # classes, slices, claims, templates


def load_kube_yaml(
    paths: list[Path],
    pools: NodePoolConfig | None = DEFAULT_POOLS,
    priority_classes: PriorityClasses | None = None,
) -> Workload:
    """Build a :class:`Workload` from Kubernetes YAML files.

    Pods labelled with a workload type get node-pool placement derived with ``pools``
    (``None`` turns derivation off). Their priority and preemption policy are admitted as the
    API server would (:mod:`~fairgpu.model.priority`) with the files' PriorityClasses, added
    to ``priority_classes`` (a cluster's) when given.
    """
    objects = _Objects()
    if priority_classes is not None:
        objects.priority_classes = priority_classes.copy()
    for path, doc in read_documents(paths):
        try:
            _collect(path, doc, objects)
        except InvalidObjectError as error:
            raise WorkloadError(f"{path}: {error}") from None
        except JobError as error:
            raise WorkloadError(str(error)) from None
    nodes = objects.nodes
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise WorkloadError(f"Node {dup}: defined more than once")
    arrivals = _arrivals(objects.pod_docs, objects.priority_classes, pools)
    jobs = [
        BatchJob(
            job.key,
            job.first,
            tuple(a.pod.uid for a in arrivals[at : at + len(job.pods)]),
            job.backoff_limit,
            job.on_disruption,
            job.active_deadline,
            job.uid,
            job.jobset,
            job.replicated,
            job.per_index,
            job.max_failed_indexes,
        )
        for at, job in objects.jobs
        if job.pods
    ]
    n, m = len(nodes), len(arrivals)
    description = f"{n} node{'s' * (n != 1)}, {m} pod{'s' * (m != 1)} from " + ", ".join(
        str(p) for p in paths
    )
    return Workload(
        name=", ".join(Path(p).name for p in paths),
        nodes=nodes,
        arrivals=arrivals,
        pod_groups=objects.pod_groups,
        description=description,
        jobs=jobs,
        jobsets=objects.jobsets,
        ordered=[tuple(a.pod.uid for a in arrivals[at : at + n]) for at, n in objects.ordered],
        recreated_groups=[
            (tuple(a.pod.uid for a in arrivals[at : at + n]), after_start)
            for at, n, after_start in objects.recreated
        ],
        fanned=[tuple(a.pod.uid for a in arrivals[at : at + n]) for at, n in objects.fanned],
        loose_leader_worker_sets=frozenset(objects.loose),
        extra={
            "ignored_kinds": objects.ignored,
            "suspended": objects.suspended,
            "finished_pods": objects.finished,
            "priority_classes": objects.priority_classes,
            "node_problems": objects.problems,
            "storage": objects.storage,
            "namespace_labels": objects.namespaces,
            "service_selectors": objects.services,
            "dra": objects.dra,
        },
    )


def skipped_objects(workload: Workload) -> list[str]:
    """What of a YAML workload does not take part in its replay, worded for a person: the
    kinds nothing here reads (their controllers are not simulated), suspended jobs (they
    create no pods) and pods that already ended."""
    notes = []
    ignored = workload.extra.get("ignored_kinds") or {}
    if ignored:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(ignored.items()))
        notes.append(f"skipped (kinds the simulator does not replay): {kinds}")
    for what in workload.extra.get("suspended") or ():
        notes.append(f"{what} is suspended (spec.suspend): it creates no pods")
    finished = workload.extra.get("finished_pods") or 0
    if finished:
        notes.append(
            f"skipped {finished} pod(s) that already ended (status.phase Succeeded or Failed)"
        )
    return notes


def _collect(path: Path, doc: dict[str, Any], out: _Objects) -> None:
    """Add one document to ``out`` by its kind (raises :class:`InvalidObjectError` or
    :class:`WorkloadError` when it is malformed)."""
    kind = doc.get("kind")
    if kind in _POD_MAKERS or is_training_job(doc):
        _collect_pods(path, doc, out)
    elif kind == "PriorityClass":
        out.priority_classes.add(k8s.decode(doc, k8s.PriorityClass))
    elif kind == "Node":
        node = node_from_k8s(k8s.decode(doc, k8s.Node))
        for problem in node.problems:
            log.warning("%s: %s", path, problem.message)
            out.problems.append(f"{path}: {problem.message}")
        out.nodes.append(node)
    elif kind == "Namespace":
        ns = k8s.decode(doc, k8s.Namespace)
        # The API server labels every Namespace with its own name.
        out.namespaces[ns.metadata.name] = {
            **ns.metadata.labels,
            "kubernetes.io/metadata.name": ns.metadata.name,
        }
    elif kind == "Service":
        svc = k8s.decode(doc, k8s.Service)
        if svc.spec.selector:  # a Service without a selector selects no pod
            namespace = svc.metadata.namespace or "default"
            out.services.setdefault(namespace, []).append(dict(svc.spec.selector))
    elif kind == "PodGroup":
        key, min_member = _pod_group(path, doc)
        out.pod_groups[key] = min_member
    elif kind in STORAGE_KINDS:
        out.storage.append(decode_storage(doc))
    elif kind in DRA_KINDS:
        out.dra.append(decode_dra(doc))
    else:
        out.ignored[str(kind)] = out.ignored.get(str(kind), 0) + 1


_POD_MAKERS = ("Pod", "Deployment", "Job", "JobSet", "StatefulSet", "LeaderWorkerSet")


def _collect_pods(path: Path, doc: dict[str, Any], out: _Objects) -> None:
    """A Pod, or the pods a controller would make of ``doc`` (with its pacing and its pod
    group, or a note that it is suspended)."""
    kind = doc.get("kind")
    if kind == "Pod":
        if (doc.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            out.finished += 1  # as a cluster export lists them: they hold nothing any more
        else:
            out.pod_docs.append((path, doc))
    elif kind == "Deployment":
        out.pod_docs.extend((path, d) for d in _expand_deployment(path, doc))
    elif kind == "Job":
        _add_jobs(path, [expand_job(path, doc)], out)
    elif kind == "StatefulSet":
        made = expand_statefulset(path, doc)
        if made.ordered and len(made.pods) > 1:
            out.ordered.append((len(out.pod_docs), len(made.pods)))
        out.pod_docs.extend((path, d) for d in made.pods)
        for claim in made.claims:
            _collect(path, claim, out)
    elif kind == "LeaderWorkerSet":
        _add_leader_workers(path, expand_leaderworkerset(path, doc), out)
    elif kind == "JobSet":
        jobs, suspended, policy = expand_jobset(path, doc)
        out.jobsets[policy.key] = policy
        _add_jobs(path, jobs, out)
        if suspended:
            out.suspended.append(f"JobSet {_key(doc)}")
    else:
        training = expand_training_job(path, doc)
        out.pod_docs.extend((path, d) for d in training.pods)
        if training.group is not None:
            out.pod_groups.setdefault(*training.group)  # a PodGroup object of it wins
        if training.suspended:
            out.suspended.append(f"{kind} {_key(doc)}")


def _add_leader_workers(path: Path, lws: ExpandedLeaderWorkerSet, out: _Objects) -> None:
    """A LeaderWorkerSet's pods to replay, each group with what its controller does: recreate
    it whole when one of its pods goes, and create its workers only once its leader runs."""
    after_start = lws.restart_policy == RECREATE_AFTER_START
    if not lws.recreates_groups:
        out.loose.add(lws.key)
    for at in range(len(out.pod_docs), len(out.pod_docs) + len(lws.pods), lws.size):
        if lws.recreates_groups:
            out.recreated.append((at, lws.size, after_start))
        if lws.leader_first and lws.size > 1:
            out.fanned.append((at, lws.size))
    out.pod_docs.extend((path, d) for d in lws.pods)


def _add_jobs(path: Path, jobs: list[ExpandedJob], out: _Objects) -> None:
    """Jobs' pods to replay, each Job with where its pods start in ``out.pod_docs``."""
    for job in jobs:
        if job.suspended:
            out.suspended.append(f"Job {job.key}")
        out.jobs.append((len(out.pod_docs), job))
        out.pod_docs.extend((path, d) for d in job.pods)


def _key(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _pod_group(path: Path, doc: dict[str, Any]) -> tuple[str, int]:
    """A PodGroup's ``namespace/name`` and its ``spec.minMember``."""
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    try:
        return f"{meta.get('namespace') or 'default'}/{meta['name']}", int(spec.get("minMember", 1))
    except (KeyError, TypeError, ValueError):
        raise WorkloadError(
            f"{path}: PodGroup {meta.get('name')}: spec.minMember must be an integer"
        ) from None


def _arrivals(
    pod_docs: list[tuple[Path, dict[str, Any]]],
    priority_classes: PriorityClasses,
    pools: NodePoolConfig | None,
) -> list[PodArrival]:
    """Each pod document decoded with its timing; a malformed or duplicate pod is kept with
    its error."""
    arrivals: list[PodArrival] = []
    seen: set[str] = set()
    for _path, doc in pod_docs:
        try:
            pod = _decode_pod(doc, priority_classes)
            if pools is not None:
                pod = derive_placement(pod, pools)
            arrival = _seconds(pod, ANN_ARRIVAL, 0.0) or 0.0
            # What the pod really runs: its actual run time when the workload gives one
            # apart from what the pod declares to the scheduler.
            duration = _seconds(pod, ANN_ACTUAL_RUN, _seconds(pod, ANN_DURATION, None))
            if not (doc.get("metadata") or {}).get("creationTimestamp"):
                pod.created = arrival  # the API stamps a pod when it arrives
        except InvalidObjectError as error:
            pod, arrival, duration = invalid_pod(doc, error), 0.0, None
        if pod.uid in seen:
            pod = invalid_pod(
                doc, InvalidObjectError(f"Pod {pod.key}", "metadata.name", "duplicate")
            )
            pod.uid = f"{pod.uid}#{len(arrivals)}"
        seen.add(pod.uid)
        arrivals.append(PodArrival(pod, arrival, duration))
    return arrivals


def _decode_pod(doc: dict[str, Any], priority_classes: PriorityClasses) -> PodInfo:
    """A pod document decoded as the scheduler decodes it; one bound to a node that fails to
    decode (and that the API server would have accepted) holds what it asked there all the
    same, as in the live cache (:func:`~fairgpu.model.pod.bound_pod_holding`)."""
    raw = k8s.decode(doc, k8s.Pod)
    try:
        return pod_from_k8s(raw, priority_classes=priority_classes)
    except RefusedObjectError:
        raise
    except InvalidObjectError as error:
        if not raw.spec.node_name:
            raise
        return bound_pod_holding(raw, DEFAULT_NAMES, error)


def _expand_deployment(path: Path, doc: dict[str, Any]) -> list[dict[str, Any]]:
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    name = meta.get("name")
    if not name:
        raise WorkloadError(f"{path}: Deployment without metadata.name")
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or replicas < 0:
        raise WorkloadError(f"{path}: Deployment {name}: spec.replicas must be a whole number >= 0")
    template = spec.get("template") or {}
    pods = []
    for i in range(replicas):
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": copy.deepcopy(template.get("metadata") or {}),
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        pod["metadata"]["name"] = f"{name}-{i}"
        pod["metadata"]["namespace"] = meta.get("namespace", "default")
        pass_timing(meta, pod["metadata"].setdefault("annotations", {}))
        pod["metadata"]["ownerReferences"] = [
            {"kind": "Deployment", "name": name, "uid": f"deployment/{name}", "controller": True}
        ]
        pods.append(pod)
    return pods
