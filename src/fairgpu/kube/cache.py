"""The live scheduler's cache: a :class:`ClusterState` plus the pending set, fed by watches.

Pure bookkeeping (no I/O, no threads): the scheduling loop owns one :class:`SchedulerCache` and
applies decoded watch events to it between engine cycles, so the engine always sees one
consistent snapshot and never races the watches.

Invariant (no GPU booked twice): every pod that holds capacity in the cluster is either bound
according to the API (``bound``) or *assumed* by this scheduler (``assumed``: placed by the
engine, bind in flight). A failed bind *forgets* the pod (releases its capacity). Victims of a
preemption are released by the engine at once but still run until their deletion is observed;
the preemptor stays assumed on their node meanwhile, so their capacity is never handed out
twice. If an eviction is refused the preemptor is forgotten and the victim put back.

Each placement says whether the API reports the pod bound (``Placement.bound``: False while it
is merely assumed) and whether its deletion has begun (``Placement.terminating``), so the
engine never chooses an unbound or terminating pod as a victim. A terminating pod keeps its
capacity until its deletion is observed, as kube-scheduler counts it.

A pod whose bind was sent (``binding``) is bound as far as the cache is concerned until the
bind fails or the API shows it bound -- the watch may lag behind the reply. When its node is
deleted meanwhile (a kubelet registering again), it waits for the node's return with its
devices, as a bound pod does, and is not pending again: the API accepts a Binding to a node
that does not exist, so the bind may well succeed, and its GPUs handed to others in the
meantime would be booked twice once the node is back.

Devices of bound pods come from their ``fairgpu.io/gpu-devices`` annotation, validated against
the node when it shows GPUs, and are kept while it shows none (a Node re-created under the same
name, or a device plugin restarting, reports 0 GPUs for a moment): they count again as soon as
the GPUs reappear, and every change of a node's GPUs re-reads them (:mod:`fairgpu.kube.devices`).
:mod:`fairgpu.kube.consistency` checks the result after every batch of events.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from fairgpu.cluster.state import ClusterState, Placement
from fairgpu.engine.lingering import hold_remainders, put_back
from fairgpu.kube.decode import NodeRecord, PodRecord, decode_node, decode_pod
from fairgpu.kube.devices import annotation_fits, least_used, reapply_devices
from fairgpu.model.node import NodeInfo, NodeProblem
from fairgpu.model.order import pod_identity
from fairgpu.model.pod import PodInfo

__all__ = [
    "CacheChanges",
    "NodeRecord",
    "PodRecord",
    "SchedulerCache",
    "annotation_fits",
    "decode_node",
    "decode_pod",
]

log = logging.getLogger("fairgpu.kube.cache")

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def _node_key(n: NodeInfo) -> tuple[Any, ...]:
    # Everything the engine reads from a node; status heartbeats change none of it.
    return (
        tuple(sorted(n.labels.items())),
        n.taints,
        n.unschedulable,
        tuple(sorted(n.allocatable.items())),
        n.gpu_count,
        n.gpu_memory_mib,
        n.gpu_model,
    )


def _charge_changed(old: PodInfo, new: PodInfo) -> bool:
    """Does a bound pod's new object charge its node differently, or match other pods'
    selectors differently? Its requests change when it is resized in place (kube-scheduler
    counts what the kubelet admitted until the resize is done: :mod:`~fairgpu.model.
    pod_requests`), its labels when someone relabels it (inter-pod affinity and spread
    constraints of pods still to place count it by them)."""
    return (
        old.requests != new.requests
        or old.node_cpu_memory != new.node_cpu_memory
        or old.labels != new.labels
    )


@dataclass(slots=True)
class CacheChanges:
    """What one batch of events changed, for the loop to act on.

    ``nodes``: names of the nodes the batch touched (checked by the consistency check);
    ``node_problems``: (node name, node uid, problem) first seen in this batch, to report;
    ``repairs``: divergences the consistency check found and repaired, by kind;
    ``gone_pods``: the bound pods among ``gone``, as last seen (their claims are released).
    """

    dirty: bool = False
    gone: set[str] = field(default_factory=set)
    gone_pods: dict[str, PodInfo] = field(default_factory=dict)
    nodes: set[str] = field(default_factory=set)
    node_problems: list[tuple[str, str, NodeProblem]] = field(default_factory=list)
    repairs: dict[str, int] = field(default_factory=dict)


class SchedulerCache:
    """Cluster state + pending pods, kept in step with the API by watch events.

    Args:
        scheduler_name: pods with this ``spec.schedulerName`` are ours to schedule.
        max_devices: initial GPUs per node of the cluster arrays (they grow with the widest
            node; no node is too wide).
    """

    def __init__(self, scheduler_name: str, max_devices: int = 8) -> None:
        self.scheduler_name = scheduler_name
        self.cluster = ClusterState(max_devices=max_devices)
        # Bound pods by node name (uid -> pod), whether placed, orphaned or evicting: what the
        # consistency check compares the cluster state with.
        self.bound_on: dict[str, dict[str, PodInfo]] = {}
        self.pending: dict[str, PodInfo] = {}
        self.first_seen: dict[str, float] = {}
        self.bound: dict[str, tuple[str, tuple[int, ...] | None]] = {}
        self.assumed: dict[str, str] = {}
        # Binds sent and not yet failed or seen bound: uid -> (node name, devices).
        self.binding: dict[str, tuple[str, tuple[int, ...] | None]] = {}
        # Pods a bind found gone before the watch said so: their late events are ignored.
        self.buried: set[str] = set()
        self.evicting: set[str] = set()
        # Bound pods whose deletion has begun: as the API reports it (deletionTimestamp), or
        # as this scheduler knows it (an eviction posted for a preemptor that gave up).
        self.deleting: set[str] = set()
        self.evicted: set[str] = set()
        # Pending pods' status.nominatedNodeName (a preemptor's node, set by this scheduler).
        self.nominated: dict[str, str] = {}
        self.orphans: dict[str, dict[str, PodInfo]] = {}
        self._node_keys: dict[str, tuple[Any, ...]] = {}
        # Node name -> its uid and problems (or its decoding error) last reported: each once.
        self._node_reported: dict[str, str] = {}
        self.overcommits = 0
        self.repairs: dict[str, int] = {}
        self.last_full_check = float("-inf")

    # ---- queries ------------------------------------------------------------------------------
    def schedulable(self) -> list[PodInfo]:
        """Pending pods not currently assumed (bind in flight) — the engine's input — by
        creation time, then namespace/name: never in watch order, which the simulator cannot
        know, so a replay of this snapshot sees the same order."""
        placements, binding = self.cluster.placements, self.binding
        pods = [
            p for uid, p in self.pending.items() if uid not in placements and uid not in binding
        ]
        pods.sort(key=pod_identity)
        return pods

    def noted_pods(self) -> list[PodInfo]:
        """The pods whose engine notes (:mod:`~fairgpu.kube.engine_notes`) an engine built
        from this cache takes back: the placed ones, and the pending ones -- a preemptor
        nominated while its victims terminated carries its reclaim's note before it is
        bound."""
        placed = self.cluster.pods
        return [*placed.values(), *(p for uid, p in self.pending.items() if uid not in placed)]

    def node_name_of(self, uid: str) -> str | None:
        """Name of the node ``uid`` is placed on in the cluster, if any."""
        pl = self.cluster.placements.get(uid)
        if pl is None:
            return None
        node = self.cluster.nodes[pl.node]
        return node.name if node is not None else None

    # ---- pods ---------------------------------------------------------------------------------
    def apply_pod(self, etype: str, rec: PodRecord, now: float, out: CacheChanges) -> None:
        """Apply one pod event (``ADDED``/``MODIFIED``/``DELETED``)."""
        uid = rec.uid
        if uid in self.buried:
            if etype == "DELETED":
                self.buried.discard(uid)
            return
        if etype == "DELETED" or rec.phase in TERMINAL_PHASES:
            self._gone(uid, out)
            return
        if rec.node_name:
            self._bound(rec, now, out)
            return
        # Unbound.
        if uid in self.bound:
            return  # a stale object (the API never unbinds a pod)
        if rec.scheduler_name != self.scheduler_name or rec.deleting or rec.info is None:
            if self.pending.pop(uid, None) is not None and uid in self.assumed:
                self.forget(uid)
                out.dirty = True
            return
        # The API's nomination, cleared ones included: a nomination this scheduler cleared
        # (a displaced preemptor) that a late event showed again goes with the next one.
        if rec.nominated:
            self.nominated[uid] = rec.nominated
        else:
            self.nominated.pop(uid, None)
        if uid not in self.pending:
            out.dirty = True
            self.first_seen.setdefault(uid, now)
        elif uid not in self.cluster.placements:
            old = self.pending[uid]
            if (
                old.labels != rec.info.labels
                or old.annotations != rec.info.annotations
                or old.scheduling_gates != rec.info.scheduling_gates  # a gate was removed
                # A status-only update: the resourceclaim controller names the claim it made
                # from a template, which the pod waited for (kube-scheduler's
                # UpdatePodGeneratedResourceClaim event).
                or old.claim_statuses != rec.info.claim_statuses
            ):
                out.dirty = True
        self.pending[uid] = rec.info

    def _gone(self, uid: str, out: CacheChanges) -> None:
        self.pending.pop(uid, None)
        self.first_seen.pop(uid, None)
        where = self.bound.pop(uid, None)
        if where is not None:
            if (last := self.bound_on.get(where[0], {}).get(uid)) is not None:
                out.gone_pods[uid] = last
            self._unindex(uid, where[0])
        self.assumed.pop(uid, None)
        self.binding.pop(uid, None)
        self.evicting.discard(uid)
        self.deleting.discard(uid)
        self.evicted.discard(uid)
        self.nominated.pop(uid, None)
        self.unorphan(uid)
        if self.cluster.release(uid) is not None:
            out.dirty = True
        out.gone.add(uid)

    def _bound(self, rec: PodRecord, now: float, out: CacheChanges) -> None:
        uid = rec.uid
        self.pending.pop(uid, None)
        self.first_seen.pop(uid, None)
        old = self.bound.get(uid)
        self.bound[uid] = (rec.node_name, rec.devices)
        self.nominated.pop(uid, None)
        if rec.deleting:
            self.deleting.add(uid)  # a deletion is never undone
        self._index(rec, old)
        out.nodes.add(rec.node_name)
        self.binding.pop(uid, None)
        if uid in self.evicting or rec.info is None:
            return  # released by a preemption plan; stays released until it is gone
        self.assumed.pop(uid, None)
        cluster = self.cluster
        pl = cluster.placements.get(uid)
        if pl is not None:
            node = cluster.nodes[pl.node]
            same_devices = rec.devices is None or tuple(sorted(pl.devices)) == tuple(
                sorted(rec.devices)
            )
            if node is not None and node.name == rec.node_name and same_devices:
                if not _charge_changed(cluster.pods[uid], rec.info):
                    self._flag(uid)
                    return
                # Resized in place (or relabelled): charge the node what the pod holds now,
                # on the same devices, from the same start.
                cluster.release(uid)
                cluster.assign(rec.info, pl.node, pl.devices, started=pl.started)
                self._flag(uid)
                out.dirty = True
                return
            cluster.release(uid)
            out.dirty = True
        self._place_bound(rec.info, rec.node_name, rec.devices, rec.started or now)

    def _index(self, rec: PodRecord, old: tuple[str, Any] | None) -> None:
        if old is not None and old[0] != rec.node_name:
            self._unindex(rec.uid, old[0])
        if rec.info is not None:
            self.bound_on.setdefault(rec.node_name, {})[rec.uid] = rec.info

    # ---- orphans: bound pods whose node is gone, waiting for its return ---------------------
    def orphan(self, node_name: str, pod: PodInfo) -> None:
        """``pod`` is bound to ``node_name``, which the cluster does not have now: it waits
        for the node's return, and still counts for its queue (:meth:`ClusterState.detach`)."""
        self.orphans.setdefault(node_name, {})[pod.uid] = pod
        self.cluster.detach(pod)

    def unorphan(self, uid: str, node_name: str | None = None) -> None:
        """``uid`` waits for no node any more (of ``node_name``, or of any when None)."""
        names = list(self.orphans) if node_name is None else [node_name]
        for name in names:
            pods = self.orphans.get(name)
            if pods is not None and pods.pop(uid, None) is not None and not pods:
                del self.orphans[name]
        self.cluster.attach(uid)

    def take_orphans(self, node_name: str) -> dict[str, PodInfo]:
        """The pods waiting for ``node_name``, which is back: none waits any more."""
        pods = self.orphans.pop(node_name, {})
        for uid in pods:
            self.cluster.attach(uid)
        return pods

    def _unindex(self, uid: str, node_name: str) -> None:
        pods = self.bound_on.get(node_name)
        if pods is not None:
            pods.pop(uid, None)
            if not pods:
                del self.bound_on[node_name]

    def _place_bound(
        self, pod: PodInfo, node_name: str, devices: tuple[int, ...] | None, started: float
    ) -> None:
        idx = self.cluster.node_index.get(node_name)
        if idx is None:
            self.orphan(node_name, pod)
            return
        devs = self._devices_for(pod, idx, devices)
        self.cluster.assign(pod, idx, devs, started=started)
        self._flag(pod.uid)
        free = self.cluster.device_milli_free[idx]
        if (free < 0).any():
            self.overcommits += 1
            log.warning(
                "GPU over-commit observed on node",
                extra={"node": node_name, "pod": pod.key, "devices": list(devs)},
            )

    def _devices_for(
        self, pod: PodInfo, idx: int, devices: tuple[int, ...] | None
    ) -> tuple[int, ...]:
        """The devices a bound pod holds.

        Its annotation when the node shows no GPUs (kept until they appear) or when every index
        is one of the node's devices; otherwise (bound by another scheduler, or an annotation
        naming devices the node does not have) the least-used devices that fit, so the
        accounting stays right either way.
        """
        gpu = pod.gpu
        if gpu.count == 0:
            return ()
        count = int(self.cluster.gpu_count[idx])
        if devices is not None:
            if annotation_fits(devices, count):
                return tuple(sorted(devices))
            log.warning(
                "GPU devices annotation names devices the node does not have; "
                "accounting the least-used devices instead",
                extra={"pod": pod.key, "devices": list(devices), "node_gpus": count},
            )
        if count == 0:
            return ()  # chosen when the node's GPUs appear
        return least_used(self.cluster, pod, idx)

    def sync_pods(self, records: list[PodRecord], now: float, out: CacheChanges) -> None:
        """Replace the pod view with a full list (after a relist)."""
        seen = {r.uid for r in records}
        self.buried &= seen  # the list shows them gone: no event of theirs is to come
        known = set(self.pending) | set(self.bound) | set(self.cluster.placements)
        for pods in self.orphans.values():
            known |= set(pods)
        for uid in known - seen:
            self._gone(uid, out)
        for rec in records:
            self.apply_pod("MODIFIED", rec, now, out)

    # ---- assume / forget ------------------------------------------------------------------------
    def assumed_by_engine(self, uid: str, node_name: str) -> None:
        """Record that the engine assumed ``uid`` on ``node_name`` (bind about to be sent):
        its placement is not bound until the API says so, so it is never a victim."""
        self.assumed[uid] = node_name
        self._flag(uid)

    def _flag(self, uid: str) -> None:
        """Copy what the API reports (bound, terminating) onto ``uid``'s placement."""
        pl = self.cluster.placements.get(uid)
        if pl is not None:
            pl.bound = uid in self.bound
            self.cluster.mark_terminating(uid, uid in self.deleting or uid in self.evicted)

    def bind_sent(self, uid: str, node_name: str, devices: tuple[int, ...] | None) -> None:
        """The bind of ``uid`` to ``node_name`` (with ``devices``) was sent: until it fails
        (:meth:`forget`) or the API shows the pod bound, it is bound here, even if its node
        goes and comes back meanwhile."""
        self.binding[uid] = (node_name, devices)

    def gone_before_bound(self, uid: str, out: CacheChanges) -> None:
        """The bind of ``uid`` found no such pod (deleted, perhaps re-created under its
        name): it is gone, as its DELETED event, which a lagging watch has not delivered
        yet, will say; events of it until then are ignored."""
        if self.forget(uid):
            out.dirty = True  # its room is free for the next cycle
        if uid in self.pending:
            self._gone(uid, out)
            self.buried.add(uid)

    def forget(self, uid: str) -> bool:
        """Undo an assumption (bind failed or abandoned); True if capacity was released.

        A pod the API already reports bound is kept: the watch is the truth.
        """
        self.assumed.pop(uid, None)
        where = self.binding.pop(uid, None)
        if where is not None:  # waiting for its node's return: it no longer does
            self.unorphan(uid, where[0])
        if uid in self.bound:
            return False
        return self.cluster.release(uid) is not None

    def mark_evicting(self, uid: str) -> None:
        """``uid`` was released by a preemption plan; ignore its updates until it is gone."""
        self.evicting.add(uid)

    def restore(self, uid: str, pod: PodInfo, started: float, terminating: bool = False) -> bool:
        """Put a released victim back on its node; True if capacity was taken again.

        ``terminating=False``: its eviction did not happen (e.g. refused by a PDB), it runs on
        and may be chosen again. ``terminating=True``: its eviction was posted but the
        preemptor gave up (timeout, deleted, node gone); the victim holds its capacity until
        its deletion is observed and is never chosen again.
        """
        self.evicting.discard(uid)
        where = self.bound.get(uid)
        if where is None:
            return False  # never bound: nothing to put back (it may still bind)
        if terminating:
            self.evicted.add(uid)
        else:
            self.evicted.discard(uid)
        held = self.cluster.placements.get(uid)
        if held is not None and held.remainder:
            self.cluster.release(uid)  # the part its preemptor did not take: all of it now
        elif held is not None:
            self._flag(uid)
            return False
        self._place_bound(pod, where[0], where[1], started)
        return uid in self.cluster.placements

    def _tried_whole(self, uid: str, pod: PodInfo, started: float) -> tuple[Placement, bool] | None:
        """Victim ``uid`` placed whole where the API reports it, as a trial (released again;
        whatever is held for it must be released first): its placement and whether its node
        had room for it as the cluster stands. None: not bound, or its node is unknown."""
        where = self.bound.get(uid)
        cluster = self.cluster
        idx = cluster.node_index.get(where[0]) if where is not None else None
        if where is None or idx is None:
            return None
        cluster.assign(pod, idx, self._devices_for(pod, idx, where[1]), started=started)
        room = bool(
            (cluster.free()[idx] >= 0).all()
            and (cluster.device_milli_free[idx] >= 0).all()
            and (cluster.device_memory_free[idx] >= 0).all()
        )
        released = cluster.release(uid)
        assert released is not None
        return released[1], room

    def linger(self, victims: list[tuple[str, PodInfo]], takers: list[PodInfo], now: float) -> None:
        """Hold again what ``victims`` (released, still terminating) keep beyond what
        ``takers``, assumed on their node, take (:mod:`~fairgpu.engine.lingering`): after
        other pods took the place of the one they were evicted for."""
        cluster = self.cluster
        whole: list[tuple[PodInfo, Placement]] = []
        for uid, pod in victims:
            held = cluster.placements.get(uid)
            if held is not None and not held.remainder:
                continue  # put back whole already
            cluster.release(uid)
            tried = self._tried_whole(uid, pod, now if held is None else held.started)
            if tried is not None:
                whole.append((pod, tried[0]))
        taken = [(t, pl) for t in takers if (pl := cluster.placements.get(t.uid)) is not None]
        hold_remainders(cluster, whole, taken)

    def restore_if_room(self, uid: str, pod: PodInfo, started: float) -> bool:
        """Put a released victim back as terminating (:meth:`restore`) only if its node has
        room for it as the cluster stands, nothing over-committed; True if it was put back.

        For the victims of a preemptor whose place another pod took: those whose room the
        new preemptor does not use hold it themselves until they are gone."""
        cluster = self.cluster
        held = cluster.placements.get(uid)
        if held is not None and not held.remainder:
            return False
        remainder = cluster.release(uid)  # tried whole below; held as it was if no room
        tried = self._tried_whole(uid, pod, started)
        if tried is not None and tried[1]:
            return self.restore(uid, pod, started, terminating=True)
        if remainder is not None:
            put_back(cluster, *remainder)
        return False

    # ---- nodes --------------------------------------------------------------------------------
    def apply_node(self, etype: str, rec: NodeRecord, now: float, out: CacheChanges) -> None:
        """Apply one node event.

        A node whose GPU count or memory changes re-reads its bound pods' devices; GPU-detail
        problems of a node (see :class:`~fairgpu.model.node.NodeProblem`) are passed on in
        ``out.node_problems`` once per Node object.
        """
        if etype == "DELETED" or rec.info is None:
            malformed = rec.info is None and etype != "DELETED"
            repeat = malformed and self._node_reported.get(rec.name) == rec.error
            self._remove_node(rec.name, out)
            if malformed:
                if not repeat:  # once, not at every status heartbeat
                    log.warning(
                        "ignoring malformed node", extra={"node": rec.name, "error": rec.error}
                    )
                self._node_reported[rec.name] = rec.error
            return
        info = rec.info
        out.nodes.add(rec.name)
        self._note_problems(info, out)
        key = _node_key(info)
        cluster = self.cluster
        idx = cluster.node_index.get(rec.name)
        if self._node_keys.get(rec.name) == key:
            # A status heartbeat, or a kubelet that pulled or removed an image: only the
            # image index changes (no filter reads it, so no cached mask goes stale).
            if idx is not None and cluster.node(idx).images != info.images:
                cluster.set_node_images(rec.name, info.images)
            return
        self._node_keys[rec.name] = key
        before = None if idx is None else (int(cluster.gpu_count[idx]), cluster.node(idx))
        cluster.add_node(info)
        out.dirty = True
        if before is not None and (
            before[0] != info.gpu_count or before[1].gpu_memory_mib != info.gpu_memory_mib
        ):
            moved = reapply_devices(cluster, self.bound, rec.name)
            if moved:
                log.info(
                    "node GPUs changed; devices of its pods re-read",
                    extra={"node": rec.name, "gpus": info.gpu_count, "pods_moved": moved},
                )
        for uid, pod in self.take_orphans(rec.name).items():
            where = self.bound.get(uid) or self.binding.get(uid)
            if where is None or uid in self.cluster.placements:
                continue
            if uid in self.evicting:
                self._place_victim(uid, rec.name, where[1], now)
            else:
                self._place_bound(pod, where[0], where[1], now)

    def _place_victim(
        self, uid: str, node_name: str, devices: tuple[int, ...] | None, now: float
    ) -> None:
        """A preemption's victim, still terminating on node ``node_name`` when the node came
        back under its name: held whole and terminating again, as the API has it.

        What it held beside its preemptor (its remainder) went with the node, and so did the
        preemptor's assumption when the preemptor was assumed there (its hold is dropped,
        which puts the whole victim back anyway); left out, the GPUs it still holds would look
        free to the next cycle while it runs on them."""
        pod = self.bound_on.get(node_name, {}).get(uid)
        if pod is None:
            return
        self._place_bound(pod, node_name, devices, now)
        self.cluster.mark_terminating(uid, True)

    def _note_problems(self, info: NodeInfo, out: CacheChanges) -> None:
        """Log and pass on a Node object's GPU-detail problems, the first time it shows them."""
        if not info.problems:
            return
        seen = "\n".join([info.uid, *(p.message for p in info.problems)])
        if self._node_reported.get(info.name) == seen:
            return
        self._node_reported[info.name] = seen
        for problem in info.problems:
            log.warning(
                "node field ignored",
                extra={"node": info.name, "field": problem.field, "error": problem.message},
            )
            out.node_problems.append((info.name, info.uid, problem))

    def _remove_node(self, name: str, out: CacheChanges) -> None:
        """Forget node ``name``; its bound pods wait as orphans (devices kept) for its return."""
        self._node_keys.pop(name, None)
        self._node_reported.pop(name, None)
        if name not in self.cluster.node_index:
            return
        for pod in self.cluster.remove_node(name):
            if pod.uid in self.bound or pod.uid in self.binding:
                self.orphan(name, pod)
            self.assumed.pop(pod.uid, None)
        out.dirty = True

    def sync_nodes(self, records: list[NodeRecord], now: float, out: CacheChanges) -> None:
        """Replace the node view with a full list."""
        seen = {r.name for r in records}
        for name in list(self.cluster.node_index):
            if name not in seen:
                self._remove_node(name, out)
        for rec in records:
            self.apply_node("MODIFIED", rec, now, out)
