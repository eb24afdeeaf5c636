"""The live scheduler with Dynamic Resource Allocation, on a real kube-apiserver.

The API server runs with the partitionable-devices gate (MIG devices as counter-set
consumers); two nodes publish NVIDIA-shaped ResourceSlices with two GPUs each and every MIG
placement of them. Every test checks the API server's own state at the end: no device is
allocated to two claims, no GPU's counters are over-consumed, and every bound pod's claims are
allocated (pinned to its node) and reserved for it, written as kube-scheduler writes them.
kube-controller-manager (only its resourceclaim controller) runs just for the template test,
so elsewhere the release of claims is the scheduler's own.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dra_audit import claim, claims, double_bookings, dra_pod, make_claims, slice_devices
from live_helpers import bound, condition, create, delete_pods, pod, pods, scheduler, wait_for

from fairgpu.devcluster import (
    ControlPlane,
    FakeKubelet,
    KubeClient,
    NodeSpec,
    create_nodes,
    ensure_namespace,
)
from fairgpu.devcluster.controller_manager import BINARY as KCM
from fairgpu.devcluster.dra import DRA_API, DRA_FEATURE_GATES, apiserver_args, publish_nvidia_dra
from fairgpu.kube import LiveScheduler
from fairgpu.kube.dra_binding import FINALIZER, ClaimWrite, DraPlan, prebind, release
from fairgpu.sim.workloads.nvidia_dra import DRIVER, claim_spec

NODES = ("dra-0", "dra-1")
GPUS = 2  # per node: 4 GPUs, 8 x 3g.40gb or 28 x 1g.10gb in all


@pytest.fixture(scope="module")
def cp(live_bin_dir: Path) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver with DRA partitionable devices, two nodes and their slices."""
    with ControlPlane(live_bin_dir, extra_apiserver_args=apiserver_args()) as plane:
        with plane.client() as c:
            ensure_namespace(c, "fairgpu-system", ca_pem=Path(plane.ca_file).read_text())
            create_nodes(c, [NodeSpec(n, pool="training") for n in NODES], domain="example.com")
            publish_nvidia_dra(c, NODES, gpus=GPUS, mig=True)
        yield plane


@pytest.fixture(scope="module")
def admin(cp: ControlPlane) -> Iterator[KubeClient]:
    with cp.client() as c:
        yield c


@pytest.fixture(scope="module")
def live(cp: ControlPlane, admin: KubeClient) -> Iterator[LiveScheduler]:
    """The fake kubelet and one fairgpu scheduler for the module."""
    k = FakeKubelet(cp.client(maxsize=8), workers=4).start()
    assert k.wait_synced(30)
    try:
        with scheduler(cp) as s:
            yield s
    finally:
        k.stop()


@pytest.fixture
def ns(cp: ControlPlane, admin: KubeClient, live: LiveScheduler) -> Iterator[str]:
    """A fresh namespace; its pods and then its claims are deleted afterwards (the claims'
    finalizers must be gone by then: every allocation was released)."""
    name = f"dra-{uuid.uuid4().hex[:8]}"
    ensure_namespace(admin, name, ca_pem=Path(cp.ca_file).read_text())
    yield name
    delete_pods(admin, name)
    admin.request("DELETE", f"{DRA_API}/namespaces/{name}/resourceclaims")
    wait_for(lambda: not claims(admin, name), 30)


def assert_consistent(admin: KubeClient, ns: str) -> dict[str, list[dict[str, Any]]]:
    """No device twice, no GPU's memory slices twice, every bound pod's claims allocated on
    its node and reserved for it, in kube-scheduler's format. Returns claims by pod name."""
    found = double_bookings(claims(admin), slice_devices(admin))
    assert not found, found
    by_name = {c["metadata"]["name"]: c for c in claims(admin, ns)}
    out: dict[str, list[dict[str, Any]]] = {}
    for p in pods(admin, ns):
        node = p["spec"].get("nodeName")
        if not node:
            continue
        generated = {
            s["name"]: s.get("resourceClaimName")
            for s in (p.get("status") or {}).get("resourceClaimStatuses") or []
        }
        mine = []
        for ref in p["spec"].get("resourceClaims", []):
            name = ref.get("resourceClaimName") or generated[ref["name"]]
            c = by_name[name]
            assert_kube_scheduler_format(c, node)
            reserved = c["status"]["reservedFor"]
            assert {
                "resource": "pods",
                "name": p["metadata"]["name"],
                "uid": p["metadata"]["uid"],
            } in reserved
            mine.append(c)
        out[p["metadata"]["name"]] = mine
    return out


