"""Former simulator-test builders, kept for test files that still import them: the old
signatures (4 A100s, 32 CPUs and 256 GiB per node; one GPU and one CPU per pod) over
``tests.builders``."""

from __future__ import annotations

from pathlib import Path

from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import PodInfo
from tests.builders import k8s_node, k8s_pod

__all__ = ["gpu_node", "gpu_pod", "simulated_run"]


def gpu_node(
    name: str,
    gpus: int = 4,
    cpu: str = "32",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> NodeInfo:
    """``k8s_node`` of ``gpus`` A100s."""
    return k8s_node(name, labels, gpus=gpus, model="A100", cpu=cpu, memory="256Gi", taints=taints)


def gpu_pod(
    name: str,
    namespace: str = "default",
    gpus: str = "1",
    cpu: str = "1",
    labels: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> PodInfo:
    """``k8s_pod`` asking ``gpus`` whole GPUs (plus any ``extra`` resources)."""
    return k8s_pod(name, namespace, gpus=gpus, cpu=cpu, labels=labels, requests=extra)


def simulated_run(tmp_path: Path, text: str) -> Path:
    """Simulate the Kubernetes YAML workload ``text`` with ``fairgpu simulate --out``; the
    run's output directory (for ``explain``/``queues``/``what-if --run``)."""
    from typer.testing import CliRunner

    from fairgpu.cli import app

    workload = tmp_path / "workload.yaml"
    workload.write_text(text)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["simulate", "--workload", str(workload), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out
