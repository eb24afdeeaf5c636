"""Live scheduling throughput: fairgpu vs kube-scheduler on one real kube-apiserver.

On one etcd + kube-apiserver (loopback) with ``--nodes`` fake nodes x 8 GPUs, for each
scheduler in turn: start it, wait until it is ready, *pause* it (SIGSTOP), create ``--pods``
one-GPU pods for it (``schedulerName`` default-scheduler for kube-scheduler, fairgpu for
fairgpu) in a fresh namespace, *resume* it (SIGCONT) and time until every pod is bound
(observed through a watch on bound pods). Then the pods are deleted and the next run starts.

Two settings, each run for both schedulers in the same invocation:

* ``unthrottled``: client rate limits off (kube-scheduler ``clientConnection.qps``/``burst``
  10000, fairgpu ``--qps 0``);
* ``default``: each scheduler's default client settings (kube-scheduler 50 QPS / burst 100,
  fairgpu ``--qps 200 --burst 400``).

Prints one JSON object; ``ratio`` = fairgpu / kube-scheduler pods per second, unthrottled.

    python benchmarks/live_throughput/run.py [--nodes 500] [--pods 3000] \
        [--settings unthrottled,default]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from fairgpu.devcluster import (
    ControlPlane,
    KubeClient,
    create_nodes,
    ensure_namespace,
    find_binaries,
    gpu_node_specs,
)
from fairgpu.devcluster.controlplane import free_port

TARGET_RATIO = 1.2


def pod_manifest(name: str, scheduler: str) -> dict[str, Any]:
    """A one-GPU pod that tolerates every taint (so every node is a candidate)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/fake:1",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }


def wait_http(url: str, timeout: float = 60.0) -> None:
    """Wait until ``url`` answers 200 (TLS not verified)."""
    ctx = ssl._create_unverified_context()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout}s")


class BindCounter:
    """Counts the bound pods of one namespace from a watch (relisting whenever the server
    closes it, e.g. for falling behind), recording when the last one was seen."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client = client
        self.path = f"/api/v1/namespaces/{namespace}/pods"
        self.bound: set[str] = set()
        self.last = 0.0
        self.done = threading.Event()
        self.target = 0
        self._closed = False
        self.stream: Any = None
        self.rv = self._list()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _list(self) -> str:
        listing = self.client.get(self.path, params={"fieldSelector": "spec.nodeName!="})
        for p in listing["items"]:
            self._seen(p["metadata"]["name"])
        return str(listing["metadata"]["resourceVersion"])

    def _seen(self, name: str) -> None:
        if name not in self.bound:
            self.bound.add(name)
            self.last = time.monotonic()
            if self.target and len(self.bound) >= self.target:
                self.done.set()

    def start(self, target: int) -> None:
        """Start counting until ``target`` pods are bound."""
        self.target = target
        self.thread.start()

    def _run(self) -> None:
        while not self._closed and not self.done.is_set():
            try:
                self.stream = self.client.watch(
                    self.path,
                    {"fieldSelector": "spec.nodeName!=", "resourceVersion": self.rv},
                    timeout_seconds=1800,
                )
                for ev in self.stream:
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        self._seen(ev["object"]["metadata"]["name"])
                        self.rv = ev["object"]["metadata"]["resourceVersion"]
                    elif ev.get("type") == "ERROR":
                        break
                    if self.done.is_set():
                        return
            except Exception:  # closed or dropped: relist below
                if self._closed:
                    return
            if not self._closed and not self.done.is_set():
                self.rv = self._list()

    def close(self) -> None:
        """Stop watching."""
        self._closed = True
        if self.stream is not None:
            self.stream.close()


def start_kube_scheduler(cp: ControlPlane, bin_dir: Path, qps: float | None, work: Path) -> Any:
    """Start kube-scheduler (no leader election) with the given client QPS (None: default)."""
    cfg: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(cp.kubeconfig_path)},
        "leaderElection": {"leaderElect": False},
    }
    if qps is not None:
        cfg["clientConnection"].update(qps=qps, burst=int(qps))
    path = work / f"kube-scheduler-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    port = free_port()
    kc = str(cp.kubeconfig_path)
    log = open(work / "kube-scheduler.log", "ab")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [
            str(bin_dir / "kube-scheduler"),
            f"--config={path}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={work / 'ks-certs'}",
            f"-v={os.environ.get('KUBE_SCHEDULER_V', '1')}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    wait_http(f"https://127.0.0.1:{port}/readyz")
    time.sleep(2.0)  # let its informers finish the initial list
    return proc


def start_fairgpu(
    cp: ControlPlane, qps: float | None, work: Path, extra: Sequence[str] = ()
) -> Any:
    """Start ``fairgpu run`` as a subprocess (no leader election), with ``extra`` flags."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "fairgpu",
        "run",
        f"--kubeconfig={cp.kubeconfig_path}",
        "--no-leader-elect",
        f"--metrics-port={port}",
        "--metrics-host=127.0.0.1",
        "--log-level=warning",
        *extra,
    ]
    if qps is not None:
        argv.append(f"--qps={qps}")
    log = open(work / "fairgpu.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{port}/readyz")
    return proc


