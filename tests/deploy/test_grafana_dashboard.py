"""deploy/grafana-dashboard.json names only metrics the live scheduler's /metrics exports.

Every PromQL expression in the dashboard (panel targets, template variable queries) is parsed
with a real PromQL parser, and each metric it selects must be a sample name of the registry
:class:`fairgpu.kube.metrics.Metrics` builds -- the one ``/metrics`` serves -- so a renamed
or removed metric breaks this test rather than a panel nobody looks at.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

promql = pytest.importorskip("promql_parser")

from fairgpu.kube.metrics import Metrics  # noqa: E402 - after the optional import

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"
# Grafana's interval variables stand where PromQL wants a duration.
_GRAFANA_DURATION = re.compile(
    r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}"
)
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$", re.S)
# What the Prometheus text format makes of one metric family, by type.
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}


def exported_names(metrics: Metrics) -> set[str]:
    """Every sample name ``/metrics`` can carry for ``metrics``' registry."""
    names: set[str] = set()
    for family in metrics.registry.collect():
        names.update(family.name + s for s in _SUFFIXES[family.type])
    return names


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}"
            if key == "expr" and isinstance(value, str):
                yield where, value
            elif key in ("definition", "query") and isinstance(value, str):
                m = _LABEL_VALUES.match(value)
                if m:
                    yield where, m.group(1)
            else:
                yield from _walk(value, where)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(JSON path, PromQL) of every query in the dashboard."""
    return list(_walk(dashboard))


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (raises ``ValueError`` if it does not parse)."""
    ast = promql.parse(_GRAFANA_DURATION.sub("5m", expr))
    found: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql.VectorSelector):
            if node.name:
                found.add(node.name)
            for m in node.matchers.matchers:
                if m.name == "__name__":
                    found.add(m.value)

    promql.walk(ast, visit)
    return found


def unknown_metrics(dashboard: dict[str, Any], known: set[str]) -> dict[str, set[str]]:
    """Per query path, the metric names it uses that ``known`` lacks."""
    out: dict[str, set[str]] = {}
    for where, expr in queries(dashboard):
        missing = metric_names(expr) - known
        if missing:
            out[where] = missing
    return out


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def test_every_query_parses_and_names_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    found = queries(dashboard)
    assert len(found) >= 20
    assert unknown_metrics(dashboard, exported_names(Metrics())) == {}


def test_the_check_catches_a_panel_naming_a_metric_that_does_not_exist(
    dashboard: dict[str, Any],
) -> None:
    broken = copy.deepcopy(dashboard)
    panel = next(p for p in broken["panels"] if p.get("targets"))
    panel["targets"][0]["expr"] = (
        'sum(rate(fairgpu_binds_total[$__rate_interval])) / sum(fairgpu_no_such_metric{queue="a"})'
    )
    assert list(unknown_metrics(broken, exported_names(Metrics())).values()) == [
        {"fairgpu_no_such_metric"}
    ]
    # A counter is exported as <name>_total only, a histogram as _bucket/_sum/_count.
    assert metric_names("rate(fairgpu_binds[5m])") - exported_names(Metrics()) == {"fairgpu_binds"}
    with pytest.raises(ValueError):
        metric_names("sum(rate(fairgpu_binds_total[5m])")


def test_the_panels_the_operators_need_are_there(dashboard: dict[str, Any]) -> None:
    used = set().union(*(metric_names(e) for _, e in queries(dashboard)))
    for name in (
        "fairgpu_pod_scheduling_duration_seconds_bucket",
        "fairgpu_binds_total",
        "fairgpu_pending_pods",
        "fairgpu_queue_gpus_pending",
        "fairgpu_queue_gpus_allocated",
        "fairgpu_queue_gpus_fair_share",
        "fairgpu_preemptions_total",
    ):
        assert name in used
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