def assert_kube_scheduler_format(c: dict[str, Any], node: str) -> None:
    """The fields kube-scheduler 1.34's PreBind writes, and nothing else."""
    alloc = c["status"]["allocation"]
    assert set(alloc) == {"devices", "nodeSelector"}
    assert alloc["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }
    assert set(alloc["devices"]) == {"results"}
    requests = {r["name"] for r in c["spec"]["devices"]["requests"]}
    for r in alloc["devices"]["results"]:
        assert set(r) == {"request", "driver", "pool", "device"}
        assert r["driver"] == DRIVER and r["pool"] == node and r["request"] in requests
    assert FINALIZER in c["metadata"]["finalizers"]
    for entry in c["status"]["reservedFor"]:
        assert set(entry) == {"resource", "name", "uid"} and entry["resource"] == "pods"


def unschedulable_message(admin: KubeClient, ns: str, name: str) -> str:
    def msg() -> str:
        p = admin.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        c = condition(p)
        return c["message"] if c and c["status"] == "False" else ""

    return str(wait_for(msg, 20))


# ---- tests ----------------------------------------------------------------------------------
def claims_per_gpu(got: dict[str, list[dict[str, Any]]]) -> Counter[tuple[str, str]]:
    """How many allocated devices of ``got`` (claims per pod) lie on each (pool, GPU): a MIG
    partition counts for the GPU it is cut from."""
    return Counter(
        (r["pool"], r["device"].split("-mig-")[0])
        for cs in got.values()
        for c in cs
        for r in c["status"]["allocation"]["devices"]["results"]
    )


def test_whole_gpu_claims_respect_devices_allocated_by_others(admin: KubeClient, ns: str) -> None:
    # A claim allocated by someone else (as kube-scheduler leaves it) holds dra-0's gpu-0.
    make_claims(admin, ns, claim("foreign", gpus=1))
    path = f"{DRA_API}/namespaces/{ns}/resourceclaims/foreign"
    foreign = admin.get(path)
    foreign["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": "dra-0", "device": "gpu-0"}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["dra-0"]}
                        ]
                    }
                ]
            },
        }
    }
    admin.request("PUT", f"{path}/status", foreign)
    make_claims(admin, ns, *(claim(f"c{i}", gpus=1) for i in range(4)))
    for i in range(4):
        create(admin, ns, dra_pod(f"p{i}", ("gpu", f"c{i}")))
    wait_for(lambda: len(bound(admin, ns)) == 3)
    left = next(f"p{i}" for i in range(4) if f"p{i}" not in bound(admin, ns))
    assert "cannot allocate all claims" in unschedulable_message(admin, ns, left)
    got = assert_consistent(admin, ns)
    assert len(got) == 3
    devices = {
        r["device"]
        for cs in got.values()
        for c in cs
        for r in c["status"]["allocation"]["devices"]["results"]
        if r["pool"] == "dra-0"
    }
    assert "gpu-0" not in devices
    admin.request("DELETE", path)  # nobody releases a claim reserved for no pod


def test_mig_partitions_share_gpus_without_overlap(admin: KubeClient, ns: str) -> None:
    # 7 x 3g.40gb (two fit a GPU) and one whole GPU: 9 halves of GPUs asked, 8 exist.
    make_claims(admin, ns, *(claim(f"m{i}", mig="3g.40gb") for i in range(7)))
    make_claims(admin, ns, claim("whole", gpus=1))
    for i in range(7):
        create(admin, ns, dra_pod(f"mig-{i}", ("gpu", f"m{i}")))
    create(admin, ns, dra_pod("whole", ("gpu", "whole")))
    wait_for(lambda: len(bound(admin, ns)) == 7)
    per_gpu = claims_per_gpu(assert_consistent(admin, ns))
    assert max(per_gpu.values()) <= 2  # never more than two 3g.40gb (or one whole) per GPU


