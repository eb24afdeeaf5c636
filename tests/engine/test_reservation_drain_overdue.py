"""A held job is not told its GPUs should be free by a time long past: a pod on the held
nodes overdue by more than drainGraceSeconds says nothing about when they free up, as for a
pod that declares no run time (its queue's observed run time, else unknown) -- not its
declared end, which would read "free by" the same past moment for ever."""

from __future__ import annotations

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy import parse_config
from tests.builders import cluster, learn_run_time, node_info, pod_info

GRACE = 100.0


def engine() -> Engine:
    config = {
        "preemption": {"enabled": False},
        "gang": {"timeoutSeconds": 600},
        "starvation": {"reserveAfterSeconds": 0, "drainGraceSeconds": GRACE},
    }
    return Engine(tenancy=parse_config(config))


def note(result: CycleResult, pod: PodInfo) -> str:
    """What ``pod``'s pending reason says about the nodes held for it."""
    reason = next(u.reason for u in result.unschedulable if u.pod is pod)
    return reason[reason.index("; GPUs are held") :]


def stuck_node(started: float = 0.0) -> ClusterState:
    """n1 (8 GPUs) runs ``stuck`` (4 GPUs), which declares 60 s and runs on."""
    return cluster(
        node_info("n1", gpus=8),
        placed=[(pod_info("stuck", "busy", gpus=4, duration=60), "n1", started)],
    )


def test_a_held_job_is_not_told_a_long_overdue_end() -> None:
    """Held from t=10, n1 is expected free at t=60 -- still so 90 s later, within the
    grace; 140 s later the end is unknown."""
    state = stuck_node()
    eng = engine()
    big = pod_info("big", "wait", gpus=8)
    assert eng.cycle(state, [big], 10.0).reserved == {"wait/big": ["n1"]}
    assert note(eng.cycle(state, [big], 150.0), big) == (
        "; GPUs are held for it on n1, expected free by t=60 s (the declared run times there)"
    )
    assert note(eng.cycle(state, [big], 200.0), big) == (
        "; GPUs are held for it on n1, "
        "when they free up is unknown (pods there declare no run time or outran it)"
    )
    assert eng.reservations["wait/big"].since == 10.0  # the hold itself is as before


def test_a_long_overdue_pod_is_expected_to_run_its_queues_observed_run_time() -> None:
    """Pods of queue busy that declare nothing ran 1 000 s each: ``stuck`` (started at
    1 000, declared 60 s, overdue by more than the grace from t=1 160) is then expected to
    end at 2 000, as a pod of busy that declares nothing would be."""
    state = cluster(node_info("n1", gpus=8))
    eng = engine()
    learn_run_time(eng, state, "busy", 1000.0)
    state.assign(pod_info("stuck", "busy", gpus=4, duration=60), 0, (0, 1, 2, 3), started=1000.0)
    big = pod_info("big", "wait", gpus=8)
    assert eng.cycle(state, [big], 1010.0).reserved == {"wait/big": ["n1"]}
    assert note(eng.cycle(state, [big], 1300.0), big) == (
        "; GPUs are held for it on n1, expected free by t=2000 s (run times observed there)"
    )
