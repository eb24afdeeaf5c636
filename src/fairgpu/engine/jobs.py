"""Jobs: what the queue order hands out -- one pod, or the pending members of a pod group."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fairgpu.engine.decisions import CycleResult, Unschedulable
from fairgpu.engine.gang import declared_runtime
from fairgpu.engine.memo import job_signature
from fairgpu.model.order import pod_identity
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.book import QueueBook
from fairgpu.tenancy.resolve import PodGroupRef, Tenant, TenantResolver


@dataclass(slots=True)
class Job:
    """One pod, or the pending members of a pod group, placed all-or-nothing.

    ``need`` members must be placed together (minMember minus running members); a pod alone
    is a job of one with ``need`` 1.
    """

    key: str
    pods: list[PodInfo]
    tenant: Tenant
    group: PodGroupRef | None = None
    need: int = 1
    waiting: str = ""
    # Computed once at creation (a job's pods do not change): see __post_init__.
    sort_key: tuple[Any, ...] = field(init=False, repr=False, compare=False)
    sig: object = field(init=False, repr=False, compare=False)
    runtime: float | None = field(init=False, repr=False, compare=False)
    # (reason, resolvable) last reported for the pod of a job of one (report_changes.py).
    reported: tuple[str, bool] | None = field(default=None, init=False, repr=False, compare=False)
    # (memo.ask of the first pod,) once computed (allocate._ask).
    asked: tuple[tuple[tuple[object, ...], np.ndarray] | None] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    # A gang's static parts of its failure shape (allocate._gang_shape): whether all its
    # members ask the same, by (labels matter, run times matter); its ask vector as a tuple.
    same_ask: dict[tuple[bool, bool], bool] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    ask_tuple: tuple[float, ...] | None = field(default=None, init=False, repr=False, compare=False)
    # What its needed members take together once placed (admit.FairAdmission), with the
    # device memory it was summed at.
    need_vec: tuple[float, np.ndarray] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        """``sort_key``: the order inside one user -- priority (high first), then its
        earliest pod's creation time and namespace/name
        (:func:`~fairgpu.model.order.pod_identity`), then key. ``sig``:
        :func:`~fairgpu.engine.memo.job_signature` (equal signatures are one object).
        ``runtime``: the first pod's declared run time (backfill reads it)."""
        first = min(pod_identity(p) for p in self.pods)
        self.sort_key = (-max(p.priority for p in self.pods), first, self.key)
        self.sig = job_signature(self)
        self.runtime = declared_runtime(self.pods[0])


def pod_order(pod: PodInfo) -> tuple[Any, ...]:
    """kube-scheduler's active queue order: priority (high first), then creation time; pods
    created together by namespace/name in natural order (not UID: a replay has none)."""
    return (-pod.priority, pod_identity(pod), pod.uid)


def build_jobs(
    pending: Iterable[PodInfo],
    resolver: TenantResolver,
    book: QueueBook,
    min_member_annotation: str,
    out: CycleResult,
) -> list[Job]:
    """Group ``pending`` into jobs: each pod outside a group alone, each group's pending
    members together. A group that cannot start yet (minMember unknown, or fewer members
    than it needs) is reported in ``out`` and yields no job."""
    jobs: list[Job] = []
    groups: dict[str, list[PodInfo]] = {}
    for pod in pending:
        ref = resolver.pod_group(pod)
        if ref is None:
            jobs.append(Job(pod.uid, [pod], resolver.resolve(pod)))
        else:
            groups.setdefault(ref.key, []).append(pod)
    for key, members in groups.items():
        members.sort(key=pod_order)
        jobs.extend(group_jobs(key, members, resolver, book, min_member_annotation, out))
    return jobs


def group_jobs(
    key: str,
    members: list[PodInfo],
    resolver: TenantResolver,
    book: QueueBook,
    min_member_annotation: str,
    out: CycleResult,
) -> list[Job]:
    """The jobs of pod group ``key``'s pending ``members`` (in :func:`pod_order`): one job
    of the members minMember still needs, or each member alone once the group runs with
    minMember; none (reported in ``out``) while it cannot start. Members that ran to
    completion count as running (:meth:`~fairgpu.tenancy.book.QueueBook.members_toward_min`)."""
    ref = resolver.pod_group(members[0])
    assert ref is not None
    tenant = resolver.resolve(members[0])
    running = len(book.group_running.get(key, ()))
    done = book.members_toward_min(key) - running  # members that ran to completion
    if ref.min_member is None:
        reason = resolver.pod_group_errors.get(key) or (
            f"pod group {key}: minMember unknown (no PodGroup registered and no "
            f"{min_member_annotation} annotation)"
        )
        out.unschedulable.extend(Unschedulable(p, reason) for p in members)
        return []
    need = max(0, ref.min_member - running - done)
    if need == 0:
        # The group already runs (or ran) with minMember: further members go one by one.
        return [Job(p.uid, [p], tenant, ref) for p in members]
    if len(members) < need:
        finished = f"{done} completed + " if done else ""
        reason = (
            f"pod group {key}: waiting for members, {running} running + {finished}"
            f"{len(members)} pending < minMember {ref.min_member}"
        )
        out.unschedulable.extend(Unschedulable(p, reason) for p in members)
        return []
    return [Job(key, members, tenant, ref, need)]
