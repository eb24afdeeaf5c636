"""What the fairness targets are judged beside: gangs their share allows (qualification at
arrival) and deficits no reclaim could close (locked)."""

from __future__ import annotations

from typing import Any

import pytest

from fairgpu.engine.engine import Engine
from fairgpu.model.pod import LABEL_USER
from fairgpu.sim.results import (
    gang_qualification,
    locked_deficit,
    pool_eligibility,
    share_ratios,
    share_timeline,
)
from fairgpu.sim.simulator import Simulation, SimulationResult
from fairgpu.sim.workload import PodArrival, Workload
from tests.sim.helpers import gpu_node, gpu_pod

Eligible = dict[str, frozenset[str]]


def _gang(
    name: str, namespace: str, at: float, duration: float, gpus: str = "1", user: str = ""
) -> list[PodArrival]:
    out = []
    for i in range(2):
        labels = {"fairgpu.io/pod-group": name} | ({LABEL_USER: user} if user else {})
        pod = gpu_pod(f"{name}-{i}", namespace=namespace, gpus=gpus, labels=labels)
        pod.annotations["fairgpu.io/min-member"] = "2"
        out.append(PodArrival(pod, at, duration))
    return out


def _run(arrivals: list[PodArrival]) -> tuple[SimulationResult, dict[str, int], Eligible]:
    """Two 4-GPU nodes: simulate ``arrivals``; the result, pools and eligibility."""
    nodes = [gpu_node("n0", gpus=4), gpu_node("n1", gpus=4)]
    engine = Engine()
    sim = Simulation(Workload("t", nodes, arrivals), engine, until=3000.0)
    result = sim.run()
    capacity, eligible = pool_eligibility(
        sim.cluster, engine.scheduler, [r.pod for r in result.records]
    )
    return result, capacity, eligible


def _qualified(arrivals: list[PodArrival]) -> dict[str, dict[str, Any]]:
    """Each started gang's qualification."""
    return {g["group"]: g for g in gang_qualification(*_run(arrivals), {})}


def test_a_gang_qualifies_when_its_tenant_plus_the_gang_is_within_its_fair_share() -> None:
    """8 GPUs. Queue a runs 6 one-GPU pods from t=0. At 10 s queue b's 2-GPU gang arrives:
    b holds 0 of a fair share of 2 (demands a 6, b 2): qualified, starts at once. At 20 s a's
    2-GPU gang arrives: a holds 6 of a fair share of 6 (demands a 8, b 2): not qualified; it
    starts when b's gang ends at 110 s."""
    arrivals = [PodArrival(gpu_pod(f"a{i}", namespace="a"), 0.0, 1000.0) for i in range(6)]
    gangs = _qualified(arrivals + _gang("gb", "b", 10.0, 100.0) + _gang("ga", "a", 20.0, 100.0))
    assert set(gangs) == {"b/gb", "a/ga"}
    b, a = gangs["b/gb"], gangs["a/ga"]
    assert (b["tenant"], b["gpus"], b["held_gpus"], b["fair_gpus"]) == ("b", 2.0, 0.0, 2.0)
    assert b["qualified"] and b["wait_s"] == pytest.approx(0.0, abs=1.0)
    assert (a["tenant"], a["gpus"], a["held_gpus"], a["fair_gpus"]) == ("a", 2.0, 6.0, 6.0)
    assert not a["qualified"] and a["wait_s"] == pytest.approx(90.0, abs=1.0)


def test_work_its_user_queued_first_takes_the_share_before_a_gang() -> None:
    """8 GPUs, all held by queue b's one-GPU pods until 300 s. At 10 s queue a's user u
    queues a 2 x 2-GPU gang (a's fair share 4 of 8, a holds 0: qualified). At 20 s u queues a
    2 x 1-GPU gang: a holds 0, but u's first gang (4 GPUs) is ahead of it, goes first (both
    start at 300 s, the older first) and a's share is 4 -- not qualified, though 0 + 2 alone
    would fit. Another user's gang at the same instant has nothing of its own user ahead:
    qualified."""
    arrivals = [PodArrival(gpu_pod(f"b{i}", namespace="b"), 0.0, 300.0) for i in range(8)]
    arrivals += _gang("first", "a", 10.0, 100.0, gpus="2", user="u")
    arrivals += _gang("second", "a", 20.0, 100.0, user="u")
    arrivals += _gang("other", "a", 20.0, 100.0, user="v")
    gangs = _qualified(arrivals)
    first, second, other = gangs["a/first"], gangs["a/second"], gangs["a/other"]
    assert (first["held_gpus"], first["ahead_gpus"], first["qualified"]) == (0.0, 0.0, True)
    assert second["held_gpus"] == 0.0 and second["ahead_gpus"] == 4.0
    assert second["fair_gpus"] == pytest.approx(4.0, abs=0.01)
    assert not second["qualified"]
    assert other["ahead_gpus"] == 0.0 and other["qualified"]


def test_older_work_that_did_not_go_first_is_not_counted() -> None:
    """As above, but b holds only 6 GPUs: u's 2 x 1-GPU gang starts at once on the 2 free
    GPUs, before u's older 4-GPU gang. That older gang took nothing from it: qualified."""
    arrivals = [PodArrival(gpu_pod(f"b{i}", namespace="b"), 0.0, 300.0) for i in range(6)]
    arrivals += _gang("first", "a", 10.0, 100.0, gpus="2", user="u")
    arrivals += _gang("second", "a", 20.0, 100.0, user="u")
    second = _qualified(arrivals)["a/second"]
    assert second["wait_s"] == pytest.approx(0.0, abs=1.0)
    assert second["ahead_gpus"] == 0.0 and second["qualified"]


def _locked(arrivals: list[PodArrival]) -> tuple[dict[str, float], dict[str, Any]]:
    """Each tenant's locked deficit and share row."""
    result, capacity, eligible = _run(arrivals)
    tl = share_timeline(result, capacity, eligible, {})
    return locked_deficit(result, tl, eligible), share_ratios(tl, result.gpu_capacity_milli)


def test_a_deficit_smaller_than_every_waiting_job_is_locked() -> None:
    """Queue a fills the 8 GPUs with one-GPU pods for 1000 s; at 10 s queue b asks a 2 x
    4-GPU gang: b's share is 4 of 8, its only job is 8 -- all of its deficit is locked (no
    reclaim may take b above its share). Asked as four one-GPU pods instead, none of it is."""
    fill = [PodArrival(gpu_pod(f"a{i}", namespace="a"), 0.0, 1000.0) for i in range(8)]
    locked, shares = _locked(fill + _gang("g", "b", 10.0, 100.0, gpus="4"))
    assert shares["b"]["deficit_gpus"] > 0 and locked["b"] == 100.0
    alone = [PodArrival(gpu_pod(f"b{i}", namespace="b"), 10.0, 100.0) for i in range(4)]
    locked, shares = _locked(fill + alone)
    assert shares["b"]["deficit_gpus"] > 0 and locked["b"] == 0.0
