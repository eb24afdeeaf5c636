"""Read a cluster once, read-only, into the state the live scheduler builds.

``fairgpu explain``, ``queues`` and ``what-if`` answer questions about the live cluster without
running a scheduler: they list the collections the live scheduler watches (Pods, Nodes,
Namespaces, storage objects, PodGroups), decode them with the live decoders, and apply them to a
fresh :class:`~fairgpu.kube.cache.SchedulerCache` and :class:`~fairgpu.engine.engine.Engine`
configured as ``fairgpu run`` is (tenancy YAML, policy, ordering, node-pool label). Nothing is
written to the cluster. The lists are kept, so :meth:`Snapshot.build` can make as many
independent copies of the state as a question needs (one to look at, one to run a cycle on).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY
from fairgpu.engine.policies import policy as named_policy
from fairgpu.kube import engine_notes
from fairgpu.kube import volumes as storage
from fairgpu.kube.cache import CacheChanges, SchedulerCache, decode_node, decode_pod
from fairgpu.kube.client import RestClient
from fairgpu.kube.completed import (
    SUCCEEDED_PARAMS,
    SUCCEEDED_PATH,
    apply_completed,
    decode_completed,
)
from fairgpu.kube.decode import NodeRecord, PodRecord, parse_time, time_label
from fairgpu.kube.dra_watch import DraWatch, read_dra
from fairgpu.kube.job_progress import JobProgress, decode_job_progress, jobs_ahead
from fairgpu.kube.jobs import PATH as JOBS_PATH
from fairgpu.kube.jobs import JobRecord, JobStore, decode_job
from fairgpu.kube.leader_worker_progress import PATH as LWS_PATH
from fairgpu.kube.leader_worker_progress import LeaderWorkerRecord, decode_leader_worker_set
from fairgpu.kube.leader_worker_progress import sets_ahead as leader_workers_ahead
from fairgpu.kube.namespaces import NamespaceStore, decode_namespace
from fairgpu.kube.podgroups import PodGroupBook, decode_pod_group, served_pod_group_paths
from fairgpu.kube.reporter import LABEL_PREEMPTED_QUEUE
from fairgpu.kube.statefulset_progress import PATH as STATEFULSETS_PATH
from fairgpu.kube.statefulset_progress import StatefulSetRecord, decode_statefulset, sets_ahead
from fairgpu.model.gpu import DEFAULT_NAMES
from fairgpu.model.node_pools import NodePoolConfig
from fairgpu.model.pod import PodInfo
from fairgpu.sim.job_backlog import JobAhead
from fairgpu.sim.statefulset_controller import SetAhead

__all__ = [
    "FORECAST_BUDGET",
    "ReadSettings",
    "Snapshot",
    "list_objects",
    "read_cluster",
    "read_preemptions",
]

#: Wall seconds a command's forecast may take unless told otherwise (``--forecast-budget``).
FORECAST_BUDGET = 3.0


class _ListMeta(msgspec.Struct):
    continue_: str = msgspec.field(default="", name="continue")


class _List(msgspec.Struct):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] = []


_list_decoder = msgspec.json.Decoder(_List)


@dataclass(slots=True)
class ReadSettings:
    """How the state is built: the same meaning as ``fairgpu run``'s options."""

    tenancy: Path | str | None = None  # a file, or YAML text (with a newline)
    policy: str = DEFAULT_POLICY
    ordering: str = "fair"
    scheduler_name: str = "fairgpu"
    node_pool_label: str = "example.com/node.usage"
    seed: int = 0


def list_objects(
    client: RestClient,
    path: str,
    decode: Callable[[bytes], Any],
    params: dict[str, str] | None = None,
) -> list[Any]:
    """Every object of the collection ``path``, paginated, each passed through ``decode``.

    Raises ``RuntimeError`` naming the collection when the API server refuses the list.
    """
    items: list[Any] = []
    cont = ""
    while True:
        query = dict(params or {}, limit="500")
        if cont:
            query["continue"] = cont
        resp = client.request("GET", path, params=query, limited=False, raw=True)
        if not resp.ok:
            raise RuntimeError(f"list {path}: HTTP {resp.status}: {resp.message}")
        page = _list_decoder.decode(resp.body)
        items.extend(decode(bytes(raw)) for raw in page.items)
        cont = page.metadata.continue_
        if not cont:
            return items


