"""Batches of pending pods for one engine cycle, when there are more than ``max_batch``.

Smaller cycles let binds of one batch overlap the engine's work on the next. Every queue is
represented in each batch: round robin over queues, each queue's jobs (a pod, or every pending
member of a pod group, kept whole) oldest and highest-priority first; the engine then orders
the batch fairly.
"""

from __future__ import annotations

from fairgpu.engine.engine import Engine
from fairgpu.model.order import pod_identity
from fairgpu.model.pod import PodInfo

__all__ = ["batch"]


def batch(engine: Engine, pending: list[PodInfo], limit: int) -> list[PodInfo]:
    """About ``limit`` pods taken round robin over queues: each queue's jobs (a pod, or
    every pending member of a pod group) oldest and highest-priority first."""
    jobs: dict[str, dict[str, list[PodInfo]]] = {}
    for p in pending:
        ref = engine.pod_group(p)
        key = ref.key if ref is not None else p.uid
        jobs.setdefault(engine.tenant(p).queue, {}).setdefault(key, []).append(p)
    lanes = []
    for name in sorted(jobs):
        units = sorted(
            jobs[name].values(),
            key=lambda u: (-max(p.priority for p in u), min(map(pod_identity, u))),
        )
        lanes.append(units)
    out: list[PodInfo] = []
    depth = 0
    while len(out) < limit and lanes:
        lanes = [lane for lane in lanes if depth < len(lane)]
        for lane in lanes:
            out.extend(lane[depth])
        depth += 1
    return out
