"""What a forecast reads of a live LeaderWorkerSet: the workers its controller is still to
create.

Under ``startupPolicy: LeaderReady`` the LeaderWorkerSet controller creates a group's
workers (its worker StatefulSet) only once the group's leader runs and is ready; while the
leader waits, the workers do not exist, and a forecast over the pods in the cluster would
never see them come. :func:`decode_leader_worker_set` reads one LeaderWorkerSet's JSON (its
pods as its controller makes them: :func:`~fairgpu.sim.workloads.leaderworkersets.
expand_leaderworkerset`, decoded as the scheduler decodes a pod); :func:`sets_ahead` pairs it
with its pods in a snapshot, as :class:`~fairgpu.sim.statefulset_controller.SetAhead`: the
workers of each group missing from the cluster, all created once its waiting leader starts
(at once when the leader runs already, or under the default ``LeaderCreated``).

Read only when the cluster serves the API; a LeaderWorkerSet that cannot be read is left out
of forecasts, never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgspec

from fairgpu.cluster.state import ClusterState
from fairgpu.kube.statefulset_progress import pod_made, read_controller
from fairgpu.model.pod import PodInfo
from fairgpu.sim.job_backlog import future_pod
from fairgpu.sim.statefulset_controller import SetAhead
from fairgpu.sim.workload import PodArrival
from fairgpu.sim.workloads.leaderworkersets import (
    RECREATE,
    expand_leaderworkerset,
    recreates_groups,
)

__all__ = [
    "PATH",
    "LeaderWorkerRecord",
    "decode_leader_worker_set",
    "restarting_alone",
    "sets_ahead",
]

PATH = "/apis/leaderworkerset.x-k8s.io/v1/leaderworkersets"

#: Decodes one pod's JSON as the scheduler does; None when it is not this scheduler's.
PodDecoder = Callable[[bytes], PodInfo | None]


@dataclass(frozen=True, slots=True)
class LeaderWorkerRecord:
    """One LeaderWorkerSet as a forecast reads it: ``key`` (namespace/name), whether its
    workers wait for their leader to run (``LeaderReady``), and each group's leader name
    with its workers as their controller makes them, decoded."""

    key: str
    leader_first: bool
    groups: tuple[tuple[str, tuple[PodInfo, ...]], ...]
    restarts_alone: bool = False  # restartPolicy None: an evicted pod takes no group down


def decode_leader_worker_set(raw: bytes, decode_pod: PodDecoder) -> LeaderWorkerRecord | None:
    """One LeaderWorkerSet's groups as its controller makes them (None: it cannot be read,
    is being deleted, or its workers are another scheduler's or cannot be decoded)."""
    read = read_controller(raw, expand_leaderworkerset)
    if read is None:
        return None
    uid, made = read
    groups = []
    for at in range(0, len(made.pods), made.size):
        leader, *workers = made.pods[at : at + made.size]
        decoded = []
        for pod_doc in workers:
            pod = pod_made(pod_doc, uid, decode_pod)
            if pod is None:
                return None
            decoded.append(pod)
        groups.append((leader["metadata"]["name"], tuple(decoded)))
    return LeaderWorkerRecord(made.key, made.leader_first, tuple(groups), not made.recreates_groups)


def restarting_alone(raw: bytes) -> str | None:
    """``namespace/name`` of the LeaderWorkerSet ``raw`` when its pods restart alone
    (``restartPolicy: None``), else None -- also when it cannot be read: an unread set is
    costed group by group, never broken by surprise."""
    try:
        data = msgspec.json.decode(raw)
        meta, template = data["metadata"], data["spec"]["leaderWorkerTemplate"]
        policy = template.get("restartPolicy") or RECREATE
        key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError):
        return None
    return None if recreates_groups(policy) else key


def sets_ahead(
    records: Iterable[LeaderWorkerRecord],
    cluster: ClusterState,
    pending: Iterable[PodInfo],
    now: float,
    runtime: Callable[[PodInfo], float | None],
) -> list[SetAhead]:
    """The groups of ``records`` whose workers are still to come, as a forecast from
    ``now`` continues them (see the module docstring); the workers run ``runtime(pod)``
    seconds."""
    waiting = {(p.namespace, p.name): p for p in pending}
    running = {(p.namespace, p.name): p for p in cluster.pods.values()}
    present = waiting.keys() | running.keys()
    out = []
    for rec in records:
        namespace = rec.key.partition("/")[0]
        for index, (leader_name, workers) in enumerate(rec.groups):
            leader = waiting.get((namespace, leader_name)) or running.get((namespace, leader_name))
            missing = [w for w in workers if (namespace, w.name) not in present]
            if leader is None or not missing:
                continue
            gate = leader.uid if rec.leader_first and (namespace, leader_name) in waiting else ""
            future = tuple(
                PodArrival(future_pod(w, w.name, w.uid, now), now, runtime(w)) for w in missing
            )
            key = f"LeaderWorkerSet {rec.key} group {index}"
            out.append(SetAhead(key, gate, future, True, "", len(workers) + 1))
    return out
