"""Queue order: which job a cycle tries next.

A :class:`QueueOrder` hands out jobs one at a time and is told which queues' usage changed
after each attempt (so a share-based order can re-rank them). Two implementations:
:class:`FairOrder` (fairgpu's) and :class:`KubeDefaultOrder` (kube-scheduler's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import attrgetter, is_
from typing import Protocol

import numpy as np

from fairgpu.engine.jobs import Job, pod_order
from fairgpu.engine.session import Session
from fairgpu.model.pod import PodInfo

# queue -> user -> that user's jobs in order
Lanes = dict[str, dict[str, list[Job]]]
# (lane, start, end of a run of one signature) -> how many of the run to take
Accept = Callable[[list[Job], int, int], int]


class QueueOrder(Protocol):
    """The order jobs are tried in within one cycle."""

    def pop(self) -> Job | None:
        """The next job to try, or None when every job was handed out."""

    def update(self, changed: set[str]) -> None:
        """The usage of queues ``changed`` moved (a job was placed, victims evicted)."""

    def take_next(self, same: Callable[[Job], bool]) -> list[Job]:
        """Remove and return the jobs :meth:`pop` would hand out next, in order, while
        ``same`` holds -- provided nothing changed since the last pop (no :meth:`update`
        with a changed queue). Lets a failed job's identical successors be settled at once.
        """

    def take_run(self, sig: object, accept: Accept | None = None) -> list[Job]:
        """:meth:`take_next` while the jobs' :attr:`Job.sig` is ``sig`` (cheaper: no test
        per job); given ``accept``, only the first ``accept(lane, start, end)`` of that
        run ``lane[start:end]``."""


def kube_default_order(pods: Iterable[PodInfo]) -> list[PodInfo]:
    """kube-scheduler's active queue order: priority (high first), then creation time."""
    return sorted(pods, key=pod_order)


class KubeDefaultOrder:
    """kube-scheduler's order over single pods, blind to queues and shares.

    ``line``: the jobs already in that order (the engine's backlog keeps them so between
    cycles); read, never changed."""

    def __init__(
        self, session: Session, pending: Iterable[PodInfo], line: list[Job] | None = None
    ) -> None:
        if line is None:
            resolve = session.resolver.resolve
            line = [Job(p.uid, [p], resolve(p)) for p in kube_default_order(pending)]
        self._line = _Cursor(line, kept_run_ends(session))

    def pop(self) -> Job | None:
        """Highest priority, then oldest."""
        return self._line.pop()

    def update(self, changed: set[str]) -> None:
        """Shares do not matter to this order."""

    def take_next(self, same: Callable[[Job], bool]) -> list[Job]:
        """The head of the line while ``same`` holds."""
        return self._line.take(same)

    def take_run(self, sig: object, accept: Accept | None = None) -> list[Job]:
        """The head of the line while its jobs' :attr:`Job.sig` is ``sig`` (and, given
        ``accept``, only as many of those as it accepts)."""
        return self._line.take_run(sig, accept)


class _Cursor:
    """A read-only list of jobs and the position of the next one (lanes are shared with
    the backlog, so handing jobs out must not change them). ``ends[i]``: where the run of
    jobs with ``jobs[i]``'s signature that starts at ``i`` ends -- computed at the first
    :meth:`take_run` by ``ends_of`` (:func:`run_ends`, at C level, or the backlog's copy of
    it, :func:`kept_run_ends`), so settling a run costs nothing per job."""

    __slots__ = ("ends", "ends_of", "jobs", "pos")

    def __init__(
        self, jobs: list[Job], ends_of: Callable[[list[Job]], np.ndarray] | None = None
    ) -> None:
        self.jobs = jobs
        self.pos = 0
        self.ends: np.ndarray | None = None
        self.ends_of = ends_of or run_ends

    def __bool__(self) -> bool:
        return self.pos < len(self.jobs)

    def pop(self) -> Job | None:
        if self.pos >= len(self.jobs):
            return None
        self.pos += 1
        return self.jobs[self.pos - 1]

    def take(self, same: Callable[[Job], bool]) -> list[Job]:
        jobs, start = self.jobs, self.pos
        end = start
        while end < len(jobs) and same(jobs[end]):
            end += 1
        self.pos = end
        return jobs[start:end]

    def take_run(self, sig: object, accept: Accept | None) -> list[Job]:
        jobs, start = self.jobs, self.pos
        if start >= len(jobs) or jobs[start].sig is not sig:
            return []
        if self.ends is None:
            self.ends = self.ends_of(jobs)
        end = int(self.ends[start])
        if accept is not None:
            end = start + accept(jobs, start, end)
        self.pos = end
        return jobs[start:end]


def run_ends(jobs: list[Job]) -> np.ndarray:
    """For each index ``i``, the end of the run of jobs whose signature is ``jobs[i]``'s
    (interned, so compared by identity) starting at ``i``."""
    n = len(jobs)
    sigs = list(map(_SIG, jobs))
    same_next = np.fromiter(map(is_, sigs[:-1], sigs[1:]), dtype=bool, count=max(n - 1, 0))
    cuts = np.append(np.flatnonzero(~same_next), n - 1)  # last index of each run
    return cuts[np.searchsorted(cuts, np.arange(n), side="left")] + 1


