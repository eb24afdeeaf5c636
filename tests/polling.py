"""Polling helper shared by the tests that watch a real API server converge."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(pred: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1) -> Any:
    """Poll ``pred`` until it returns something truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"condition not met within {timeout}s (last value: {last!r})")
