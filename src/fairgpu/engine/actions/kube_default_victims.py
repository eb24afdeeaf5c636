"""kube-scheduler's victim policy: priority preemption as kube-scheduler does it, for the
``kube-default`` ordering (the baseline fair ordering is measured against)."""

from __future__ import annotations

import numpy as np

from fairgpu.engine.actions.victim_eligibility import HeldBack, eligible_victim, held_first
from fairgpu.engine.jobs import Job
from fairgpu.engine.preemption import PreemptionPlan, find_preemption
from fairgpu.engine.session import Session
from fairgpu.model.pod import PodInfo


class KubeDefaultVictims:
    """kube-scheduler's priority preemption: strictly lower priority, anywhere, no minimum
    run time."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self._lowest = min((p.priority for p in session.cluster.pods.values()), default=0)

    def may_preempt(self, pod: PodInfo) -> bool:
        """Enabled, not ``Never``, not held back, and some running pod has a lower
        priority."""
        s = self.s
        return (
            s.tenancy.preemption.enabled
            and pod.preemption_policy != "Never"
            and pod.priority > self._lowest
            and pod.uid not in s.no_preemption
        )

    def memo_key(self, job: Job, pod: PodInfo) -> tuple[object, ...]:
        """Same priority."""
        return (pod.priority,)

    def kind(self, job: Job, victim: PodInfo) -> str:
        """Always ``priority``."""
        return "priority"

    def placed(self, pod: PodInfo) -> None:
        """Track the lowest running priority (the cheap gate of :meth:`may_preempt`)."""
        self._lowest = min(self._lowest, pod.priority)

    def refusal(self, pod: PodInfo) -> str:
        """No rule beyond priority: nothing to name."""
        return ""

    def quota_candidates(self, job: Job, pod: PodInfo) -> list[str]:
        """No queues, no quotas: none."""
        return []

    def department_candidates(self, job: Job, pod: PodInfo) -> list[str]:
        """No departments: none."""
        return []

    def department_refusal(self, job: Job, pod: PodInfo, victims: list[PodInfo]) -> str | None:
        """No departments: nothing to refuse."""
        return None

    def note_room(self, job: Job, pod: PodInfo, victims: list[PodInfo]) -> None:
        """No reclaims to record."""

    def freeable(self, job: Job, pod: PodInfo) -> set[str]:
        """Every placed pod of strictly lower priority that may be a victim."""
        return set(self._lower(pod))

    def held_back(self, job: Job, pod: PodInfo) -> HeldBack:
        """No time rule holds a victim back: none."""
        return HeldBack()

    def _lower(self, pod: PodInfo) -> list[str]:
        s = self.s
        return [
            uid
            for uid, p in s.cluster.pods.items()
            if p.priority < pod.priority and eligible_victim(s, uid, 0.0)
        ]

    def plan(
        self, session: Session, job: Job, pod: PodInfo, allowed: np.ndarray | None
    ) -> PreemptionPlan | None:
        """The best plan among pods of strictly lower priority, taking only held
        preemptors' places if that suffices (:func:`held_first`)."""
        for victims in held_first(session, [self._lower(pod)]):
            plan = find_preemption(pod, session.cluster, session.scheduler, victims, allowed)
            if plan is not None:
                return plan
        return None
