"""A pod's ``activeDeadlineSeconds`` live: the kubelet fails the pod when it passes, so the
answers take it as the longest the pod can hold its GPUs.

``short`` declares no run time but an 8 s deadline; ``next`` waits for its node. Before, a pod
behind one without a run time had no predicted start; now ``explain`` predicts it when the
deadline passes, and so it goes: the (fake, faithful) kubelet fails ``short`` then
(``DeadlineExceeded``) and the scheduler binds ``next``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from live_helpers import ask_cli, bound, create, pod, scheduler, wait_for
from test_jobs_live import NODE, TENANCY

from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration


def test_a_pod_behind_one_with_a_deadline_is_predicted_and_starts_then(
    live_cp: ControlPlane, admin: KubeClient, ns: str, tmp_path: Path
) -> None:
    config = tmp_path / "tenancy.yaml"
    config.write_text(TENANCY)
    labels = {"fairgpu.io/queue": "a"}
    on_node = {"kubernetes.io/hostname": NODE}

    def ask(*args: str) -> Any:
        return ask_cli(live_cp, config, *args)

    with scheduler(live_cp, tenancy=TENANCY):
        short = pod("short", gpus=8, labels=labels, node_selector=on_node)
        short["spec"]["activeDeadlineSeconds"] = 8
        create(admin, ns, short)
        wait_for(lambda: bound(admin, ns).get("short") == NODE, timeout=30)
        notes = {"fairgpu.io/duration-seconds": "60"}
        nxt = pod("next", gpus=8, labels=labels, annotations=notes, node_selector=on_node)
        create(admin, ns, nxt)
        said = ask("explain", f"{ns}/next")
        assert said["state"] == "pending", said
        assert said["predicted_in_seconds"] in range(0, 9), said
        wait_for(lambda: bound(admin, ns).get("next") == NODE, timeout=30)
        status = admin.get(f"/api/v1/namespaces/{ns}/pods/short")["status"]
        assert (status["phase"], status.get("reason")) == ("Failed", "DeadlineExceeded")