def test_shared_claim_two_pods_then_released(admin: KubeClient, ns: str) -> None:
    make_claims(admin, ns, claim("shared", gpus=1))
    create(admin, ns, dra_pod("a", ("gpu", "shared")))
    create(admin, ns, dra_pod("b", ("gpu", "shared")))
    wait_for(lambda: len(bound(admin, ns)) == 2)
    where = bound(admin, ns)
    assert where["a"] == where["b"]
    got = assert_consistent(admin, ns)
    c = got["a"][0]
    assert len(c["status"]["allocation"]["devices"]["results"]) == 1
    assert {e["name"] for e in c["status"]["reservedFor"]} == {"a", "b"}
    path = f"{DRA_API}/namespaces/{ns}/resourceclaims/shared"
    admin.request("DELETE", f"/api/v1/namespaces/{ns}/pods/a", {"gracePeriodSeconds": 0})

    def only_b() -> bool:
        st = admin.get(path)["status"]
        return [e["name"] for e in st.get("reservedFor", [])] == ["b"] and "allocation" in st

    wait_for(only_b)
    admin.request("DELETE", f"/api/v1/namespaces/{ns}/pods/b", {"gracePeriodSeconds": 0})

    def released() -> bool:
        c = admin.get(path)
        return not c.get("status") and FINALIZER not in c["metadata"].get("finalizers", [])

    wait_for(released)


def test_gang_of_pods_with_claims_all_or_nothing(admin: KubeClient, ns: str) -> None:
    # Each member holds two claims of one GPU: three members need 6 GPUs, 4 exist.
    for group, members in (("big", 3), ("small", 2)):
        for i in range(members):
            make_claims(admin, ns, claim(f"{group}-{i}-x", gpus=1), claim(f"{group}-{i}-y", gpus=1))
            create(
                admin,
                ns,
                dra_pod(
                    f"{group}-{i}",
                    ("x", f"{group}-{i}-x"),
                    ("y", f"{group}-{i}-y"),
                    labels={"fairgpu.io/pod-group": group},
                    annotations={"fairgpu.io/min-member": str(members)},
                ),
            )
    wait_for(lambda: set(bound(admin, ns)) == {"small-0", "small-1"})
    unschedulable_message(admin, ns, "big-0")
    got = assert_consistent(admin, ns)
    assert all(len(cs) == 2 for cs in got.values())
    for c in claims(admin, ns):
        if c["metadata"]["name"].startswith("big-"):
            assert not c.get("status"), c  # nothing written for a gang that did not fit


def one_mig_template(admin: KubeClient, ns: str) -> None:
    """Create ResourceClaimTemplate ``one-mig``: one 1g.10gb MIG partition."""
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-mig"},
        "spec": {"spec": claim_spec(mig_profile="1g.10gb")},
    }
    admin.post(f"{DRA_API}/namespaces/{ns}/resourceclaimtemplates", template)


def test_claim_template_per_pod(cp: ControlPlane, admin: KubeClient, ns: str) -> None:
    if not (cp.bin_dir / KCM).exists():
        pytest.skip(f"{KCM} not built (tools/kube/build-control-plane.sh)")
    cp.start_controller_manager(feature_gates=DRA_FEATURE_GATES)
    try:
        one_mig_template(admin, ns)
        for i in range(3):
            create(admin, ns, dra_pod(f"t{i}", ("gpu", "template:one-mig")))
        wait_for(lambda: len(bound(admin, ns)) == 3)
        got = assert_consistent(admin, ns)
        for name, (c,) in got.items():
            owner = c["metadata"]["ownerReferences"][0]
            assert owner["kind"] == "Pod" and owner["name"] == name
        delete_pods(admin, ns)

        def released() -> bool:  # deleting them is the garbage collector's job, not run here
            return all(
                not c.get("status") and FINALIZER not in c["metadata"].get("finalizers", [])
                for c in claims(admin, ns)
            )

        wait_for(released, 30)
    finally:
        cp.stop_controller_manager()


