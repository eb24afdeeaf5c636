"""Observed run times: how long a queue's pods ran to completion, for pods that declare none.

The engine sees only snapshots: a pod that was running and is gone, was not evicted by the
engine and is not pending again, completed; it ran from its start to the last time it was
seen running (an underestimate by at most one cycle). Per queue the last :data:`WINDOW` such
runs are kept; the expected run time is their median once :data:`MIN_RUNS` are known,
else the median over all queues, else unknown.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Container, Iterable, Set

WINDOW = 64
MIN_RUNS = 5


class ObservedRuntimes:
    """Completed run times per queue, learned from successive snapshots of running pods.

    Cost per snapshot: set differences over the running uids (C speed) and Python work only
    for the pods that started or ended since the last one.
    """

    def __init__(self) -> None:
        self._seen: set[str] = set()  # every running uid of the last snapshot
        self._watched: dict[str, tuple[str, float]] = {}  # uid -> (queue, started)
        self._last_seen = 0.0
        self._runs: dict[str, deque[float]] = {}
        self._all: deque[float] = deque(maxlen=WINDOW)
        self._evicted: set[str] = set()
        self.version = 0  # bumped with every run learned: what expected() says may change

    def evicted(self, uids: Iterable[str]) -> None:
        """The engine evicted ``uids``: their end is no completion."""
        self._evicted.update(uids)

    def observe(
        self,
        running: Set[str],
        watch: Callable[[str], tuple[str, float] | None],
        pending: Container[str],
        now: float,
    ) -> None:
        """A new snapshot at ``now`` of the ``running`` uids. ``watch`` gives a newly seen
        pod's queue and start if its run time is worth learning (None: it declares one).
        Watched pods gone since the last snapshot, neither evicted nor ``pending`` again,
        completed when they were last seen."""
        for uid in self._seen - running:
            got = self._watched.pop(uid, None)
            if got is not None and uid not in self._evicted and uid not in pending:
                self._add(got[0], max(0.0, self._last_seen - got[1]))
        for uid in running - self._seen:
            got = watch(uid)
            if got is not None:
                self._watched[uid] = got
        self._evicted &= running  # an evicted pod may take a while to terminate
        self._seen = set(running)
        self._last_seen = now

    def _add(self, queue: str, runtime: float) -> None:
        self._runs.setdefault(queue, deque(maxlen=WINDOW)).append(runtime)
        self._all.append(runtime)
        self.version += 1

    def expected(self, queue: str) -> float | None:
        """The run time expected of a pod of ``queue`` that declares none (None: unknown)."""
        runs = self._runs.get(queue)
        if runs is not None and len(runs) >= MIN_RUNS:
            return float(statistics.median(runs))
        if len(self._all) >= MIN_RUNS:
            return float(statistics.median(self._all))
        return None
