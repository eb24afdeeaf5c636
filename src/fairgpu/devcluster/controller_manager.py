"""The command line of kube-controller-manager running only the controllers a test needs.

A bare control plane runs no controllers (see :mod:`fairgpu.devcluster.controlplane`); some
behaviour the scheduler relies on is theirs, e.g. the ResourceClaims of pods that use a
ResourceClaimTemplate are created by the resourceclaim controller. Running just those
controllers keeps the test cluster small and its behaviour explicit: no node lifecycle,
garbage collection or service-account token controllers, which would need more setup.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["BINARY", "RESOURCECLAIM_CONTROLLER", "WORKLOAD_CONTROLLERS", "controller_manager_argv"]

#: The binary tools/kube/build-control-plane.sh builds next to kube-apiserver.
BINARY = "kube-controller-manager"
#: The 1.34 name of the controller that creates claims from templates, and removes
#: reservations (and the allocation of unused claims) once their pods are gone.
RESOURCECLAIM_CONTROLLER = "resourceclaim-controller"
#: What turns the objects users apply into pods and keeps them honest: Jobs, Deployments and
#: their ReplicaSets, PodDisruptionBudgets' status (without it an eviction of a pod a budget
#: covers is always refused), the garbage collector (deleting a Deployment deletes its pods)
#: and the ``default`` ServiceAccount of every namespace (without it no pod may be created
#: there).
WORKLOAD_CONTROLLERS = (
    "serviceaccount-controller",
    "job-controller",
    "deployment-controller",
    "replicaset-controller",
    "disruption-controller",
    "garbage-collector-controller",
)


def controller_manager_argv(
    binary: Path,
    kubeconfig: Path,
    port: int,
    cert_dir: Path,
    controllers: Sequence[str],
    *,
    feature_gates: str = "",
    verbosity: int = 1,
) -> list[str]:
    """kube-controller-manager with only ``controllers`` enabled, no leader election, its
    secure port on loopback (``/healthz`` is readable without credentials)."""
    if not controllers:
        raise ValueError("kube-controller-manager: name at least one controller")
    kc = str(kubeconfig)
    argv = [
        str(binary),
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        f"--controllers={','.join(controllers)}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        f"-v={verbosity}",
    ]
    if feature_gates:
        argv.append(f"--feature-gates={feature_gates}")
    return argv
