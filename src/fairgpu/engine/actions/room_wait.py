"""The wait a kill must beat: how long a pod alone asking GPUs would wait for room if
nobody were evicted, by the declared run times of the pods running where it may go.

A preemption that would lose at least the pod's GPUs x that wait is refused: waiting is
cheaper (:func:`~fairgpu.engine.victim_cost.waiting_is_cheaper`, where the argument is).
:class:`RoomWait` answers it once per ask, nodes and cluster state in a cycle;
:func:`cheaper_wait` words the refusal.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import Placement
from fairgpu.engine.jobs import Job
from fairgpu.engine.session import Session
from fairgpu.engine.victim_cost import declared_ends, time_to_fit
from fairgpu.model.pod import PodInfo


class RoomWait:
    """(GPUs, seconds) of waiting a kill would save a pod, kept for one cycle (``now`` is
    fixed)."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self._waits: dict[tuple[object, ...], float] = {}
        self._ends: tuple[tuple[int, int, int], list[tuple[float, int, Placement]]] | None = None

    def wait(self, job: Job, pod: PodInfo, allowed: np.ndarray | None) -> tuple[float, float]:
        """(GPUs, seconds) of waiting that a kill saves a pod alone asking GPUs: its GPUs, and
        the time until declared run times free room for it on a node it may use (``inf``:
        unknown). A kill that loses at least their product is refused: waiting is cheaper
        (:func:`~fairgpu.engine.victim_cost.waiting_is_cheaper`). A member of a gang is not
        judged (``inf``): the gang starts only when all its members fit, which one member
        cannot tell. (Judging it by the time until every member its gang still needs fits
        was measured on ``benchmarks/fairness``: less work lost on the demo, but the flood
        mix's training gangs then waited for the flood's short pods, whose room the flood
        took first, and fell to 0.58x their share from 0.78x; only for a gang holding a
        reservation, no share gained on the demo either. Judging a pod alone by the time
        until room frees for it and the identical pods waiting behind it in its lane -- one
        eviction moves the whole run one room earlier -- changed little and not one way:
        demo seeds 0-7 mean useful allocation 72.07% -> 72.26%, lost 1.53% -> 1.38%, mean
        lowest share ratio 0.725 -> 0.713 (seed 1: 0.721 -> 0.646); the flexible mix on
        seed 1 0.427 -> 0.524, its useful allocation 63.5% -> 62.3%. Counting the wait
        dearer than the work -- ``k x G x T`` against ``L``, so a preemptor kills sooner
        rather than wait -- was measured too, k = 1.5 / 2 / 3: demo seeds 0/1/2 lowest share
        ratio .704/.721/.740 -> .741/.589/.665, .708/.587/.691, .702/.625/.707, the demo's
        highest lost GPU time 2.17% -> 2.59/4.76/3.66%, pool mix lowest .839 ->
        .745/.814/.631; the flood mix as before, the flexible mix's useful allocation too
        (76.09%; lost .94 -> 1.30%). Not judging a starved queue's pod of at most one GPU --
        its queue holding at most the band x its share, so a brief wait weighs heavily on
        its ratio --: the flood mix's lowest share ratio .871 -> .908 on seed 0, .868 -> .883
        on seed 1, unchanged on seed 2; but over the demo on seeds 0-7 (run seed 1), the
        demo on seed 0 (run seeds 0 and 2), demo-departments and the pool mix (run seeds 1
        and 2) the lowest ratios moved both ways -- demo .768 -> .769 / .736, seed 1 .640 ->
        .678, seed 3 .785 -> .776, demo-departments (run seed 2) .609 -> .555, pool mix
        .796 -> .832 -- for a mean gain under 0.01.)"""
        s = self.s
        gpus = pod.gpu.total_milli / 1000.0
        if job.group is not None or gpus <= 0:
            return gpus, np.inf
        mask = s.scheduler.static_mask(pod, s.cluster)
        if allowed is not None:
            mask = mask & allowed[: mask.size]
        key = (pod.gpu, mask.tobytes(), s.cluster.load_version, s.cluster.static_version)
        if key not in self._waits:  # once per ask and nodes while the cluster stays
            self._waits[key] = time_to_fit(pod, 1, s.cluster, mask, s.now, self._declared_ends)
        return gpus, self._waits[key]

    def _declared_ends(self) -> list[tuple[float, int, Placement]]:
        """:func:`~fairgpu.engine.victim_cost.declared_ends` of the cluster, once per state
        in a cycle (``now`` is fixed): one walk of the running pods for every mask asked."""
        c = self.s.cluster
        key = (c.load_version, c.static_version, c.size)
        if self._ends is None or self._ends[0] != key:
            # A pod overdue by more than the drain grace says nothing about its end.
            grace = self.s.tenancy.starvation.drain_grace_seconds
            self._ends = (key, declared_ends(c, self.s.now, grace))
        return self._ends[1]


def cheaper_wait(session: Session, loss: str, wait: float) -> str:
    """The refusal of a kill that loses more than waiting ``wait`` seconds costs (``loss``
    says what the kill would lose, compared with that wait). The time is absolute (as in a
    reservation's note): the room is expected at the same moment from one cycle to the
    next, so the reason of a pod that keeps waiting for it stays the same and is not
    reported again every cycle (thousands of waiting pods share it)."""
    until = session.time_label(session.now + wait)
    return f"waiting is cheaper: declared run times free room by {until}, and {loss}"
