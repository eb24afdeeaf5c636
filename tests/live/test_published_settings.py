"""The read-only commands answer with the settings the running scheduler decides with: it
publishes them (ConfigMap fairgpu-system/<scheduler-name>-settings) once it leads, and
``queues`` / ``explain`` take every setting not given on their command line from there --
a person who forgets --config no longer gets one queue per namespace, of weight 1, in
silence."""

from __future__ import annotations

import json
from pathlib import Path

from live_helpers import create, pod, scheduler, wait_for
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.devcluster import ControlPlane, KubeClient

SETTINGS = "/api/v1/namespaces/fairgpu-system/configmaps/fairgpu-settings"


def queues(cp: ControlPlane, *args: str) -> tuple[dict[str, dict], str]:
    """``fairgpu queues -o json`` rows by queue, and what it said on standard error."""
    said = CliRunner().invoke(
        app, ["queues", "-o", "json", "--kubeconfig", str(cp.kubeconfig_path), *args]
    )
    assert said.exit_code == 0, said.output
    return {r["queue"]: r for r in json.loads(said.stdout)}, said.stderr


def test_commands_take_the_running_schedulers_settings(
    live_cp: ControlPlane, admin: KubeClient, ns: str, tmp_path: Path
) -> None:
    tenancy = tmp_path / "tenancy.yaml"
    tenancy.write_text(
        f"queues:\n  - {{name: mine, weight: 3, namespaces: [{ns}], quota: {{gpu: 8}}}}\n"
    )
    create(admin, ns, pod("p", gpus=1))
    # Nothing published yet: the command says so, and answers with its own defaults.
    rows, note = queues(live_cp)
    assert "fairgpu-system/fairgpu-settings does not exist" in note, note
    assert rows[ns]["weight"] == 1 and "mine" not in rows
    with scheduler(live_cp, tenancy=str(tenancy), ordering="kube-default"):
        wait_for(lambda: admin.request("GET", SETTINGS).ok)
        rows, note = queues(live_cp)
        assert rows["mine"]["weight"] == 3 and rows["mine"]["nominal_gpus"] == 8, rows
        assert ns not in rows
        assert "using the scheduler's settings (ConfigMap fairgpu-system/fairgpu-settings" in note
        assert "its tenancy config" in note and "ordering kube-default" in note, note
        # A --config of one's own wins, with a note that the scheduler runs another.
        other = tmp_path / "other.yaml"
        other.write_text("queues:\n  - {name: elsewhere}\n")
        rows, note = queues(live_cp, "--config", str(other))
        assert "mine" not in rows and rows[ns]["weight"] == 1
        assert f"--config {other} is not the tenancy config the scheduler runs with" in note
