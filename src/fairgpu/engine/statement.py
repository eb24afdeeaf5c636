"""The transactional statement: the only writer of the cluster and the queue book in a cycle.

After Volcano's ``Statement``. Every placement and eviction a cycle decides goes through one:
:meth:`Statement.assign` and :meth:`Statement.evict` apply it tentatively to both the
:class:`~fairgpu.cluster.state.ClusterState` and the :class:`~fairgpu.tenancy.book.QueueBook`
(so later attempts see it), then :meth:`Statement.commit` emits the :class:`Bind` and
:class:`Evict` decisions (a :class:`Displace` for a victim that is a held preemptor, one of
the session's ``displaceable``: it is unbound, so it is never evicted), or
:meth:`Statement.discard` rolls every step back, newest first.
Because cluster and book change only here, and always together, they cannot drift apart; and
a pod group is placed all-or-nothing: a partial group is never bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fairgpu.cluster.state import Placement
from fairgpu.engine.decisions import Bind, Displace, Evict
from fairgpu.engine.lingering import hold_remainders
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.book import placed_vector

if TYPE_CHECKING:
    from fairgpu.engine.session import Session


@dataclass(slots=True)
class Eviction:
    """One tentative eviction: the victim, where it ran, and what the decision will say."""

    victim: PodInfo
    placement: Placement
    preemptor: PodInfo | None
    reason: str
    kind: str


@dataclass(slots=True)
class Assignment:
    """One tentative placement."""

    pod: PodInfo
    placement: Placement


class Statement:
    """Tentative placements and evictions that are committed or discarded together."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.placed: list[Assignment] = []
        self.evicted: list[Eviction] = []

    def assign(self, pod: PodInfo, node: int, devices: tuple[int, ...]) -> Placement:
        """Place ``pod`` on node slot ``node`` with ``devices`` and account it."""
        s = self.session
        placement = s.cluster.assign(pod, node, devices, started=s.now)
        s.book.add(pod.uid, pod, placed_vector(pod, placement), placement.dra_milli)
        s.placed_now.add(pod.uid)
        self.placed.append(Assignment(pod, placement))
        return placement

    def evict(
        self, victim: PodInfo, preemptor: PodInfo | None, reason: str = "", kind: str = ""
    ) -> bool:
        """Remove ``victim`` from cluster and book (remembered for rollback); False if it
        was not placed."""
        s = self.session
        released = s.cluster.release(victim.uid)
        if released is None:
            return False
        s.cluster.dra.released.add(victim.uid)  # its DRA claims are free for the preemptor
        s.book.remove(victim.uid)
        self.evicted.append(Eviction(victim, released[1], preemptor, reason, kind))
        return True

    def commit(self) -> None:
        """Emit the decisions: every eviction, then every bind, in the order they were made.

        Every bind waits for every victim of the statement -- one job's
        (:attr:`~fairgpu.engine.decisions.Bind.wait_for`): a pod alone for the victims of
        its plan and the group members torn down with them; a pod group's member for all of
        its group's, whichever member's plan evicted them. A member placed on the GPUs a
        torn-down group's member still holds, or beside the sibling a preemption was planned
        for, takes room the victims keep until they are gone -- bound at once, it would share
        a device with a pod still running there; and a member bound at once while its
        siblings wait could run alone, or finish, before they start -- if they were requeued
        (their victims did not go, their node went), the group would be left below minMember.
        A displaced held preemptor is named too: the adapter hands its victims to every pod
        that names it, on any node (they took its place)."""
        s = self.session
        out = s.out
        held = s.displaceable
        for e in self.evicted:
            if e.victim.uid in held and e.preemptor is not None:
                out.displaced.append(Displace(e.victim, e.preemptor, e.reason))
                s.displaced_nodes.add(e.placement.node)
            else:
                out.evictions.append(Evict(e.victim, e.preemptor, e.reason, e.kind))
        victims = tuple(e.victim.uid for e in self.evicted)
        for a in self.placed:
            name = s.cluster.node(a.placement.node).name
            note = s.reclaim_notes.pop(a.pod.uid, None)
            until = s.protected_now.pop(a.pod.uid, None)
            tore = s.tore_down_now.pop(a.pod.uid, ())
            out.binds.append(Bind(a.pod, name, a.placement.devices, victims, note, until, tore))
        if s.victims_linger and self.evicted:
            self._linger()
        self.placed = []
        self.evicted = []

    def _linger(self) -> None:
        """Put back what the victims hold beyond the room this statement's pods take on their
        nodes while they terminate (:mod:`~fairgpu.engine.lingering`; all of it for a victim
        of no preemptor). A displaced held preemptor's room is its own victims': what the
        pods taking its place do not take is held for the rest of the cycle under its uid
        (the adapter requeues it and holds its victims' remainders again), covered before
        the new pods' own victims."""
        s = self.session
        taken = [(a.pod, a.placement) for a in self.placed]
        displaced: list[tuple[PodInfo, Placement]] = []
        evicted: list[tuple[PodInfo, Placement]] = []
        alone: list[tuple[PodInfo, Placement]] = []
        for e in self.evicted:
            if e.preemptor is None:  # a pod group's timeout: nobody takes their room
                if e.placement.bound:
                    alone.append((e.victim, e.placement))
            elif e.victim.uid in s.displaceable:
                displaced.append((e.victim, e.placement))
            else:
                evicted.append((e.victim, e.placement))
        back = hold_remainders(s.cluster, [*displaced, *evicted], taken)
        back += hold_remainders(s.cluster, alone, ())
        self._book_leaving(back, [*evicted, *alone])

    def _book_leaving(self, back: list[PodInfo], bound: list[tuple[PodInfo, Placement]]) -> None:
        """Tell the queue book what the victims put ``back`` hold: the remainder as a placed
        pod (as it counts every terminating pod; the book is marked in line with the cluster
        after the cycle, so it would not see it before some later change), and what a bound
        victim holds in the API beyond it against quotas and limits only -- the room its
        preemptor takes on the node is the preemptor's there, but a quota or a limit,
        perhaps of another queue, is not free before the victim is gone."""
        s = self.session
        book, placements = s.book, s.cluster.placements
        was = {victim.uid: (victim, placement) for victim, placement in bound}
        for pod in back:
            placement = placements[pod.uid]
            vec = placed_vector(pod, placement)
            book.add(pod.uid, pod, vec, placement.dra_milli)
            book.remainders.add(pod.uid)
            whole = was.get(pod.uid)
            if whole is None:
                continue
            victim, held = whole
            extra = np.maximum(placed_vector(victim, held) - vec, 0.0)
            ns_extra = np.maximum(
                book.ns_vector(victim, held.dra_milli) - book.ns_vector(pod, placement.dra_milli),
                0.0,
            )
            if extra.any() or ns_extra.any():
                book.hold_leaving(pod.uid, victim, extra, ns_extra)

    def discard(self) -> None:
        """Undo everything, newest first, leaving cluster and book as before."""
        s = self.session
        for a in reversed(self.placed):
            s.cluster.release(a.pod.uid)
            s.book.remove(a.pod.uid)
            s.placed_now.discard(a.pod.uid)
        for e in reversed(self.evicted):
            s.cluster.dra.released.discard(e.victim.uid)
            pl = e.placement
            placement = s.cluster.assign(e.victim, pl.node, pl.devices, started=pl.started)
            # What the adapter recorded (a held preemptor is not bound) comes back too.
            placement.bound, placement.terminating = pl.bound, pl.terminating
            s.book.add(
                e.victim.uid, e.victim, placed_vector(e.victim, placement), placement.dra_milli
            )
        self.placed = []
        self.evicted = []
