"""Nodes that come and go under the same name, or show 0 GPUs for a while, against the real API
server with the fake kubelet: no GPU is ever booked twice (checked by the auditor from the API
server's own state), and a node whose GPU label cannot be read is kept."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from auditor import Auditor
from live_helpers import bound, condition, create, pod, pods, scheduler, set_gpus, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient, NodeSpec, create_nodes, delete_nodes

pytestmark = pytest.mark.integration

MODEL = "FAIRGPU-CHURN-GPU"
HOST = "kubernetes.io/hostname"


@pytest.fixture
def churn_node(admin: KubeClient) -> Iterator[NodeSpec]:
    """An 8-GPU node of its own (a GPU model no other test asks for); deleted at the end."""
    spec = NodeSpec(f"churn-{uuid.uuid4().hex[:6]}", gpu_model=MODEL, gpus=8, gpu_memory_mib=40960)
    create_nodes(admin, [spec])
    try:
        yield spec
    finally:
        delete_nodes(admin, [spec.name])


def gpu_pod(name: str, node: str) -> dict[str, Any]:
    return pod(name, gpus=1, pool=None, model=MODEL, node_selector={HOST: node})


def explained(admin: KubeClient, ns: str, prefix: str) -> list[str]:
    """Names of the pods starting with ``prefix`` that the scheduler reported unschedulable."""
    return [
        p["metadata"]["name"]
        for p in pods(admin, ns)
        if p["metadata"]["name"].startswith(prefix)
        and (c := condition(p)) is not None
        and c["status"] == "False"
    ]


def held_devices(s: Any, node: str) -> list[int]:
    """Devices of ``node`` the live scheduler's cache counts as taken."""
    cluster = s.cache.cluster
    try:  # read from the test's thread while the scheduler's loop may be changing it
        idx = cluster.node_index[node]
        count = int(cluster.gpu_count[idx])
        return [d for d in range(count) if cluster.device_milli_free[idx, d] < 1000]
    except (KeyError, IndexError):
        return []


def test_a_node_recreated_under_its_name_never_books_its_gpus_twice(
    live_cp: ControlPlane, admin: KubeClient, ns: str, churn_node: NodeSpec
) -> None:
    name = churn_node.name
    auditor = Auditor(admin)
    with scheduler(live_cp) as s, auditor.running():
        for i in range(8):
            create(admin, ns, gpu_pod(f"first-{i}", name))
        wait_for(lambda: len(bound(admin, ns)) == 8)
        # A kubelet re-registering: the Node is deleted and created again, its status (and
        # so its GPUs) written after the object itself. The first eight pods keep running.
        delete_nodes(admin, [name])
        wait_for(lambda: not admin.request("GET", f"/api/v1/nodes/{name}").ok)
        create_nodes(admin, [churn_node])
        wait_for(lambda: held_devices(s, name) == list(range(8)))
        for i in range(8):
            create(admin, ns, gpu_pod(f"second-{i}", name))
        wait_for(lambda: len(explained(admin, ns, "second-")) == 8)
        time.sleep(1.0)  # a few more cycles: still nothing may bind
        assert sorted(bound(admin, ns)) == sorted(f"first-{i}" for i in range(8))
        assert s.cache.repairs == {}
        # The node is usable: once the first pods are gone the second ones run there.
        for i in range(8):
            admin.delete(f"/api/v1/namespaces/{ns}/pods/first-{i}")
        wait_for(lambda: sorted(bound(admin, ns)) == sorted(f"second-{i}" for i in range(8)))
    assert auditor.checks > 3 and auditor.violations == []
    assert s.cache.repairs == {}


def test_gpus_going_to_zero_and_back_across_a_restart_stay_booked(
    live_cp: ControlPlane, admin: KubeClient, ns: str, churn_node: NodeSpec
) -> None:
    name = churn_node.name
    auditor = Auditor(admin)
    with auditor.running():
        with scheduler(live_cp):
            for i in range(7):
                create(admin, ns, gpu_pod(f"first-{i}", name))
            # One GPU pod bound without fairgpu (nodeName set, as a DaemonSet's): no devices
            # annotation, so fairgpu accounts it on devices the annotations leave free.
            direct = pod("first-7", gpus=1, pool=None, model=MODEL, scheduler="default-scheduler")
            create(admin, ns, direct | {"spec": {**direct["spec"], "nodeName": name}})
            wait_for(lambda: len(bound(admin, ns)) == 8)
        set_gpus(admin, name, 0)  # the device plugin restarts while fairgpu is down
        with scheduler(live_cp) as s:
            wait_for(lambda: name in s.cache.cluster.node_index)
            assert int(s.cache.cluster.gpu_count[s.cache.cluster.node_index[name]]) == 0
            for i in range(8):
                create(admin, ns, gpu_pod(f"second-{i}", name))
            wait_for(lambda: len(explained(admin, ns, "second-")) == 8)
            set_gpus(admin, name, 8)
            wait_for(lambda: held_devices(s, name) == list(range(8)))
            time.sleep(1.5)  # cycles run with the GPUs back: still nothing may bind
            assert sorted(bound(admin, ns)) == sorted(f"first-{i}" for i in range(8))
            assert s.cache.repairs == {}
    assert auditor.checks > 3 and auditor.violations == []


