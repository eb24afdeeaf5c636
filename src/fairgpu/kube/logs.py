"""Structured logs: one JSON object per line on stderr.

Fields: ``ts`` (RFC 3339, UTC), ``level``, ``logger``, ``msg``, plus anything passed with
``extra={...}`` (e.g. ``pod``, ``node``, ``error``) and ``exc`` for exceptions.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import sys
from typing import Any

__all__ = ["JsonFormatter", "setup_logging"]

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        """The JSON text of ``record``."""
        out: dict[str, object] = {
            "ts": _dt.datetime.fromtimestamp(record.created, _dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted, not to the stream it was
    when logging was set up: a program embedding the scheduler (or a test runner capturing
    output) may replace and close that one, and later records must not fail on it."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # always the current sys.stderr


def setup_logging(level: str = "info") -> None:
    """Send ``fairgpu`` logs to stderr as JSON lines at ``level``."""
    handler = _Stderr()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("fairgpu")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