def test_template_claim_is_the_one_the_pod_status_names(admin: KubeClient, ns: str) -> None:
    """No kube-controller-manager here: a claim made by hand exactly as its resourceclaim
    controller makes one (the pod-claim-name annotation, the pod as controller) is used only
    once the pod's ``status.resourceClaimStatuses`` names it, as kube-scheduler does; while
    the status names nothing, or a claim that does not exist, the pod waits and says why."""
    one_mig_template(admin, ns)
    uid = create(admin, ns, dra_pod("t", ("gpu", "template:one-mig")))["metadata"]["uid"]
    made = claim("t-gpu-1a2b3", mig="1g.10gb")
    made["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    made["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "t", "uid": uid, "controller": True}
    ]
    make_claims(admin, ns, made)
    entry = ' (pod claim "gpu" from template "one-mig")'

    def waits_with(message: str) -> None:
        def current() -> str:
            p = admin.get(f"/api/v1/namespaces/{ns}/pods/t")
            assert not p["spec"].get("nodeName"), "bound with a claim its status does not name"
            c = condition(p)
            return c["message"] if c and c["status"] == "False" else ""

        wait_for(lambda: current() == message, 20)

    waits_with(f'pod "{ns}/t": ResourceClaim not created yet{entry}')

    def name_in_status(claim_name: str) -> None:
        status = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim_name}]}
        admin.patch(f"/api/v1/namespaces/{ns}/pods/t/status", {"status": status})

    name_in_status("t-gpu-other")  # a status-only update the scheduler must see
    waits_with(f'resourceclaim.resource.k8s.io "t-gpu-other" not found{entry}')
    name_in_status("t-gpu-1a2b3")
    wait_for(lambda: "t" in bound(admin, ns))
    got = assert_consistent(admin, ns)
    assert [c["metadata"]["name"] for c in got["t"]] == ["t-gpu-1a2b3"]


def dra1_allocation(device: str) -> dict[str, Any]:
    """A claim allocation of the GPU ``device`` of node dra-1, as kube-scheduler writes it."""
    return {
        "devices": {
            "results": [{"request": "gpu", "driver": DRIVER, "pool": "dra-1", "device": device}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["dra-1"]}]}
            ]
        },
    }


def two_claims_one_allocated(admin: KubeClient, ns: str, free: str, taken: str) -> dict[str, str]:
    """One-GPU claims ``free`` and ``taken``, the second allocated dra-1's gpu-0 (as by another
    scheduler); their uids by name."""
    make_claims(admin, ns, claim(free, gpus=1), claim(taken, gpus=1))
    path = f"{DRA_API}/namespaces/{ns}/resourceclaims/{taken}"
    held = admin.get(path)
    held["status"] = {"allocation": dra1_allocation("gpu-0")}
    admin.request("PUT", f"{path}/status", held)
    return {c["metadata"]["name"]: c["metadata"]["uid"] for c in claims(admin, ns)}


def test_prebind_conflict_releases_what_it_wrote(admin: KubeClient, ns: str) -> None:
    """A claim allocated elsewhere between the choice and the write fails the bind, and the
    claim written before it is released (no allocation, reservation or finalizer left)."""
    uids = two_claims_one_allocated(admin, ns, "first", "second")
    path = f"{DRA_API}/namespaces/{ns}/resourceclaims"
    plan = DraPlan(
        ns,
        "ghost",
        "0000-ghost",
        "dra-1",
        (
            ClaimWrite(ns, "first", uids["first"], dra1_allocation("gpu-1")),
            ClaimWrite(ns, "second", uids["second"], dra1_allocation("gpu-1")),
        ),
    )
    status, message = prebind(admin.rest, plan)
    assert status == 409 and "allocated elsewhere" in message
    first = admin.get(f"{path}/first")
    assert not first.get("status") and FINALIZER not in first["metadata"].get("finalizers", [])
    admin.request("DELETE", f"{path}/second")


