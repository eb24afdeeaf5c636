"""The workload's typical pod shapes: given in the policy's arguments, or learned online.

The fragmentation measures (FGD's and the packing-capacity one) weigh a node's free GPU
milli by how likely the workload's next pods can use it, so they need the distribution of
pod shapes: :class:`TypicalPods` holds it, :class:`ShapeLearner` estimates it from the pods
the engine sees when the policy gives none.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import CPU, MEMORY, PodInfo

Array = npt.NDArray[Any]
# (cpu milli, per-device GPU milli, device count, allowed GPU models or None)
Shape = tuple[int, int, int, frozenset[str] | None]


# Uids a shape learner remembers to count each pod once (see ShapeLearner).
REMEMBER_UIDS = 1 << 17


@dataclass(frozen=True, slots=True)
class TypicalPods:
    """The most frequent pod shapes of a workload with their renormalised weights.

    A shape is (cpu milli, per-device GPU milli, device count, allowed GPU models or None);
    CPU-only shapes have ``count == 0`` and ``milli == 0``. ``memory``: the mean memory
    (bytes) the pods of each shape ask, or None when unknown; it is not part of the shape (FGD
    ignores memory), only the packing-capacity measure reads it.
    """

    cpu: Array
    milli: Array
    count: Array
    models: tuple[frozenset[str] | None, ...]
    weight: Array
    memory: Array | None = None
    # Every shape of the workload (coverage 1), when these are the most frequent ones only.
    full: TypicalPods | None = None

    @property
    def size(self) -> int:
        """Number of shapes."""
        return int(self.cpu.size)

    @staticmethod
    def shape_of(pod: PodInfo) -> Shape:
        """A pod's shape as the fragmentation measure sees it."""
        gpu = pod.gpu
        if gpu.count <= 0:
            return (pod.requests.get(CPU, 0), 0, 0, gpu.models)
        return (pod.requests.get(CPU, 0), min(gpu.milli, WHOLE), gpu.count, gpu.models)

    @classmethod
    def from_counts(
        cls,
        counts: Mapping[Shape, float],
        coverage: float = 0.95,
        memory: Mapping[Shape, float] | None = None,
    ) -> TypicalPods:
        """The most frequent shapes that together cover ``coverage`` of the pods.

        Ties in frequency are broken by the shape itself, so the result is deterministic.
        ``memory``: mean memory (bytes) per shape, kept for the chosen shapes when every one
        of them has it.
        """
        if not 0 < coverage <= 1:
            raise ValueError(f"TypicalPods.coverage: {coverage} is outside (0, 1]")
        if not all(math.isfinite(float(c)) for c in counts.values()):
            raise ValueError("TypicalPods: shape counts must be finite")
        items = sorted(
            ((s, float(c)) for s, c in counts.items() if c > 0),
            key=lambda kv: (-kv[1], kv[0][:3], sorted(kv[0][3] or ())),
        )
        total = sum(c for _, c in items)
        if total <= 0:
            raise ValueError("TypicalPods: no pods to learn shapes from")
        chosen: list[tuple[Shape, float]] = []
        acc = 0.0
        for shape, c in items:
            chosen.append((shape, c))
            acc += c
            if coverage < 1 and acc >= coverage * total - 1e-9:
                break
        weight = np.array([c for _, c in chosen], dtype=np.float64)
        # Huge finite weights overflow when summed: scale by the largest first. Always
        # scaling would change the weights' last bits, and so ties, for ordinary counts.
        with np.errstate(over="ignore"):
            if not np.isfinite(weight.sum()):
                weight = weight / weight.max()
        mem = None
        if memory is not None and all(s in memory for s, _ in chosen):
            mem = np.array([memory[s] for s, _ in chosen], dtype=np.float64)
        full = None
        if len(chosen) < len(items):
            full = cls.from_counts(dict(items), 1.0, memory)
        return cls(
            cpu=np.array([s[0] for s, _ in chosen], dtype=np.int64),
            milli=np.array([s[1] for s, _ in chosen], dtype=np.int64),
            count=np.array([s[2] for s, _ in chosen], dtype=np.int64),
            models=tuple(s[3] for s, _ in chosen),
            weight=weight / weight.sum(),
            memory=mem,
            full=full,
        )

    @classmethod
    def from_pods(cls, pods: Iterable[PodInfo], coverage: float = 0.95) -> TypicalPods:
        """Learn the typical shapes (and their mean memory) from a list of pods."""
        counts: Counter[Shape] = Counter()
        memory: dict[Shape, float] = {}
        for p in pods:
            shape = cls.shape_of(p)
            counts[shape] += 1
            memory[shape] = memory.get(shape, 0.0) + p.requests.get(MEMORY, 0)
        means = {s: memory[s] / counts[s] for s in counts}
        return cls.from_counts(counts, coverage, means)

    @classmethod
    def from_args(cls, shapes: Sequence[dict[str, Any]]) -> TypicalPods:
        """From plugin arguments: ``[{cpu, milli, count, models, weight, memory}, ...]``
        (weights are renormalised; ``models`` is a list or a ``|``-separated string;
        ``memory`` in bytes is optional and used only when every shape has it)."""
        counts: dict[Shape, float] = {}
        tail: dict[Shape, float] = {}
        memory: dict[Shape, float] = {}
        for i, item in enumerate(shapes):
            try:
                shape, w, mem = _parse_arg(item)
            except (KeyError, TypeError, ValueError) as error:
                raise ValueError(f"typical_pods[{i}]: {error}") from None
            into = tail if item.get("tail") else counts
            into[shape] = into.get(shape, 0.0) + w
            if mem is not None:
                memory[shape] = memory.get(shape, 0.0) + w * mem
        both = dict(counts)
        for shape, w in tail.items():
            both[shape] = both.get(shape, 0.0) + w
        means = {s: memory[s] / both[s] for s in memory if both[s] > 0}
        main = cls.from_counts(counts, coverage=1.0, memory=means)
        if not tail:
            return main
        full = cls.from_counts(both, coverage=1.0, memory=means)
        return cls(main.cpu, main.milli, main.count, main.models, main.weight, main.memory, full)

    def to_args(self) -> list[dict[str, Any]]:
        """The inverse of :meth:`from_args` (JSON-friendly). The shapes beyond the most
        frequent ones (:attr:`full`) come last, marked ``tail``, weighted on the same scale."""
        out = [self._arg(i) for i in range(self.size)]
        full = self.full
        if full is not None:
            # Sums run in shape order, never in set order: a set of shapes (which hold
            # frozensets of model names) iterates in an order that changes with the string
            # hash seed, i.e. from one process to the next, and so would the rounding.
            keys = [self._key(i) for i in range(self.size)]
            mine = set(keys)
            own = {full._key(j): float(full.weight[j]) for j in range(full.size)}
            scale = sum(own.get(k, 0.0) for k in keys)
            for j in range(full.size):
                if full._key(j) not in mine and scale > 0:
                    item = full._arg(j)
                    item["weight"] = float(full.weight[j]) / scale
                    item["tail"] = True
                    out.append(item)
        return out

    def distance(self, other: TypicalPods) -> float:
        """L1 distance (0..2) between the two workloads' shape distributions, over every
        shape (:attr:`full` where present); a shape one side lacks weighs 0 there."""
        mine, theirs = (t.full if t.full is not None else t for t in (self, other))
        a = {mine._key(i): float(mine.weight[i]) for i in range(mine.size)}
        b = {theirs._key(j): float(theirs.weight[j]) for j in range(theirs.size)}
        keys = [*a, *(k for k in b if k not in a)]  # shape order, the same in every process
        return sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys)

    def _key(self, i: int) -> Shape:
        return (int(self.cpu[i]), int(self.milli[i]), int(self.count[i]), self.models[i])

    def _arg(self, i: int) -> dict[str, Any]:
        return {
            "cpu": int(self.cpu[i]),
            "milli": int(self.milli[i]),
            "count": int(self.count[i]),
            "models": "|".join(sorted(self.models[i] or ())),
            "weight": float(self.weight[i]),
            **({"memory": float(self.memory[i])} if self.memory is not None else {}),
        }


