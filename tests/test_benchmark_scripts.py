"""The benchmark scripts still run against the code as it is: each on its smallest input,
printing the JSON its README describes (a script that breaks silently measures nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPENB = ROOT.parent / "shared" / "traces" / "openb"
NEEDS_OPENB = pytest.mark.skipif(
    not OPENB.is_dir(), reason=f"the openb traces are not beside the checkout ({OPENB})"
)


def _run(script: str, *args: str) -> list[dict[str, object]]:
    """The JSON objects ``script`` prints (one document, or one per line)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = done.stdout.strip()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("script", "args", "keys"),
    [
        (
            "benchmarks/fairness/run.py",
            ("--suite", "realistic", "--mix", "flexible-and-confined"),
            ("fairgpu", "kube-default", "targets"),
        ),
        (
            "benchmarks/fairness/unlocked_deficit.py",
            ("--mix", "flexible-and-confined"),
            ("lowest", "unlocked_gpu_s", "causes", "clauses"),
        ),
        (
            "benchmarks/fairness/reservations.py",
            ("--mix", "flexible-and-confined"),
            ("reservations", "idle_gpus_pct_of_capacity", "useful_allocation_pct"),
        ),
        (
            "benchmarks/fair_cycle_speed/run.py",
            ("--flood", "50"),
            ("fair", "kube-default", "cpu_ratio_fair_to_kube_default"),
        ),
        (
            "benchmarks/decision_latency/run.py",
            ("--nodes", "200", "--pods", "500", "--stream", "100", "--baseline-pods", "20"),
            ("policies", "baseline", "pass"),
        ),
        (
            "benchmarks/decision_latency/failure_memo.py",
            ("--rounds", "1"),
            ("cycle_s_with_memo", "cycle_s_without", "reasons_identical"),
        ),
        ("benchmarks/memory/run.py", ("--nodes", "200", "--pods", "1000"), ("kib_per_pod", "pass")),
        (
            "benchmarks/volume_latency/run.py",
            ("--nodes", "200", "--stream", "50", "--rounds", "1", "--claim-pods", "20"),
            ("no_claims", "local_volumes"),
        ),
        pytest.param(
            "benchmarks/dra_packing/run.py",
            ("--nodes", "4", "--seeds", "1-1"),
            ("ratio", "runs"),
            marks=NEEDS_OPENB,
        ),
        (
            "benchmarks/prediction/run.py",
            ("--only", "mixed", "--runtimes", "declared", "--samples", "0", "--every", "7200"),
            ("scenarios",),
        ),
        pytest.param(
            "benchmarks/gpu_allocation/run.py",
            ("--lists", "default", "--policies", "fairgpu-frag-plan", "--seeds", "42-42"),
            ("runs",),
            marks=NEEDS_OPENB,
        ),
        ("benchmarks/pool_precedence/run.py", ("--spike", "6"), ("with_rule", "without_rule")),
        ("benchmarks/fragile_jobs/run.py", ("--seed", "2"), ("aware", "blind", "kube_default")),
        ("benchmarks/job_forecast/run.py", ("--every", "3600"), ("aware", "blind")),
        ("benchmarks/fragile_jobs/jobsets.py", ("--seed", "1"), ("aware", "job_only")),
        (
            "benchmarks/fragile_jobs/leaderworkersets.py",
            ("--seed", "1"),
            ("aware", "blind", "kube_default"),
        ),
        (
            "benchmarks/job_forecast/run.py",
            ("--every", "3600", "--deadlines"),
            ("aware", "deadline_blind", "jobs_failed"),
        ),
        ("benchmarks/gang_topology/run.py", ("--loads", "12"), ("loads",)),
        (
            "benchmarks/backfill_contract/run.py",
            ("--seed", "2"),
            ("preemption_off", "preemption_on"),
        ),
        ("benchmarks/backfill_contract/overdue.py", ("--seed", "1"), ("aware", "at_their_word")),
        pytest.param(
            "benchmarks/fgd_speed/run.py",
            (),
            ("baseline", "ratio_to_baseline"),
            marks=NEEDS_OPENB,
        ),
    ],
    ids=[
        "fairness",
        "unlocked-deficit",
        "reservations",
        "fair-cycle-speed",
        "decision-latency",
        "failure-memo",
        "memory",
        "volume-latency",
        "dra-packing",
        "prediction",
        "gpu-allocation",
        "pool-precedence",
        "fragile-jobs",
        "job-forecast",
        "fragile-jobsets",
        "leader-worker-groups",
        "job-forecast-deadlines",
        "gang-topology",
        "backfill-contract",
        "overdue-pods",
        "fgd-speed",
    ],
)
def test_a_benchmark_prints_its_figures(
    script: str, args: tuple[str, ...], keys: tuple[str, ...]
) -> None:
    rows = _run(script, *args)
    assert rows
    for row in rows:
        for key in keys:
            assert key in row, (script, key, sorted(row))
