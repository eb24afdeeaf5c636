"""The PodScheduled message carries the predicted start; a moved prediction rewrites the
condition of a pod already reported, without a new Event."""

from __future__ import annotations

from fairgpu.kube.reporter import PREDICTED_START, Report, Reporter


def _reporter() -> Reporter:
    # Workers are not started: the test reads the queue the workers would send from.
    return Reporter(None, "fairgpu-scheduler", lambda uid: True)  # type: ignore[arg-type]


def test_message_ends_with_the_predicted_start() -> None:
    r = _reporter()
    rep = Report("u1", "ns", "p", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    assert r.message(rep) == rep.message
    r.predicted("u1", "2026-01-02T03:04:05Z")
    assert r.message(rep) == f"{rep.message}{PREDICTED_START}2026-01-02T03:04:05Z"
    r.predicted("u1", None)
    assert r.message(rep) == rep.message


def test_a_moved_prediction_requeues_the_condition_only() -> None:
    r = _reporter()
    r.predicted("u1", "2026-01-02T03:04:05Z")
    assert r.backlog == 0  # never reported: nothing to rewrite
    rep = Report("u1", "ns", "p", "0/2 nodes are available.")
    assert r.report(rep, now=0.0)
    r._queue.clear()  # as if sent
    r.predicted("u1", "2026-01-02T03:04:05Z")
    assert r.backlog == 0  # unchanged
    r.predicted("u1", "2026-01-02T04:00:00Z")
    queued = r._queue["u1"]
    assert queued.message == rep.message and not queued.event
    r.forget("u1")
    assert r.backlog == 0 and r.message(rep) == rep.message
