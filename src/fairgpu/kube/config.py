"""Settings of the live scheduler (``fairgpu run``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fairgpu.engine.policies import DEFAULT_POLICY
from fairgpu.kube.client import Connection

__all__ = ["RunConfig"]


@dataclass(slots=True)
class RunConfig:
    """Settings of ``fairgpu run`` (each documented where the CLI option is defined).

    Attributes:
        kubeconfig: kubeconfig path; None: ``$KUBECONFIG``, ``~/.kube/config`` or in-cluster.
        context: kubeconfig context (None: current).
        tenancy: tenancy YAML (queues, quotas; the simulator's ``--config``).
        policy: placement policy name.
        ordering: ``fair`` or ``kube-default``.
        scheduler_name: pods with this ``spec.schedulerName`` are scheduled.
        leader_elect: campaign for the Lease; without it this replica always schedules.
        lease_namespace, lease_name: the Lease.
        lease_duration, renew_deadline, retry_period: leader-election timings (seconds).
        identity: candidate id (default: hostname + random suffix).
        metrics_host, metrics_port: HTTP endpoint (port 0: pick a free one).
        qps, burst: client-side rate limit for binds and evictions (``qps <= 0``: none).
        bind_workers: concurrent bind calls.
        max_batch: most pending pods per engine cycle (0: all). Smaller cycles let binds of
            one batch overlap the engine's work on the next; every queue is represented in
            each batch (round robin over queues, oldest highest-priority jobs first, pod
            groups whole), and the engine orders each batch fairly.
        events_qps: rate cap for Events + PodScheduled conditions.
        node_pool_label: the node-pool label/taint key used to derive placement from a
            ``fairgpu.io/workload-type`` label.
        max_devices: deprecated and ignored (the cache holds nodes of any GPU count).
        seed: engine seed.
        resync_seconds: run a cycle at least this often while pods are pending.
        preemption_wait: seconds a preemptor waits for its victims to go before it is requeued.
        pdb_backoff: seconds a victim whose eviction a PodDisruptionBudget refused is spared.
        podgroup_discovery_seconds: how often to look for PodGroup APIs (CRDs) not watched
            yet, so one installed after the start is picked up, and to list the
            LeaderWorkerSets whose pods restart alone (:mod:`~fairgpu.kube.
            leader_worker_policies`).
        forecast_seconds: how often the leader predicts pending pods' start times (in a
            separate process; see :mod:`fairgpu.kube.forecaster`); ``<= 0``: never.
        forecast_budget: wall seconds one forecast may simulate ahead.
        log_level: ``debug``, ``info``, ``warning``.
        connection: an already loaded connection (tests); overrides ``kubeconfig``.
        install_signal_handlers: stop gracefully on SIGTERM/SIGINT (main thread only).
    """

    kubeconfig: str | None = None
    context: str | None = None
    tenancy: str | Path | None = None
    policy: str = DEFAULT_POLICY
    ordering: str = "fair"
    scheduler_name: str = "fairgpu"
    leader_elect: bool = True
    lease_namespace: str = "fairgpu-system"
    lease_name: str = "fairgpu-scheduler"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str | None = None
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 10259
    qps: float = 200.0
    burst: int = 400
    bind_workers: int = 32
    max_batch: int = 500
    events_qps: float = 20.0
    node_pool_label: str = "example.com/node.usage"
    max_devices: int = 8
    seed: int = 0
    resync_seconds: float = 2.0
    preemption_wait: float = 120.0
    pdb_backoff: float = 60.0
    podgroup_discovery_seconds: float = 60.0
    forecast_seconds: float = 30.0
    forecast_budget: float = 5.0
    log_level: str = "info"
    connection: Connection | None = None
    install_signal_handlers: bool = True
