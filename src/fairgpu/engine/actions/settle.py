"""Settling followers: when a pod alone fails, the pods the order would hand out next that
ask for exactly the same get its outcome at once, without an attempt of their own.

Each such follower would meet the leader's failure in the memos: the same admission
answer, the failed-ask memo (:class:`~fairgpu.engine.memo.Front`, keyed by the nodes
reservations leave, which :meth:`~fairgpu.engine.memo.CycleMemo.backfill_key` shares
between pods whose declared run times differ) and the failed-search memo, which also keeps
the rule that refused; no search budget is spent for it. So a follower that asks the same
(the same interned :attr:`~fairgpu.engine.jobs.Job.sig`, and the same labels and preemption
hold where those matter) and may use the same nodes gets the leader's outcome; one that
reservations leave other nodes gets the outcome already known for its backfill class (the
outcome memo), as an attempt would give it, and ends the run when none is known. Not for a
large pod in the fair cycle: each failure of one may start a reservation, so it goes on its
own.

Cost: one identity test per follower, done at C level over the lane
(:meth:`~fairgpu.engine.actions.order.QueueOrder.take_run`); while reservations exist, the
followers' backfill classes are computed at once from their declared run times
(:class:`_RunJudge`) and each class is judged once. Pods without GPUs, labels that matter
(inter-pod affinity placed) or pods held back from preempting go one by one.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from itertools import compress, repeat
from operator import attrgetter, ne
from typing import cast

import numpy as np

from fairgpu.engine.actions.admit import Admission
from fairgpu.engine.actions.backfill import allowed, backfill_key
from fairgpu.engine.actions.order import QueueOrder
from fairgpu.engine.decisions import Unschedulable
from fairgpu.engine.jobs import Job
from fairgpu.engine.report_changes import unchanged_dropped
from fairgpu.engine.session import Session

Outcome = tuple[str, bool]
_REPORTED = attrgetter("reported")
_SORT = attrgetter("sort_key")


def consume(it: Iterable[object]) -> None:
    """Run ``it`` to its end at C speed, keeping nothing."""
    deque(it, maxlen=0)


def settle_followers(
    session: Session, order: QueueOrder, job: Job, admission: Admission, reserve: bool
) -> None:
    """Report the identical successors of the failed ``job`` with its outcome (see the
    module docstring); ``reserve``: large pods may get reservations (they go alone)."""
    out = session.out
    last = out.unschedulable[-1]
    head = job.pods[0]
    reservations = session.state.reservations
    if job.group is not None or last.pod is not head or job.key in reservations:
        return
    if reserve and head.gpu.count >= session.tenancy.starvation.min_gpus:
        return
    sig = job.sig
    if sig is None:
        return
    outcome = (last.reason, last.resolvable)
    mask = allowed(session, job, head)
    classes = _Classes(session, job, mask, outcome, admission)
    if not session.no_preemption and not session.cluster.pods_with_affinity:
        if not reservations:
            taken = order.take_run(sig)
            _report(session, taken, repeat(outcome))
            return
        if classes.by_class is not None:
            judge = _RunJudge(session, classes, sig)
            taken = order.take_run(sig, judge.accept)
            _report(session, taken, judge.outcomes)
            return
    _settle_one_by_one(session, order, job, classes)


def _report(session: Session, taken: list[Job], outcomes: Iterable[Outcome]) -> None:
    """Report each of ``taken`` with its outcome -- only those whose last report differs,
    when the adapter does not want repeats (:mod:`~fairgpu.engine.report_changes`). Those
    are compared here already, so their outcomes are recorded on their jobs at once and
    the span of reports is marked (:attr:`~fairgpu.engine.session.Session.recorded`) for
    the end of the cycle to keep as it is: a settled follower never holds a reservation,
    so no note is added to its reason after this."""
    reports = session.out.unschedulable
    if session.report_unchanged:
        reports.extend(
            [Unschedulable(f.pods[0], r, ok) for f, (r, ok) in zip(taken, outcomes, strict=False)]
        )
        return
    if isinstance(outcomes, repeat):  # one outcome for all: nothing to keep per job
        known = next(outcomes)
        taken = unchanged_dropped(taken, known)
        reason, ok = known
        made = [Unschedulable(f.pods[0], reason, ok) for f in taken]
        consume(map(setattr, taken, repeat("reported"), repeat(known)))
    else:
        outcomes = list(outcomes)
        keep = list(map(ne, map(_REPORTED, taken), outcomes))
        taken = list(compress(taken, keep))
        changed = list(compress(outcomes, keep))
        made = [Unschedulable(f.pods[0], r, ok) for f, (r, ok) in zip(taken, changed, strict=True)]
        consume(map(setattr, taken, repeat("reported"), changed))
    if made:
        start = len(reports)
        reports.extend(made)
        session.recorded.append((start, len(reports)))


def _settle_one_by_one(session: Session, order: QueueOrder, job: Job, classes: _Classes) -> None:
    """The general case: each follower compared by itself."""
    head, sig = job.pods[0], job.sig
    cluster, held = session.cluster, session.no_preemption
    reservations = session.state.reservations
    lead_held = head.uid in held
    got: list[Outcome] = []

    def same(other: Job) -> bool:
        # memo.same_outcome by the interned signature, plus what it leaves out.
        pod = other.pods[0]
        if other.sig is not sig or other.key in reservations:
            return False
        if held and (pod.uid in held) != lead_held:
            return False
        if cluster.pods_with_affinity and pod.labels != head.labels:
            return False
        known = classes.outcome(other)
        if known is not None:
            got.append(known)
        return known is not None

    taken = order.take_next(same)
    _report(session, taken, got)


class _Classes:
    """A follower's outcome by the nodes reservations leave it (:func:`allowed`): the
    leader's when its mask equals the leader's, else the outcome memo's for its backfill
    class (:meth:`~fairgpu.engine.actions.admit.Admission.outcome_key`), None when
    unknown. For pods with GPUs the mask and that key depend only on the backfill class
    (``by_class`` is then a dict), so each class is judged once per run of followers;
    pods without GPUs are judged one by one."""

    def __init__(
        self,
        session: Session,
        leader: Job,
        mask: np.ndarray | None,
        outcome: Outcome,
        admission: Admission,
    ) -> None:
        self.s, self.mask, self.lead, self.admission = session, mask, outcome, admission
        timed = bool(session.state.reservations)
        key = backfill_key(session, leader, leader.pods[0]) if timed else None
        self.by_class: dict[int, Outcome | None] | None = None if key is None else {}

    def outcome(self, other: Job) -> Outcome | None:
        """``other``'s outcome, or None when it must be tried itself."""
        by_class = self.by_class
        if by_class is None:
            return self._judge(other)
        k = self.s.memo.ends_before(other.runtime, self.s.now)
        if k not in by_class:
            by_class[k] = self._judge(other, k)
        return by_class[k]

    def _judge(self, other: Job, k: int | None = None) -> Outcome | None:
        """``other``'s outcome: the leader's when reservations leave it the leader's nodes,
        else the one known for its backfill class (None: unknown). Given its class ``k``,
        its mask and outcome key come from the cycle's table (:meth:`_class_keys`)."""
        session, mask = self.s, self.mask
        known = None if k is None else self._class_keys(other, k)
        mine = allowed(session, other, other.pods[0]) if known is None else known[0]
        if mine is mask or (mine is not None and mask is not None and _same_mask(mine, mask)):
            return self.lead
        # Other nodes left by reservations: settled only if that class's outcome is known.
        fast = self.admission.outcome_key(session, other) if known is None else known[1]
        return session.memo.outcome.get(fast) if fast is not None else None

    def _class_keys(
        self, other: Job, k: int
    ) -> tuple[np.ndarray | None, tuple[object, ...] | None]:
        """The backfill mask and outcome key of ``other``, a follower of backfill class ``k``
        (no reservation of its own). Both depend only on its signature, its user, the
        reservations and ``k`` -- the mask on the backfill key (reservations, ``k``), the
        outcome key on the queue, ask and priority the signature holds, the user and that
        key (labels do not matter here) --, so they are computed once per cycle for every
        run of followers and every leader, not once per run."""
        memo = self.s.memo
        # The user too: the outcome key holds it (whom a pod may preempt depends on it).
        key = (other.sig, other.tenant.user, memo.reservation_keys(), k)
        got = memo.judged.get(key)
        if got is None:
            session = self.s
            mine = allowed(session, other, other.pods[0])
            got = memo.judged[key] = (mine, self.admission.outcome_key(session, other))
        return got