@dataclass(slots=True)
class Snapshot:
    """The decoded lists of one read, and the settings to build state from them."""

    settings: ReadSettings
    now: float
    nodes: list[NodeRecord]
    pods: list[PodRecord]
    namespaces: list[tuple[str, dict[str, str]]]
    volumes: list[tuple[str, list[Any]]] = field(default_factory=list)
    pod_groups: dict[str, list[Any]] = field(default_factory=dict)
    dra: list[tuple[str, list[Any]]] = field(default_factory=list)
    # Pod group members that ran to completion (:mod:`~fairgpu.kube.completed`).
    completed: list[Any] = field(default_factory=list)
    # How a point in time reads in answers (live: RFC 3339 UTC).
    label: Callable[[float], str] = time_label
    # (when, queue) of each preemption seen: live, the scheduler's Preempted Events (kept an
    # hour by the API server, read by `queues` only: :func:`read_preemptions`); None when
    # they were not or could not be read.
    preemptions: list[tuple[float, str]] | None = None
    # Wall seconds a start-time forecast over this snapshot may take.
    forecast_budget: float = FORECAST_BUDGET
    # The Jobs (:mod:`~fairgpu.kube.jobs`): which one more evicted pod fails.
    jobs: list[JobRecord] = field(default_factory=list)
    # The same Jobs' progress and pods to come, for forecasts (:mod:`~fairgpu.kube.job_progress`).
    job_progress: list[JobProgress] = field(default_factory=list)
    # The StatefulSets whose pods this scheduler places, for the pods they are still to
    # create (:mod:`~fairgpu.kube.statefulset_progress`).
    statefulsets: list[StatefulSetRecord] = field(default_factory=list)
    # ... and the LeaderWorkerSets, for the workers of groups whose leader waits
    # (:mod:`~fairgpu.kube.leader_worker_progress`).
    leader_worker_sets: list[LeaderWorkerRecord] = field(default_factory=list)

    def sets_ahead(
        self, cache: SchedulerCache, runtime: Callable[[PodInfo], float | None]
    ) -> list[SetAhead]:
        """The pods controllers are still to create once others start, as a forecast over
        ``cache`` (one :meth:`build` of this snapshot) continues them: live, the
        StatefulSets' ordered pods and the LeaderWorkerSets' workers."""
        pending = cache.pending.values()
        return [
            *sets_ahead(self.statefulsets, cache.cluster, pending, self.now, runtime),
            *leader_workers_ahead(
                self.leader_worker_sets, cache.cluster, pending, self.now, runtime
            ),
        ]

    def jobs_ahead(
        self, cache: SchedulerCache, runtime: Callable[[PodInfo], float | None]
    ) -> list[JobAhead]:
        """The Jobs whose controller is still to create pods, as a forecast over ``cache``
        (one :meth:`build` of this snapshot) continues them."""
        return jobs_ahead(
            self.job_progress, cache.cluster, cache.pending.values(), self.now, runtime
        )

    def build(self) -> tuple[SchedulerCache, Engine]:
        """A fresh cache and engine holding this snapshot, as the live scheduler would
        (raises ``ValueError`` for a bad tenancy file or policy name)."""
        from fairgpu.tenancy import load_config

        s = self.settings
        tenancy = load_config(s.tenancy) if s.tenancy is not None else None
        engine = Engine(
            named_policy(s.policy),
            s.seed,
            tenancy=tenancy,
            ordering=s.ordering,  # type: ignore[arg-type]
            time_label=time_label,
        )
        cache = SchedulerCache(s.scheduler_name)
        out = CacheChanges()
        cache.sync_nodes(self.nodes, self.now, out)
        NamespaceStore().apply("SYNC", self.namespaces, cache.cluster)
        for kind, items in self.volumes:
            storage.VolumeWatch.apply(cache.cluster, "SYNC", (kind, items))
        for payload in self.dra:  # DeviceClasses, ResourceSlices, ResourceClaims
            DraWatch.apply(cache.cluster, "SYNC", payload)
        book = PodGroupBook()
        for path, items in self.pod_groups.items():
            for key, group in book.apply(path, "SYNC", items).items():
                namespace, _, name = key.partition("/")
                if group is None:
                    continue
                if group.error is not None:
                    engine.set_pod_group_error(namespace, name, group.error)
                else:
                    engine.set_pod_group(namespace, name, group.min_member)
        apply_completed(cache.cluster, "SYNC", self.completed)
        cache.sync_pods(self.pods, self.now, out)
        # The time rules the scheduler works under, as it restores them (engine_notes).
        engine_notes.restore(engine, cache.noted_pods(), self.now)
        jobs = JobStore()
        jobs.apply("SYNC", self.jobs)
        engine.fragile_jobs = jobs.fragile()
        engine.loose_leader_worker_sets = frozenset(
            r.key for r in self.leader_worker_sets if r.restarts_alone
        )
        return cache, engine


