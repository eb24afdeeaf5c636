"""Predicted start times against a real API server: the annotation and the PodScheduled
condition message appear, and follow the cluster when it changes.

The training A100 node (8 GPUs) runs ``fill`` (declares 60 s); ``b`` and ``c`` ask for the whole
node and declare 30 s each, so ``b`` is predicted to start when ``fill`` ends and ``c`` 30 s
later. Deleting ``fill`` early starts ``b`` at once and moves ``c`` about 57 s earlier; the
start of ``b`` is scored in the prediction-error histogram.
"""

from __future__ import annotations

import time
from typing import Any

from live_helpers import condition, create, pod, pods, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, FakeKubelet, KubeClient
from fairgpu.kube.forecaster import ANN_PREDICTED_START, parse_time, time_label
from fairgpu.kube.reporter import PREDICTED_START

NODE = "lv-training-a100"
FIRST = 90.0  # seconds to wait for a forecast round


def _get(admin: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return admin.get(f"/api/v1/namespaces/{ns}/pods/{name}")


def _predicted(admin: KubeClient, ns: str, name: str) -> float | None:
    ann = _get(admin, ns, name)["metadata"].get("annotations") or {}
    return parse_time(ann.get(ANN_PREDICTED_START))


def _message_has_prediction(admin: KubeClient, ns: str, name: str) -> bool:
    """The condition message ends with the annotation's time."""
    p = _get(admin, ns, name)
    label = (p["metadata"].get("annotations") or {}).get(ANN_PREDICTED_START)
    cond = condition(p) or {}
    return bool(label) and (cond.get("message") or "").endswith(f"{PREDICTED_START}{label}")


def _whole_node(name: str, seconds: int) -> dict[str, Any]:
    return pod(name, gpus=8, annotations={"fairgpu.io/duration-seconds": str(seconds)})


def _start_fill(admin: KubeClient, ns: str, seconds: int) -> float:
    """Run a pod "fill" of ``seconds`` on the whole node; returns when it started."""
    fill = _whole_node("fill", seconds)
    fill["spec"]["nodeName"] = NODE
    create(admin, ns, fill)
    started = wait_for(lambda: _get(admin, ns, "fill").get("status", {}).get("startTime"))
    start = parse_time(started)
    assert start is not None
    return start


def test_predicted_start_is_annotated_in_the_condition_and_follows_changes(
    live_cp: ControlPlane, admin: KubeClient, ns: str, kubelet: FakeKubelet
) -> None:
    fill_start = _start_fill(admin, ns, 60)
    create(admin, ns, _whole_node("b", 30))
    create(admin, ns, _whole_node("c", 30))
    with scheduler(live_cp, forecast_seconds=0.5, forecast_budget=2.0) as s:
        s.forecaster.min_wait = 0.0  # score even this short wait
        # The forecasting process runs at a lower CPU priority: on a busy machine the first
        # forecast (a process start, a list, a simulation) can take a while.
        b = wait_for(lambda: _predicted(admin, ns, "b"), timeout=FIRST)
        c = wait_for(lambda: _predicted(admin, ns, "c"), timeout=FIRST)
        # The start time of fill is to the second; the forecast's clock is the reader's.
        assert abs(b - (fill_start + 60)) <= 3, (b, fill_start)
        assert abs(c - (b + 30)) <= 2, (b, c)
        wait_for(lambda: _message_has_prediction(admin, ns, "b"), timeout=FIRST)
        wait_for(lambda: _message_has_prediction(admin, ns, "c"), timeout=FIRST)
        # It continues from the scheduler's state (a round while the loop is busy may not).
        wait_for(lambda: s.forecaster.last.get("engine_state"), 10)

        admin.request(
            "DELETE",
            f"/api/v1/namespaces/{ns}/pods/fill",
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
        )
        wait_for(lambda: _get(admin, ns, "b")["spec"].get("nodeName") == NODE, timeout=FIRST)
        moved = wait_for(lambda: (t := _predicted(admin, ns, "c")) and t < c - 20 and t, FIRST)
        assert moved > fill_start  # still ahead: when b (30 s) ends
        wait_for(lambda: _message_has_prediction(admin, ns, "c"), timeout=FIRST)
        text = s.metrics.render().decode()
        assert "fairgpu_prediction_error_ratio_count 1.0" in text, text


def test_explain_and_queues_print_the_predicted_start_and_drain(
    live_cp: ControlPlane, admin: KubeClient, ns: str, kubelet: FakeKubelet
) -> None:
    from typer.testing import CliRunner

    from fairgpu.cli import app

    fill_end = _start_fill(admin, ns, 600) + 600
    # Created in the same second, so ordered by name: "first" before "second".
    create(admin, ns, _whole_node("first", 30))
    create(admin, ns, pod("second", gpus=8))  # declares no run time
    kc = ["--kubeconfig", str(live_cp.kubeconfig_path)]
    runner = CliRunner()
    out = runner.invoke(app, ["explain", f"{ns}/first", *kc])
    assert out.exit_code == 0, out.output
    label = time_label(fill_end)
    assert f"Predicted start: {label} (in " in out.output, out.output
    # After first (30 s) the node is free for the pod that declares nothing: it starts then.
    out = runner.invoke(app, ["queues", *kc])
    assert out.exit_code == 0, out.output
    row = next(line for line in out.output.splitlines() if line.startswith(f"{ns} "))
    assert row.rstrip().endswith(time_label(fill_end + 30)), out.output
    # Behind a pod whose run time nobody knows, nothing can be predicted.
    admin.request("DELETE", f"/api/v1/namespaces/{ns}/pods/first")
    wait_for(lambda: not any(p["metadata"]["name"] == "first" for p in pods(admin, ns)))
    create(admin, ns, _whole_node("third", 30))  # after "second" by time or name
    out = runner.invoke(app, ["explain", f"{ns}/third", *kc])
    assert "Predicted start: unknown: it waits on pods whose run time is unknown" in out.output
    out = runner.invoke(app, ["queues", *kc])
    row = next(line for line in out.output.splitlines() if line.startswith(f"{ns} "))
    assert row.rstrip().endswith("unknown"), out.output


def test_run_times_learned_from_pods_that_succeeded_give_a_start_behind_undeclared_pods(
    live_cp: ControlPlane, admin: KubeClient, ns: str, kubelet: FakeKubelet
) -> None:
    with scheduler(live_cp, forecast_seconds=0.5, forecast_budget=2.0) as s:
        done = _whole_node("done", 2)  # the fake kubelet ends it after 2 s: Succeeded
        done["spec"]["nodeName"] = NODE
        create(admin, ns, done)
        wait_for(lambda: _get(admin, ns, "done")["status"].get("phase") == "Succeeded", 20)
        fill = pod("fill", gpus=8)  # declares no run time
        fill["spec"]["nodeName"] = NODE
        create(admin, ns, fill)
        wait_for(lambda: _get(admin, ns, "fill").get("status", {}).get("startTime"))
        create(admin, ns, pod("want", gpus=8))
        # Learned from "done": a run of about 2 s; "fill" has already run about that long.
        predicted = wait_for(lambda: _predicted(admin, ns, "want"), timeout=FIRST)
        assert predicted - time.time() < 30, predicted
        # The worker writes the annotation before the scheduler applies its reply: the round
        # that saw "want" becomes the scheduler's last one a moment after the annotation.
        wait_for(lambda: s.forecaster.last.get("pending", 0) >= 1, 10)


def test_forecast_from_a_live_snapshot_with_the_arrival_model(
    live_cp: ControlPlane, admin: KubeClient, ns: str, kubelet: FakeKubelet, monkeypatch
) -> None:
    """The forecasting process's path with future arrivals on: the snapshot's pods are
    recorded by creation time, and a pod first in line keeps its start (later copies of the
    same queue queue behind it)."""
    from fairgpu.kube import forecaster
    from fairgpu.kube.client import RestClient, load_connection
    from fairgpu.kube.snapshot import ReadSettings, read_cluster
    from fairgpu.sim.arrivals import ArrivalHistory

    fill_end = _start_fill(admin, ns, 600) + 600
    create(admin, ns, _whole_node("first", 30))
    client = RestClient(load_connection(str(live_cp.kubeconfig_path), None))
    snapshot = read_cluster(client, ReadSettings())
    monkeypatch.setattr(forecaster, "ARRIVAL_SAMPLES", 3)
    history = ArrivalHistory()
    result, pending, _ = forecaster.forecast_snapshot(snapshot, None, 5.0, None, history)
    names = {p.name for p, _ in history.pairs() if p.namespace == ns}
    assert {"fill", "first"} <= names
    first = next(p for p in pending if p.namespace == ns and p.name == "first")
    assert result.start(first.uid) == fill_end
