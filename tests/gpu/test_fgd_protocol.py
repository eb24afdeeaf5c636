"""The published FGD experiment protocol: order, inflation, metric, and runs through the engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fairgpu.sim.protocols.fgd import (
    allocation_at,
    arrival_order,
    format_table,
    reference_figures,
    reference_for_policy,
    run_fgd_protocol,
)
from fairgpu.sim.workloads.openb import load_openb_pods
from tests.gpu.placement import OPENB

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"


def _trace(tmp_path: Path, pods: int = 40) -> tuple[Path, Path]:
    rng = np.random.default_rng(7)
    rows = []
    for i in range(pods):
        kind = rng.integers(4)
        num, milli = [(1, 500), (1, 1000), (2, 1000), (0, 0)][kind]
        rows.append(f"pod-{i:03d},{int(rng.integers(1, 8)) * 1000},1024,{num},{milli}")
    pod_csv = tmp_path / "openb_pod_list_tiny.csv"
    pod_csv.write_text(POD_HEADER + "\n".join(rows) + "\n")
    node_csv = tmp_path / "nodes.csv"
    node_csv.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},32000,262144,{[2, 4, 8][i % 3]},T4\n" for i in range(6))
    )
    return pod_csv, node_csv


def test_order_is_a_seeded_shuffle_then_inflation(tmp_path: Path) -> None:
    pod_csv, _ = _trace(tmp_path)
    pods = load_openb_pods(pod_csv)
    capacity = 28_000
    order = arrival_order(pods, capacity, seed=42)
    names = [p.pod.name for p in order[: len(pods)]]
    assert sorted(names) == sorted(p.pod.name for p in pods)
    assert names != sorted(names)  # shuffled
    again = arrival_order(pods, capacity, seed=42)
    assert [p.pod.uid for p in again] == [p.pod.uid for p in order]
    other = arrival_order(pods, capacity, seed=43)
    assert [p.pod.uid for p in other] != [p.pod.uid for p in order]
    total = sum(p.gpu_request_milli for p in order)
    # Stop rule: the next draw's per-GPU milli would have crossed 130%.
    assert total - max(p.gpu_request_milli for p in order) <= 1.3 * capacity
    assert len({p.pod.uid for p in order}) == len(order)  # copies get their own uid


def test_lists_above_130_percent_lose_pods_at_random(tmp_path: Path) -> None:
    pod_csv, _ = _trace(tmp_path)
    pods = load_openb_pods(pod_csv)
    total = sum(p.gpu_request_milli for p in pods)
    capacity = int(total / 1.5)
    order = arrival_order(pods, capacity, seed=1)
    kept = sum(p.gpu_request_milli for p in order)
    assert kept <= 1.3 * capacity and len(order) < len(pods)


def test_allocation_at_averages_arrivals_rounding_to_each_percent() -> None:
    arrived = np.array([99.4, 99.6, 100.2, 100.4, 101.0, 103.0])
    allocated = np.array([90.0, 91.0, 92.0, 93.0, 94.0, 95.0])
    at = allocation_at(arrived, allocated, [99, 100, 101, 102])
    assert at[99] == 90.0
    assert at[100] == pytest.approx((91 + 92 + 93) / 3)
    assert at[101] == 94.0
    assert at[102] == pytest.approx((94 + 95) / 2)  # none round to 102: use 101 and 103


@pytest.mark.parametrize("name", ["best-fit", "fgd", "fairgpu-frag", "random"])
def test_protocol_run_on_a_small_trace(tmp_path: Path, name: str) -> None:
    pod_csv, node_csv = _trace(tmp_path)
    result = run_fgd_protocol(pod_csv, node_csv, name, seed=3, fragmentation_every=10)
    assert result.policy == name and result.gpus == 28
    assert result.placed + result.failed == result.arrivals
    curve = result.allocated_pct
    assert np.all(np.diff(curve) >= 0)  # nothing ever finishes
    # A 2-GPU draw may overshoot 130% by one GPU (the stop test uses per-GPU milli).
    assert curve[-1] <= 100.0 and result.arrived_pct[-1] <= 130.0 + 100 * 1000 / 28_000
    assert set(range(0, 131)) >= set(result.gpu_allocation_at)
    assert result.fragmentation_pct and result.fragmentation_pct[-1][0] == result.arrivals
    again = run_fgd_protocol(pod_csv, node_csv, name, seed=3)
    assert np.array_equal(again.allocated_pct, curve)  # deterministic given the seed


def test_reference_figures_are_read_by_list(tmp_path: Path) -> None:
    ref = tmp_path / "fgd_gpu_allocation.csv"
    ref.write_text(
        "workload,policy,alloc_at_100pct_mean,alloc_at_100pct_std\n"
        "openb_pod_list_x,FGD,95.5,0.1\nopenb_pod_list_y,FGD,90.0,0.2\n"
    )
    assert reference_figures("openb_pod_list_x", ref) == {"FGD": {100: (95.5, 0.1)}}
    assert reference_for_policy("openb_pod_list_y.csv", "fgd", tmp_path) == {100: 90.0}
    assert reference_figures("openb_pod_list_z", ref) is None
    assert reference_figures("openb_pod_list_x", tmp_path / "absent.csv") is None


@pytest.mark.trace
def test_real_trace_ours_beats_best_fit_at_130() -> None:
    pods = OPENB / "openb_pod_list_default.csv"
    nodes = OPENB / "openb_node_list_gpu_node.csv"
    if not pods.is_file() or not nodes.is_file():
        pytest.skip(f"openb traces not found under {OPENB}")
    ours = run_fgd_protocol(pods, nodes, "fairgpu-frag", seed=42)
    best_fit = run_fgd_protocol(pods, nodes, "best-fit", seed=42)
    assert ours.gpus == 6212 and ours.arrivals > 10_000
    assert ours.gpu_allocation_at[130] > best_fit.gpu_allocation_at[130]
    assert "BestFit" in format_table(ours)
