"""``fairgpu run``'s options as a user types them reach the live scheduler's settings."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

import fairgpu.kube
from fairgpu.cli import app

runner = CliRunner()


def test_forecast_options_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    # Stop at the boundary to the live scheduler: this test is about the command line only.
    monkeypatch.setattr(fairgpu.kube, "run", lambda settings: seen.append(settings) or 0)
    result = runner.invoke(app, ["run", "--forecast-seconds", "12", "--forecast-budget", "2.5"])
    assert result.exit_code == 0, result.output
    assert seen[0].forecast_seconds == 12.0
    assert seen[0].forecast_budget == 2.5


@pytest.mark.parametrize("budget", ["0", "-1", "nan"])
def test_a_forecast_budget_that_is_not_positive_is_refused(budget: str) -> None:
    result = runner.invoke(app, ["run", "--forecast-budget", budget])
    assert result.exit_code == 2
    assert "--forecast-budget must be > 0 seconds" in result.output
