"""Relocation through the real API: a queue confined to the training pool takes the node of a
queue at its share whose pod could run on the inference node, which stands free."""

from __future__ import annotations

from typing import Any

import pytest
from live_helpers import A100, bound, create, pod, pods, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient
from fairgpu.devcluster.kubelet import DURATION_ANNOTATION

pytestmark = pytest.mark.integration

TENANCY = """
mode: dynamic
namespaceQueues: false
history: {halfLifeSeconds: 0}
preemption: {enabled: true, minRuntimeSeconds: 0, reclaimMinRuntimeSeconds: 0}
queues:
  - {name: flex}
  - {name: conf}
  - {name: inf}
"""


def _anywhere(name: str) -> dict[str, Any]:
    """An 8-GPU pod of queue flex on any A100 node, whatever its pool."""
    manifest = pod(name, gpus=8, pool=None, model=A100, labels={"fairgpu.io/queue": "flex"})
    manifest["spec"]["tolerations"] = [{"operator": "Exists"}]
    return manifest


def _phase(admin: KubeClient, ns: str, name: str) -> str | None:
    return next(
        (p["status"].get("phase") for p in pods(admin, ns) if p["metadata"]["name"] == name), None
    )


def test_a_confined_queue_takes_the_node_of_a_pod_that_can_run_elsewhere(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # The inference A100 node is busy for a few seconds: flex's two pods land on the
    # training and hybrid A100 nodes, the only others they may use.
    blocker = pod(
        "blocker",
        gpus=8,
        pool="inference",
        labels={"fairgpu.io/queue": "inf"},
        annotations={DURATION_ANNOTATION: "3"},
    )
    create(admin, ns, blocker)
    with scheduler(live_cp, tenancy=TENANCY) as s:
        wait_for(lambda: bound(admin, ns).get("blocker") == "lv-inference-a100")
        for name in ("flex-0", "flex-1"):
            create(admin, ns, _anywhere(name))
        where = wait_for(lambda: b if len(b := bound(admin, ns)) == 3 else None)
        assert {where["flex-0"], where["flex-1"]} == {"lv-training-a100", "lv-hybrid-a100"}
        wait_for(lambda: _phase(admin, ns, "blocker") == "Succeeded", timeout=20)
        # conf may use the training A100 node only. flex holds 16 GPUs, its fair share of
        # the 24 it may use (conf's is 8): no reclaim -- but the inference node is free.
        create(admin, ns, pod("conf", gpus=8, labels={"fairgpu.io/queue": "conf"}))
        wait_for(lambda: bound(admin, ns).get("conf") == "lv-training-a100", timeout=30)
        moved = next(n for n, node in where.items() if node == "lv-training-a100")
        wait_for(lambda: moved not in bound(admin, ns))
        assert s.metrics.preemptions.labels("relocate")._value.get() == 1
        # Its controller would create it again: it starts on the inference node.
        create(admin, ns, _anywhere(f"{moved}-again"))
        wait_for(lambda: bound(admin, ns).get(f"{moved}-again") == "lv-inference-a100")
