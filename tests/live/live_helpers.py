"""Helpers shared by the live-scheduler tests: pods, waiting, an in-process scheduler."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fairgpu.devcluster import ControlPlane, KubeClient, NodeSpec, ensure_namespace
from fairgpu.kube import LiveScheduler, RunConfig
from fairgpu.kube.client import Connection
from tests import polling


@contextlib.contextmanager
def control_plane(
    bin_dir: Path, priorities: dict[str, int] | None = None, **plane: Any
) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver on loopback with the fairgpu-system namespace and the
    PriorityClasses ``priorities`` (name -> value); stopped on exit. ``plane``: more of
    :class:`ControlPlane`'s arguments (``extra_apiserver_args``, ...)."""
    cp = ControlPlane(bin_dir, **plane)
    cp.start()
    try:
        with cp.client() as c:
            ensure_namespace(c, "fairgpu-system", ca_pem=Path(cp.ca_file).read_text())
            create_priority_classes(c, priorities or {})
        yield cp
    finally:
        cp.stop()


def create_priority_classes(client: KubeClient, priorities: dict[str, int]) -> None:
    """PriorityClasses ``priorities`` (name -> value); those that exist already are kept."""
    for name, value in priorities.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        r = client.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body)
        if not r.ok and r.status != 409:
            raise AssertionError(f"PriorityClass {name}: HTTP {r.status}")


#: The start of a churn test's tenancy YAML (its queues follow): dynamic shares without
#: usage history, preemption on with its time guards off -- victims are seconds old, and the
#: same GPUs change hands again within minutes.
CHURN_TENANCY = """mode: dynamic
history: {halfLifeSeconds: 0}
preemption:
  {enabled: true, minRuntimeSeconds: 0, reclaimMinRuntimeSeconds: 0, reclaimCooldownSeconds: 0}
"""

DOMAIN = "example.com"
USAGE = f"{DOMAIN}/node.usage"
A100 = "NVIDIA-A100-SXM4-80GB"
T4 = "Tesla-T4"


def live_node_specs() -> list[NodeSpec]:
    """An A100 and a T4 node (8 GPUs) per pool, plus one CPU-only hybrid node."""
    specs = []
    for pool in ("training", "inference", "hybrid"):
        for model, short in ((A100, "a100"), (T4, "t4")):
            specs.append(NodeSpec(f"lv-{pool}-{short}", pool=pool, gpu_model=model, gpus=8))
    specs.append(NodeSpec("lv-cpu-0", pool="hybrid", cpu="32", memory="128Gi"))
    return specs


def wait_for(pred: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1) -> Any:
    """Poll ``pred`` until truthy; fail the test after ``timeout`` seconds."""
    return polling.wait_for(pred, timeout, interval)


def pod(
    name: str,
    *,
    gpus: int = 0,
    pool: str | None = "training",
    model: str | None = A100,
    cpu: str = "100m",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    priority_class: str | None = None,
    scheduler: str = "fairgpu",
    node_selector: dict[str, str] | None = None,
    extra_resources: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod asking ``gpus`` whole GPUs that must run in ``pool`` on ``model`` nodes."""
    requests: dict[str, str] = {"cpu": cpu, "memory": "64Mi"}
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    for k, v in (extra_resources or {}).items():
        limits[k] = v
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/fake:1",
                "resources": {"requests": {**requests, **limits}, "limits": limits},
            }
        ],
        "tolerations": [],
    }
    selector = dict(node_selector or {})
    if pool is not None:
        selector[USAGE] = pool
        spec["tolerations"].append(
            {"key": USAGE, "operator": "Equal", "value": pool, "effect": "NoSchedule"}
        )
    if model is not None:
        selector["nvidia.com/gpu.product"] = model
        spec["tolerations"].append(
            {"key": "nvidia.com/gpu.product", "operator": "Equal", "value": model}
        )
    if selector:
        spec["nodeSelector"] = selector
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
    }


def create(client: KubeClient, ns: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Create a pod in ``ns``."""
    return client.post(f"/api/v1/namespaces/{ns}/pods", manifest)


def pods(client: KubeClient, ns: str) -> list[dict[str, Any]]:
    """All pods of ``ns``."""
    return client.get(f"/api/v1/namespaces/{ns}/pods")["items"]


def bound(client: KubeClient, ns: str) -> dict[str, str]:
    """``{pod name: node name}`` of the bound pods of ``ns``."""
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods(client, ns)
        if p["spec"].get("nodeName")
    }