def test_a_preemptors_allocation_waits_for_its_victims_claim(admin: KubeClient, ns: str) -> None:
    """A preemptor's claim is allocated the GPU its victim's claim still holds in the API
    only once that claim is deallocated (its pod is gone; the release follows): never are
    both allocated at once. A victim's claim that stays allocated fails the bind, writing
    nothing."""
    uids = two_claims_one_allocated(admin, ns, "preemptor", "victim")
    path = f"{DRA_API}/namespaces/{ns}/resourceclaims"
    write = ClaimWrite(
        ns,
        "preemptor",
        uids["preemptor"],
        dra1_allocation("gpu-0"),
        after=((f"{ns}/victim", uids["victim"]),),
    )
    plan = DraPlan(ns, "ghost", "0000-ghost", "dra-1", (write,))

    assert prebind(admin.rest, plan, wait_allocated=0.5)[0] == 409
    assert not admin.get(f"{path}/preemptor").get("status")  # nothing written

    got: list[tuple[int, str]] = []
    bind = threading.Thread(target=lambda: got.append(prebind(admin.rest, plan)))
    bind.start()
    seen_both = False
    for _ in range(5):  # half a second of the wait: the preemptor's claim stays unallocated
        time.sleep(0.1)
        seen_both |= bool(admin.get(f"{path}/preemptor").get("status", {}).get("allocation"))
    held = admin.get(f"{path}/victim")
    held["status"] = {}
    admin.request("PUT", f"{path}/victim/status", held)  # its release
    bind.join(15)
    assert not seen_both and got == [(200, "")]
    results = admin.get(f"{path}/preemptor")["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-0"]
    assert double_bookings(claims(admin), slice_devices(admin)) == []
    release(admin.rest, plan)  # the ghost pod's claim, for the namespace's clean-up


def test_pod_waits_for_its_claim(admin: KubeClient, ns: str) -> None:
    create(admin, ns, dra_pod("early", ("gpu", "late")))
    assert 'resourceclaim.resource.k8s.io "late" not found' in unschedulable_message(
        admin, ns, "early"
    )
    make_claims(admin, ns, claim("late", gpus=1))
    wait_for(lambda: "early" in bound(admin, ns))
    assert_consistent(admin, ns)


def shape(value: Any) -> Any:
    """The structure of a JSON value: keys kept, leaves replaced by their type."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return sorted({repr(shape(v)) for v in value})
    return type(value).__name__


def test_claim_status_matches_kube_scheduler(cp: ControlPlane, admin: KubeClient, ns: str) -> None:
    """kube-scheduler and fairgpu each allocate one claim on the same cluster: the claims'
    status and finalizers have the same structure, and neither takes the other's device."""
    cp.start_scheduler(extra_args=[f"--feature-gates={DRA_FEATURE_GATES}"])
    try:
        make_claims(admin, ns, claim("by-kube", gpus=1), claim("by-fairgpu", gpus=1))
        manifest = dra_pod("kube", ("gpu", "by-kube"))
        manifest["spec"]["schedulerName"] = "default-scheduler"
        create(admin, ns, manifest)
        # One after the other: two schedulers choosing devices at the same instant is a race
        # no scheduler can close (each sees the other's choice only once it is written).
        wait_for(lambda: len(bound(admin, ns)) == 1, 30)
        create(admin, ns, dra_pod("fair", ("gpu", "by-fairgpu")))
        wait_for(lambda: len(bound(admin, ns)) == 2, 30)
    finally:
        cp.stop_scheduler()
    got = assert_consistent(admin, ns)
    ks, fg = got["kube"][0], got["fair"][0]
    assert shape(ks["status"]) == shape(fg["status"])
    assert ks["metadata"]["finalizers"] == fg["metadata"]["finalizers"] == [FINALIZER]
    # kube-controller-manager's part for kube-scheduler's claim (it does not run here).
    admin.request("DELETE", f"/api/v1/namespaces/{ns}/pods/kube", {"gracePeriodSeconds": 0})
    path = f"{DRA_API}/namespaces/{ns}/resourceclaims/by-kube"
    ks = admin.get(path)
    ks["status"] = {}
    ks = admin.call("PUT", f"{path}/status", ks)
    ks["metadata"]["finalizers"] = []
    admin.call("PUT", path, ks)


