"""The backlog: pending work kept grouped between cycles.

A cycle used to rebuild its jobs and lanes from the whole pending list -- a job per pod, a
sort of every user's jobs, the same-ask comparison of every pod with its predecessor --,
so it cost in proportion to the backlog even when it could start one pod. The
:class:`Backlog` keeps, between cycles, each pending pod's job of one and every lane sorted,
and updates them by what changed since the last cycle: pods that arrived are inserted, pods
that left (placed, deleted, gated, or placed behind the engine's back) are removed. Which
pods changed is found by object identity: an adapter that hands a pod in anew (an updated
object) hands in a new object, which is a removal plus an arrival, so nothing cached about
the old object is ever read for the new one.

What a job caches depends only on the pod object and on how the resolver groups pods: the
tenant (the resolver caches it per uid for good), the sort key and the ask signature
(:func:`ask_signature`). The engine drops the whole backlog when pod groups are registered,
changed or removed (:meth:`Backlog.reset`); the next cycle rebuilds it.

Pod group members are kept per group and their jobs are built every cycle (they depend on
how many members run), then merged into a copy of their lane; lanes without group jobs are
handed out as they are (cycles only read them).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter
from typing import Any, TypeVar, cast

from fairgpu.engine.decisions import CycleResult
from fairgpu.engine.jobs import Job, group_jobs, pod_order
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.book import QueueBook
from fairgpu.tenancy.resolve import TenantResolver
from fairgpu.tenancy.touched import TouchedUids

# queue -> user -> that user's jobs in order
Lanes = dict[str, dict[str, list[Job]]]

_sort_key = attrgetter("sort_key")
T = TypeVar("T")


class JobKeys(AbstractSet[str]):
    """The keys of a cycle's jobs -- pods alone by uid (a view of the backlog's own index)
    and the group jobs' keys --, not merged into one set: the cycle only asks membership."""

    __slots__ = ("_alone", "_groups")

    def __init__(self, alone: AbstractSet[str], groups: AbstractSet[str]) -> None:
        self._alone = alone
        self._groups = groups

    def __contains__(self, key: object) -> bool:
        return key in self._alone or key in self._groups

    def __iter__(self) -> Iterator[str]:
        yield from self._alone
        yield from (k for k in self._groups if k not in self._alone)

    def __len__(self) -> int:
        return len(self._alone) + sum(1 for k in self._groups if k not in self._alone)


@dataclass(frozen=True, slots=True)
class PendingChanges:
    """What changed in an adapter's pending pods since its previous cycle call, by object:
    ``added`` pods handed in anew, ``removed`` pods no longer handed in (net: a pod added and
    removed in between is in neither). ``source`` names whose pending pods these are: the
    changes are relative to the pods that source handed in last time."""

    source: object
    added: Sequence[PodInfo]
    removed: Sequence[PodInfo]


