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
from dataclasses import dataclass

from fairgpu.model.pod import PodInfo
from fairgpu.sim.workload import PodArrival


@dataclass(frozen=True, slots=True)
class SetAhead:
    """A controller's pods still to be created, as a forecast continues them: ``key`` names
    it for people (``StatefulSet team-a/vllm``); ``gate`` is the uid of its waiting pod whose
    start creates the first of them ("": the first exists at once); ``future`` their arrivals
    in creation order; ``fan``: all created at once when the gate starts, else each once the
    one before it starts; ``owner`` the uid its pods name as their controller, ``total`` how
    many pods it makes in all."""

    key: str
    gate: str
    future: tuple[PodArrival, ...]
    fan: bool = False
    owner: str = ""
    total: int = 0

    def chain(self) -> tuple[tuple[str, ...], bool]:
        """(the uids a forecast's :class:`OrderedCreation` holds back, gate first, and
        whether they fan out) -- empty when nothing waits for a start."""
        uids = tuple(a.pod.uid for a in self.future)
        if self.gate:
            return (self.gate, *uids), self.fan
        if self.fan:
            return (), True  # all of them at once, now
        return uids, False  # the first now, each other once the one before starts


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

    def ahead(self, present: set[str], now: float) -> list[SetAhead]:
        """The pods not created yet, as a forecast from ``now`` continues them: one
        :class:`SetAhead` per pod in ``present`` (waiting or running) whose start creates
        more -- its chain followed to the end, the pods copied, created and arriving at
        ``now``."""
        out = []
        for gate, created in self._next.items():
            if gate not in present:
                continue  # not created yet itself: part of the chain before it
            fan = len(created) > 1
            future: list[PodArrival] = []
            nxt: list[PodArrival] = list(created)
            while nxt:
                future.extend(nxt)
                nxt = [] if fan else list(self._next.get(nxt[-1].pod.uid, ()))
            copies = tuple(a.made_at(now) for a in future)
            first = copies[0].pod
            out.append(SetAhead(_owner_key(first), gate, copies, fan, first.owner))
        return out

    def started(self, uid: str, now: float) -> list[PodArrival]:
        """The pods created because pod ``uid`` started at ``now`` (none: no later pod, or
        created already): copies of the workload's, created and arriving at ``now``, so the
        workload is left as it was for another run."""
        return [arrival.made_at(now) for arrival in self._next.pop(uid, ())]


def _owner_key(pod: PodInfo) -> str:
    """How answers name the controller of ``pod``: its kind and ``namespace/name`` (the
    pod's name without its ordinal)."""
    name = pod.name.rpartition("-")[0] or pod.name
    return f"{pod.owner_kind or 'controller'} {pod.namespace}/{name}"
