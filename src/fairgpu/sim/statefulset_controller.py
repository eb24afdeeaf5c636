"""The StatefulSet controller's part in a simulation: with ``OrderedReady`` pod management,
pod ``i`` is created only once pod ``i-1`` runs.

:mod:`fairgpu.sim.workloads.statefulsets` gives each such StatefulSet's pods in index order;
the first arrives with the StatefulSet, each later one when the one before it starts -- created
then, so it waits and is ordered from then on. A pod that is preempted and waits again does not
take back the ones already created (the controller does not delete a higher pod because a
lower one went away). A pod counts as ready when it starts (no readiness probe is replayed).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from fairgpu.sim.workload import PodArrival


class OrderedCreation:
    """Which pods of ordered StatefulSets exist from the start, and which ones a start
    creates. ``chains``: pods each created once the one before it starts; ``fans``: pods all
    created once the first of them starts (a LeaderWorkerSet's workers under
    ``startupPolicy: LeaderReady``, :mod:`fairgpu.sim.workloads.leaderworkersets`)."""

    def __init__(
        self,
        chains: Iterable[Sequence[str]],
        arrivals: Iterable[PodArrival],
        fans: Iterable[Sequence[str]] = (),
    ) -> None:
        by_uid = {a.pod.uid: a for a in arrivals}
        self._next: dict[str, list[PodArrival]] = {}  # uid -> the arrivals its start creates
        for chain in chains:
            for before, after in itertools.pairwise(chain):
                if after in by_uid:
                    self._next.setdefault(before, []).append(by_uid[after])
        for first, *rest in fans:
            self._next.setdefault(first, []).extend(by_uid[u] for u in rest if u in by_uid)
        self._held = {a.pod.uid for created in self._next.values() for a in created}

    def initial(self, arrivals: Iterable[PodArrival]) -> list[PodArrival]:
        """The ``arrivals`` that exist without waiting for another pod to start."""
        return [a for a in arrivals if a.pod.uid not in self._held]

    @property
    def waiting(self) -> int:
        """How many pods are not created yet."""
        return sum(len(created) for created in self._next.values())

    def started(self, uid: str, now: float) -> list[PodArrival]:
        """The pods created because pod ``uid`` started at ``now`` (none: no later pod, or
        created already): copies of the workload's, created and arriving at ``now``, so the
        workload is left as it was for another run."""
        return [arrival.made_at(now) for arrival in self._next.pop(uid, ())]
