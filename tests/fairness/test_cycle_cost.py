"""A cycle costs in proportion to the distinct asks it tries, not to the backlog."""

from __future__ import annotations

import pytest
from fairness_builders import cluster, node, pod

from fairgpu.engine.actions import allocate as allocate_mod
from fairgpu.engine.engine import Engine
from fairgpu.engine.scheduler import Scheduler

BACKLOG = 600


def backlog() -> list:
    """Two users of one queue each flood identical one-GPU pods, and one asks for two GPUs:
    two user lanes, two shapes."""
    pods = [
        pod(f"a-{i}", "a", gpus=1, created=i * 1e-3, labels={"fairgpu.io/user": f"u{i % 2}"})
        for i in range(BACKLOG)
    ]
    pods.append(pod("a-big", "a", gpus=2, created=0.5, labels={"fairgpu.io/user": "u0"}))
    return pods


@pytest.mark.parametrize("ordering", ["fair", "kube-default"])
def test_identical_backlog_costs_distinct_shapes(
    ordering: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each job ``allocate`` tries, and each ``Scheduler.schedule`` call, is counted: over a
    full cluster with hundreds of identical pending pods, both stay at a handful (one per
    user lane and shape), and every pod is still reported with the reason it would get."""
    tries: list[str] = []
    schedules: list[str] = []
    real_try, real_schedule = allocate_mod.try_job, Scheduler.schedule

    def counting_try(session, job, rules):  # type: ignore[no-untyped-def]
        tries.append(job.key)
        return real_try(session, job, rules)

    def counting_schedule(self, p, *args, **kwargs):  # type: ignore[no-untyped-def]
        schedules.append(p.uid)
        return real_schedule(self, p, *args, **kwargs)

    monkeypatch.setattr(allocate_mod, "try_job", counting_try)
    monkeypatch.setattr(Scheduler, "schedule", counting_schedule)
    # The cluster is full of the same queue's higher-priority work: nothing can preempt.
    filler = [pod(f"f-{i}", "a", gpus=8, priority=100) for i in range(2)]
    state = cluster(
        node("n0"), node("n1"), placed=[(p, f"n{i}", 0.0) for i, p in enumerate(filler)]
    )
    pending = backlog()
    res = Engine(ordering=ordering).cycle(state, pending, 10.0)  # type: ignore[arg-type]

    assert not res.binds
    assert {u.pod.uid for u in res.unschedulable} == {p.uid for p in pending}
    reasons = {u.reason for u in res.unschedulable if u.pod.namespace == "a"}
    assert len(reasons) == 1 and "nvidia.com/gpu" in next(iter(reasons))
    assert len(tries) <= 4, len(tries)
    assert len(schedules) <= 6, len(schedules)
