"""Victim cost: what evicting running pods throws away, and when waiting is cheaper.

**A gang is one victim** (so is a Job one more eviction fails:
:mod:`~fairgpu.engine.fragile_jobs`, and a LeaderWorkerSet group:
:mod:`~fairgpu.engine.leader_worker_groups`). A pod group runs only with at least ``minMember``
members: evicting a member that leaves fewer running tears the whole group down (the engine
evicts the rest, as a job controller restarts a distributed job that lost a worker). So a
member's cost is the whole group's, the plan evicts every member, and the reclaim rule
judges the end state with the group gone. Members *beyond* ``minMember`` (an elastic group)
go one by one, each at its own cost, as long as the group keeps ``minMember`` running.

**Work lost.** An evicted pod restarts from the beginning: what it ran is thrown away. The
cost of a victim set is its *lost work*, GPUs held x seconds run (:func:`lost_work`), summed
over everything that goes, whole gangs included -- not the number of pods: one member of a
32-GPU gang that ran an hour costs 32 GPU-hours, eight fresh one-GPU pods cost minutes.

**Where the time left counts.** Between two victim sets the preemptor starts now either way,
so only what each throws away differs: the time a victim still had to run does not make
killing it cheaper (a pod that ran ten hours and has twenty left still loses ten). The time
left counts against *not killing at all*: waiting ``T`` seconds, until declared run times say
enough GPUs free up, costs the preemptor ``G x T`` GPU-seconds of delay (``G`` its GPUs) and
loses nothing, while killing loses ``L``. So the net cost of killing is ``L - G x T`` -- "GPU x
time run, less what is left" -- and a preemption goes ahead only while it is negative
(:func:`waiting_is_cheaper`). For one victim freeing exactly what the preemptor asks, that is
"kill only if it has more left than it has run": a pod near its end is cheap to wait for, not
to kill. A large gang is never torn down for a small pod when the pool drains soon: the loss
is the whole gang's, the gain the small pod's ``G x T``. Without declared run times ``T`` is
unknown (taken as infinite) and preemption goes ahead as before, choosing the least lost work.
``T`` is optimistic -- work ahead in fair order may take the room first -- and is judged again
every cycle: if the room went elsewhere, ``T`` grows and the kill may become the cheaper move.

**The decision does not flip.** While nothing else changes, ``L`` only grows (victims keep
running) and ``T`` only shrinks (declared ends come closer): once waiting is cheaper it stays
cheaper, so a preemptor that waits is never later tempted into the same kill -- until a pod
it waits for is overdue by more than ``drainGraceSeconds`` (:func:`remaining`): its
declaration then says nothing about when room frees, and the kill is weighed as without one.
Otherwise declaring a minute and running on would hold the room for ever.
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

import numpy as np

from fairgpu.cluster.state import COL_CPU, COL_MEMORY, ClusterState, Placement
from fairgpu.engine.fragile_jobs import group_key, job_groups
from fairgpu.engine.gang import declared_runtime
from fairgpu.engine.leader_worker_groups import LABEL_NAME
from fairgpu.engine.leader_worker_groups import PREFIX as LEADER_WORKER_PREFIX
from fairgpu.engine.leader_worker_groups import group_key as leader_worker_key
from fairgpu.engine.leader_worker_groups import groups as leader_worker_groups
from fairgpu.engine.leader_worker_groups import set_key as leader_worker_set
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import CPU, MEMORY, PodInfo
from fairgpu.tenancy.book import QueueBook
from fairgpu.tenancy.resolve import TenantResolver

SECONDS_PER_HOUR = 3600.0


def gpus_held(placement: Placement) -> float:
    """GPUs the placement holds, in whole-GPU units (a quarter share is 0.25)."""
    return placement.device_milli * len(placement.devices) / WHOLE


def lost_work(uids: Iterable[str], cluster: ClusterState, now: float) -> float:
    """GPU-seconds thrown away by evicting ``uids`` now: GPUs held x seconds run, summed.
    A pod not bound yet (a held preemptor, displaced rather than evicted) has run nothing."""
    total = 0.0
    for uid in uids:
        pl = cluster.placements.get(uid)
        if pl is not None and pl.bound:
            total += gpus_held(pl) * max(0.0, now - pl.started)
    return total


def declared_end(
    pod: PodInfo, placement: Placement, now: float, grace: float = math.inf
) -> float | None:
    """When the pod ends by its declared run time (past if it is overdue), or None: it
    declares none, or it is overdue by more than ``grace`` seconds -- a pod that ran well
    past its declaration says nothing any more about when it ends (taken at its word, a
    declaration of one minute would promise room "now" for ever, and waiting for that room
    would always look cheaper than evicting it)."""
    runtime = declared_runtime(pod)
    if runtime is None:
        return None
    end = placement.started + runtime
    return None if outran(end, now, grace) else end


def outran(end: float, now: float, grace: float) -> bool:
    """Is a pod that declared it would end at ``end`` overdue by more than ``grace`` seconds
    at ``now``? (The one definition :func:`declared_end` and the backfill contract share.)"""
    return now > end + grace


def remaining(
    pod: PodInfo, placement: Placement, now: float, grace: float = math.inf
) -> float | None:
    """Seconds the pod still runs by its declared run time (0 if overdue), or None: it
    declares none, or it is overdue by more than ``grace`` seconds (:func:`declared_end`)."""
    end = declared_end(pod, placement, now, grace)
    return None if end is None else max(0.0, end - now)


class RunningGangs:
    """The running members of each pod group and its ``minMember``, read live from the queue
    book's ``group_running`` (so a statement's evictions show at once); ``completed``: the
    members that ran to completion, which count toward minMember too."""

    def __init__(
        self,
        members: Mapping[str, set[str]],
        group_of: Callable[[str], str],
        min_member: Callable[[str], int | None],
        completed: Mapping[str, set[str]] | None = None,
    ) -> None:
        self.members = members
        self.key = group_of
        self._min_member = min_member
        self._completed = completed or {}
        self._need: dict[str, int | None] = {}

    def slack(self, key: str, leaving: int = 0) -> int:
        """Members of group ``key`` that may still leave, after ``leaving`` have, without the
        group dropping below ``minMember`` (unknown minMember: none may, the group is rigid)."""
        if key not in self._need:
            self._need[key] = self._min_member(key)
        need = self._need[key]
        if need is None:
            return -leaving
        running = len(self.members.get(key, ())) + len(self._completed.get(key, ()))
        return running - leaving - need


def running_gangs(
    book: QueueBook,
    resolver: TenantResolver,
    cluster: ClusterState,
    fragile: Collection[str] = (),
    loose: Collection[str] = (),
) -> RunningGangs:
    """The running pod groups the queue book tracks (``minMember`` from the resolver), the
    running pods of each Job of ``fragile`` (uids) as a group none of which may leave alone
    (:mod:`~fairgpu.engine.fragile_jobs`), and the leader-worker groups of LeaderWorkerSets
    not in ``loose`` (``namespace/name``: those whose pods restart alone)."""

    def pod_group_of(uid: str) -> str:
        entry = book.entries.get(uid)
        return entry.group if entry is not None else ""

    jobs = job_groups(cluster, fragile, lambda uid: bool(pod_group_of(uid)))

    def group_of(uid: str) -> str:
        key = pod_group_of(uid)
        if key:
            return key
        pod = cluster.pods.get(uid)
        if pod is None:
            return ""
        if LABEL_NAME in pod.labels and leader_worker_set(pod) not in loose:
            key = leader_worker_key(pod)
            if key:
                return key
        return group_key(pod, fragile, jobs) if jobs else ""

    def min_member(key: str) -> int | None:
        for uid in book.group_running.get(key, ()):
            pod = cluster.pods.get(uid)
            ref = resolver.pod_group(pod) if pod is not None else None
            if ref is not None:
                return ref.min_member
        return None  # a fragile Job's group too: none of it may leave alone

    known: Mapping[str, set[str]] = (
        ChainMap(jobs, book.group_running) if jobs else book.group_running
    )
    members = _Members(known, cluster, lambda uid: bool(pod_group_of(uid)), loose)
    return RunningGangs(members, group_of, min_member, book.group_completed)


class _Members(Mapping[str, set[str]]):
    """The running members of pod groups and fragile Jobs (``known``), and of leader-worker
    groups (:mod:`~fairgpu.engine.leader_worker_groups`), found in ``cluster`` only when
    one is first asked for: most victim searches meet none."""

    def __init__(
        self,
        known: Mapping[str, set[str]],
        cluster: ClusterState,
        in_pod_group: Callable[[str], bool],
        loose: Collection[str] = (),
    ) -> None:
        self._known = known
        self._cluster = cluster
        self._in_pod_group = in_pod_group
        self._loose = loose
        self._leader_workers: dict[str, set[str]] | None = None

    def _groups(self) -> dict[str, set[str]]:
        if self._leader_workers is None:
            self._leader_workers = leader_worker_groups(
                self._cluster, self._in_pod_group, self._loose
            )
        return self._leader_workers

    def __getitem__(self, key: str) -> set[str]:
        if key.startswith(LEADER_WORKER_PREFIX):
            return self._groups()[key]
        return self._known[key]

    def __iter__(self) -> Iterator[str]:
        yield from self._known
        yield from self._groups()

    def __len__(self) -> int:
        return len(self._known) + len(self._groups())


def no_tier(pod: PodInfo) -> float:
    """Every victim in the same tier: lost work alone decides."""
    return -math.inf


class VictimCost:
    """Costs and gang closure of victim sets at time ``now`` (see the module docstring).

    ``tier`` ranks victims before their cost (lower goes first): the fair ordering gives a
    pod of the preemptor's own queue its priority -- inside a queue, priority preemption
    keeps Kubernetes' contract that lower priority goes first -- and another queue's pod
    ``-inf``: a reclaim takes back share from a queue above it, and which of its pods go is a
    question of waste, not of priorities that do not compare across queues.

    ``max_loss``: plans losing at least this much are refused anyway (waiting is cheaper),
    so the search skips nodes that cannot do better and sets ``pruned`` when it did.
    """

    def __init__(
        self,
        cluster: ClusterState,
        gangs: RunningGangs,
        now: float,
        tier: Callable[[PodInfo], float] = no_tier,
    ) -> None:
        self.cluster = cluster
        self.gangs = gangs
        self.now = now
        self.tier = tier
        self.max_loss = math.inf
        self.pruned = False
        self._units: dict[str, float] = {}

    def unit_cost(self, uid: str) -> float:
        """Lost work of evicting ``uid`` alone: its whole group's when that breaks it. Kept
        per pod: a search releases and restores pods while it tries nodes, but what they
        ran and which groups they belong to stay (``now`` is fixed)."""
        got = self._units.get(uid)
        if got is None:
            key = self.gangs.key(uid)
            if key and self.gangs.slack(key) < 1:
                got = lost_work(self.gangs.members.get(key, ()), self.cluster, self.now)
            else:
                got = lost_work((uid,), self.cluster, self.now)
            self._units[uid] = got
        return got

    def admissible(self, uid: str, eligible: Collection[str]) -> bool:
        """May ``uid`` be a victim when only ``eligible`` pods may be evicted? A member whose
        eviction breaks its group only if every running member may go."""
        key = self.gangs.key(uid)
        if not key or self.gangs.slack(key) >= 1:
            return True
        return all(u in eligible for u in self.gangs.members.get(key, ()))

    def broken(self, victims: Iterable[str]) -> set[str]:
        """The groups that fall below ``minMember`` when ``victims`` leave."""
        leaving: dict[str, int] = {}
        for uid in victims:
            key = self.gangs.key(uid)
            if key:
                leaving[key] = leaving.get(key, 0) + 1
        return {k for k, n in leaving.items() if self.gangs.slack(k, n) < 0}

    def closure(self, victims: Iterable[str]) -> list[str]:
        """``victims`` plus every other running member of each group they break, in a
        stable order (victims first, then the rest by uid)."""
        out = list(dict.fromkeys(victims))
        seen = set(out)
        for key in sorted(self.broken(out)):
            extra = sorted(u for u in self.gangs.members.get(key, ()) if u not in seen)
            out.extend(extra)
            seen.update(extra)
        return out

    def floor(self, pods: Iterable[PodInfo], deficit: float = 0.0) -> tuple[float, float]:
        """A lower bound of (tier, lost work) for any plan among ``pods`` (all on one node)
        that must free ``deficit`` GPUs there: its tier is its victims' highest, and it loses
        at least the cheapest fractional cover of ``deficit`` (a pod's cost per GPU it frees,
        a rigid group's cost shared among its members here, since evicting several of them
        loses the group once) -- and at least one victim's share."""
        pods = list(pods)
        if not pods:
            return -math.inf, 0.0
        tier = min(self.tier(p) for p in pods)
        here: dict[str, int] = {}
        for p in pods:
            key = self.gangs.key(p.uid)
            if key:
                here[key] = here.get(key, 0) + 1
        items = []
        for p in pods:
            key = self.gangs.key(p.uid)
            share = self.unit_cost(p.uid)
            if key and self.gangs.slack(key) < 1:
                share /= here[key]
            pl = self.cluster.placements.get(p.uid)
            items.append((share, gpus_held(pl) if pl is not None else 0.0))
        return tier, max(min(c for c, _ in items), _cover(items, deficit))

    def units(self, victims: Iterable[str]) -> int:
        """Victims counted as units: each pod alone one, each group one."""
        return len({self.gangs.key(u) or u for u in victims})


