"""Backfill contract: a pod let onto nodes held for a starving job because it declared it
would end before they drain keeps that promise, or goes.

Backfill around a reservation trusts declared run times (``fairgpu.io/duration-seconds``,
:func:`~fairgpu.engine.gang.backfill_mask`): a GPU pod may start on a held node only if it
declares it ends before the held job is expected to start. Left at that, a declaration is
a way to game the fair order: declare five minutes, run for hours, and the GPUs are yours
-- the held job waits past its hold, the reservation is given up, and the job waits again
while the pod keeps running. So, as a batch scheduler ends a job at its time limit, a pod
that started on a held node while it was held and is still there ``drainGraceSeconds``
after its declared run time is evicted (kind ``backfill-overrun``), provided the
reservation still holds. Pods are not held to it that started there before the reservation
was made, that declare nothing (they were never let on by their run time), that a pool
precedence rule lets onto the node whatever their run time, or that belong to the held
job. ``starvation.evictBackfillOverruns: false`` turns the rule off.

A pod whose run time is a guess can declare it generously or not at all: it then waits for
nodes no reservation holds, as any pod that declares nothing does.
"""

from __future__ import annotations

import numpy as np

from fairgpu.engine.actions.precedence_nodes import open_reserved
from fairgpu.engine.gang import Reservation
from fairgpu.engine.session import Session
from fairgpu.engine.victim_cost import declared_end, outran
from fairgpu.model.pod import PodInfo

KIND = "backfill-overrun"


def evict_backfill_overruns(session: Session) -> None:
    """Evict every pod that broke the contract (module docstring).

    No cycle is asked for at the moment a pod would break it: the engine cannot tell a pod
    that will overrun from one that ends on time, and a replay woken at every backfilled
    pod's deadline would run a cycle for each honest one too, after it ended -- extra cycles
    that move the timed rules' decisions (measured: the fairness benchmark's pool mix, with
    no pod overrunning, lowest share ratio 0.839 -> 0.834). The live scheduler's periodic
    cycles judge a pod within seconds; a replay at its next event."""
    starvation = session.tenancy.starvation
    if not starvation.evict_backfill_overruns or not session.state.reservations:
        return
    grace = starvation.drain_grace_seconds
    late = [
        (pod, node, res, due)
        for res in session.state.reservations.values()
        for pod, node, due in _overdue(session, res, grace)
    ]
    if not late:
        return
    stmt = session.statement()
    for pod, node, res, due in late:
        reason = (
            f"backfilled onto {session.cluster.node(node).name}, held for {res.key}, because "
            f"it declared it would end by {session.time_label(due)}; still running "
            f"{grace:g}s after that"
        )
        stmt.evict(pod, None, reason, KIND)
    stmt.commit()
    session.released()


def _overdue(session: Session, res: Reservation, grace: float) -> list[tuple[PodInfo, int, float]]:
    """The pods ``res``'s nodes let on by their declared run time while it held them and
    now overdue by more than ``grace`` (:func:`~fairgpu.engine.victim_cost.outran`), each
    with its node and when it declared it would end."""
    cluster = session.cluster
    rules = session.tenancy.preemption.pool_precedence
    out = []
    for node in res.nodes[res.nodes < cluster.size].tolist():
        for uid, pod in cluster.node_pods[node].items():
            placement = cluster.placements[uid]
            if not pod.gpu.count or placement.started < res.since or uid in res.present:
                continue  # not let on by its run time: no GPUs, or there before the hold
            end = declared_end(pod, placement, session.now)
            if end is None:
                # No promise: not let on by a run time (another scheduler bound it there).
                continue
            if not outran(end, session.now, grace):
                continue  # not overdue by more than the grace yet
            if placement.terminating or not placement.bound:
                continue  # going already (an evicted pod lingers while it terminates)
            if res.key in _job_keys(session, pod):
                continue
            if rules and _opened(session, pod, res, node):
                continue
            out.append((pod, node, end))
    return out


def _opened(session: Session, pod: PodInfo, res: Reservation, node: int) -> bool:
    """Does a pool precedence rule let ``pod`` onto ``node`` whatever its run time?"""
    cluster = session.cluster
    shut = np.zeros(cluster.size, dtype=bool)
    rules = session.tenancy.preemption.pool_precedence
    return bool(open_reserved(rules, cluster, pod, [res], shut)[node])


def _job_keys(session: Session, pod: PodInfo) -> tuple[str, ...]:
    """The keys a job of ``pod`` may have: its own uid (a pod alone) and its pod group's."""
    ref = session.resolver.pod_group(pod)
    return (pod.uid,) if ref is None else (pod.uid, ref.key)