def read_cluster(client: RestClient, settings: ReadSettings) -> Snapshot:
    """List what the live scheduler watches, decoded as it decodes it (read-only)."""
    names = DEFAULT_NAMES
    pools = NodePoolConfig(usage_key=settings.node_pool_label)
    sched = settings.scheduler_name
    nodes = list_objects(client, "/api/v1/nodes", lambda raw: decode_node(raw, names))
    pods = list_objects(
        client,
        "/api/v1/pods",
        lambda raw: decode_pod(raw, sched, names, pools),
        {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"},
    )
    namespaces = list_objects(client, "/api/v1/namespaces", decode_namespace)
    volumes: list[tuple[str, list[Any]]] = []

    def keep(etype: str, payload: tuple[str, Any]) -> None:
        volumes.append((payload[0], payload[1]))

    # The storage reflectors of the live scheduler, used only for their paths and decoders.
    for reflector in storage.VolumeWatch(client, keep).reflectors:
        reflector.sink("SYNC", list_objects(client, reflector.path, reflector.decode))
    groups = {
        path: list_objects(client, path, decode_pod_group)
        for path in served_pod_group_paths(client)
    }
    dra = read_dra(client, lambda path, decode: list_objects(client, path, decode))
    done = list_objects(client, SUCCEEDED_PATH, decode_completed, SUCCEEDED_PARAMS)
    snapshot = Snapshot(settings, time.time(), nodes, pods, namespaces, volumes, groups, dra, done)

    def template(raw: bytes) -> PodInfo | None:
        return decode_pod(raw, sched, names, pools).info

    # As the scheduler: without the permission to list Jobs, no Job is known fragile.
    with contextlib.suppress(RuntimeError):

        def job(raw: bytes) -> tuple[JobRecord, JobProgress | None]:
            record = decode_job(raw)
            return record, decode_job_progress(raw, record, template)

        jobs = list_objects(client, JOBS_PATH, job)
        snapshot.jobs = [record for record, _ in jobs]
        snapshot.job_progress = [progress for _, progress in jobs if progress is not None]
    # Without the permission to list StatefulSets, forecasts see only their pods.
    with contextlib.suppress(RuntimeError):
        sets = list_objects(
            client, STATEFULSETS_PATH, lambda raw: decode_statefulset(raw, template)
        )
        snapshot.statefulsets = [s for s in sets if s is not None]
    # Read where the cluster serves LeaderWorkerSets and the scheduler may list them.
    with contextlib.suppress(RuntimeError):
        groups_of = list_objects(
            client, LWS_PATH, lambda raw: decode_leader_worker_set(raw, template)
        )
        snapshot.leader_worker_sets = [g for g in groups_of if g is not None]
    return snapshot


class _EventMeta(msgspec.Struct, rename="camel"):
    labels: dict[str, str] = {}
    creation_timestamp: str = ""


class _Event(msgspec.Struct, rename="camel"):
    metadata: _EventMeta = msgspec.field(default_factory=_EventMeta)
    event_time: str | None = None


_event_decoder = msgspec.json.Decoder(_Event)


def read_preemptions(client: RestClient) -> list[tuple[float, str]] | None:
    """(when, queue) of every ``Preempted`` Event the scheduler wrote (labelled with the
    victim's queue); None when Events cannot be listed (e.g. RBAC): the answer is then
    unknown, not zero."""
    try:
        events = list_objects(
            client,
            "/apis/events.k8s.io/v1/events",
            _event_decoder.decode,
            {"labelSelector": LABEL_PREEMPTED_QUEUE},
        )
    except RuntimeError:
        return None
    out = []
    for e in events:
        when = parse_time(e.event_time or e.metadata.creation_timestamp)
        queue = e.metadata.labels.get(LABEL_PREEMPTED_QUEUE, "")
        if when is not None and queue:
            out.append((when, queue))
    return out
