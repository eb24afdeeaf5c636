"""Every run attempt is recorded: runs.csv rows, lost work by cause, reversals, gang starts."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.engine.engine import Engine
from fairgpu.model.gpu import GpuRequest
from fairgpu.sim.accounting import LOST, USEFUL, RunAttempt, gang_stats, reversals
from fairgpu.sim.results import accounting_summary, preemptions_text, summarize, write_runs_csv
from fairgpu.sim.simulator import Simulation, SimulationResult
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy import parse_config
from tests.builders import k8s_pod
from tests.sim.helpers import gpu_node, gpu_pod


def _reclaim_of_a_gang() -> SimulationResult:
    """Queue a runs a 2-member gang (2 GPUs each) on n0 and n1, and a pod on n2 (tainted: only
    that pod tolerates it); queue b's pod arrives at 10 s and reclaims one member, so the
    other restarts with it; b's pod runs 100 s. (a keeps n2, so b does not pass it.)"""
    config = parse_config(
        {
            "mode": "dynamic",
            # reclaimMinRuntimeSeconds off: the gang has run only 10 s when b's pod reclaims.
            "preemption": {"enabled": True, "minRuntimeSeconds": 0, "reclaimMinRuntimeSeconds": 0},
            "queues": [{"name": "a", "namespaces": ["a"]}, {"name": "b", "namespaces": ["b"]}],
        }
    )
    engine = Engine(tenancy=config)
    only_a = {"key": "only", "value": "a", "effect": "NoSchedule"}
    nodes = [gpu_node("n0", gpus=2), gpu_node("n1", gpus=2), gpu_node("n2", 2, taints=[only_a])]
    gang = [
        gpu_pod(f"g{i}", namespace="a", gpus="2", labels={"fairgpu.io/pod-group": "g"})
        for i in range(2)
    ]
    for pod in gang:
        pod.annotations["fairgpu.io/min-member"] = "2"
    arrivals = [PodArrival(p, 0.0, 1000.0) for p in gang]
    keep = k8s_pod("keep", "a", gpus="2", cpu="1", tolerations=[{**only_a, "operator": "Equal"}])
    arrivals.append(PodArrival(keep, 0.0, 1000.0))
    arrivals.append(PodArrival(gpu_pod("late", namespace="b", gpus="2"), 10.0, 100.0))
    return Simulation(Workload("t", nodes, arrivals), engine, until=600.0).run()


def test_runs_csv_has_one_row_per_attempt(tmp_path: Path) -> None:
    result = _reclaim_of_a_gang()
    write_runs_csv(result, tmp_path / "runs.csv")
    lines = (tmp_path / "runs.csv").read_text().splitlines()
    assert lines[0] == (
        "namespace,name,tenant,user,group,node,devices,gpu_request,start,end,outcome,cause,"
        "preemptor,preemptor_tenant,work_start"
    )
    assert lines[1:] == [
        # b's pod reclaims g0's node; g1 is torn down with it (same preemptor, its own row).
        'a,g0,a,a,a/g,n0,"0,1",2,0.0,10.0,preempted,reclaim,b/late,b,0.0',
        'a,g1,a,a,a/g,n1,"0,1",2,0.0,10.0,gang-restart,,b/late,b,0.0',
        'b,late,b,b,,n0,"0,1",2,10.0,110.0,completed,,,,10.0',
        'a,keep,a,a,,n2,"0,1",2,0.0,600.0,running,,,,0.0',
        # The gang starts again once b's pod is done, and runs when the clock stops.
        'a,g0,a,a,a/g,n0,"0,1",2,110.0,600.0,running,,,,110.0',
        'a,g1,a,a,a/g,n1,"0,1",2,110.0,600.0,running,,,,110.0',
    ]


def test_summary_counts_lost_work_by_cause_and_gang_starts() -> None:
    acc = accounting_summary(_reclaim_of_a_gang())
    hours = 2 * 10.0 / 3600  # each member held 2 GPUs for 10 s before it was stopped
    assert acc["lost_gpu_hours_by_outcome"]["preempted"] == round(hours, 2)
    assert acc["lost_gpu_hours_by_outcome"]["gang-restart"] == round(hours, 2)
    useful = (2 * 100 + 2 * 2 * 490 + 2 * 600) / 3600
    assert acc["useful_gpu_hours"] == round(useful, 2)
    assert acc["lost_pct_of_capacity"] == round(100 * 40 / (6 * 600), 2)
    assert acc["gang_restarts"] == 1
    assert acc["max_gang_starts"] == 2
    assert acc["gang_wait_p50_s"] == 110.0  # arrived at 0, final start at 110
    assert acc["reversals"] == {"same_cycle": 0, "10min": 0, "1h": 0}


