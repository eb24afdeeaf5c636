"""DRA in the simulator: DeviceClasses, NVIDIA-shaped ResourceSlices, claims and templates read
from YAML; a claim is allocated and reserved when its pod binds, released when the pod ends."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fairgpu.engine.engine import Engine
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workloads.kube_yaml import WorkloadError, load_kube_yaml
from fairgpu.sim.workloads.nvidia_dra import claim_spec, nvidia_device_classes, nvidia_slice

NODES = "\n---\n".join(
    f"""apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels: {{kubernetes.io/hostname: {name}}}
status: {{allocatable: {{cpu: "32", memory: 128Gi, pods: "50"}}}}"""
    for name in ("n0", "n1")
)


def objects(*docs: dict) -> str:
    return "\n---\n" + yaml.safe_dump_all(docs)


def pod(name: str, arrival: int, duration: int, **refs: str) -> str:
    entries = [
        {
            "name": k,
            "resourceClaimTemplateName"
            if v.startswith("tpl:")
            else "resourceClaimName": v.removeprefix("tpl:"),
        }
        for k, v in refs.items()
    ]
    return objects(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "annotations": {
                    "fairgpu.io/arrival-seconds": str(arrival),
                    "fairgpu.io/duration-seconds": str(duration),
                },
            },
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                "resourceClaims": entries,
            },
        }
    )


def base() -> str:
    # Only n0 has GPUs: two A100s, partitionable.
    return NODES + objects(*nvidia_device_classes(), nvidia_slice("n0", gpus=2))


def template(name: str, gpus: int = 0, mig: str = "") -> str:
    return objects(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": claim_spec(gpus, mig)},
        }
    )


def claim(name: str, gpus: int = 0, mig: str = "") -> str:
    return objects(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": claim_spec(gpus, mig),
        }
    )


def run(tmp_path: Path, text: str, until: float | None = None) -> Simulation:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    sim = Simulation(load_kube_yaml([path]), Engine(seed=1), until=until)
    sim.run()
    return sim


def test_template_claims_allocated_on_bind_and_released_at_the_end(tmp_path: Path) -> None:
    text = base() + template("one-gpu", gpus=1)
    text += "".join(pod(f"p{i}", 0, 100, gpu="tpl:one-gpu") for i in range(3))
    sim = run(tmp_path, text, until=50)
    recs = {r.pod.name: r for r in sim.records.values()}
    running = sorted(n for n, r in recs.items() if r.start is not None)
    assert len(running) == 2 and all(recs[n].node == "n0" for n in running)
    waiting = next(r for r in recs.values() if r.start is None)
    assert waiting.reason == "0/2 nodes are available: 2 cannot allocate all claims."
    claims = sim.cluster.dra.claims
    taken = sorted(claims[f"default/{n}-gpu"].allocation[0].device for n in running)
    assert taken == ["gpu-0", "gpu-1"]
    assert claims[f"default/{running[0]}-gpu"].reserved_for == (recs[running[0]].pod.uid,)
    # Run to the end: the third pod starts when a GPU frees; every generated claim is gone.
    sim = run(tmp_path, text)
    recs = {r.pod.name: r for r in sim.records.values()}
    assert sorted(r.start for r in recs.values()) == [0.0, 0.0, 100.0]
    assert sim.cluster.dra.claims == {}


def test_shared_claim_reserved_by_both_and_deallocated_after(tmp_path: Path) -> None:
    text = base() + claim("shared", mig="3g.40gb")
    text += pod("a", 0, 100, gpu="shared") + pod("b", 10, 100, gpu="shared")
    sim = run(tmp_path, text, until=50)
    c = sim.cluster.dra.claims["default/shared"]
    assert c.allocation is not None and c.allocation[0].device.startswith("gpu-0-mig-3g40gb")
    assert c.node == "n0" and len(c.reserved_for) == 2
    sim = run(tmp_path, text)
    c = sim.cluster.dra.claims["default/shared"]
    assert c.allocation is None and c.reserved_for == ()


def test_mig_partitions_share_a_gpu_in_simulation(tmp_path: Path) -> None:
    text = base() + template("small", mig="1g.10gb") + template("whole", gpus=1)
    text += "".join(pod(f"s{i}", 0, 100, gpu="tpl:small") for i in range(3))
    text += pod("w", 1, 100, gpu="tpl:whole")
    sim = run(tmp_path, text, until=50)
    recs = {r.pod.name: r for r in sim.records.values()}
    assert all(r.start is not None for r in recs.values())
    parents = {
        sim.cluster.dra.claims[f"default/s{i}-gpu"].allocation[0].device.split("-mig")[0]
        for i in range(3)
    }
    assert len(parents) == 1  # the partitions packed on one GPU; the other stayed whole


def test_bad_dra_object_names_file_and_field(tmp_path: Path) -> None:
    bad = objects(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "broken"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]},
        }
    )
    path = tmp_path / "bad.yaml"
    path.write_text(NODES + bad)
    with pytest.raises(WorkloadError, match=r"bad.yaml: DeviceClass broken: field spec.selectors"):
        load_kube_yaml([path])


def gang_pod(name: str, group: str, size: int, template_name: str) -> str:
    return (
        pod(name, 0, 100, gpu=f"tpl:{template_name}")
        .replace(
            "  namespace: default\n",
            f"  namespace: default\n  labels: {{fairgpu.io/pod-group: {group}}}\n",
            1,
        )
        .replace("annotations:\n", f"annotations:\n    fairgpu.io/min-member: '{size}'\n", 1)
    )


def test_gang_of_claims_starts_whole_or_not_at_all(tmp_path: Path) -> None:
    # Three GPUs are needed, two exist: no member may hold a device.
    text = base() + template("one-gpu", gpus=1)
    text += "".join(gang_pod(f"g{i}", "job", 3, "one-gpu") for i in range(3))
    sim = run(tmp_path, text, until=50)
    assert all(r.start is None for r in sim.records.values())
    assert all(c.allocation is None for c in sim.cluster.dra.claims.values())
    # Two members fit: both start, each with its own GPU.
    text = base() + template("one-gpu", gpus=1)
    text += "".join(gang_pod(f"g{i}", "job", 2, "one-gpu") for i in range(2))
    sim = run(tmp_path, text, until=50)
    assert all(r.start == 0.0 for r in sim.records.values())
    devices = sorted(c.allocation[0].device for c in sim.cluster.dra.claims.values())
    assert devices == ["gpu-0", "gpu-1"]


def stale_claim(name: str, node: str) -> str:
    """A one-GPU claim left allocated to ``node``'s gpu-0 and reserved by nobody (its pod was
    deleted before the allocation was cleared)."""
    doc = yaml.safe_load(claim(name, gpus=1).split("---\n", 1)[1])
    doc["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": "gpu-0"}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    return objects(doc)


def hog(node: str, until: int) -> str:
    """A pod holding every CPU of ``node`` until ``until``."""
    doc = yaml.safe_load(pod("hog", 0, until).split("---\n", 1)[1])
    doc["spec"]["nodeName"] = node
    doc["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "32"
    doc["spec"].pop("resourceClaims")
    return objects(doc)


def test_a_stale_allocation_is_cleared_and_the_claim_allocated_where_the_pod_fits(
    tmp_path: Path,
) -> None:
    """The claim is pinned to n0, whose CPUs ``hog`` holds for 1000 s; n1 has a free GPU. As
    kube-scheduler's PostFilter does, the stale allocation is cleared and the pod starts on
    n1 at once, with a fresh allocation (it would wait for ``hog`` otherwise)."""
    text = NODES + objects(
        *nvidia_device_classes(), nvidia_slice("n0", gpus=1), nvidia_slice("n1", gpus=1)
    )
    text += stale_claim("left", "n0") + hog("n0", 1000) + pod("p", 10, 100, gpu="left")
    sim = run(tmp_path, text, until=50)
    rec = next(r for r in sim.records.values() if r.pod.name == "p")
    assert (rec.start, rec.node) == (10.0, "n1")
    c = sim.cluster.dra.claims["default/left"]
    assert c.allocation is not None and c.node == "n1" and c.reserved_for == (rec.pod.uid,)


def test_a_claim_another_pod_reserves_is_never_deallocated(tmp_path: Path) -> None:
    """The same, but the allocation on n0 is in use by ``user`` (running there, sharing the
    claim): it stays, and ``p`` waits on n0's CPUs."""
    text = NODES + objects(
        *nvidia_device_classes(), nvidia_slice("n0", gpus=1), nvidia_slice("n1", gpus=1)
    )
    text += claim("shared", gpus=1) + pod("user", 0, 1000, gpu="shared")
    doc = yaml.safe_load(hog("n0", 1000).split("---\n", 1)[1])
    doc["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "31"
    text += objects(doc) + pod("p", 10, 100, gpu="shared")
    sim = run(tmp_path, text, until=50)
    recs = {r.pod.name: r for r in sim.records.values()}
    assert recs["user"].node == "n0" and recs["p"].start is None
    c = sim.cluster.dra.claims["default/shared"]
    assert c.node == "n0" and c.reserved_for == (recs["user"].pod.uid,)


def test_a_job_pod_failed_at_its_deadline_waits_again_with_fresh_claims(tmp_path: Path) -> None:
    """A Job's pod (``backoffLimit: 1``) would run 100 s but its ``activeDeadlineSeconds``
    is 60: it fails at 60 s, and its replacement -- made from the claim template again, as
    for a preempted pod -- runs 60-120 s and fails too, which fails the Job."""
    job = objects(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "train",
                "namespace": "default",
                "annotations": {"fairgpu.io/duration-seconds": "100"},
            },
            "spec": {
                "backoffLimit": 1,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "activeDeadlineSeconds": 60,
                        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                    }
                },
            },
        }
    )
    sim = run(tmp_path, base() + template("one-gpu", gpus=1) + job)
    runs = [(a.start, a.end, a.outcome) for a in sim.runs.close(sim.now)]
    assert runs == [(0.0, 60.0, "deadline-exceeded"), (60.0, 120.0, "deadline-exceeded")], runs
    assert sim.failed_jobs["default/train"][0] == 120.0
    assert sim.cluster.dra.claims == {}