def _parse_arg(item: dict[str, Any]) -> tuple[Shape, float, float | None]:
    """One ``typical_pods`` item: (shape, weight, memory or None); raises on bad values."""
    models = item.get("models")
    if isinstance(models, str):
        models = [m for m in models.split("|") if m]
    shape: Shape = (
        int(item["cpu"]),
        int(item.get("milli", 0)),
        int(item.get("count", 0)),
        frozenset(models) if models else None,
    )
    w = float(item.get("weight", 1.0))
    if not math.isfinite(w) or w < 0:
        raise ValueError(f"weight must be a finite number >= 0 (got {w})")
    mem = None
    if item.get("memory") is not None:
        mem = float(item["memory"])
        if not math.isfinite(mem) or mem < 0:
            raise ValueError(f"memory must be a finite number >= 0 (got {mem})")
    return shape, w, mem


class ShapeLearner:
    """The typical shapes a fragmentation score uses: the configured ones, or an online
    estimate from the pods it observes.

    ``owner`` names the plugin in error messages. ``coverage``: the share of pods the most
    frequent shapes must cover; ``learn_every`` and ``relearn_threshold``: see
    :meth:`observe`. ``remember``: how many of the most recently counted pods' uids are kept
    so that a pod scored again is not counted again (:attr:`seen_uids`, oldest dropped
    first). A scheduler that runs for months sees millions of pods; keeping every uid would
    grow without end (and the forecasting process is sent this state every round). A pod
    is scored only while it waits, so one counted ``remember`` pods ago has long left.
    """

    def __init__(
        self,
        owner: str,
        typical_pods: Sequence[dict[str, Any]] | None = None,
        coverage: float = 0.95,
        learn_every: int = 256,
        relearn_threshold: float = 0.2,
        remember: int = REMEMBER_UIDS,
    ) -> None:
        if learn_every < 1:
            raise ValueError(f"{owner}.learn_every: must be >= 1 (got {learn_every})")
        if not 0 <= relearn_threshold <= 2:
            raise ValueError(
                f"{owner}.relearn_threshold: must be within [0, 2] (got {relearn_threshold})"
            )
        self.coverage = coverage
        self.learn_every = learn_every
        self.relearn_threshold = relearn_threshold
        self.fixed = typical_pods is not None
        self.typical: TypicalPods | None = (
            TypicalPods.from_args(typical_pods) if typical_pods is not None else None
        )
        self.seen: Counter[Shape] = Counter()
        # The uids of the last ``remember`` pods counted, oldest first (a dict keeps order).
        self.seen_uids: dict[str, None] = {}
        self.remember = remember
        self._since_learn = 0
        self._next_learn = 1

    def observe(self, pod: PodInfo) -> bool:
        """Count ``pod``'s shape (once per pod); True when the typical shapes were replaced.

        Only learns when no distribution was configured. The distribution is re-estimated
        after 1, 2, 4, ... new pods, then every ``learn_every``; it replaces the one in use
        only when they differ by more than ``relearn_threshold`` (L1; 0.2 means 10% of the
        pods moved between shapes), because a replacement invalidates every cached score
        (the next pod of each shape then scores all its feasible nodes afresh).
        """
        if self.fixed or pod.uid in self.seen_uids:
            return False
        self.seen_uids[pod.uid] = None
        if len(self.seen_uids) > self.remember:
            del self.seen_uids[next(iter(self.seen_uids))]
        self.seen[TypicalPods.shape_of(pod)] += 1
        self._since_learn += 1
        if self.typical is not None and self._since_learn < self._next_learn:
            return False
        fresh = TypicalPods.from_counts(self.seen, self.coverage)
        self._since_learn = 0
        self._next_learn = min(2 * self._next_learn, self.learn_every)
        if self.typical is not None and fresh.distance(self.typical) <= self.relearn_threshold:
            return False
        self.typical = fresh
        return True
