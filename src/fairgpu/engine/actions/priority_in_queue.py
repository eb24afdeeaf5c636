"""Priority inside a queue respects users: who a pod may preempt within its own queue.

kube-scheduler lets any pod take the place of pods of strictly lower priority. Inside a
fairgpu queue that would let a user buy a bigger share by raising its pods' priority, at the
other users' expense. So users are treated as queues are between them: a pod may take
*another* user's lower-priority pods only while its own user stays at or below its fair share
of what the queue holds (weighted max-min over the queue's users, each capped by its demand),
a gang member judged with every member its gang still needs, as in reclaim; its own user's
lower-priority pods it may always take, as kube-scheduler would. Candidates ran
``minRuntimeSeconds`` (:func:`~fairgpu.engine.actions.victim_eligibility.eligible_victim`);
those protected after a reserved start are held back until their protection ends.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fairgpu.engine.actions.order import Lanes
from fairgpu.engine.actions.reserve import protected_until
from fairgpu.engine.actions.victim_eligibility import HeldBack, eligible_victim
from fairgpu.engine.jobs import Job
from fairgpu.engine.session import Session
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.fairshare import weighted_max_min


class UsersInQueue:
    """Within-queue priority preemption for one cycle. ``queues``: the cycle's pending jobs
    per queue and user; their demand counts in the users' shares (without it only what
    users hold counts)."""

    def __init__(self, session: Session, queues: Lanes) -> None:
        self.s = session
        self.queues = queues
        self._pending: dict[str, dict[str, np.ndarray]] = {}

    def lower_priority(
        self, job: Job, pod: PodInfo, held: HeldBack, ask: Callable[[], np.ndarray]
    ) -> tuple[list[str], str]:
        """The queue's pods of strictly lower priority that ran ``minRuntimeSeconds``, sorted;
        other users' pods only while the preemptor's user stays within its share of the
        queue with ``ask()`` added (the preemptor's end state, asked for only when another
        user's pod is a candidate). Those protected go to ``held``. Second: the refusal of
        other users' pods, "" when none was refused."""
        s = self.s
        queue, user = job.tenant.queue, job.tenant.user
        min_run = s.tenancy.preemption.min_runtime_seconds
        others_ok: bool | None = None
        own = []
        for uid in s.book.queue_pods.get(queue, ()):
            p = s.cluster.pods.get(uid)
            # No cycle is asked for when a younger one comes of age: it is not held back.
            if p is None or p.priority >= pod.priority or not eligible_victim(s, uid, min_run):
                continue
            until = protected_until(s, uid)
            if until is not None:
                held.add(uid, until)
                continue
            entry = s.book.entries.get(uid)
            if entry is not None and entry.tenant.user != user:
                if others_ok is None:
                    others_ok = self.user_within_share(queue, user, ask())
                if not others_ok:
                    continue
            own.append(uid)
        why = ""
        if others_ok is False:
            why = (
                f"priority preemption refused: user {user!r} would be above its share of "
                f"queue {queue!r}, so it may not preempt other users' pods"
            )
        return sorted(own), why

    def user_within_share(self, queue: str, user: str, ask: np.ndarray) -> bool:
        """Would ``user`` hold at most its fair share of what ``queue`` holds with ``ask``
        added (the preemptor's end state: a gang member with the members its gang still
        needs)? Shares: weighted max-min over the queue's users, each capped by its demand
        (what it holds plus what it had pending when the cycle began)."""
        book = self.s.book
        pending = self._user_pending(queue)
        demand: dict[str, float] = {}
        for (q, u), used in book.user_usage.items():
            if q == queue:
                demand[u] = book.dominant(used + pending.get(u, 0.0))
        for u, vec in pending.items():
            demand.setdefault(u, book.dominant(vec))
        mine = book.user_usage.get((queue, user))
        after = book.dominant(ask if mine is None else mine + ask)
        demand[user] = max(demand.get(user, 0.0), after)
        weights = {u: book.user_weight(queue, u) for u in demand}
        shares = weighted_max_min(book.dominant(book.used(queue)), demand, weights)
        return after <= shares.get(user, 0.0) + 1e-9

    def _user_pending(self, queue: str) -> dict[str, np.ndarray]:
        """What each user of ``queue`` had pending when the cycle began, once per queue."""
        got = self._pending.get(queue)
        if got is None:
            book = self.s.book
            got = {}
            for u, jobs in self.queues.get(queue, {}).items():
                vec = np.zeros_like(book.used(queue))
                for j in jobs:
                    for p in j.pods:
                        vec += book.pending_vector(p)
                got[u] = vec
            self._pending[queue] = got
        return got
