"""Kubernetes YAML as a simulator workload.

Reads one or more multi-document YAML files (or directories of ``*.yaml``/``*.yml``) holding
Nodes, Pods, PriorityClasses, Deployments (expanded to their replicas) and PodGroups
(scheduler-plugins ``scheduling.x-k8s.io`` or Volcano ``scheduling.volcano.sh``), and the
storage objects pods mount (PersistentVolumeClaims, PersistentVolumes, StorageClasses,
CSINodes; in ``Workload.extra["storage"]``). Simulation-only
annotations give each pod its timing: ``fairgpu.io/arrival-seconds`` (default 0) and
``fairgpu.io/duration-seconds`` (default: runs until the end).

A malformed pod does not stop the replay: it is kept with its error and reported unschedulable.
A Node field read only for GPU detail that cannot be read (``nvidia.com/gpu.memory: 16Gi``)
keeps the node with a fallback, as the live scheduler does: it is logged once as a warning and
listed in the workload's ``extra["node_problems"]``. A node malformed otherwise, an unreadable
file or invalid YAML raises :class:`WorkloadError`.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import yaml

from fairgpu.api import objects as k8s
from fairgpu.api.dra import DRA_KINDS
from fairgpu.api.errors import InvalidObjectError
from fairgpu.model.dra import DraObject, decode_dra
from fairgpu.model.node import node_from_k8s
from fairgpu.model.node_pools import NodePoolConfig, derive_placement
from fairgpu.model.pod import ANN_ARRIVAL, ANN_DURATION, PodInfo, invalid_pod, pod_from_k8s
from fairgpu.model.volumes import STORAGE_KINDS, StorageObject, decode_storage
from fairgpu.sim.workload import PodArrival, Workload

DEFAULT_POOLS = NodePoolConfig()

log = logging.getLogger("fairgpu.sim.workloads")


class WorkloadError(ValueError):
    """A workload file cannot be used; the message names the file and what is wrong."""


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
            loaded = list(yaml.safe_load_all(text))
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


def load_kube_yaml(paths: list[Path], pools: NodePoolConfig | None = DEFAULT_POOLS) -> Workload:
    """Build a :class:`Workload` from Kubernetes YAML files.

    Pods labelled with a workload type get node-pool placement derived with ``pools``
    (``None`` turns derivation off).
    """
    docs = read_documents(paths)
    priority_classes: dict[str, int] = {}
    pod_groups: dict[str, int] = {}
    nodes = []
    problems: list[str] = []
    pod_docs: list[tuple[Path, dict[str, Any]]] = []
    ignored: dict[str, int] = {}
    storage: list[StorageObject] = []  # PVCs, PVs, StorageClasses, CSINodes
    dra: list[DraObject] = []  # DeviceClasses, ResourceSlices, ResourceClaims, templates
    for path, doc in docs:
        kind = doc.get("kind")
        if kind == "PriorityClass":
            try:
                pc = k8s.decode(doc, k8s.PriorityClass)
            except InvalidObjectError as error:
                raise WorkloadError(f"{path}: {error}") from None
            priority_classes[pc.metadata.name] = pc.value
        elif kind == "Node":
            try:
                node = node_from_k8s(k8s.decode(doc, k8s.Node))
            except InvalidObjectError as error:
                raise WorkloadError(f"{path}: {error}") from None
            for problem in node.problems:
                log.warning("%s: %s", path, problem.message)
                problems.append(f"{path}: {problem.message}")
            nodes.append(node)
        elif kind == "Pod":
            pod_docs.append((path, doc))
        elif kind == "Deployment":
            pod_docs.extend((path, d) for d in _expand_deployment(path, doc))
        elif kind == "PodGroup":
            meta = doc.get("metadata") or {}
            spec = doc.get("spec") or {}
            try:
                pod_groups[f"{meta.get('namespace') or 'default'}/{meta['name']}"] = int(
                    spec.get("minMember", 1)
                )
            except (KeyError, TypeError, ValueError):
                raise WorkloadError(
                    f"{path}: PodGroup {meta.get('name')}: spec.minMember must be an integer"
                ) from None
        elif kind in DRA_KINDS:
            try:
                dra.append(decode_dra(doc))
            except InvalidObjectError as error:
                raise WorkloadError(f"{path}: {error}") from None
        elif kind in STORAGE_KINDS:
            try:
                storage.append(decode_storage(doc))
            except InvalidObjectError as error:
                raise WorkloadError(f"{path}: {error}") from None
        else:
            ignored[str(kind)] = ignored.get(str(kind), 0) + 1
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise WorkloadError(f"Node {dup}: defined more than once")
    arrivals = []
    seen: set[str] = set()
    for _path, doc in pod_docs:
        try:
            pod = pod_from_k8s(k8s.decode(doc, k8s.Pod), priority_classes=priority_classes)
            if pools is not None:
                pod = derive_placement(pod, pools)
            arrival = _seconds(pod, ANN_ARRIVAL, 0.0) or 0.0
            duration = _seconds(pod, ANN_DURATION, None)
        except InvalidObjectError as error:
            pod, arrival, duration = invalid_pod(doc, error), 0.0, None
        if pod.uid in seen:
            pod = invalid_pod(
                doc, InvalidObjectError(f"Pod {pod.key}", "metadata.name", "duplicate")
            )
            pod.uid = f"{pod.uid}#{len(arrivals)}"
        seen.add(pod.uid)
        arrivals.append(PodArrival(pod, arrival, duration))
    description = f"{len(nodes)} nodes, {len(arrivals)} pods from " + ", ".join(
        str(p) for p in paths
    )
    return Workload(
        name=", ".join(Path(p).name for p in paths),
        nodes=nodes,
        arrivals=arrivals,
        pod_groups=pod_groups,
        description=description,
        extra={
            "ignored_kinds": ignored,
            "priority_classes": priority_classes,
            "node_problems": problems,
            "storage": storage,
            "dra": dra,
        },
    )


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
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": copy.deepcopy(template.get("metadata") or {}),
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        pod["metadata"]["name"] = f"{name}-{i}"
        pod["metadata"]["namespace"] = meta.get("namespace", "default")
        annotations = pod["metadata"].setdefault("annotations", {})
        for key in (ANN_ARRIVAL, ANN_DURATION):
            if key in (meta.get("annotations") or {}) and key not in annotations:
                annotations[key] = meta["annotations"][key]
        pod["metadata"]["ownerReferences"] = [
            {"kind": "Deployment", "name": name, "uid": f"deployment/{name}", "controller": True}
        ]
        pods.append(pod)
    return pods
