"""Trying it locally as the docs say: a dev cluster, fairgpu, and ``deploy/examples/`` applied
as they are -- the workload controllers turn the Job and the Deployments into pods, which
fairgpu places; deleting a Deployment deletes its pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from live_helpers import A100, T4, bound, pods, scheduler, wait_for

from fairgpu.devcluster import DevCluster, KubeClient, NodeSpec, find_binaries

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Job": "/apis/batch/v1/namespaces/{ns}/jobs",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "Service": "/api/v1/namespaces/{ns}/services",
}


def apply_examples(client: KubeClient) -> None:
    """``kubectl create namespace team-a serving; kubectl apply -f deploy/examples/``."""
    for ns in ("team-a", "serving"):  # bare namespaces: no ServiceAccount made for them
        client.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                client.post(PATHS[doc["kind"]].format(ns=doc["metadata"]["namespace"]), doc)


def test_the_examples_run_on_a_dev_cluster() -> None:
    bin_dir = find_binaries()
    if bin_dir is None or not (bin_dir / "kube-controller-manager").exists():
        pytest.skip("control-plane binaries not built (tools/kube/build-control-plane.sh)")
    nodes = [NodeSpec(f"train-{i}", pool="training", gpu_model=A100, gpus=8) for i in range(4)]
    nodes.append(NodeSpec("infer-0", pool="inference", gpu_model=T4, gpus=8))
    with DevCluster(nodes, bin_dir=bin_dir, controllers=True) as dev:
        client = dev.client
        assert client is not None
        with scheduler(dev.control_plane):
            apply_examples(client)
            # The Job's 4 workers start together on the training nodes; the 6 replicas of
            # the two Deployments share the T4 node.
            training = wait_for(lambda: b if len(b := bound(client, "team-a")) == 4 else None)
            assert sorted(training.values()) == [f"train-{i}" for i in range(4)]
            serving = wait_for(lambda: b if len(b := bound(client, "serving")) == 6 else None)
            assert set(serving.values()) == {"infer-0"}
            client.delete("/apis/apps/v1/namespaces/serving/deployments/ranker")
            wait_for(lambda: len(pods(client, "serving")) == 3, timeout=30)
            left: list[dict[str, Any]] = pods(client, "serving")
            assert all(p["metadata"]["name"].startswith("ranker-derived-") for p in left)