def test_every_mig_slot_filled_once(admin: KubeClient, ns: str) -> None:
    """28 single-slice MIG claims fill the four GPUs exactly (7 each); the 29th waits."""
    n = 7 * GPUS * len(NODES)
    make_claims(admin, ns, *(claim(f"s{i}", mig="1g.10gb") for i in range(n + 1)))
    t0 = time.monotonic()
    for i in range(n + 1):
        create(admin, ns, dra_pod(f"s{i}", ("gpu", f"s{i}")))
    wait_for(lambda: len(bound(admin, ns)) == n, 60)
    elapsed = time.monotonic() - t0
    left = next(f"s{i}" for i in range(n + 1) if f"s{i}" not in bound(admin, ns))
    assert "cannot allocate all claims" in unschedulable_message(admin, ns, left)
    per_gpu = claims_per_gpu(assert_consistent(admin, ns))
    assert sorted(per_gpu.values()) == [7] * (GPUS * len(NODES))
    print(f"\n{n} MIG pods created and bound with their claims in {elapsed:.2f}s")


def test_cluster_without_dra_api_still_schedules(live_bin_dir: Path) -> None:
    """resource.k8s.io/v1 turned off: the scheduler becomes ready and binds pods; a pod with
    a claim stays pending, its claim never found."""
    off = ["--runtime-config=resource.k8s.io/v1=false"]
    with ControlPlane(live_bin_dir, extra_apiserver_args=off) as plane, plane.client() as c:
        ensure_namespace(c, "fairgpu-system", ca_pem=Path(plane.ca_file).read_text())
        ensure_namespace(c, "plain", ca_pem=Path(plane.ca_file).read_text())
        create_nodes(c, [NodeSpec("only", pool="training")], domain="example.com")
        with scheduler(plane):
            create(c, "plain", pod("cpu", model=None))
            create(c, "plain", dra_pod("claims", ("gpu", "none")))
            wait_for(lambda: "cpu" in bound(c, "plain"))
            assert "not found" in unschedulable_message(c, "plain", "claims")


def test_dev_cluster_with_dra() -> None:
    """``DevCluster(dra=True)``: NVIDIA slices for the GPU nodes (with MIG counters), and
    kube-controller-manager creating a pod's claim from its template."""
    from fairgpu.devcluster import DevCluster

    spec = NodeSpec("g0", pool="training", gpu_model="NVIDIA-A100-SXM4-80GB", gpus=2)
    cpu = NodeSpec("c0", pool="training")
    with DevCluster([spec, cpu], dra=True, kubelet=False) as dev:
        c = dev.client
        assert c is not None
        slices = c.get(f"{DRA_API}/resourceslices")["items"]
        assert [s["spec"]["nodeName"] for s in slices] == ["g0"]
        assert len(slices[0]["spec"]["sharedCounters"]) == 2
        template = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one"},
            "spec": {"spec": claim_spec(gpus=1)},
        }
        c.post(f"{DRA_API}/namespaces/default/resourceclaimtemplates", template)
        create(c, "default", dra_pod("p", ("gpu", "template:one")))
        made = wait_for(lambda: claims(c, "default"), 30)
        assert made[0]["metadata"]["ownerReferences"][0]["name"] == "p"