class Backlog:
    """Pending pods of an engine, grouped into sorted lanes and kept between cycles.

    ``grouped``: pod group members go together (the fair cycle; lanes per queue and user);
    otherwise every pod is a job of one in a single lane (kube-default order,
    :func:`~fairgpu.engine.jobs.pod_order`).
    """

    def __init__(self, grouped: bool) -> None:
        self.grouped = grouped
        self.touched = TouchedUids()
        self.reset()

    def reset(self) -> None:
        """Forget everything; the next :meth:`sync` rebuilds from the pending pods."""
        self._seen: dict[int, PodInfo] = {}
        self._jobs: dict[int, Job] = {}
        self._lane_of: dict[int, tuple[str, str]] = {}
        self.lanes: Lanes = {}
        self.groups: dict[str, dict[int, PodInfo]] = {}
        self._group_of: dict[int, str] = {}
        # Per group, its jobs as last built and what they were built from: ((its members'
        # change count, running members, minMember), jobs).
        self._group_version: dict[str, int] = {}
        self._group_jobs: dict[str, tuple[tuple[int, int, int, int | None], list[Job]]] = {}
        # uid -> pod of every pending pod (alone or in a group) and the uids of pods alone.
        self.pods: dict[str, PodInfo] = {}
        self.alone: dict[str, Job] = {}
        # Uids added to or removed from ``pods`` since the pool demand index looked; a reset
        # loses the record (the index then compares every uid once).
        self.touched.lose()
        # The source whose changes the backlog follows (:meth:`follow`), and the gated pods
        # it was handed (kept out of the lanes), by id.
        self.following: object = None
        self.gated: dict[int, PodInfo] = {}
        # Arrays derived from a kept lane's jobs (:meth:`derived`), by the lane's object and
        # the stamp of its contents: every change of a lane gives it a new stamp.
        self._stamp = 0
        self._lane_stamp: dict[int, int] = {}
        self._derived: dict[tuple[int, str], tuple[int, Any]] = {}

    def sync(self, pending: Sequence[PodInfo], resolver: TenantResolver) -> None:
        """Make the backlog hold exactly ``pending`` (no gated or placed pods)."""
        cur = set(map(id, pending))
        seen = self._seen
        if cur == seen.keys():
            return
        for i in seen.keys() - cur:
            self._remove(i, seen.pop(i))
        added = cur - seen.keys()
        if added:
            # In the order pods were handed in, so group members keep it; the new pods are
            # picked out at C level (a pod handed in twice is added once).
            for pod in compress(pending, map(added.__contains__, map(id, pending))):
                if id(pod) not in seen:
                    seen[id(pod)] = pod
                    self._add(pod, resolver)

    def follow(self, changes: PendingChanges, resolver: TenantResolver) -> bool:
        """Update the backlog by ``changes`` alone -- a cycle then costs nothing per pod that
        did not change -- when it holds what ``changes.source`` handed in last time
        (:meth:`sync` was given exactly those pods, less the gated ones in ``gated``, and
        every change since came through here); False, changing nothing, otherwise."""
        if self.following is None or self.following is not changes.source:
            return False
        seen, gated = self._seen, self.gated
        for pod in changes.removed:
            i = id(pod)
            if gated.pop(i, None) is None and seen.get(i) is pod:
                del seen[i]
                self._remove(i, pod)
        for pod in changes.added:
            i = id(pod)
            if pod.scheduling_gates:
                gated[i] = pod
            elif i not in seen:
                seen[i] = pod
                self._add(pod, resolver)
        return True

    def _add(self, pod: PodInfo, resolver: TenantResolver) -> None:
        i = id(pod)
        self.pods[pod.uid] = pod
        self.touched.note(pod.uid)
        ref = resolver.pod_group(pod) if self.grouped else None
        if ref is not None:
            self.groups.setdefault(ref.key, {})[i] = pod
            self._group_of[i] = ref.key
            self._group_version[ref.key] = self._group_version.get(ref.key, 0) + 1
            return
        tenant = resolver.resolve(pod)
        job = Job(pod.uid, [pod], tenant)
        lane = (tenant.queue, tenant.user) if self.grouped else ("", "")
        self._jobs[i] = job
        self._lane_of[i] = lane
        self.alone[pod.uid] = job
        lst = self.lanes.setdefault(lane[0], {}).setdefault(lane[1], [])
        insort(lst, job, key=_sort_key)
        self._touch(lst)

    def _remove(self, i: int, pod: PodInfo) -> None:
        if self.pods.get(pod.uid) is pod:
            del self.pods[pod.uid]
            self.touched.note(pod.uid)
        key = self._group_of.pop(i, None)
        if key is not None:
            members = self.groups[key]
            del members[i]
            self._group_version[key] += 1
            if not members:
                del self.groups[key]
                del self._group_version[key]
                self._group_jobs.pop(key, None)
            return
        job = self._jobs.pop(i)
        if self.alone.get(pod.uid) is job:
            del self.alone[pod.uid]
        queue, user = self._lane_of.pop(i)
        users = self.lanes[queue]
        lst = users[user]
        at = bisect_left(lst, job.sort_key, key=_sort_key)
        while lst[at] is not job:
            at += 1
        del lst[at]
        self._touch(lst)
        if not lst:
            self._forget_lane(lst)
            del users[user]
            if not users:
                del self.lanes[queue]

    def derived(self, lane: list[Job], name: str, compute: Callable[[list[Job]], T]) -> T:
        """``compute(lane)``, kept while ``lane`` -- one of the backlog's own lanes -- does
        not change (between cycles too: a lane of thousands of waiting pods changes by a pod
        or two per cycle, if at all); computed afresh for any other list (a lane a cycle
        merged its pod groups' jobs into). ``name`` tells what is derived."""
        stamp = self._lane_stamp.get(id(lane))
        if stamp is None:
            return compute(lane)
        got = self._derived.get((id(lane), name))
        if got is not None and got[0] == stamp:
            return cast(T, got[1])
        value = compute(lane)
        self._derived[(id(lane), name)] = (stamp, value)
        return value

    def _touch(self, lane: list[Job]) -> None:
        self._stamp += 1
        self._lane_stamp[id(lane)] = self._stamp

    def _forget_lane(self, lane: list[Job]) -> None:
        i = id(lane)
        del self._lane_stamp[i]
        for key in [k for k in self._derived if k[0] == i]:
            del self._derived[key]

    def cycle_lanes(
        self, resolver: TenantResolver, book: QueueBook, annotation: str, out: CycleResult
    ) -> tuple[Lanes, Container[str], Mapping[str, PodInfo]]:
        """This cycle's lanes -- the kept lanes with the pod groups' jobs merged in (groups
        that cannot start yet are reported in ``out``) --, the keys of all its jobs and
        their pods by uid. Lanes and pods are shared with the backlog: callers must not
        change them."""
        lanes = self.lanes
        copied: set[tuple[str, str]] = set()
        group_keys: set[str] = set()
        idle: list[str] = []  # members of groups that yield no job this cycle
        for key, members in self.groups.items():
            jobs = self._jobs_of(key, members, resolver, book, annotation, out)
            if not jobs:
                idle.extend(p.uid for p in members.values())
            for job in jobs:
                if lanes is self.lanes:
                    lanes = {q: dict(users) for q, users in self.lanes.items()}
                queue, user = job.tenant.queue, job.tenant.user
                users = lanes.setdefault(queue, {})
                if (queue, user) not in copied:
                    users[user] = list(users.get(user, ()))
                    copied.add((queue, user))
                insort(users[user], job, key=_sort_key)
                group_keys.add(job.key)
        pending: Mapping[str, PodInfo] = self.pods
        if idle:
            pending = dict(self.pods)
            for uid in idle:
                pending.pop(uid, None)
        # The jobs' keys: pods alone by uid, group jobs by theirs (asked for membership only,
        # so not merged into one set every cycle).
        return lanes, JobKeys(self.alone.keys(), group_keys), pending

    def _jobs_of(
        self,
        key: str,
        members: dict[int, PodInfo],
        resolver: TenantResolver,
        book: QueueBook,
        annotation: str,
        out: CycleResult,
    ) -> list[Job]:
        """:func:`~fairgpu.engine.jobs.group_jobs` of group ``key``, the jobs of the last
        cycle again while its members, its running members and its minMember are the same
        (then so are its jobs: they depend on nothing else), so what a job caches about its
        pods (asks, gang shape) lasts as long as they wait. Groups that yield no job report
        why every cycle."""
        ref = resolver.pod_group(next(iter(members.values())))
        stamp = (
            self._group_version[key],
            len(book.group_running.get(key, ())),
            book.members_toward_min(key),
            ref.min_member if ref is not None else None,
        )
        hit = self._group_jobs.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        pods = sorted(members.values(), key=pod_order)
        jobs = group_jobs(key, pods, resolver, book, annotation, out)
        if jobs:
            self._group_jobs[key] = (stamp, jobs)
        else:
            self._group_jobs.pop(key, None)
        return jobs

    def line(self) -> list[Job]:
        """All jobs in one line (the single lane of an ungrouped backlog), shared: callers
        must not change it."""
        return self.lanes.get("", {}).get("", [])
