"""Starvation reservations and backfill around them.

A large job (many whole GPUs, or a big gang) that stays blocked at the head of fair order for
``starvation.reserve_after_seconds`` gets nodes held for it
(:func:`~fairgpu.engine.gang.choose_reservation`); while the reservation exists, other pods
may use those nodes only if they cannot delay the job (:func:`allowed_nodes`, backfill).
A reservation ends when its job starts or leaves, or after the gang timeout.
"""

from __future__ import annotations

import math

import numpy as np

from fairgpu.engine.gang import (
    Reservation,
    backfill_mask,
    choose_reservation,
    drain_estimate,
    whole_gpus,
)
from fairgpu.engine.jobs import Job
from fairgpu.engine.session import Session
from fairgpu.model.pod import CPU, MEMORY, PodInfo


def allowed_nodes(session: Session, job: Job, pod: PodInfo) -> np.ndarray | None:
    """Nodes ``pod`` of ``job`` may use given other jobs' reservations (None: all)."""
    reservations = session.state.reservations
    others = [r for k, r in reservations.items() if k != job.key]
    if not others:
        return None
    return backfill_mask(pod, session.cluster, others, session.drain, session.now)


def reservation_drain(session: Session) -> dict[int, float]:
    """When each reserved node is expected to be empty."""
    cluster = session.cluster
    return {
        int(i): drain_estimate(cluster, int(i))
        for res in session.state.reservations.values()
        for i in res.nodes
        if i < cluster.size
    }


def note_placed(session: Session, job: Job) -> None:
    """``job`` started: its starvation clock and reservation end."""
    session.state.blocked_since.pop(job.key, None)
    session.state.reservations.pop(job.key, None)


def _is_large(session: Session, job: Job, needed: list[PodInfo]) -> bool:
    cfg = session.tenancy.starvation
    return whole_gpus(needed) >= cfg.min_gpus or (
        job.group is not None and job.need >= cfg.min_gang_pods
    )


def note_blocked(session: Session, job: Job) -> None:
    """A job at the head of fair order did not fit: start or check its starvation clock, and
    hold nodes for it once it has waited long enough."""
    cfg = session.tenancy.starvation
    state = session.state
    if not cfg.enabled or job.key in state.reservations:
        return
    needed = job.pods[: job.need]
    if not _is_large(session, job, needed):
        return
    since = state.blocked_since.setdefault(job.key, session.now)
    if session.now - since < cfg.reserve_after_seconds:
        return
    res = _reserve(session, job, needed)
    if res is None:
        return
    state.reservations[job.key] = res
    for i in res.nodes:
        session.drain[int(i)] = drain_estimate(session.cluster, int(i))


def _reserve(session: Session, job: Job, needed: list[PodInfo]) -> Reservation | None:
    cluster = session.cluster
    scheduler = session.scheduler
    taken = np.zeros(cluster.size, dtype=bool)
    for res in session.state.reservations.values():
        taken[res.nodes[res.nodes < cluster.size]] = True
    nodes = choose_reservation(
        needed,
        cluster,
        lambda p: scheduler.static_mask(p, cluster),
        taken,
        scheduler.ranks(cluster),
    )
    if nodes is None:
        return None
    head = needed[0]
    per_node = max(1, -(-len(needed) // len(nodes)))
    return Reservation(
        job.key,
        job.tenant.queue,
        nodes,
        session.now,
        cpu=float(head.requests.get(CPU, 0) * per_node),
        memory=float(head.requests.get(MEMORY, 0) * per_node),
        node_names=[cluster.node(int(i)).name for i in nodes],
    )


def expire_reservations(session: Session, pending_keys: set[str]) -> None:
    """Drop reservations of jobs no longer pending or held longer than the gang timeout,
    and starvation clocks of jobs no longer pending."""
    state = session.state
    timeout = session.tenancy.gang.timeout_seconds
    now = session.now
    for key in list(state.reservations):
        res = state.reservations[key]
        if key not in pending_keys or now - res.since > timeout:
            del state.reservations[key]
            if key in pending_keys:
                state.blocked_since[key] = now  # wait again before the next reservation
    for key in list(state.blocked_since):
        if key not in pending_keys:
            del state.blocked_since[key]


def publish_reservations(session: Session) -> None:
    """List the held nodes in the result and explain them in the held jobs' pending
    reasons."""
    out = session.out
    reservations = session.state.reservations
    for key, res in reservations.items():
        out.reserved[key] = list(res.node_names)
    if reservations:
        _explain(session)


def _explain(session: Session) -> None:
    """Tell a held job's pending pods where GPUs are held for them and when those should be
    free: the latest declared end (``fairgpu.io/duration-seconds``) of the pods on the held
    nodes. The time is absolute, so the reason stays the same from cycle to cycle."""
    notes: dict[str, str] = {}
    reservations = session.state.reservations
    for item in session.out.unschedulable:
        group = session.resolver.pod_group(item.pod)
        key = group.key if group is not None else item.pod.uid
        if key not in reservations:
            key = item.pod.uid  # a member of a group that already runs goes alone
        res = reservations.get(key)
        if res is None:
            continue
        note = notes.get(key)
        if note is None:
            note = notes[key] = _hold_note(session, res)
        item.reason += note


def _hold_note(session: Session, res: Reservation) -> str:
    cluster = session.cluster
    names = res.node_names
    held = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    ends = [drain_estimate(cluster, int(i)) for i in res.nodes if i < cluster.size]
    end = max(ends, default=math.inf)
    when = (
        f"expected free by {session.time_label(end)} (the declared run times there)"
        if math.isfinite(end)
        else "when they free up is unknown (pods there declare no run time)"
    )
    return f"; GPUs are held for it on {held}, {when}"
