"""The report's table of predicted against actual starts reads as a person expects."""

from __future__ import annotations

import re

import pytest

from fairgpu.sim.forecast import PredictedRow, PredictionSample

html_report = pytest.importorskip("fairgpu.report.html", reason="needs the report extra")


def test_a_pod_that_arrived_seconds_before_the_instant_shows_minute_0_not_minus_0() -> None:
    sample = PredictionSample(
        at=3600.0,
        pending=2,
        rows=[
            PredictedRow("ns/just-in", "q", 3590.0, 3600.0, 3660.0),
            PredictedRow("ns/older", "q", 3000.0, 4200.0, 4500.0),
        ],
        wall_seconds=0.1,
    )
    page = html_report._prediction_section(sample)
    cells = re.findall(r"<td>([^<]*)</td>", page)
    assert cells[:7] == ["ns/just-in", "q", "0", "0", "1", "1", "86 %"]
    assert cells[7:10] == ["ns/older", "q", "-10"]
    assert "-0" not in cells
