"""A replay where a pod declares a shorter run time than it really runs (``fairgpu.io/actual-
run-seconds``): it backfills onto the node held for a starving job, overruns, and is evicted
(outcome ``backfill-overrun``); the held job starts when the honest pod there ends."""

from __future__ import annotations

import csv
from pathlib import Path

import yaml
from typer.testing import CliRunner

from fairgpu.cli import app

GPU = "nvidia.com/gpu"
CONFIG = """preemption: {enabled: false}
starvation: {reserveAfterSeconds: 0}
"""


def pod(name: str, gpus: int, arrival: float, declared: float, actual: float | None = None) -> dict:
    notes = {
        "fairgpu.io/arrival-seconds": str(arrival),
        "fairgpu.io/duration-seconds": str(declared),
    }
    if actual is not None:
        notes["fairgpu.io/actual-run-seconds"] = str(actual)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "annotations": notes},
        "spec": {
            "schedulerName": "fairgpu",
            "containers": [{"name": "c", "image": "c", "resources": {"limits": {GPU: str(gpus)}}}],
        },
    }


def test_a_pod_that_overruns_what_it_declared_is_evicted_for_the_held_job(tmp_path: Path) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "pods": "110", GPU: "8"}},
    }
    docs = [
        node,
        pod("long", 4, 0, 2000),  # holds half the node until 2 000 s, as it says
        pod("big", 8, 10, 600),  # waits for the whole node: it is held for it
        pod("liar", 1, 20, 300, actual=5000),  # says it ends by 320 s, runs to 5 020 s
    ]
    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump_all(docs))
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "out"
    args = ["simulate", "--workload", str(workload), "--config", str(config), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with (out / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    liar = [(r["outcome"], float(r["start"]), float(r["end"])) for r in rows if r["name"] == "liar"]
    # Judged at the first cycle past 20 + 300 + 120 s (`long` ending at 2 000 s); queued
    # again, it runs its 5 000 s once `big` (600 s) is done.
    assert liar == [("backfill-overrun", 20.0, 2000.0), ("completed", 2600.0, 7600.0)]
    [big] = [float(r["start"]) for r in rows if r["name"] == "big"]
    assert big == 2000.0