def test_least_privilege_rbac_of_deploy_allocates_and_releases(
    cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    """A second scheduler (its own name) running as deploy/'s service account, with only the
    RBAC granted there, allocates, reserves and releases a claim."""
    from test_deploy import install_rbac

    from fairgpu.kube.client import Connection

    token = install_rbac(admin)
    make_claims(admin, ns, claim("rbac", gpus=1))
    manifest = dra_pod("rbac", ("gpu", "rbac"))
    manifest["spec"]["schedulerName"] = "fairgpu-rbac"
    create(admin, ns, manifest)
    conn = Connection(cp.url, token, cp.ca_file)
    path = f"{DRA_API}/namespaces/{ns}/resourceclaims/rbac"
    with scheduler(cp, connection=conn, scheduler_name="fairgpu-rbac") as s:
        wait_for(lambda: "rbac" in bound(admin, ns))
        assert_consistent(admin, ns)
        admin.request("DELETE", f"/api/v1/namespaces/{ns}/pods/rbac", {"gracePeriodSeconds": 0})
        wait_for(lambda: not admin.get(path).get("status"))
        wait_for(lambda: not admin.get(path)["metadata"].get("finalizers"))
        assert s.metrics.binds.labels("error")._value.get() == 0


def test_explain_reads_claims_and_devices(cp: ControlPlane, admin: KubeClient, ns: str) -> None:
    """``fairgpu explain`` builds its state with the DRA objects too: a pod whose claim
    cannot get a GPU is explained by the allocation, not by a claim it cannot find."""
    from typer.testing import CliRunner

    from fairgpu.cli import app

    n = GPUS * len(NODES)
    make_claims(admin, ns, *(claim(f"g{i}", gpus=1) for i in range(n + 1)))
    for i in range(n + 1):
        create(admin, ns, dra_pod(f"g{i}", ("gpu", f"g{i}")))
    wait_for(lambda: len(bound(admin, ns)) == n)
    left = next(f"g{i}" for i in range(n + 1) if f"g{i}" not in bound(admin, ns))
    args = ["explain", f"{ns}/{left}", "--kubeconfig", str(cp.kubeconfig_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    nodes = next(line for line in result.output.splitlines() if line.startswith("Nodes:"))
    assert "2 cannot allocate all claims" in nodes, result.output


def test_prebind_retried_is_idempotent_and_checks_the_allocation(
    admin: KubeClient, ns: str
) -> None:
    """The same writes again (a lost reply) succeed without a second reservation; a claim
    left reserved for the pod with another allocation fails the bind and is released."""
    make_claims(admin, ns, claim("once", gpus=1))
    uid = claims(admin, ns)[0]["metadata"]["uid"]
    path = f"{DRA_API}/namespaces/{ns}/resourceclaims/once"

    def plan(device: str) -> DraPlan:
        write = ClaimWrite(ns, "once", uid, dra1_allocation(device))
        return DraPlan(ns, "ghost", "0000-ghost", "dra-1", (write,))

    assert prebind(admin.rest, plan("gpu-1")) == (200, "")
    assert prebind(admin.rest, plan("gpu-1")) == (200, "")
    assert len(admin.get(path)["status"]["reservedFor"]) == 1
    status, message = prebind(admin.rest, plan("gpu-0"))
    assert status == 409 and "another allocation" in message
    c = admin.get(path)
    assert not c.get("status") and FINALIZER not in c["metadata"].get("finalizers", [])


def test_claims_of_pods_bound_before_a_restart_are_released(
    cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    """A scheduler started after the bind (no kube-controller-manager here) still releases
    the claim of one of its pods when the pod goes."""
    make_claims(admin, ns, claim("kept", gpus=1))
    manifest = dra_pod("kept", ("gpu", "kept"))
    manifest["spec"]["schedulerName"] = "fairgpu-restart"
    create(admin, ns, manifest)
    path = f"{DRA_API}/namespaces/{ns}/resourceclaims/kept"
    with scheduler(cp, scheduler_name="fairgpu-restart"):
        wait_for(lambda: "kept" in bound(admin, ns))
    assert admin.get(path)["status"]["reservedFor"]
    with scheduler(cp, scheduler_name="fairgpu-restart"):
        admin.request("DELETE", f"/api/v1/namespaces/{ns}/pods/kept", {"gracePeriodSeconds": 0})
        wait_for(lambda: not admin.get(path).get("status"))
        wait_for(lambda: not admin.get(path)["metadata"].get("finalizers"))


def test_a_stale_allocation_is_deallocated_and_the_pod_bound_elsewhere(
    admin: KubeClient, ns: str
) -> None:
    """A claim left allocated to dra-1 and reserved by nobody; its pod may only run on dra-0.
    As kube-scheduler's DynamicResources PostFilter does, the scheduler clears the allocation
    (status subresource) and the next attempt allocates the claim on dra-0 and binds."""
    make_claims(admin, ns, claim("left", gpus=1))
    path = f"{DRA_API}/namespaces/{ns}/resourceclaims/left"
    stale = admin.get(path)
    stale["status"] = {"allocation": dra1_allocation("gpu-1")}
    admin.request("PUT", f"{path}/status", stale)
    body = dra_pod("pinned", ("gpu", "left"))
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "dra-0"}
    create(admin, ns, body)
    wait_for(lambda: bound(admin, ns).get("pinned") == "dra-0", 30)
    got = assert_consistent(admin, ns)
    (only,) = [c for cs in got.values() for c in cs]
    results = only["status"]["allocation"]["devices"]["results"]
    assert [r["pool"] for r in results] == ["dra-0"]
