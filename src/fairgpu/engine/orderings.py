"""The two cycles an engine can run, built from the same actions.

``fair`` (:class:`FairCycle`, default)
    Pending pods are grouped into jobs (a pod, or a pod group placed all-or-nothing) per queue
    and user and handed out in fair-share order (:class:`~fairgpu.engine.actions.order.
    FairOrder`). Quotas (static or dynamic with borrowing), namespace caps, reclaim and
    within-queue preemption (:class:`~fairgpu.engine.actions.preempt.FairVictims`), gang
    timeouts and starvation reservations apply.

``kube-default`` (:class:`KubeDefaultCycle`)
    kube-scheduler's order (priority, then creation time) with its priority preemption and no
    gangs or quotas: the baseline fairgpu is compared with.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Protocol

from fairgpu.engine.actions.admit import FairAdmission, KubeDefaultAdmission
from fairgpu.engine.actions.allocate import Rules, allocate
from fairgpu.engine.actions.backfill_contract import evict_backfill_overruns
from fairgpu.engine.actions.gang_timeout import expire_partial_groups
from fairgpu.engine.actions.kube_default_victims import KubeDefaultVictims
from fairgpu.engine.actions.order import FairOrder, KubeDefaultOrder, lanes
from fairgpu.engine.actions.preempt import FairVictims
from fairgpu.engine.actions.reclaim import deserved_shares
from fairgpu.engine.actions.reserve import (
    drop_sated_reservations,
    expire_reservations,
    reservation_drain,
)
from fairgpu.engine.jobs import build_jobs
from fairgpu.engine.session import Session
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.book import QueueBook


class Cycle(Protocol):
    """One ordering's cycle over a session."""

    def run(self, session: Session, pending: Sequence[PodInfo]) -> None:
        """Try every pending pod once; decisions go to ``session.out``."""


def history_shares(book: QueueBook) -> dict[str, float]:
    """Current dominant shares per queue and per department (``/name``), for the history."""
    shares: dict[str, float] = {}
    for q, u in book.usage.items():
        shares[q] = book.dominant(u)
    for p, u in book.parent_usage.items():
        shares["/" + p] = book.dominant(u)
    return shares


class FairCycle:
    """history -> jobs -> fair shares -> gang timeouts and reservation expiry -> allocate ->
    reservations the placements made needless dropped."""

    def run(self, session: Session, pending: Sequence[PodInfo]) -> None:
        """One fair cycle."""
        book = session.book
        history = session.state.history
        history.advance(session.now, history_shares(book))
        annotation = session.tenancy.gang.min_member_annotation
        backlog = session.backlog
        groups: Container[str]
        if backlog is not None:
            queues, pending_keys, session.pending_pods = backlog.cycle_lanes(
                session.resolver, book, annotation, session.out
            )
            groups = backlog.groups
        else:
            jobs = build_jobs(pending, session.resolver, book, annotation, session.out)
            queues = lanes(jobs)
            pending_keys = {j.key for j in jobs}
            refs = map(session.resolver.pod_group, pending)
            groups = {ref.key for ref in refs if ref is not None}
        deserved = session.deserved = deserved_shares(book, queues, session)
        expire_partial_groups(session)
        evict_backfill_overruns(session)
        expire_reservations(session, pending_keys, groups)
        order = FairOrder(session, queues)
        session.drain = reservation_drain(session)
        rules = Rules(FairAdmission(), FairVictims(session, deserved, queues), reserve=True)
        allocate(session, order, rules)
        drop_sated_reservations(session)
        history.set_current(history_shares(book))


class KubeDefaultCycle:
    """kube-scheduler's order and priority preemption, nothing else."""

    def run(self, session: Session, pending: Sequence[PodInfo]) -> None:
        """One kube-default cycle."""
        rules = Rules(KubeDefaultAdmission(), KubeDefaultVictims(session), reserve=False)
        line = session.backlog.line() if session.backlog is not None else None
        allocate(session, KubeDefaultOrder(session, pending, line), rules)


CYCLES: dict[str, type[FairCycle] | type[KubeDefaultCycle]] = {
    "fair": FairCycle,
    "kube-default": KubeDefaultCycle,
}
