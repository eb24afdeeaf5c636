"""StatefulSets (apps/v1) as a simulator workload: the pods and claims their controller makes.

A StatefulSet of ``replicas`` pods names them ``<name>-0`` .. ``<name>-<n-1>``, labels each
with its name and index (``statefulset.kubernetes.io/pod-name``, ``apps.kubernetes.io/
pod-index``), sets its ``hostname`` and ``subdomain`` (``spec.serviceName``), and gives it a
PersistentVolumeClaim of each ``volumeClaimTemplates`` entry, named ``<claim>-<pod>``, mounted
as that volume. With the default ``podManagementPolicy: OrderedReady`` it creates pod ``i``
only once pod ``i-1`` runs (:mod:`fairgpu.sim.statefulset_controller`); ``Parallel`` creates
them all at once. Timing annotations on the StatefulSet apply to its pods, as for Jobs.

Not replayed: readiness probes (a pod counts as ready when it starts), ``minReadySeconds``,
updates and scale-down, and ``persistentVolumeClaimRetentionPolicy`` (a replay never deletes
the StatefulSet).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairgpu.sim.workloads.kube_jobs import Controller, JobError, pass_timing, whole_number

LABEL_POD_NAME = "statefulset.kubernetes.io/pod-name"
LABEL_POD_INDEX = "apps.kubernetes.io/pod-index"


@dataclass(slots=True)
class ExpandedStatefulSet:
    """One StatefulSet's pods' documents in index order, its claims' documents, and whether
    each pod waits for the one before it to run (``ordered``)."""

    key: str
    pods: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    ordered: bool = True


def expand_statefulset(path: Path, doc: dict[str, Any]) -> ExpandedStatefulSet:
    """The pods and claims the StatefulSet ``doc`` (read from ``path``) makes."""
    c = Controller.of(path, doc, "StatefulSet")
    meta, spec, namespace, where = c.meta, c.spec, c.namespace, c.where
    name = meta["name"]
    replicas = whole_number(spec, "replicas", 1, 0, f"{where}: spec.replicas")
    policy = spec.get("podManagementPolicy") or "OrderedReady"
    if policy not in ("OrderedReady", "Parallel"):
        raise JobError(
            f"{where}: spec.podManagementPolicy: must be OrderedReady or Parallel, not {policy!r}"
        )
    templates = spec.get("volumeClaimTemplates") or []
    if not isinstance(templates, list):
        raise JobError(f"{where}: spec.volumeClaimTemplates: must be a list")
    out = ExpandedStatefulSet(f"{namespace}/{name}", ordered=policy == "OrderedReady")
    template = spec.get("template") or {}
    for i in range(replicas):
        pod_name = f"{name}-{i}"
        pod_spec = copy.deepcopy(template.get("spec") or {})
        pod_meta = copy.deepcopy(template.get("metadata") or {})
        pod_meta.update(name=pod_name, namespace=namespace)
        labels = pod_meta.setdefault("labels", {})
        labels.update({LABEL_POD_NAME: pod_name, LABEL_POD_INDEX: str(i)})
        pass_timing(meta, pod_meta.setdefault("annotations", {}))
        pod_meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": name,
                "uid": str(meta.get("uid") or f"statefulset/{namespace}/{name}"),
                "controller": True,
            }
        ]
        pod_spec.setdefault("hostname", pod_name)
        if spec.get("serviceName"):
            pod_spec.setdefault("subdomain", spec["serviceName"])
        volumes = pod_spec.setdefault("volumes", [])
        for k, claim in enumerate(templates):
            claim_name = (
                (claim.get("metadata") or {}).get("name") if isinstance(claim, dict) else None
            )
            if not claim_name:
                raise JobError(f"{where}: spec.volumeClaimTemplates[{k}].metadata.name: required")
            pvc = f"{claim_name}-{pod_name}"
            volumes.append({"name": claim_name, "persistentVolumeClaim": {"claimName": pvc}})
            out.claims.append(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": pvc, "namespace": namespace},
                    "spec": copy.deepcopy(claim.get("spec") or {}),
                }
            )
        out.pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec})
    return out