def _move(t: float, node: str, victim: str, taker: str, seq: int) -> RunAttempt:
    """A run of ``victim``'s pod on ``node`` that ``taker``'s pod preempted at ``t``."""
    return RunAttempt(
        victim, f"p{seq}", f"{victim}/p{seq}", victim, "", "", node, (0,), GpuRequest(1),
        0.0, t, "preempted", "reclaim", f"{taker}/x", taker, seq,
    )  # fmt: skip


def test_reversals_count_opposite_moves_on_the_same_node_within_the_window() -> None:
    runs = [
        _move(100.0, "n0", "d", "a", 0),  # a takes n0 from d
        _move(153.0, "n0", "a", "d", 1),  # d takes it back 53 s later: a reversal
        _move(160.0, "n1", "d", "a", 2),  # another node: not a reversal of anything
        _move(900.0, "n0", "d", "a", 3),  # a again, 747 s after d's move: within the hour
        _move(900.0, "n1", "a", "d", 4),  # same cycle as the next move
        _move(900.0, "n1", "d", "a", 5),  # undoes move 4 in the same cycle (and move 2)
        _move(910.0, "n0", "a", "a", 6),  # inside one queue: never a move
    ]
    assert reversals(runs, 0.0) == 1  # move 5
    assert reversals(runs, 600.0) == 2  # moves 1 and 5
    assert reversals(runs, 3600.0) == 4  # and moves 3 (of 1) and 4 (of 2)


def test_gang_starts_are_the_most_attempts_of_any_member() -> None:
    def run(uid: str, start: float) -> RunAttempt:
        return RunAttempt("a", uid, uid, "a", "", "a/g", "n0", (0,), GpuRequest(1), start)

    runs = [run("m0", 5.0), run("m1", 5.0), run("m0", 50.0), run("m1", 50.0), run("m0", 70.0)]
    stats = gang_stats(runs, {"m0": 0.0, "m1": 1.0})
    assert stats["max_gang_starts"] == 3
    assert stats["gangs_started_more_than_twice"] == 1
    assert stats["gang_wait_s"] == [pytest.approx(70.0)]


def test_simulate_out_writes_runs_csv_consistent_with_the_summary(tmp_path: Path) -> None:
    out, report = tmp_path / "out", tmp_path / "report.html"
    args = ["simulate", "--jobs", "120", "--out", str(out), "--report", str(report)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    with (out / "runs.csv").open() as handle:
        runs = list(csv.DictReader(handle))
    acc = summary["accounting"]
    assert len(runs) == acc["run_attempts"] > summary["pods_started"]
    # Every eviction the simulator applied ended exactly one attempt; every started pod has
    # exactly one attempt that kept its work.
    assert sum(1 for r in runs if r["outcome"] in LOST) == summary["preemptions"] > 0
    kept = Counter(f"{r['namespace']}/{r['name']}" for r in runs if r["outcome"] in USEFUL)
    assert len(kept) == summary["pods_started"] and set(kept.values()) == {1}
    # Training (A100: training + hybrid nodes) and inference (L4) are separate pools, and the
    # pool-aware fair shares never add up to more than the cluster.
    assert summary["pools_gpus"] == {"p0": 80.0, "p1": 24.0}
    assert sum(t["fair_share_pct"] for t in summary["tenants"].values()) <= 100.0
    # Each tenant with a shortfall says how much of it no reclaim could close.
    short = [t for t in summary["tenants"].values() if (t["deficit_gpus"] or 0) > 0]
    assert short and all(0.0 <= t["deficit_locked_pct"] <= 100.0 for t in short)
    page = report.read_text()
    assert "useful GPUs against its pool-aware fair share" in page and "Lost work" in page
    assert "shortfall locked by job size" in page


def test_preemptions_are_counted_by_kind() -> None:
    """The summary's preemptions by kind add up to its count: the reclaimed member and the
    sibling torn down with it, as the CLI and the report print them."""
    result = _reclaim_of_a_gang()
    summary = summarize(result, {})
    assert summary["preemptions_by_kind"] == {"gang-restart": 1, "reclaim": 1}
    assert sum(summary["preemptions_by_kind"].values()) == summary["preemptions"] == 2
    assert preemptions_text(summary) == "2 (gang-restart 1, reclaim 1)"
    assert preemptions_text({"preemptions": 0, "preemptions_by_kind": {}}) == "0"
