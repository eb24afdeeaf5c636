"""Pods the scheduler cannot place get a FailedScheduling Event and PodScheduled=False with a
reason a person can act on; malformed pods disturb nothing else."""

from __future__ import annotations

import time

import pytest
from live_helpers import A100, bound, condition, create, events_for, pod, pods, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration


def _explained(admin: KubeClient, ns: str, names: set[str]) -> dict[str, dict]:
    out = {}
    for p in pods(admin, ns):
        c = condition(p)
        if p["metadata"]["name"] in names and c and c["status"] == "False":
            out[p["metadata"]["name"]] = c
    return out


def test_malformed_and_impossible_pods_are_explained_and_others_still_bind(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    tenancy = f"""
mode: static
namespaceQueues: false
queues:
  - name: team-a
    namespaces: [{ns}]
    quota: {{gpu: 3}}
"""
    bad = {
        # 150% of one GPU: accepted by the API server (an integer), impossible for a device.
        "bad-quantity": pod("bad-quantity", extra_resources={"nvidia.com/gpucores": "150"}),
        "unknown-queue": pod("unknown-queue", gpus=1, labels={"fairgpu.io/queue": "nope"}),
        # No node has 16 GPUs.
        "impossible-gpus": pod("impossible-gpus", gpus=16),
    }
    good = [pod(f"good-{i}", gpus=1, pool="training", model=A100) for i in range(3)]
    # The queue's quota is 3 GPUs: a fourth one-GPU pod waits for the quota.
    over_quota = pod("over-quota", gpus=1, pool="training", model=A100)
    for m in [*bad.values(), *good]:
        create(admin, ns, m)
    with scheduler(live_cp, tenancy=tenancy) as s:
        wait_for(lambda: len(bound(admin, ns)) == 3)
        create(admin, ns, over_quota)
        names = {*bad, "over-quota"}
        conds = wait_for(lambda: c if len(c := _explained(admin, ns, names)) == 4 else None)
        assert s._healthy()[0]
        for name in names:
            assert wait_for(lambda n=name: events_for(admin, ns, n))[0]["reason"] == (
                "FailedScheduling"
            )
    assert set(bound(admin, ns)) == {"good-0", "good-1", "good-2"}
    assert conds["bad-quantity"]["reason"] == "SchedulerError"
    assert "nvidia.com/gpucores" in conds["bad-quantity"]["message"]
    assert "150" in conds["bad-quantity"]["message"]
    assert "queue 'nope'" in conds["unknown-queue"]["message"]
    assert "known queues: team-a" in conds["unknown-queue"]["message"]
    # The queue's quota is the first thing that can never fit.
    assert "16 GPU" in conds["impossible-gpus"]["message"]
    assert "team-a" in conds["impossible-gpus"]["message"]
    assert "team-a" in conds["over-quota"]["message"]
    assert "quota" in conds["over-quota"]["message"]


def test_same_reason_is_not_reported_again_and_again(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    for i in range(5):
        create(admin, ns, pod(f"never-{i}", gpus=16))
    with scheduler(live_cp, resync_seconds=0.2) as s:
        wait_for(lambda: len(_explained(admin, ns, {f"never-{i}" for i in range(5)})) == 5)
        # Many cycles run meanwhile; each pod is reported once while its reason is unchanged.
        wait_for(lambda: s.reporter.sent == 5)
        cycles = s.metrics.cycle_seconds._sum.get()
        time.sleep(1.5)
        assert s.metrics.cycle_seconds._sum.get() > cycles  # the scheduler kept trying
        assert s.reporter.sent == 5
    for i in range(5):
        assert len(events_for(admin, ns, f"never-{i}")) == 1
        c = condition(next(p for p in pods(admin, ns) if p["metadata"]["name"] == f"never-{i}"))
        assert c is not None
        assert "16 GPUs asked" in c["message"] and "no node has more than 8" in c["message"]
