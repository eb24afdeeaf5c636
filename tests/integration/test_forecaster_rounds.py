"""When the live forecaster starts a round: after its period, never while the scheduler is busy
or has just placed a pod (unless its last forecast has grown stale), only on the leader."""

from __future__ import annotations

import time

from fairgpu.kube.config import RunConfig
from fairgpu.kube.forecaster import STALE_PERIODS, Forecaster
from fairgpu.kube.metrics import Metrics
from tests.builders import pod_info


def _forecaster(busy: list[bool], leader: list[bool]) -> Forecaster:
    config = RunConfig(forecast_seconds=10.0)
    return Forecaster(
        config,
        Metrics(),
        None,
        lambda p: "q",
        lambda: leader[0],
        lambda: busy[0],  # type: ignore[arg-type]
    )


def test_a_round_waits_for_its_period_for_idle_binds_and_for_leadership() -> None:
    busy, leader = [False], [True]
    f = _forecaster(busy, leader)
    assert f._due()  # never forecast yet
    f._last_round = time.monotonic() - 5.0
    assert not f._due()  # within the period
    f._last_round = time.monotonic() - 11.0
    assert f._due()
    busy[0] = True
    assert not f._due()  # binds in flight: the scheduler comes first
    busy[0] = False
    f.started(pod_info("p"), now=0.0)
    assert not f._due()  # it placed a pod just now
    f._last_start = time.monotonic() - 3.0
    assert f._due()
    busy[0] = True
    f._last_round = time.monotonic() - STALE_PERIODS * 10.0 - 1.0
    assert f._due()  # but a forecast never grows older than this
    leader[0] = False
    assert not f._due()