def one_run(
    cp: ControlPlane,
    client: KubeClient,
    bin_dir: Path,
    which: str,
    qps: float | None,
    pods: int,
    work: Path,
    timeout: float,
) -> dict[str, Any]:
    """Create ``pods`` pods while ``which`` is paused; time from resume to all bound."""
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    ensure_namespace(client, ns)
    if which == "kube-scheduler":
        proc = start_kube_scheduler(cp, bin_dir, qps, work)
        sched_name = "default-scheduler"
    else:
        proc = start_fairgpu(cp, qps, work)
        sched_name = "fairgpu"
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        counter = BindCounter(client, ns)
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda i: client.post(
                        f"/api/v1/namespaces/{ns}/pods", pod_manifest(f"p-{i:05d}", sched_name)
                    ),
                    range(pods),
                )
            )
        counter.start(pods)
        time.sleep(1.0)  # let the API server settle after the burst of creates
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGCONT)
        finished = counter.done.wait(timeout)
        elapsed = (counter.last if finished else time.monotonic()) - t0
        counter.close()
        bound = len(counter.bound)
        in_api = len(
            client.get(
                f"/api/v1/namespaces/{ns}/pods", params={"fieldSelector": "spec.nodeName!="}
            )["items"]
        )
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        client.request(
            "DELETE",
            f"/api/v1/namespaces/{ns}/pods",
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
            timeout=120,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            left = client.get(f"/api/v1/namespaces/{ns}/pods", params={"limit": 1})["items"]
            if not left:
                break
            time.sleep(0.5)
    return {
        "bound": bound,
        "seconds": round(elapsed, 3),
        "pods_per_s": round(bound / elapsed, 1) if elapsed > 0 else None,
        "complete": finished,
        "bound_in_api": in_api,
    }


def main() -> None:
    """Parse arguments, run every scheduler x setting, print one JSON object."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--settings", default="unthrottled,default")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    bin_dir = find_binaries()
    if bin_dir is None:
        sys.exit("control-plane binaries not found; run tools/kube/build-control-plane.sh")
    if args.pods > args.nodes * args.gpus_per_node:
        sys.exit("--pods exceeds the GPUs of the cluster")
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    result: dict[str, Any] = {
        "benchmark": "live_throughput",
        "nodes": args.nodes,
        "gpus_per_node": args.gpus_per_node,
        "pods": args.pods,
        "cpus": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory(prefix="fairgpu-bench-") as tmp, ControlPlane(bin_dir) as cp:
        work = Path(tmp)
        with cp.client(maxsize=32) as client:
            t = time.monotonic()
            create_nodes(
                client,
                gpu_node_specs(args.nodes, gpus_per_node=args.gpus_per_node),
                workers=16,
                status_in_create=True,
            )
            result["node_setup_s"] = round(time.monotonic() - t, 1)
            qps_of = {
                "unthrottled": {"kube-scheduler": 10000.0, "fairgpu": 0.0},
                "default": {"kube-scheduler": None, "fairgpu": None},
            }
            for setting in settings:
                runs = {}
                for which in ("kube-scheduler", "fairgpu"):
                    runs[which] = one_run(
                        cp,
                        client,
                        bin_dir,
                        which,
                        qps_of[setting][which],
                        args.pods,
                        work,
                        args.timeout,
                    )
                f = runs["fairgpu"]["pods_per_s"] or 0.0
                k = runs["kube-scheduler"]["pods_per_s"] or 0.0
                entry = {
                    "fairgpu_pods_per_s": f,
                    "kube_scheduler_pods_per_s": k,
                    "ratio": round(f / k, 2) if k else None,
                    "fairgpu": runs["fairgpu"],
                    "kube_scheduler": runs["kube-scheduler"],
                }
                result[setting] = entry
                print(f"{setting}: {json.dumps(entry)}", file=sys.stderr, flush=True)
    head = result.get("unthrottled") or result[settings[0]]
    result["fairgpu_pods_per_s"] = head["fairgpu_pods_per_s"]
    result["kube_scheduler_pods_per_s"] = head["kube_scheduler_pods_per_s"]
    result["ratio"] = head["ratio"]
    result["target_ratio"] = TARGET_RATIO
    result["meets_target"] = bool(head["ratio"] and head["ratio"] >= TARGET_RATIO)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
