"""The live scheduler's JSON logs follow ``sys.stderr`` as it is when a record is emitted."""

from __future__ import annotations

import contextlib
import io
import json
import logging

from fairgpu.kube.logs import setup_logging


def test_logs_survive_a_closed_stderr_and_follow_the_current_one() -> None:
    # Set up while stderr is a stream that is closed afterwards (as a test runner's capture or
    # a CLI runner's buffer is): records logged later must not fail on it.
    root = logging.getLogger("fairgpu")
    saved = (root.handlers[:], root.level, root.propagate)
    first = io.StringIO()
    with contextlib.redirect_stderr(first):
        setup_logging("info")
    first.close()
    second = io.StringIO()
    log = logging.getLogger("fairgpu.kube")
    errors: list[BaseException] = []
    handler = root.handlers[0]
    handler.handleError = lambda record: errors.append(RuntimeError(record.getMessage()))  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stderr(second):
            log.info("cycle", extra={"binds": 3})
    finally:
        root.handlers[:], root.propagate = saved[0], saved[2]
        root.setLevel(saved[1])
    assert errors == []
    line = json.loads(second.getvalue())
    assert line["msg"] == "cycle" and line["binds"] == 3
