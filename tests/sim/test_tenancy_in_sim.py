"""The simulator accounts tenants as the engine resolves them and keeps gangs whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.engine.engine import Engine
from fairgpu.sim.results import add_accounting, summarize
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy import parse_config
from tests.builders import k8s_node, k8s_pod

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_summary_shows_fair_share_beside_share(tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "--jobs",
            "80",
            "--config",
            str(EXAMPLES / "tenancy.yaml"),
            "--out",
            str(tmp_path),
            "--report",
            str(report),
        ],
    )
    assert result.exit_code == 0, result.output
    tenants = json.loads((tmp_path / "summary.json").read_text())["tenants"]
    assert set(tenants) == {"team-a", "team-b", "team-c", "team-d"}
    for row in tenants.values():
        assert 0.0 <= row["fair_share_pct"] <= 100.0
    assert sum(r["fair_share_pct"] for r in tenants.values()) <= 100.0 + 1e-6
    # Each tenant's department, which its weight counts within: in the summary, under the
    # tenant table, and in the report's.
    assert {t: row["department"] for t, row in tenants.items()} == {
        "team-a": "research",
        "team-b": "research",
        "team-c": "product",
        "team-d": "product",
    }
    line = "Departments (share first, then their queues) -- product: team-c, team-d; research"
    assert line in result.output
    page = report.read_text()
    assert "<th>tenant</th><th>department</th>" in page
    assert "<tr><td>team-c</td><td>product</td>" in page


def test_without_departments_no_department_is_shown(tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    args = ["simulate", "--jobs", "40", "--out", str(tmp_path), "--report", str(report)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    tenants = json.loads((tmp_path / "summary.json").read_text())["tenants"]
    assert not any("department" in row for row in tenants.values())
    assert "Departments" not in result.output and "department" not in report.read_text()


def test_namespace_mapping_decides_the_tenant() -> None:
    config = parse_config({"queues": [{"name": "ml", "namespaces": ["a", "b"]}]})
    engine = Engine(tenancy=config)
    arrivals = [PodArrival(k8s_pod("p", "b", gpus=1, cpu="1"), 0.0, 10.0)]
    result = Simulation(Workload("t", [k8s_node("n0", gpus=4)], arrivals), engine).run()
    assert result.records[0].tenant == "ml"


def test_losing_one_gang_member_restarts_the_group() -> None:
    config = parse_config(
        {
            "mode": "dynamic",
            # reclaimMinRuntimeSeconds (default 60) off: the gang is reclaimed 10 s in.
            "preemption": {"enabled": True, "minRuntimeSeconds": 0, "reclaimMinRuntimeSeconds": 0},
            "queues": [{"name": "a", "namespaces": ["a"]}, {"name": "b", "namespaces": ["b"]}],
        }
    )
    engine = Engine(tenancy=config)
    # a also holds n2, which only its pod tolerates: with the whole gang gone a keeps 2 GPUs,
    # so b (taking 2) does not pass a and the reclaim rule allows the move.
    only_a = {"key": "only", "value": "a", "effect": "NoSchedule"}
    nodes = [k8s_node(f"n{i}", gpus=2) for i in range(2)]
    nodes.append(k8s_node("n2", gpus=2, taints=[only_a]))
    gang = [k8s_pod(f"g{i}", "a", gpus=2, cpu="1", group="g", min_member=2) for i in range(2)]
    keep = k8s_pod("keep", "a", gpus=2, cpu="1", tolerations=[{**only_a, "operator": "Equal"}])
    arrivals = [PodArrival(p, 0.0, 1000.0) for p in [*gang, keep]]
    arrivals.append(PodArrival(k8s_pod("late", "b", gpus=2, cpu="1"), 10.0, 100.0))
    result = Simulation(Workload("t", nodes, arrivals), engine).run()
    recs = {r.pod.name: r for r in result.records}
    assert recs["late"].start == 10.0  # b reclaims its fair half
    # Both members were stopped together and restarted together later.
    assert recs["g0"].preempted == 1 and recs["g1"].preempted == 1
    assert recs["g0"].start == recs["g1"].start and recs["g0"].start >= 110.0


def test_the_reported_fair_shares_let_departments_share_first() -> None:
    """Department d (a and b) and queue c weigh the same, all three flooding one 8-GPU
    node for as long as the run lasts: c is owed half of it and a and b a quarter each --
    not a third each, as queue weights alone would say -- the shares the engine reclaims
    by."""
    config = parse_config(
        {
            "queues": [
                {"name": "d"},
                {"name": "a", "parent": "d", "namespaces": ["a"]},
                {"name": "b", "parent": "d", "namespaces": ["b"]},
                {"name": "c", "namespaces": ["c"]},
            ]
        }
    )
    engine = Engine(tenancy=config)
    arrivals = [
        PodArrival(k8s_pod(f"{q}{j}", q, gpus=1, cpu="1"), 0.0, 600.0)
        for q in "abc"
        for j in range(40)
    ]
    sim = Simulation(Workload("t", [k8s_node("n0", gpus=8)], arrivals), engine, until=1800.0)
    result = sim.run()
    summary = summarize(result, {})
    add_accounting(summary, result, engine, sim.cluster)
    fair = {t: row["fair_share_pct"] for t, row in summary["tenants"].items()}
    assert fair == {"a": pytest.approx(25.0), "b": pytest.approx(25.0), "c": pytest.approx(50.0)}
