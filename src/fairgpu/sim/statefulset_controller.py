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
    """Which pods of ordered StatefulSets exist from the start, and which one a start
    creates."""

    def __init__(self, chains: Iterable[Sequence[str]], arrivals: Iterable[PodArrival]) -> None:
        by_uid = {a.pod.uid: a for a in arrivals}
        self._next: dict[str, PodArrival] = {}  # uid -> the arrival its start creates
        for chain in chains:
            for before, after in itertools.pairwise(chain):
                if after in by_uid:
                    self._next[before] = by_uid[after]
        self._held = {a.pod.uid for a in self._next.values()}

    def initial(self, arrivals: Iterable[PodArrival]) -> list[PodArrival]:
        """The ``arrivals`` that exist without waiting for another pod to start."""
        return [a for a in arrivals if a.pod.uid not in self._held]

    @property
    def waiting(self) -> int:
        """How many pods are not created yet."""
        return len(self._next)

    def started(self, uid: str, now: float) -> PodArrival | None:
        """The pod created because pod ``uid`` started at ``now`` (None: no later pod, or
        created already): a copy of the workload's, created and arriving at ``now``, so the
        workload is left as it was for another run."""
        arrival = self._next.pop(uid, None)
        return None if arrival is None else arrival.made_at(now)