def _cover(items: list[tuple[float, float]], deficit: float) -> float:
    """The least cost of freeing ``deficit`` GPUs from (cost, GPUs) items taken fractionally,
    cheapest per GPU first (a lower bound of any whole choice)."""
    if deficit <= 0:
        return 0.0
    total = 0.0
    for cost, gpus in sorted((c / g, g) for c, g in items if g > 0):
        take = min(gpus, deficit)
        total += cost * take
        deficit -= take
        if deficit <= 0:
            break
    return total


def copies_on_node(pod: PodInfo, milli: np.ndarray, memory: np.ndarray, need_mem: int) -> int:
    """How many copies of ``pod`` the free device ``milli``/``memory`` of one node hold, as far
    as GPUs go."""
    gpu = pod.gpu
    if gpu.is_whole:
        return int(np.count_nonzero(milli >= WHOLE)) // max(1, gpu.count)
    per = milli // max(1, gpu.milli)
    if need_mem > 0:
        per = np.minimum(per, memory // need_mem)
    return int(per.clip(min=0).sum()) // max(1, gpu.count)


def time_to_fit(
    pod: PodInfo,
    copies: int,
    cluster: ClusterState,
    mask: np.ndarray,
    now: float,
    ends: Callable[[], list[tuple[float, int, Placement]]] | None = None,
) -> float:
    """Seconds until ``copies`` copies of ``pod`` fit on the nodes of ``mask`` as far as GPUs
    go, if every pod ends at its declared run time; ``inf`` if that is not known. Also ``inf``
    when they fit already: then something other than GPUs blocks the pod, and when that ends
    cannot be told. ``ends``: :func:`declared_ends` of the whole cluster at ``now`` (shared
    by callers asking for several masks in the same state; the nodes of ``mask`` are picked
    out of it, in the same order)."""
    if pod.gpu.count == 0:
        return math.inf
    nodes = np.flatnonzero(mask[: cluster.size])
    row = {int(n): i for i, n in enumerate(nodes.tolist())}
    milli, memory = _device_room(cluster, nodes)  # one row per node of the mask
    need = [cluster.device_memory_for(pod, n) for n in row]
    fit = _copies_per_node(pod, milli, memory, need)
    total = sum(fit)
    if total >= copies:
        return math.inf
    soonest = (
        _declared_ends(cluster, row, now) if ends is None else (e for e in ends() if e[1] in row)
    )
    for end, n, pl in soonest:
        i = row[n]
        _give_back(milli[i], memory[i], pl)
        again = copies_on_node(pod, milli[i], memory[i], need[i])
        total += again - fit[i]
        fit[i] = again
        if total >= copies:
            return max(0.0, end - now)
    return math.inf


def room_times(
    pod: PodInfo,
    cluster: ClusterState,
    node: int,
    ends: Iterable[tuple[float, str]],
    most: int,
) -> list[float]:
    """For ``k`` = 1 .. ``most``: when node slot ``node`` has room for ``k`` copies of
    ``pod`` (GPUs, CPU and memory), if the pods there end at ``ends`` -- ``(end, uid)``,
    soonest first, ``inf`` for a pod whose end is not known --, every other pod staying.
    ``-inf`` for copies that fit now, ``inf`` for those no known end makes room for.

    What a reservation for a job of such copies waits for on that node: not its last pod
    (a 4-GPU member needs half of an 8-GPU node, and a fractional inference replica that
    runs for hours beside it need not leave)."""
    milli, memory = _device_room(cluster, node)
    free = cluster.allocatable[node].astype(np.int64) - cluster.requested[node]
    asks = [(COL_CPU, CPU), (COL_MEMORY, MEMORY)]
    need_mem = cluster.device_memory_for(pod, node)

    def copies() -> int:
        have = copies_on_node(pod, milli, memory, need_mem) if pod.gpu.count else most
        for col, name in asks:
            ask = int(pod.requests.get(name, 0))
            if ask > 0:
                have = min(have, int(free[col]) // ask)
        return have

    out = [-math.inf] * min(max(copies(), 0), most)
    for end, uid in ends:
        if len(out) >= most or not math.isfinite(end):
            break
        _give_back(milli, memory, cluster.placements[uid])
        left = cluster.pods.get(uid)
        if left is not None:
            for col, name in asks:
                free[col] += int(left.requests.get(name, 0))
        out.extend([end] * (min(copies(), most) - len(out)))
    return out + [math.inf] * (most - len(out))


def _device_room(cluster: ClusterState, nodes: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Free milli and memory of the devices of ``nodes`` (a row per node; one row for a
    single slot), as copies to count down from; devices a node does not have hold none."""
    milli = cluster.device_milli_free[nodes].astype(np.int64)
    memory = cluster.device_memory_free[nodes].astype(np.int64)
    gone = ~cluster.device_exists[nodes]
    milli[gone] = 0
    memory[gone] = 0
    return milli, memory


def _give_back(milli: np.ndarray, memory: np.ndarray, pl: Placement) -> None:
    """Add what placement ``pl`` holds on its devices to one node's ``milli``/``memory``
    rows (:func:`_device_room`): the room it leaves when it ends."""
    width = milli.shape[-1]
    for d in pl.devices:
        if 0 <= d < width:
            milli[d] += pl.device_milli
            memory[d] += pl.device_memory


def _copies_per_node(
    pod: PodInfo, milli: np.ndarray, memory: np.ndarray, need: list[int]
) -> list[int]:
    """:func:`copies_on_node` of every row of ``milli``/``memory`` (one node each, ``need``
    its device memory per copy), computed for all rows at once."""
    gpu = pod.gpu
    count = max(1, gpu.count)
    if gpu.is_whole:
        whole: list[int] = (np.count_nonzero(milli >= WHOLE, axis=1) // count).tolist()
        return whole
    per = milli // max(1, gpu.milli)
    mem = np.asarray(need, dtype=np.int64)
    some = mem > 0
    if some.any():
        # memory // need where a copy needs memory; rows that need none keep ``per``.
        by_memory = memory // np.where(some, mem, 1)[:, None]
        per = np.where(some[:, None], np.minimum(per, by_memory), per)
    shared: list[int] = (per.clip(min=0).sum(axis=1) // count).tolist()
    return shared


def declared_ends(
    cluster: ClusterState, now: float, grace: float = math.inf
) -> list[tuple[float, int, Placement]]:
    """(end, node, placement) of every GPU pod in ``cluster`` that declares its run time and
    is not overdue by more than ``grace`` (:func:`remaining`), soonest first (ties by uid):
    what :func:`time_to_fit` walks, for all nodes at once."""
    return _declared_ends(cluster, range(cluster.size), now, grace)


def _declared_ends(
    cluster: ClusterState, nodes: Collection[int], now: float, grace: float = math.inf
) -> list[tuple[float, int, Placement]]:
    """(end, node, placement) of the GPU pods on ``nodes`` that declare their run time (and
    are not overdue by more than ``grace``), soonest first. (A terminating pod too goes by
    its declared end: its grace period is not known here.)"""
    ends: list[tuple[float, str, int, Placement]] = []
    for n in nodes:
        for uid, pod in cluster.node_pods[n].items():
            pl = cluster.placements[uid]
            if not pl.devices:
                continue
            left = remaining(pod, pl, now, grace)
            if left is not None:
                ends.append((now + left, uid, n, pl))
    ends.sort(key=lambda e: (e[0], e[1]))
    return [(end, n, pl) for end, _, n, pl in ends]


def waiting_is_cheaper(loss: float, gpus: float, wait: float) -> bool:
    """Is waiting ``wait`` seconds for ``gpus`` GPUs no dearer than killing work worth
    ``loss`` GPU-seconds? (``gpus x wait <= loss``; never when the wait is unknown.)"""
    return math.isfinite(wait) and gpus * wait <= loss


def hours(gpu_seconds: float) -> str:
    """GPU-seconds as a short GPU-hours text for reasons."""
    return f"{gpu_seconds / SECONDS_PER_HOUR:.2f} GPU-h"
