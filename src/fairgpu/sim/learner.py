"""Run times learned per queue from observed completions, for pods that declare none.

A forecast needs two numbers per pod: how long a pending pod will run once started, and when a
running pod will end. A pod that declares ``fairgpu.io/duration-seconds`` answers both; for the
others :class:`RuntimeLearner` keeps the most recent completed run times of each queue and
answers with

* the mean run time of the queue, for a pending pod;
* the mean *residual* run time given how long the pod has already run (the mean of ``s - e``
  over the samples ``s`` longer than the elapsed ``e``), for a running pod -- a job that has
  outlived the short runs of its queue is probably one of the long ones.

A queue with fewer than ``min_samples`` completions borrows the samples of every queue. With no
sample at all the answer is None ("unknown"): a forecast then gives no start to pods that wait
on it rather than inventing one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fairgpu.engine.gang import annotated_runtime, shorter
from fairgpu.model.pod import PodInfo

__all__ = ["RuntimeLearner", "Runtimes", "deadline_end"]


@dataclass(slots=True)
class RuntimeLearner:
    """Recent completed run times (seconds) per queue; ``window`` samples kept per queue."""

    window: int = 200
    min_samples: int = 3
    _samples: dict[str, deque[float]] = field(default_factory=dict)
    _all: deque[float] = field(default_factory=lambda: deque(maxlen=1000))

    def observe(self, queue: str, runtime: float) -> None:
        """Record that a pod of ``queue`` completed after ``runtime`` seconds of running."""
        if not runtime >= 0:  # also rejects NaN
            return
        self._samples.setdefault(queue, deque(maxlen=self.window)).append(float(runtime))
        self._all.append(float(runtime))

    def count(self, queue: str | None = None) -> int:
        """Samples held for ``queue`` (None: all queues)."""
        return len(self._all) if queue is None else len(self._samples.get(queue, ()))

    def _of(self, queue: str) -> np.ndarray | None:
        own = self._samples.get(queue)
        chosen = own if own is not None and len(own) >= self.min_samples else self._all
        return np.fromiter(chosen, dtype=np.float64) if chosen else None

    def mean(self, queue: str) -> float | None:
        """Expected run time of a pod of ``queue`` not started yet (None: nothing learned)."""
        samples = self._of(queue)
        return None if samples is None else float(samples.mean())

    def remaining(self, queue: str, elapsed: float) -> float | None:
        """Expected seconds left for a pod of ``queue`` that has run ``elapsed`` seconds."""
        samples = self._of(queue)
        if samples is None:
            return None
        longer = samples[samples > elapsed]
        if longer.size:
            return float(longer.mean() - elapsed)
        # It outlived every sample: it ends "soon", by the same guess as the shortest tail.
        return float(0.1 * samples.mean())

    def state(self) -> dict[str, list[float]]:
        """The samples per queue (to ship to another process)."""
        return {q: list(s) for q, s in self._samples.items()}

    @classmethod
    def from_state(cls, state: dict[str, list[float]]) -> RuntimeLearner:
        """A learner holding ``state`` (see :meth:`state`)."""
        learner = cls()
        for queue, samples in state.items():
            for s in samples:
                learner.observe(queue, s)
        return learner


@dataclass(slots=True)
class Runtimes:
    """Run times a forecast uses: declared first, else learned for the pod's queue.

    ``queue_of`` maps a pod to its queue (the engine's tenancy resolution); ``learner`` may be
    None (declared run times only); ``use_declared`` False ignores the annotation (to measure
    what learning alone predicts).
    """

    queue_of: Callable[[PodInfo], str]
    learner: RuntimeLearner | None = None
    use_declared: bool = True

    def natural(self, pod: PodInfo) -> float | None:
        """How long ``pod``'s work takes once started, declared or learned (None: unknown),
        whatever its ``activeDeadlineSeconds``."""
        declared = annotated_runtime(pod) if self.use_declared else None
        if declared is not None or self.learner is None:
            return declared
        return self.learner.mean(self.queue_of(pod))

    def duration(self, pod: PodInfo) -> float | None:
        """How long ``pod`` will run once started (None: unknown); never past its
        ``activeDeadlineSeconds``."""
        return shorter(self.natural(pod), pod.active_deadline)

    def replayed(self, pod: PodInfo) -> float | None:
        """The run time a replay gives ``pod``: its work's, which its deadline cuts short
        (the replay fails it then), else its deadline (a run of unknown length ends there)."""
        natural = self.natural(pod)
        return natural if natural is not None else pod.active_deadline

    def natural_end(self, pod: PodInfo, started: float, now: float) -> float | None:
        """When the running ``pod`` (started at ``started``) will end its work (None:
        unknown), whatever its ``activeDeadlineSeconds``."""
        declared = annotated_runtime(pod) if self.use_declared else None
        if declared is not None:
            # A pod past its declared time still runs: it ends now, at the earliest.
            return max(now, started + declared)
        if self.learner is None:
            return None
        elapsed = max(0.0, now - started)
        left = self.learner.remaining(self.queue_of(pod), elapsed)
        return None if left is None else now + left

    def end(self, pod: PodInfo, started: float, now: float) -> float | None:
        """When the running ``pod`` (started at ``started``) will end (None: unknown); by its
        ``activeDeadlineSeconds`` at the latest."""
        return shorter(self.natural_end(pod, started, now), deadline_end(pod, started, now))


def deadline_end(pod: PodInfo, started: float, now: float) -> float | None:
    """When the kubelet fails the running ``pod`` (started at ``started``) at its
    ``activeDeadlineSeconds``, now at the earliest (None: no deadline)."""
    return None if pod.active_deadline is None else max(now, started + pod.active_deadline)
