"""Pool precedence through the real API: on the hybrid pool inference goes before training,
whatever the shares -- a training pod is evicted (policy/v1) and the replica binds there."""

from __future__ import annotations

from typing import Any

import pytest
from live_helpers import T4, bound, create, pod, pods, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration

TENANCY = """
mode: dynamic
namespaceQueues: false
history: {halfLifeSeconds: 0}
preemption:
  reclaimMinRuntimeSeconds: 0
  poolPrecedence:
    - {nodes: {example.com/node.usage: hybrid}, preemptor: inference, victims: training}
queues:
  - {name: train, weight: 3}
  - {name: serve, weight: 1}
"""


def typed(name: str, kind: str, queue: str) -> dict[str, Any]:
    """A one-GPU T4 pod of ``kind``: its pool affinity and tolerations are derived."""
    labels = {
        "fairgpu.io/queue": queue,
        "fairgpu.io/workload-type": kind,
        "fairgpu.io/gpu-model": T4,
    }
    return pod(name, gpus=1, pool=None, model=None, labels=labels)


def test_inference_evicts_training_on_the_hybrid_pool_only(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    with scheduler(live_cp, tenancy=TENANCY) as s:
        for i in range(16):
            create(admin, ns, typed(f"t-{i:02d}", "training", "train"))
        for i in range(8):
            create(admin, ns, typed(f"s-{i}", "inference", "serve"))
        where = wait_for(lambda: b if len(b := bound(admin, ns)) == 24 else None)
        on = {n: sorted(p for p, node in where.items() if node == n) for n in set(where.values())}
        assert len(on["lv-training-t4"]) == len(on["lv-hybrid-t4"]) == 8
        assert all(p.startswith("s-") for p in on["lv-inference-t4"])
        # train (weight 3) is at its share of the T4s it may use with more waiting, serve at
        # its own: no share rule lets the ninth replica in; the precedence rule does.
        for i in range(4):
            create(admin, ns, typed(f"t-more-{i}", "training", "train"))
        create(admin, ns, typed("s-8", "inference", "serve"))
        wait_for(lambda: bound(admin, ns).get("s-8") == "lv-hybrid-t4", timeout=30)
        names = {p["metadata"]["name"] for p in pods(admin, ns)}
        gone = [p for p in on["lv-hybrid-t4"] if p not in names]
        assert len(gone) == 1 and gone[0].startswith("t-")
        assert set(on["lv-training-t4"]) <= names  # nothing else moved
        assert s.metrics.preemptions.labels("precedence")._value.get() == 1
        assert not any(bound(admin, ns).get(f"t-more-{i}") for i in range(4))