_SIG = attrgetter("sig")


def kept_run_ends(session: Session) -> Callable[[list[Job]], np.ndarray]:
    """:func:`run_ends`, kept by the session's backlog for its own lanes while they do not
    change (:meth:`~fairgpu.engine.backlog.Backlog.derived`)."""
    backlog = session.backlog
    if backlog is None:
        return run_ends
    return lambda lane: backlog.derived(lane, "run_ends", run_ends)


def lanes(jobs: Iterable[Job]) -> Lanes:
    """Jobs per queue and user, each user's in :attr:`Job.sort_key` order."""
    out: Lanes = {}
    for job in jobs:
        out.setdefault(job.tenant.queue, {}).setdefault(job.tenant.user, []).append(job)
    for users in out.values():
        for lst in users.values():
            lst.sort(key=lambda j: j.sort_key)
    return out


class FairOrder:
    """The next job comes from the queue with the lowest weighted dominant share
    (departments first, then queues inside one; optionally blended with decayed usage
    history), then from that queue's user with the lowest share, then by priority and
    creation time inside that user. A PriorityClass never moves one tenant ahead of another,
    and submitting more pods never raises a tenant's share.

    Ranking queues instead by what they hold against their pool-aware fair share (the
    reclaim rule's measure, the fairness benchmark's ratio) was measured and not adopted
    (``benchmarks/fairness``, realistic suite, demo seeds 0-2): the lowest share ratio
    0.704/0.721/0.740 -> 0.758/0.724/0.707 on the demo, 0.839 -> 0.771 on the pool mix;
    useful allocation on demo seed 2 76.1 -> 70.0% and on the pool mix 50.5 -> 47.9%, its
    qualified gang's wait 3 633 -> 20 679 s; the flood and flexible mixes unchanged."""

    def __init__(self, session: Session, queues: Lanes) -> None:
        self.s = session
        ends_of = kept_run_ends(session)
        self._cursors = {
            q: {u: _Cursor(lst, ends_of) for u, lst in users.items()} for q, users in queues.items()
        }
        self._keys = {q: self._order_key(q) for q in self._cursors}
        self._user_keys: dict[tuple[str, str], tuple[float, str]] = {}
        self._last: tuple[str, str] = ("", "")

    def pop(self) -> Job | None:
        """The head job of the lowest-share user of the lowest-share queue."""
        cursors = self._cursors
        if not cursors:
            return None
        queue = min(cursors, key=self._keys.__getitem__)
        users = cursors[queue]
        user = min(users, key=lambda u: self._user_key(queue, u))
        job = users[user].pop()
        assert job is not None
        self._last = (queue, user)
        self._drop_empty(queue, user)
        return job

    def take_next(self, same: Callable[[Job], bool]) -> list[Job]:
        """The rest of the last popped job's user lane while ``same`` holds: with no usage
        changed, the same queue and user stay the lowest, so these are the next pops."""
        queue, user = self._last
        lane = self._cursors.get(queue, {}).get(user)
        if not lane:
            return []
        taken = lane.take(same)
        self._drop_empty(queue, user)
        return taken

    def take_run(self, sig: object, accept: Accept | None = None) -> list[Job]:
        """:meth:`take_next` while the jobs' :attr:`Job.sig` is ``sig`` (and, given
        ``accept``, only as many of those as it accepts)."""
        queue, user = self._last
        lane = self._cursors.get(queue, {}).get(user)
        if not lane:
            return []
        taken = lane.take_run(sig, accept)
        self._drop_empty(queue, user)
        return taken

    def _drop_empty(self, queue: str, user: str) -> None:
        users = self._cursors[queue]
        if not users[user]:
            del users[user]
            if not users:
                del self._cursors[queue]

    def update(self, changed: set[str]) -> None:
        """Re-rank the changed queues, their departments' other queues, and their users."""
        if not changed:
            return
        book = self.s.book
        parents = {book.queue_limits(q).parent for q in changed} - {""}
        for q in self._cursors:
            if q in changed or book.queue_limits(q).parent in parents:
                self._keys[q] = self._order_key(q)
        for key in [k for k in self._user_keys if k[0] in changed]:
            del self._user_keys[key]

    def _user_key(self, queue: str, user: str) -> tuple[float, str]:
        key = self._user_keys.get((queue, user))
        if key is None:
            key = (self.s.book.user_share(queue, user), user)
            self._user_keys[(queue, user)] = key
        return key

    def _blend(self, key: str, instant: float, weight: float) -> float:
        history = self.s.state.history
        if not history.enabled:
            return instant
        a = self.s.tenancy.history.weight
        return (1 - a) * instant + a * history.value(key) / weight

    def _order_key(self, queue: str) -> tuple[float, float, str]:
        book = self.s.book
        lim = book.queue_limits(queue)
        qs = self._blend(queue, book.queue_share(queue), lim.weight)
        if lim.parent:
            top = self._blend(
                "/" + lim.parent, book.top_share(queue), book.parent_weight(lim.parent)
            )
        else:
            top = qs
        return (top, qs, queue)
