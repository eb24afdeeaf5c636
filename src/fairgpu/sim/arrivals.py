"""Future arrivals for a forecast, learned from the arrivals observed before the instant.

Under a fair order, work submitted *after* the instant by a queue below its share goes ahead of
a pod that waits; a forecast that assumes nothing more arrives predicts that pod's start too
early. :class:`ArrivalModel` is the guess that the near future looks like the recent past: the
jobs that arrived in the last ``window`` seconds arrive again, at the same overall rate, as a
Poisson process whose jobs are drawn from that window (so each queue keeps its rate and its mix
of shapes, priorities, gangs and run times). A forecast averages a few sampled futures
(:func:`fairgpu.sim.forecast.forecast_ensemble`).

Only what arrived before the instant is used: the model is built from ``(pod, arrival)`` pairs
and ignores any pair at or after ``now`` that a caller might hold.
Live, the arrivals are the pods' creation timestamps (:class:`ArrivalHistory`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from fairgpu.model.pod import PodInfo
from fairgpu.sim.workload import PodArrival
from fairgpu.tenancy.resolve import GROUP_KEYS

__all__ = ["DEFAULT_WINDOW", "ArrivalHistory", "ArrivalModel", "future_copy"]

#: How much of the past the model learns from by default (seconds).
DEFAULT_WINDOW = 3600.0

#: A window shorter than this (e.g. just after a start) is taken as this long: a handful of
#: arrivals in the first minutes must not be read as a huge rate.
MIN_SPAN = 600.0


def future_copy(pod: PodInfo, tag: str, arrival: float) -> PodInfo:
    """``pod`` as a new pod arriving at ``arrival``: its own UID and name (suffix ``tag``) and,
    for a gang member, its own group name, so it never joins the real pod's group; created at
    its arrival, so it queues behind the pods waiting now."""
    labels = {k: f"{v}{tag}" if k in GROUP_KEYS else v for k, v in pod.labels.items()}
    ann = {k: f"{v}{tag}" if k in GROUP_KEYS else v for k, v in pod.annotations.items()}
    return replace(
        pod,
        uid=f"{pod.uid}{tag}",
        name=f"{pod.name}{tag}",
        labels=labels,
        annotations=ann,
        node_name="",
        claim_statuses=(),  # a new pod: the controller has made no claim for it yet
        created=arrival,
        source=None,
        _static_key=None,
    )


@dataclass(slots=True)
class ArrivalHistory:
    """Pods seen arriving (by UID, first sighting wins), kept ``window`` seconds."""

    window: float = DEFAULT_WINDOW
    _seen: dict[str, tuple[PodInfo, float]] = field(default_factory=dict)

    def observe(self, pod: PodInfo, arrival: float) -> None:
        """Record that ``pod`` arrived at ``arrival`` (its creation time, live)."""
        if pod.uid and pod.uid not in self._seen:
            self._seen[pod.uid] = (pod, float(arrival))

    def prune(self, now: float) -> None:
        """Forget arrivals older than the window before ``now``."""
        old = [u for u, (_, t) in self._seen.items() if t < now - self.window]
        for uid in old:
            del self._seen[uid]

    def pairs(self) -> list[tuple[PodInfo, float]]:
        """The ``(pod, arrival)`` pairs held."""
        return list(self._seen.values())


@dataclass(frozen=True, slots=True)
class ArrivalModel:
    """Jobs (the pods of one gang, or one pod) seen in ``[now - span, now)``, each with the
    offsets of its pods from the job's first, and the rate (jobs/s) they arrived at."""

    now: float
    span: float
    jobs: tuple[tuple[tuple[PodInfo, float], ...], ...]
    starts: tuple[float, ...] = ()  # when each job arrived

    @property
    def rate(self) -> float:
        """Jobs per second."""
        return len(self.jobs) / self.span if self.span > 0 else 0.0

    @classmethod
    def learn(
        cls,
        observed: Iterable[tuple[PodInfo, float]],
        now: float,
        group_of: Callable[[PodInfo], str | None],
        window: float = DEFAULT_WINDOW,
    ) -> ArrivalModel:
        """The model of ``observed`` arrivals strictly before ``now`` within ``window``
        (anything at or after ``now`` is ignored). ``group_of`` names a pod's gang (None for
        a pod alone): a gang's members arrive together again."""
        past = sorted(((p, t) for p, t in observed if t < now), key=lambda pt: (pt[1], pt[0].uid))
        seen = [(p, t) for p, t in past if now - window <= t]
        if not seen:
            return cls(now, window, ())
        # Observed for less than the window (e.g. just started): the rate is over that time.
        span = min(window, max(MIN_SPAN, now - past[0][1]))
        by_job: dict[str, list[tuple[PodInfo, float]]] = {}
        for pod, t in seen:
            key = group_of(pod) or f"pod:{pod.uid}"
            by_job.setdefault(key, []).append((pod, t))
        jobs = tuple(
            tuple((p, t - members[0][1]) for p, t in members) for members in by_job.values()
        )
        return cls(now, span, jobs, tuple(m[0][1] for m in by_job.values()))

    def sample(
        self, start: float, end: float, rng: np.random.Generator, tag: str, step: float = 0.0
    ) -> list[PodArrival]:
        """Jobs arriving in ``[start, end)``: Poisson at :attr:`rate`, each a copy of a job
        drawn from the window (run times left for the caller: ``duration`` None). ``tag``
        makes the copies' names unique across calls. ``step`` > 0 delays each job to the
        next multiple of ``step`` after :attr:`now`, so jobs arrive in batches: a forecast
        runs one cycle per batch instead of one per job."""
        out: list[PodArrival] = []
        if not self.jobs or end <= start:
            return out
        count = int(rng.poisson(self.rate * (end - start)))
        times = np.sort(rng.uniform(start, end, size=count))
        if step > 0:
            times = self.now + np.ceil((times - self.now) / step) * step
        picks = rng.integers(0, len(self.jobs), size=count)
        for i, (at, pick) in enumerate(zip(times, picks, strict=True)):
            for pod, offset in self.jobs[int(pick)]:
                when = round(float(at) + offset, 3)
                out.append(PodArrival(future_copy(pod, f"~{tag}.{i}", when), when, None))
        return out

    def tile(self, start: float, end: float, tag: str) -> list[PodArrival]:
        """The window's arrivals repeated every :attr:`span` seconds after it (the periodic
        extension of the past), those falling in ``[start, end)``: one deterministic future."""
        out: list[PodArrival] = []
        if not self.jobs or end <= start or self.span <= 0:
            return out
        first = int(np.floor((start - self.now) / self.span))
        last = int(np.ceil((end - self.now) / self.span))
        for k in range(max(1, first), max(1, last) + 1):
            shift = k * self.span
            for j, job in enumerate(self.jobs):
                begin = self.starts[j] + shift
                if not start <= begin < end:
                    continue
                for pod, offset in job:
                    when = round(begin + offset, 3)
                    copy = future_copy(pod, f"~{tag}.{k}.{j}", when)
                    out.append(PodArrival(copy, when, None))
        out.sort(key=lambda a: a.arrival)
        return out