@pytest.mark.parametrize("memory", ["16Gi", "x1"])
def test_a_node_with_an_unreadable_gpu_memory_label_is_kept(
    live_cp: ControlPlane, admin: KubeClient, ns: str, memory: str
) -> None:
    spec = NodeSpec(
        f"odd-{uuid.uuid4().hex[:6]}",
        gpu_model=MODEL,
        gpus=8,
        labels={"nvidia.com/gpu.memory": memory},
    )
    create_nodes(admin, [spec])
    try:
        selector = {HOST: spec.name, "nvidia.com/gpu.memory": memory}
        cpu_pod = pod("cpu", pool=None, model=MODEL, node_selector=selector)
        gpu = pod("gpu", gpus=2, pool=None, model=MODEL, node_selector=selector)
        with scheduler(live_cp) as s:
            create(admin, ns, cpu_pod)
            create(admin, ns, gpu)
            wait_for(lambda: bound(admin, ns) == {"cpu": spec.name, "gpu": spec.name})
            idx = s.cache.cluster.node_index[spec.name]
            assert int(s.cache.cluster.device_memory_total[idx, 0]) == 16384  # the default
            field = "metadata.labels[nvidia.com/gpu.memory]"
            wait_for(lambda: s.metrics.node_problems.labels(field)._value.get() == 1)
            event = wait_for(lambda: node_events(admin, spec.name))
            assert event[0]["reason"] == "GPUDetailIgnored" and event[0]["type"] == "Warning"
            assert repr(memory) in event[0]["note"] and "16384 MiB" in event[0]["note"]
            time.sleep(0.5)  # heartbeats and resyncs report nothing more
            assert len(node_events(admin, spec.name)) == 1
        # kube-scheduler places the same pod on the same node.
        live_cp.start_scheduler()
        try:
            create(admin, ns, {**cpu_pod, "metadata": {"name": "kube"}} | _default(cpu_pod))
            wait_for(lambda: bound(admin, ns).get("kube") == spec.name)
        finally:
            live_cp.stop_scheduler()
    finally:
        delete_nodes(admin, [spec.name])


def _default(manifest: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {**manifest["spec"], "schedulerName": "default-scheduler"}}


def node_events(admin: KubeClient, node: str) -> list[dict[str, Any]]:
    """events.k8s.io/v1 Events about Node ``node``."""
    items = admin.get("/apis/events.k8s.io/v1/namespaces/default/events")["items"]
    return [
        e
        for e in items
        if (e.get("regarding") or {}).get("kind") == "Node" and e["regarding"]["name"] == node
    ]


def test_the_auditor_sees_gpus_cpu_and_pods_booked_twice(
    admin: KubeClient, ns: str, churn_node: NodeSpec
) -> None:
    name = churn_node.name
    auditor = Auditor(admin)
    for i in range(2):  # bound without a scheduler, both claiming device 3
        p = pod(f"twice-{i}", gpus=1, pool=None, model=MODEL, scheduler="default-scheduler")
        p["metadata"]["annotations"] = {"fairgpu.io/gpu-devices": "3"}
        create(admin, ns, p | {"spec": {**p["spec"], "nodeName": name}})
    big = pod("big", pool=None, model=MODEL, cpu="40", scheduler="default-scheduler")
    create(admin, ns, big | {"spec": {**big["spec"], "nodeName": name}})
    found = auditor.check()
    assert any(f"node {name}: GPU 3 booked 2000m" in v for v in found), found
    assert any(f"node {name}: cpu requested" in v for v in found), found
    assert len(found) == 2


def test_a_node_cut_into_56_mig_slices_is_used_whole(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    product = "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"  # GPU feature discovery, single strategy
    spec = NodeSpec(f"mig-{uuid.uuid4().hex[:6]}", gpu_model=product, gpus=56, gpu_memory_mib=9728)
    create_nodes(admin, [spec])
    auditor = Auditor(admin)
    try:
        with scheduler(live_cp), auditor.running():
            create(admin, ns, pod("wide", gpus=50, pool=None, model=product))
            create(admin, ns, pod("rest", gpus=6, pool=None, model=product))
            wait_for(lambda: bound(admin, ns) == {"wide": spec.name, "rest": spec.name})
        devices = sorted(
            int(d)
            for p in pods(admin, ns)
            for d in p["metadata"]["annotations"]["fairgpu.io/gpu-devices"].split(",")
        )
        assert devices == list(range(56))
        assert auditor.violations == []
    finally:
        delete_nodes(admin, [spec.name])
