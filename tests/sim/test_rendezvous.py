"""Gang members work only once minMember of their group run; waiting ones give up and fail."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgpu.engine.engine import Engine
from fairgpu.model.pod import PodInfo
from fairgpu.sim.accounting import RunAttempt
from fairgpu.sim.rendezvous import DEFAULT_BACKOFF_LIMIT, DEFAULT_TIMEOUT, Rendezvous
from fairgpu.sim.results import accounting_summary
from fairgpu.sim.simulator import Simulation, SimulationResult
from fairgpu.sim.workload import PodArrival, Workload
from tests.sim.helpers import gpu_node, gpu_pod


def _member(name: str) -> PodInfo:
    pod = gpu_pod(name, gpus="2", labels={"fairgpu.io/pod-group": "g"})
    pod.annotations["fairgpu.io/min-member"] = "2"
    return pod


def _blocked_gang(
    busy_for: float, ordering: str = "kube-default", work: float = 1000.0
) -> SimulationResult:
    """Two 2-GPU nodes; ``busy`` holds one for ``busy_for`` s; the 2-member gang ``g`` (2 GPUs
    each, ``work`` s of work) arrives with it, so one member fits at once and one does not."""
    nodes = [gpu_node("n0", gpus=2), gpu_node("n1", gpus=2)]
    arrivals = [PodArrival(gpu_pod("busy", gpus="2"), 0.0, busy_for)]
    arrivals += [PodArrival(_member(f"g{i}"), 0.0, work) for i in range(2)]
    return Simulation(Workload("t", nodes, arrivals), Engine(ordering=ordering)).run()  # type: ignore[arg-type]


def _attempts(result: SimulationResult, name: str) -> list[RunAttempt]:
    return sorted((a for a in result.runs if a.name == name), key=lambda a: a.start)


def test_a_member_works_from_its_groups_rendezvous_not_from_its_own_bind() -> None:
    result = _blocked_gang(busy_for=300.0)
    (g0,) = _attempts(result, "g0")
    (g1,) = _attempts(result, "g1")
    # g0 ran from 0 but waited for g1 (bound at 300): both work 1 000 s from 300.
    assert (g0.start, g0.work_start, g0.end, g0.outcome) == (0.0, 300.0, 1300.0, "completed")
    assert (g1.start, g1.work_start, g1.end) == (300.0, 300.0, 1300.0)
    acc = accounting_summary(result)
    # The 300 s g0 held 2 GPUs without working are lost, not useful.
    assert acc["lost_gpu_hours_by_outcome"]["gang-wait"] == pytest.approx(2 * 300 / 3600, abs=0.01)
    assert acc["useful_gpu_hours"] == pytest.approx((2 * 300 + 2 * 2 * 1000) / 3600, abs=0.01)


def test_waiting_members_give_up_at_the_timeout_and_queue_again() -> None:
    result = _blocked_gang(busy_for=2000.0)
    outcomes = [(a.start, a.end, a.outcome) for a in _attempts(result, "g0")]
    t = DEFAULT_TIMEOUT
    assert outcomes == [
        (0.0, t, "gang-timeout"),
        (t, 2 * t, "gang-timeout"),
        (2 * t, 3 * t, "gang-timeout"),
        (3 * t, 3000.0, "completed"),  # g1 bound at 2 000 when busy ended: both work from then
    ]
    assert _attempts(result, "g0")[-1].work_start == 2000.0


def test_a_job_that_gives_up_backoff_limit_times_fails_and_the_replay_ends() -> None:
    result = _blocked_gang(busy_for=100_000.0)
    g0 = _attempts(result, "g0")
    assert [a.outcome for a in g0] == ["gang-timeout"] * DEFAULT_BACKOFF_LIMIT
    records = {r.pod.name: r for r in result.records}
    for name in ("g0", "g1"):
        assert records[name].end is None and records[name].start is None
        assert "pod group default/g failed" in records[name].reason
        assert records[name].failed_at == DEFAULT_BACKOFF_LIMIT * DEFAULT_TIMEOUT
    assert records["busy"].end == 100_000.0
    assert result.end_time == 100_000.0


def test_a_gang_placed_all_or_nothing_works_from_its_bind() -> None:
    result = _blocked_gang(busy_for=300.0, ordering="fair")
    for name in ("g0", "g1"):
        (a,) = _attempts(result, name)
        assert (a.start, a.work_start, a.end) == (300.0, 300.0, 1300.0)
    assert accounting_summary(result)["lost_gpu_hours_by_outcome"]["gang-wait"] == 0.0


@pytest.mark.parametrize("ordering", ["kube-default", "fair"])
def test_a_deadline_the_group_no_longer_has_does_not_extend_the_run(ordering: str) -> None:
    # The gang starts at 300 and ends at 400, before the 600 s deadline a member set on
    # binding alone (kube-default: at 0; fair: for an instant inside the cycle at 300).
    result = _blocked_gang(busy_for=300.0, ordering=ordering, work=100.0)
    assert result.end_time == 400.0
    assert result.timeline.time[-1] == 400.0


def test_rendezvous_elastic_extra_works_at_once_and_leavers_reset_the_wait() -> None:
    r = Rendezvous(timeout=10.0)
    assert r.bind("g", 2, {"a"}, "a", 0.0) == []
    assert r.deadline("g") == 10.0
    assert r.bind("g", 2, {"a", "b"}, "b", 5.0) == ["a", "b"]
    assert r.deadline("g") is None
    assert r.bind("g", 2, {"a", "b", "c"}, "c", 6.0) == ["c"]  # beyond minMember
    assert r.bind("h", 3, {"x"}, "x", 1.0) == []
    r.leave("h", "x")
    assert r.deadline("h") is None and r.expired("h", 100.0) == []
    assert r.bind("", None, set(), "solo", 0.0) == ["solo"]


@st.composite
def _gang_workloads(draw: st.DrawFn) -> Workload:
    """2-3 nodes of 2-4 GPUs; 1-4 gangs of 2-3 members and 0-4 pods alone, arriving over
    a few minutes with run times of 1-20 minutes."""
    nodes = [
        gpu_node(f"n{i}", gpus=draw(st.integers(2, 4))) for i in range(draw(st.integers(2, 3)))
    ]
    arrivals: list[PodArrival] = []
    for g in range(draw(st.integers(1, 4))):
        size = draw(st.integers(2, 3))
        at, work = draw(st.floats(0, 600)), draw(st.floats(60, 1200))
        for m in range(size):
            pod = gpu_pod(
                f"g{g}-{m}",
                gpus=str(draw(st.integers(1, 2))),
                labels={"fairgpu.io/pod-group": f"g{g}"},
            )
            pod.annotations["fairgpu.io/min-member"] = str(size)
            # members of one job are submitted a little apart, as a job controller does
            arrivals.append(PodArrival(pod, at + draw(st.floats(0, 300)), work))
    for s in range(draw(st.integers(0, 4))):
        pod = gpu_pod(f"s{s}", gpus=str(draw(st.integers(1, 2))))
        arrivals.append(PodArrival(pod, draw(st.floats(0, 600)), draw(st.floats(60, 1200))))
    return Workload("random", nodes, arrivals)


@settings(max_examples=40, deadline=None)
@given(_gang_workloads(), st.sampled_from(["kube-default", "fair"]))
def test_work_begins_only_with_min_member_running_and_every_replay_ends(
    workload: Workload, ordering: str
) -> None:
    result = Simulation(workload, Engine(ordering=ordering)).run()  # type: ignore[arg-type]
    duration = {a.pod.uid: a.duration for a in workload.arrivals}
    for a in result.runs:
        if a.outcome == "completed":
            assert a.work_start is not None and a.end is not None
            assert a.end - a.work_start == pytest.approx(duration[a.uid])
        if a.work_start is None or not a.group:
            continue
        assert a.work_start >= a.start
        # when its work began, its whole group (minMember = its size here) was running
        size = sum(
            1
            for p in workload.arrivals
            if p.pod.labels.get("fairgpu.io/pod-group") == a.group.split("/")[-1]
        )
        running = {
            b.uid
            for b in result.runs
            if b.group == a.group
            and b.start <= a.work_start < (b.end if b.end is not None else math.inf)
        }
        assert len(running) >= size
        if ordering == "fair":
            assert a.work_start == a.start  # placed all-or-nothing: no member waits
    # The replay ended, and no member was left holding GPUs while waiting for siblings:
    # without ``until`` nothing is still running at the end (a pod never started is pending:
    # its gang never fits, or its job failed after giving up backoff-limit times).
    assert not [a for a in result.runs if a.outcome == "running"]