def condition(p: dict[str, Any], kind: str = "PodScheduled") -> dict[str, Any] | None:
    """The pod's condition of type ``kind``."""
    for c in (p.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def events_for(client: KubeClient, ns: str, name: str) -> list[dict[str, Any]]:
    """events.k8s.io/v1 Events about pod ``name``."""
    items = client.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
    return [e for e in items if (e.get("regarding") or {}).get("name") == name]


def delete_pods(client: KubeClient, ns: str) -> None:
    """Delete every pod of ``ns`` at once (grace period 0) and wait until they are gone."""
    client.request(
        "DELETE",
        f"/api/v1/namespaces/{ns}/pods",
        {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and pods(client, ns):
        time.sleep(0.1)


def connection(cp: ControlPlane) -> Connection:
    """A scheduler connection to the test control plane (admin token)."""
    return Connection(cp.url, cp.token, cp.ca_file)


@contextlib.contextmanager
def scheduler(cp: ControlPlane, **overrides: Any) -> Iterator[LiveScheduler]:
    """Run a :class:`LiveScheduler` in a thread (no leader election) until the block ends."""
    settings: dict[str, Any] = {
        "connection": connection(cp),
        "leader_elect": False,
        "metrics_port": 0,
        "metrics_host": "127.0.0.1",
        "install_signal_handlers": False,
        "qps": 0,
        "resync_seconds": 0.5,
        "forecast_seconds": 0,  # tests of the forecaster turn it on
    }
    settings.update(overrides)
    s = LiveScheduler(RunConfig(**settings))
    t = threading.Thread(target=s.run, name="live-scheduler", daemon=True)
    t.start()
    try:
        wait_for(lambda: s._ready()[0], 20)
        yield s
    finally:
        s.stop()
        t.join(30)
        assert not t.is_alive(), "scheduler did not stop"


class SchedulerProcess:
    """``python -m fairgpu run`` as a child process (for crash and leader-election tests)."""

    def __init__(self, cp: ControlPlane, log_path: Any, *args: str) -> None:
        import subprocess
        import sys

        from fairgpu.devcluster.controlplane import free_port

        self.port = free_port()
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fairgpu",
                "run",
                f"--kubeconfig={cp.kubeconfig_path}",
                f"--metrics-port={self.port}",
                "--metrics-host=127.0.0.1",
                "--qps=0",
                *args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def get(self, path: str) -> tuple[int, str]:
        """GET ``path`` on the metrics port: (status, body); (0, '') if unreachable."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def metric(self, name: str) -> float:
        """Sum of the samples of metric ``name`` (0 if absent)."""
        _, text = self.get("/metrics")
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait for ``/readyz``; fail with the log tail if the process died."""

        def ready() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"scheduler exited: {self.log_tail()}")
            return self.get("/readyz")[0] == 200

        wait_for(ready, timeout)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the log."""
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def kill9(self) -> None:
        """SIGKILL, no chance to clean up."""
        self.proc.kill()
        self.wait()

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.wait(timeout)

    def wait(self, timeout: float = 20.0) -> int:
        """Wait for exit (SIGKILL after ``timeout``)."""
        import subprocess

        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(5)
        self._log.close()
        return code


def gpu_usage(client: KubeClient, ns: str) -> dict[str, list[int]]:
    """Per node, the GPU device indexes that bound pods of ``ns`` hold (from the annotation)."""
    from fairgpu.model.gpu import decode_gpu_devices

    usage: dict[str, list[int]] = {}
    for p in pods(client, ns):
        node = p["spec"].get("nodeName")
        if not node:
            continue
        ann = (p["metadata"].get("annotations") or {}).get("fairgpu.io/gpu-devices", "")
        usage.setdefault(node, []).extend(d.index for d in decode_gpu_devices(ann))
    return usage


def set_gpus(admin: KubeClient, node: str, gpus: int) -> None:
    """What a device plugin restart looks like: the node's GPU capacity changes."""
    amount = {"nvidia.com/gpu": str(gpus)}
    admin.patch(
        f"/api/v1/nodes/{node}/status", {"status": {"capacity": amount, "allocatable": amount}}
    )


def create_many(client: KubeClient, ns: str, manifests: list[dict[str, Any]]) -> None:
    """Create many pods concurrently."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda m: create(client, ns, m), manifests))


def install_podgroup_crd(admin: KubeClient, group: str, version: str) -> None:
    """Install a PodGroup CRD for ``group``/``version`` (schema kept open, as far as the
    scheduler cares) and wait until the API serves it."""
    install_crd(admin, group, version, "PodGroup")


#: The LeaderWorkerSet API group (its CRD is installed by :func:`install_crd`).
LWS_API = "leaderworkerset.x-k8s.io"


def leader_worker_set(
    name: str,
    size: int,
    member: dict[str, Any],
    startup_policy: str | None = None,
    **template: Any,
) -> dict[str, Any]:
    """A LeaderWorkerSet ``name`` of one group of ``size`` pods made from the pod manifest
    ``member`` (its labels and spec); ``template``: further fields of its
    ``leaderWorkerTemplate`` (``restartPolicy``...)."""
    worker = {"metadata": {"labels": member["metadata"].get("labels", {})}, "spec": member["spec"]}
    spec: dict[str, Any] = {
        "replicas": 1,
        "leaderWorkerTemplate": {"size": size, "workerTemplate": worker, **template},
    }
    if startup_policy is not None:
        spec["startupPolicy"] = startup_policy
    return {
        "apiVersion": f"{LWS_API}/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": spec,
    }


def install_crd(admin: KubeClient, group: str, version: str, kind: str) -> None:
    """Install a namespaced CRD of ``kind`` (plural: its name in lower case and an "s") for
    ``group``/``version``, its schema kept open, and wait until the API serves it."""
    plural = f"{kind.lower()}s"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    r = admin.request("POST", path, crd)
    assert r.ok or r.status == 409, r

    def established() -> bool:
        got = admin.get(f"{path}/{plural}.{group}")
        conds = (got.get("status") or {}).get("conditions") or []
        ready = any(c["type"] == "Established" and c["status"] == "True" for c in conds)
        return ready and admin.request("GET", f"/apis/{group}/{version}").ok

    wait_for(established)


def create_pod_group(
    admin: KubeClient, group: str, version: str, ns: str, name: str, min_member: Any
) -> None:
    """Create a PodGroup object of ``group``/``version``."""
    body = {
        "apiVersion": f"{group}/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minMember": min_member},
    }
    r = admin.request("POST", f"/apis/{group}/{version}/namespaces/{ns}/podgroups", body)
    assert r.ok, r


@contextlib.contextmanager
def controller_manager(cp: ControlPlane, *controllers: str) -> Iterator[None]:
    """The real kube-controller-manager running only ``controllers`` (skips the test when
    its binary is not built)."""
    if not (cp.bin_dir / "kube-controller-manager").exists():
        pytest.skip("kube-controller-manager not built (tools/kube/build-control-plane.sh)")
    cp.start_controller_manager(controllers)
    try:
        yield
    finally:
        cp.stop_controller_manager()


def ask_cli(cp: ControlPlane, config: Path, *args: str) -> Any:
    """What a ``fairgpu`` answer command (``explain``, ``queues``, ``jobs``...) prints as
    JSON against ``cp`` with tenancy ``config``."""
    from typer.testing import CliRunner

    from fairgpu.cli import app

    flags = ["--config", str(config), "--kubeconfig", str(cp.kubeconfig_path)]
    said = CliRunner().invoke(app, [*args, *flags, "-o", "json"])
    assert said.exit_code == 0, said.output
    # Its standard output alone: warnings about other tests' objects go to standard error.
    return json.loads(said.stdout)
