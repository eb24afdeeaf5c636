"""``fairgpu explain``, ``queues`` and ``what-if`` against a real API server, as a user runs them.

No scheduler runs: a pod bound at creation (``spec.nodeName``) fills the training A100 node,
and the pod under question stays pending. The commands read the cluster through the
kubeconfig and must print what a person expects -- and write nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from live_helpers import create, delete_pods, pod, pods
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.devcluster import ControlPlane, KubeClient, ensure_namespace

runner = CliRunner()


def _run(cp: ControlPlane, *args: str) -> str:
    result = runner.invoke(app, [*args, "--kubeconfig", str(cp.kubeconfig_path)])
    assert result.exit_code == 0, result.output
    return result.stdout  # notes on where the settings came from go to standard error


def _fill_and_wait(admin: KubeClient, ns: str) -> None:
    """``fill`` runs on lv-training-a100 with its 8 GPUs; ``want`` asks 8 more there."""
    fill = pod("fill", gpus=8)
    fill["spec"]["nodeName"] = "lv-training-a100"
    create(admin, ns, fill)
    create(admin, ns, pod("want", gpus=8))


def test_explain_names_insufficient_gpus_queue_and_what_would_free_it(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    _fill_and_wait(admin, ns)
    text = _run(live_cp, "explain", f"{ns}/want")
    assert f"Pod {ns}/want (queue {ns}, user {ns}) is pending." in text
    assert re.search(r"Nodes: 0/\d+ nodes are available: .*\b1 Insufficient nvidia\.com/gpu", text)
    assert f"Queue {ns}: weight 1, holds 8 GPUs" in text
    # Same queue, same priority: the preemption rules forbid it, and explain says which.
    assert (
        f"lv-training-a100: fits if these left: {ns}/fill (queue {ns}, priority 0; "
        "no preemption: its priority 0 is not below 0)"
    ) in text
    assert "Next cycle: stays pending: 0/" in text

    report = json.loads(_run(live_cp, "explain", "want", "-n", ns, "-o", "json"))
    assert report["state"] == "pending" and report["queue"] == ns
    assert report["queue_state"]["allocated_gpus"] == 8
    assert report["queue_state"]["pending_gpus"] == 8
    assert report["fits_now"] is None
    assert report["fits_on_empty_nodes"] == ["lv-training-a100"]
    victim = report["if_freed"][0]["would_have_to_go"][0]
    assert victim["pod"] == f"{ns}/fill" and victim["preemptible_by_rules"] is False
    assert report["next_cycle"]["outcome"] == "pending"

    bound = _run(live_cp, "explain", f"{ns}/fill")
    assert "is bound to node lv-training-a100" in bound
    missing = runner.invoke(
        app, ["explain", f"{ns}/nope", "--kubeconfig", str(live_cp.kubeconfig_path)]
    )
    assert missing.exit_code == 2 and f"pod {ns}/nope not found" in missing.output


def test_explain_a_malformed_pod_names_its_field(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    """A pod asking more than a whole GPU's cores as a share stays pending whatever happens:
    explain says so and names the field, instead of node reasons and a start time."""
    bad = pod("bad", gpus=1, extra_resources={"nvidia.com/gpucores": "150"})
    create(admin, ns, bad)
    text = _run(live_cp, "explain", f"{ns}/bad")
    lines = text.splitlines()
    head = f"Pod {ns}/bad (queue {ns}, user {ns}) is pending and will stay so: "
    assert lines[0].startswith(head), text
    assert "nvidia.com/gpucores: 150% is more than one whole GPU" in lines[0], text
    assert "Predicted start" not in text and "Nodes:" not in text
    report = json.loads(_run(live_cp, "explain", f"{ns}/bad", "-o", "json"))
    assert report["state"] == "invalid" and "nvidia.com/gpucores" in report["error"]


def test_explain_a_pod_of_an_unknown_queue_says_it_has_none(
    live_cp: ControlPlane, admin: KubeClient, ns: str, tmp_path: Path
) -> None:
    """A pod whose queue label names no queue of the config is not tried: explain says so,
    not a fair share and a start time for a queue that does not exist."""
    create(admin, ns, pod("lost", gpus=1, labels={"fairgpu.io/queue": "nope"}))
    config = tmp_path / "tenancy.yaml"
    config.write_text(f"queues:\n  - {{name: qa, namespaces: [{ns}]}}\n")
    text = _run(live_cp, "explain", f"{ns}/lost", "--config", str(config))
    assert text.splitlines() == [
        f"Pod {ns}/lost is pending and not tried: it has no queue: queue 'nope' (label "
        "fairgpu.io/queue) does not exist; known queues: qa",
        "It is tried once its queue exists (the tenancy config names it; the scheduler reads "
        "the config at start) or its labels name one that does.",
    ]


def test_queues_shows_one_row_per_queue(live_cp: ControlPlane, admin: KubeClient, ns: str) -> None:
    _fill_and_wait(admin, ns)
    rows = json.loads(_run(live_cp, "queues", "-o", "json"))
    mine = next(r for r in rows if r["queue"] == ns)
    assert mine["allocated_gpus"] == 8 and mine["pending_pods"] == 1
    assert mine["pending_gpus"] == 8 and mine["weight"] == 1 and mine["borrowed_gpus"] == 0
    text = _run(live_cp, "queues").splitlines()
    assert text[0].split() == [
        "QUEUE",
        "WEIGHT",
        "FAIR-SHARE",
        "ALLOCATED",
        "PENDING-PODS",
        "PENDING-GPUS",
        "TO-CREATE",
        "NOMINAL",
        "BORROWED",
        "PREEMPTED-1H",
        "DRAINS",
    ]
    row = next(line.split() for line in text[1:] if line.split()[0] == ns)
    assert row[3:7] == ["8", "1", "8", "0"]
    assert mine["preemptions_last_hour"] == 0 and row[9] == "0"  # no scheduler preempted


def _objects(admin: KubeClient) -> dict[str, int]:
    out = {}
    for path in ("/api/v1/pods", "/api/v1/events", "/apis/apps/v1/deployments"):
        out[path] = len(admin.get(path)["items"])
    return out


def test_what_if_names_a_node_and_creates_nothing(
    live_cp: ControlPlane, admin: KubeClient, ns: str, tmp_path: Path
) -> None:
    _fill_and_wait(admin, ns)
    docs: list[dict[str, Any]] = []
    for name, gpus, pool in (("fits", 8, "hybrid"), ("too-big", 16, "training")):
        docs.append(pod(name, gpus=gpus, pool=pool))  # no namespace: -n gives it
    # A GPU asked in requests alone: the API server refuses such a pod.
    refused = pod("requests-only", pool="hybrid")
    refused["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "1"}}
    docs.append(refused)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump_all(docs))
    before = _objects(admin)
    text = _run(live_cp, "what-if", "-f", str(job), "-n", ns)
    assert f"{ns}/fits (queue {ns}, user {ns}): would start on lv-hybrid-a100 now" in text
    assert (
        f"{ns}/too-big (queue {ns}, user {ns}): would stay pending: 16 GPUs asked "
        "(nvidia.com/gpu), but no node has more than 8"
    ) in text
    assert (
        f"{ns}/requests-only (queue {ns}, user {ns}): the API server would refuse it: Pod "
        f"{ns}/requests-only: field spec.containers[0].resources.limits.nvidia.com/gpu: required"
    ) in text
    rows = json.loads(_run(live_cp, "what-if", "-f", str(job), "-n", ns, "-o", "json"))
    assert [r["outcome"] for r in rows] == ["bind", "pending", "refused"]
    assert _objects(admin) == before
    names = {p["metadata"]["name"] for p in admin.get(f"/api/v1/namespaces/{ns}/pods")["items"]}
    assert names == {"fill", "want"}


def test_what_if_says_when_a_waiting_pod_would_start(
    live_cp: ControlPlane, admin: KubeClient, ns: str, tmp_path: Path
) -> None:
    """A pod that would wait for a node whose pods declare their run time: what-if predicts
    its start (the forecast the scheduler runs), and creates nothing."""
    fill = pod("fill", gpus=8, annotations={"fairgpu.io/duration-seconds": "600"})
    fill["spec"]["nodeName"] = "lv-training-a100"
    create(admin, ns, fill)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(pod("next", gpus=8)))
    before = _objects(admin)
    text = _run(live_cp, "what-if", "-f", str(job), "-n", ns)
    assert f"{ns}/next (queue {ns}, user {ns}): would stay pending: 0/" in text
    assert re.search(r"Predicted start: \S+ \(in (9|10)m\), if nothing else arrives", text), text
    rows = json.loads(_run(live_cp, "what-if", "-f", str(job), "-n", ns, "-o", "json"))
    assert 540 <= rows[0]["predicted_in_seconds"] <= 600
    assert _objects(admin) == before


def test_kubectl_plugin_runs_the_commands(
    live_cp: ControlPlane, admin: KubeClient, ns: str, tmp_path: Path
) -> None:
    """``kubectl fairgpu queues`` finds the ``kubectl-fairgpu`` executable on PATH, as
    the console script pyproject installs does."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed")
    _fill_and_wait(admin, ns)
    plugin = tmp_path / "kubectl-fairgpu"
    plugin.write_text(
        f"#!{sys.executable}\nfrom fairgpu.commands import kubectl_app\nkubectl_app()\n"
    )
    plugin.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    env["KUBECONFIG"] = str(live_cp.kubeconfig_path)
    out = subprocess.run(
        [kubectl, "fairgpu", "explain", f"{ns}/want"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "1 Insufficient nvidia.com/gpu" in out
    listed = subprocess.run(
        [kubectl, "plugin", "list"], env=env, capture_output=True, text=True, timeout=60
    ).stdout
    assert str(plugin) in listed


# The churn guards off (a reclaim as soon as the rules allow it).
GUARDS_OFF = "preemption: {reclaimMinRuntimeSeconds: 0, reclaimCooldownSeconds: 0}\n"


def test_quota_and_reclaim_rules_under_a_tenancy_config(
    live_cp: ControlPlane, admin: KubeClient, ns: str, tmp_path: Path
) -> None:
    """Queue qb borrows beyond its quota on the training A100 node; queue qa, within its own,
    may take it back (reclaim) once the pod has run long enough, and what-if names qa's quota
    for one pod more."""
    other = f"{ns}-b"
    ensure_namespace(admin, other, ca_pem=Path(live_cp.ca_file).read_text())
    try:
        fill = pod("fill", gpus=8)
        fill["spec"]["nodeName"] = "lv-training-a100"
        create(admin, other, fill)
        create(admin, ns, pod("want", gpus=8))
        config = tmp_path / "tenancy.yaml"
        config.write_text(
            "queues:\n"
            f"  - {{name: qa, namespaces: [{ns}], quota: {{gpu: 8}}, borrowingLimit: {{gpu: 0}}}}\n"
            f"  - {{name: qb, namespaces: [{other}], quota: {{gpu: 4}}}}\n"
        )
        text = _run(live_cp, "explain", f"{ns}/want", "--config", str(config))
        assert f"Pod {ns}/want (queue qa, user {ns}) is pending." in text
        assert "Queue qa: weight 1, holds 0 GPUs" in text
        assert "nominal quota 8 GPUs, may hold 8" in text
        # qa is within its quota and qb borrows, but fill has just started: the minimum run
        # before a reclaim protects it, and explain says so.
        assert (
            f"lv-training-a100: fits if these left: {other}/fill (queue qb, priority 0; "
            "no preemption: it has run"
        ) in text
        assert "under reclaimMinRuntimeSeconds" in text
        assert "Next cycle: stays pending: 0/" in text

        # Without the minimum run, the nominal quota is a guarantee: qa takes it back.
        config.write_text(config.read_text() + GUARDS_OFF)
        text = _run(live_cp, "explain", f"{ns}/want", "--config", str(config))
        assert f"lv-training-a100: fits if these left: {other}/fill (queue qb, priority 0)" in text
        assert (
            f"Next cycle: would bind to lv-training-a100, preempting {other}/fill (reclaim)"
        ) in text

        # qb borrows 8 more GPUs on the hybrid node.
        extra = pod("extra", gpus=8, pool="hybrid")
        extra["spec"]["nodeName"] = "lv-hybrid-a100"
        create(admin, other, extra)

        rows = json.loads(_run(live_cp, "queues", "--config", str(config), "-o", "json"))
        qb = next(r for r in rows if r["queue"] == "qb")
        assert qb["nominal_gpus"] == 4 and qb["allocated_gpus"] == 16 and qb["borrowed_gpus"] == 12

        job = tmp_path / "more.yaml"
        job.write_text(yaml.safe_dump(pod("more", gpus=8, pool="inference")))
        before = _objects(admin)
        out = _run(live_cp, "what-if", "-f", str(job), "-n", ns, "--config", str(config))
        assert (
            f"{ns}/more (queue qa, user {ns}): would stay pending: queue 'qa' would hold "
            "16 GPU, above its nominal quota + borrowing limit of 8 GPU"
        ) in out
        assert _objects(admin) == before
        # Nothing was evicted: explain and what-if only ran the engine on copies.
        assert sorted(p["metadata"]["name"] for p in pods(admin, other)) == ["extra", "fill"]
    finally:
        delete_pods(admin, other)


def test_explain_a_pod_whose_group_cannot_start_yet(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    _fill_and_wait(admin, ns)
    lonely = pod(
        "lonely-0",
        gpus=8,
        labels={"fairgpu.io/pod-group": "lonely"},
        annotations={"fairgpu.io/min-member": "3"},
    )
    create(admin, ns, lonely)
    text = _run(live_cp, "explain", f"{ns}/lonely-0")
    assert "Order (fair): not tried until its pod group can start" in text
    assert "no preemption: the pod is not tried now (its pod group cannot start yet)" in text
    assert (
        f"Next cycle: stays pending: pod group {ns}/lonely: waiting for members, "
        "0 running + 1 pending < minMember 3"
    ) in text
