"""A pod that backfilled onto a node held for a starving job by declaring a short run time,
and runs on past it, is evicted through the real API server -- and the held job starts when
the node's honest pod ends, not when the liar would have."""

from __future__ import annotations

from pathlib import Path

import pytest
from live_helpers import bound, create, pod, pods, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient
from fairgpu.devcluster.kubelet import DURATION_ANNOTATION, RUN_ANNOTATION

TENANCY = """preemption: {enabled: false}
starvation: {reserveAfterSeconds: 0, drainGraceSeconds: 2, minGpus: 8}
"""


@pytest.mark.integration
def test_a_backfilled_pod_running_past_its_declaration_is_evicted(
    live_cp: ControlPlane, admin: KubeClient, ns: str, tmp_path: Path
) -> None:
    config = tmp_path / "tenancy.yaml"
    config.write_text(TENANCY)
    # lv-training-a100 (8 GPUs) runs `long` (4 GPUs, 20 s); `big` (8 GPUs) waits for it, so
    # the node is held for `big`; `liar` (1 GPU) declares 3 s -- ending before the node
    # drains, it may backfill -- but runs 600 s.
    create(admin, ns, pod("long", gpus=4, annotations={DURATION_ANNOTATION: "20"}))
    with scheduler(live_cp, tenancy=config):
        wait_for(lambda: "long" in bound(admin, ns))
        create(admin, ns, pod("big", gpus=8))
        liar = {DURATION_ANNOTATION: "3", RUN_ANNOTATION: "600"}
        wait_for(lambda: "held for it" in _message(admin, ns, "big"))
        create(admin, ns, pod("liar", gpus=1, annotations=liar))
        wait_for(lambda: "liar" in bound(admin, ns))
        # Evicted once 3 s + 2 s of grace have passed: gone well before `long` ends.
        wait_for(lambda: "liar" not in {p["metadata"]["name"] for p in pods(admin, ns)}, 15)
        assert "long" in bound(admin, ns)
        wait_for(lambda: "big" in bound(admin, ns), 40)


def _message(admin: KubeClient, ns: str, name: str) -> str:
    """The PodScheduled message of pod ``name`` ("" when none)."""
    for p in pods(admin, ns):
        if p["metadata"]["name"] == name:
            for c in (p.get("status") or {}).get("conditions") or []:
                if c.get("type") == "PodScheduled":
                    return str(c.get("message") or "")
    return ""