class _RunJudge:
    """How much of a run of same-signature followers is settled while reservations exist,
    and with what: up to the first job that holds a reservation or whose backfill class has
    no known outcome. The classes come from the declared run times at once
    (:meth:`~fairgpu.engine.memo.CycleMemo.ends_before`, vectorised)."""

    def __init__(self, session: Session, classes: _Classes, sig: object) -> None:
        self.s, self.classes, self.sig = session, classes, sig
        self.outcomes: list[Outcome] | repeat[Outcome] = []

    def accept(self, lane: list[Job], start: int, end: int) -> int:
        """How many of the run ``lane[start:end]`` (in order) are settled; their outcomes go
        to :attr:`outcomes` (one outcome repeated when they are all of one class: no list as
        long as the run). Reads the lane in place: the classes of the whole lane are
        computed once per lane and set of reservations in a cycle
        (:meth:`~fairgpu.engine.memo.CycleMemo.lane_classes`), not once per run."""
        limit = self._before_reserved(lane, start, end)
        if limit == 0:
            return 0
        ks = self.s.memo.lane_classes(lane, self.s.now)[start : start + limit]
        by_class = self.classes.by_class
        assert by_class is not None
        # Classes are 0..len(reservations): a table per class, not a search per job.
        seen = np.bincount(ks)
        for k in seen.nonzero()[0].tolist():
            if k not in by_class:
                by_class[k] = self.classes.outcome(lane[start + int((ks == k).argmax())])
        unknown = np.zeros(seen.size, dtype=bool)
        for k, known in by_class.items():
            if known is None and k < seen.size:
                unknown[k] = True
        stop = unknown[ks]
        if np.count_nonzero(stop):
            limit = int(stop.argmax())
        # Every class before ``limit`` is known (not None).
        if limit and np.count_nonzero(seen) == 1:  # one class: one outcome for all
            self.outcomes = repeat(cast(Outcome, by_class[int(ks[0])]))
        else:
            ids = ks[:limit].tolist()
            self.outcomes = cast(list[Outcome], list(map(by_class.__getitem__, ids)))
        return limit

    def _before_reserved(self, lane: list[Job], start: int, end: int) -> int:
        """How many jobs of ``lane[start:end]`` come before the first that holds a
        reservation (``end - start``: none)."""
        limit = end - start
        backlog = self.s.backlog
        for key in self.s.state.reservations:
            job = backlog.alone.get(key) if backlog is not None else None
            if job is None:
                if backlog is None:
                    return min(limit, _scan_reserved(lane, start, end, self.s) - start)
                continue
            if job.sig is not self.sig:
                continue
            at = _index(lane, job, start, end)
            if at is not None:
                limit = min(limit, at - start)
        return limit


def _same_mask(a: np.ndarray, b: np.ndarray) -> bool:
    """Do two node masks (boolean, 1-D) hold the same? Their bytes compared: a boolean
    array stores 0 or 1, and this runs once per follower class in a cycle, where
    ``np.array_equal``'s wrappers cost several times as much."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _index(lane: list[Job], job: Job, start: int, end: int) -> int | None:
    """Where ``job`` is in ``lane[start:end]`` (sorted by sort key; an index of ``lane``),
    or None."""
    at = bisect_left(lane, job.sort_key, start, end, key=_SORT)
    while at < end and lane[at].sort_key == job.sort_key:
        if lane[at] is job:
            return at
        at += 1
    return None


def _scan_reserved(lane: list[Job], start: int, end: int, session: Session) -> int:
    """The index of ``lane`` of the first job of ``lane[start:end]`` that holds a
    reservation (``end``: none)."""
    reservations = session.state.reservations
    for i in range(start, end):
        if lane[i].key in reservations:
            return i
    return end
