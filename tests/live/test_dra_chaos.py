"""Chaos with Dynamic Resource Allocation, against the real API server: a seeded random mix of
what real clusters do to a scheduler whose GPUs come as ResourceClaims.

Three nodes publish NVIDIA-shaped ResourceSlices (two A100s each, with every MIG placement);
kube-controller-manager runs its resourceclaim controller, as on a real cluster (it makes the
claims of pods that use a ResourceClaimTemplate, and releases claims whose pods are gone). Jobs
of two queues and two priorities arrive: a pod with a claim of one or two whole GPUs or of a
MIG partition, a gang of two such pods, or two pods sharing one claim. Users delete jobs and
submit them again under the same names; pods get stuck terminating (a finalizer) and keep
their claims reserved; nodes register again (Node and ResourceSlice deleted, created again,
the slice published after the node); DRA drivers restart (the node's slice gone for a moment);
kube-apiserver restarts (kube-controller-manager with it: :meth:`DraChaos.restart_apiserver`
says why); the scheduler is restarted between segments of the churn, and in the
middle one it runs as a process killed by SIGKILL whatever it was doing -- allocating claims,
binding, evicting -- and a new one takes over.

Safety, judged from the API server's own state after every step and every 0.3 s meanwhile:
no device allocated to two claims and no GPU's shared counters (memory slices, memory,
multiprocessors) consumed beyond what its slice offers (:func:`~dra_audit.double_bookings`);
every bound pod's claims allocated on its node and reserved for it, pods and claims read at
one resourceVersion (:func:`~dra_audit.unreserved_pods`); and, from the Pod and Node watch of
:class:`~auditor.Auditor`, no node over its CPU, memory or pod capacity, no pod bound twice,
no pod deleted before it was bound unless the test deleted it.
Liveness, once the churn stops: every pod left runs to completion, and then no claim is still
allocated or reserved -- a claim the scheduler left allocated would hold its GPU for good.

``FAIRGPU_DRA_CHAOS_SEED`` and ``FAIRGPU_DRA_CHAOS_STEPS`` run other seeds, or longer.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from auditor import Auditor, repeating
from churn import Churn
from dra_audit import (
    allocated,
    claim,
    claims,
    double_bookings,
    dra_pod,
    slice_devices,
    unreserved_pods,
)
from live_helpers import (
    CHURN_TENANCY,
    SchedulerProcess,
    control_plane,
    create_many,
    scheduler,
    wait_for,
)

from fairgpu.devcluster import (
    ControlPlane,
    FakeKubelet,
    KubeClient,
    NodeSpec,
    create_nodes,
    delete_nodes,
    ensure_namespace,
)
from fairgpu.devcluster.client import ApiError
from fairgpu.devcluster.controller_manager import BINARY as KCM
from fairgpu.devcluster.dra import DRA_API, DRA_FEATURE_GATES, apiserver_args, publish_nvidia_dra
from fairgpu.devcluster.kubelet import DURATION_ANNOTATION
from fairgpu.kube import LiveScheduler
from fairgpu.kube.client import CONNECTION_ERRORS
from fairgpu.sim.workloads.nvidia_dra import claim_spec, nvidia_slice
from fairgpu.tenancy.resolve import LABEL_POD_GROUP

pytestmark = pytest.mark.integration

NODES, GPUS = 3, 2
GRACE = 1.0  # seconds a deleted pod stays terminating
SEED = int(os.environ.get("FAIRGPU_DRA_CHAOS_SEED", "3"))
STEPS = int(os.environ.get("FAIRGPU_DRA_CHAOS_STEPS", "90"))
SEGMENTS = 3  # the scheduler runs this many times during the churn (restarted in between)
TENANCY = (
    CHURN_TENANCY
    + """queues:
  - {name: qa}
  - {name: qb}
"""
)
PRIORITIES = {"dc-low": 1, "dc-high": 100}
TEMPLATES = {
    "one-gpu": claim_spec(gpus=1),
    "two-gpus": claim_spec(gpus=2),
    "mig-1g": claim_spec(mig_profile="1g.10gb"),
    "mig-3g": claim_spec(mig_profile="3g.40gb"),
}


@pytest.fixture(scope="module")
def cp(live_bin_dir: Path) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver with DRA partitionable devices, the priority classes and
    kube-controller-manager's resourceclaim controller."""
    if not (live_bin_dir / KCM).exists():
        pytest.skip(f"{KCM} not built (tools/kube/build-control-plane.sh)")
    with control_plane(live_bin_dir, PRIORITIES, extra_apiserver_args=apiserver_args()) as plane:
        plane.start_controller_manager(feature_gates=DRA_FEATURE_GATES)
        try:
            yield plane
        finally:
            plane.stop_controller_manager()


class ClaimAudit:
    """The claim invariants of the module docstring, checked from the API server's state."""

    def __init__(self, api: KubeClient, ns: str) -> None:
        self.api, self.ns = api, ns
        self.devices = slice_devices(api)  # every slice published at the start
        self.found: list[str] = []
        self.checks = 0
        self._lock = threading.Lock()

    def check(self) -> None:
        """One audit; an API server that is down skips it."""
        try:
            listed = self.api.get(f"{DRA_API}/resourceclaims")
            rv = listed["metadata"]["resourceVersion"]
            pods = self.api.get(
                f"/api/v1/namespaces/{self.ns}/pods",
                params={"resourceVersion": rv, "resourceVersionMatch": "Exact"},
            )["items"]
        except (ApiError, *CONNECTION_ERRORS):
            return
        found = double_bookings(listed["items"], self.devices)
        found += unreserved_pods(pods, listed["items"])
        with self._lock:
            self.checks += 1
            self.found.extend(f for f in found if f not in self.found)

    @contextlib.contextmanager
    def running(self, interval: float = 0.3) -> Iterator[ClaimAudit]:
        """Audit every ``interval`` seconds in the background until the block ends."""
        with repeating(self.check, interval, "claim-audit"):
            yield self


class DraChaos(Churn):
    """The namespace, nodes and jobs of one run, and the random actions on them."""

    def __init__(
        self, cp: ControlPlane, api: KubeClient, ns: str, tag: str, auditor: Auditor
    ) -> None:
        super().__init__(cp, api, ns, auditor, SEED)
        self.tag = tag
        self.nodes = [f"dc-{tag}-{i}" for i in range(NODES)]
        self.jobs: dict[str, list[str]] = {}  # job name -> its pods' names
        self.manifests: dict[str, list[dict[str, Any]]] = {}  # job name -> its pods
        self.deleted: set[str] = set()  # jobs their users deleted
        self.shared: set[str] = set()  # jobs whose pods share one claim (named after the job)
        self.seq = 0

    def setup(self) -> None:
        """The nodes, their slices (after the nodes, as a DRA driver publishes them) and the
        claim templates."""
        specs = [NodeSpec(n, pool="training", labels={"t": self.tag}) for n in self.nodes]
        create_nodes(self.api, specs)
        publish_nvidia_dra(self.api, self.nodes, gpus=GPUS, mig=True)
        for name, spec in TEMPLATES.items():
            body = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": name},
                "spec": {"spec": spec},
            }
            self.api.post(f"{DRA_API}/namespaces/{self.ns}/resourceclaimtemplates", body)

    # ---- actions --------------------------------------------------------------------------
    def submit(self) -> None:
        self.seq += 1
        name = f"j{self.seq:03d}"
        self.create(name)

    def create(self, name: str) -> None:
        """A job ``name``: a pod with a claim of whole GPUs or a MIG partition, a gang of two
        one-GPU pods, or two pods sharing one claim; a random queue, priority and run time."""
        rng = self.rng
        kind = rng.choice(["gpu", "gpu", "mig", "mig", "gang", "shared"])
        labels = {"fairgpu.io/queue": rng.choice(["qa", "qb"]), "chaos-job": name}
        kw: dict[str, Any] = {
            "node_selector": {"t": self.tag},
            "priority_class": rng.choice(["dc-low", "dc-low", "dc-high"]),
            "annotations": {DURATION_ANNOTATION: str(rng.choice([2, 4, 8]))},
        }
        if kind == "gpu":
            template = rng.choice(["one-gpu", "one-gpu", "two-gpus"])
            manifests = [dra_pod(name, ("gpu", f"template:{template}"), labels=labels, **kw)]
        elif kind == "mig":
            template = rng.choice(["mig-1g", "mig-1g", "mig-3g"])
            manifests = [dra_pod(name, ("gpu", f"template:{template}"), labels=labels, **kw)]
        elif kind == "gang":
            group = {**labels, LABEL_POD_GROUP: name}
            kw["annotations"] = {**kw["annotations"], "fairgpu.io/min-member": "2"}
            manifests = [
                dra_pod(f"{name}-{m}", ("gpu", "template:one-gpu"), labels=group, **kw)
                for m in range(2)
            ]
        else:
            self.api.post(f"{DRA_API}/namespaces/{self.ns}/resourceclaims", claim(name, gpus=1))
            self.shared.add(name)
            manifests = [
                dra_pod(f"{name}-{m}", ("gpu", name), labels=labels, **kw) for m in range(2)
            ]
        create_many(self.api, self.ns, manifests)
        self.jobs[name] = [m["metadata"]["name"] for m in manifests]
        self.manifests[name] = manifests
        self.deleted.discard(name)
        self.note(f"submitted {name}: {kind}, {labels['fairgpu.io/queue']}, {kw}")

    def delete_job(self) -> None:
        """A user deletes a job: its pods, and the claim its pods share."""
        name = self._live_job()
        if name is not None:
            self.note(f"deleting {name}")
            self._delete(name)
            self.deleted.add(name)

    def recreate_job(self) -> None:
        """A user deletes a job and submits it again under its name once its pods (and its
        shared claim) are gone: new uids, perhaps another shape."""
        name = self._live_job(unstuck=True)
        if name is None:
            return
        self.note(f"recreating {name}")
        old = self._delete(name)
        pod_path = f"/api/v1/namespaces/{self.ns}/pods/"
        claim_path = f"{DRA_API}/namespaces/{self.ns}/resourceclaims/{name}"

        def gone() -> bool:
            if any(self.api.request("GET", pod_path + n).ok for n in old):
                return False
            return not self.api.request("GET", claim_path).ok

        wait_for(gone, 30, 0.05)
        self.shared.discard(name)
        self.create(name)

    def restore(self) -> None:
        """What the jobs' controllers do once the churn is over: the pods a job lost without
        its user deleting it (evicted -- a pod group's member whose sibling was still
        unbound, its bind having failed --, or deleted while stuck) are created again."""
        live = {p["metadata"]["name"] for p in self.pods()}
        for name, manifests in sorted(self.manifests.items()):
            lost = [m for m in manifests if m["metadata"]["name"] not in live]
            if name not in self.deleted and lost:
                self.note(f"restoring {[m['metadata']['name'] for m in lost]} of {name}")
                create_many(self.api, self.ns, lost)

    def settled(self) -> bool:
        """Has every pod finished? The jobs' controllers go on recreating what the last
        scheduler still evicts (a pod group's member preempted while its sibling, restored
        after being stuck, still waits: without it the sibling waits for ever)."""
        self.restore()
        return not self.unfinished()

    def _live_job(self, unstuck: bool = False) -> str | None:
        live = {p["metadata"]["name"] for p in self.pods()}
        names = [
            j
            for j, pods in sorted(self.jobs.items())
            if set(pods) & live and not (unstuck and set(pods) & set(self.stuck))
        ]
        return self.rng.choice(names) if names else None

    def _delete(self, name: str) -> list[str]:
        live = {p["metadata"]["name"]: p for p in self.pods()}
        pods = [live[n] for n in self.jobs[name] if n in live]
        self.delete(pods)
        if name in self.shared:
            self.api.request("DELETE", f"{DRA_API}/namespaces/{self.ns}/resourceclaims/{name}")
        return [p["metadata"]["name"] for p in pods]

    def reregister_node(self) -> None:
        """A node registers again: its slice and Node deleted, the Node created again and its
        slice published after it. Its pods keep running, their claims allocated."""
        node = self.rng.choice(self.nodes)
        self.note(f"re-registering node {node}")
        self._unpublish(node)
        delete_nodes(self.api, [node])
        wait_for(lambda: not self.api.request("GET", f"/api/v1/nodes/{node}").ok)
        time.sleep(self.rng.uniform(0.0, 0.5))
        create_nodes(self.api, [NodeSpec(node, pool="training", labels={"t": self.tag})])
        time.sleep(self.rng.uniform(0.0, 0.5))
        self._publish(node)

    def restart_driver(self) -> None:
        """A DRA driver restarts: the node's slice is gone for a moment."""
        node = self.rng.choice(self.nodes)
        self.note(f"DRA driver restarting on {node}")
        self._unpublish(node)
        time.sleep(self.rng.uniform(0.1, 0.8))
        self._publish(node)

    def _unpublish(self, node: str) -> None:
        name = nvidia_slice(node, gpus=GPUS)["metadata"]["name"]
        self.api.request("DELETE", f"{DRA_API}/resourceslices/{name}")

    def _publish(self, node: str) -> None:
        self.api.post(f"{DRA_API}/resourceslices", nvidia_slice(node, gpus=GPUS, mig=True))

    def restart_apiserver(self) -> None:
        """kube-apiserver restarts, and kube-controller-manager with it. Left running, the
        controller-manager's pod informer comes back seconds late (client-go's relist
        backoff) and, seeing a deleted pod where a new pod of the same name now runs,
        removes the new pod's reservation and deallocates the claim it uses ("pod got
        replaced with new instance"): upstream behaviour this test does not judge."""
        self.cp.stop_controller_manager()
        super().restart_apiserver()
        self.cp.start_controller_manager(feature_gates=DRA_FEATURE_GATES)

    def actions(self) -> dict[str, tuple[Callable[[], None], float]]:
        """The random actions and their weights."""
        return {
            "submit": (self.submit, 6),
            "delete": (self.delete_job, 1.5),
            "recreate": (self.recreate_job, 0.6),
            "reregister": (self.reregister_node, 0.8),
            "driver": (self.restart_driver, 0.8),
            "stuck": (self.stick, 0.4),
            "apiserver": (self.restart_apiserver, 0.2),
        }

    # ---- reading back ---------------------------------------------------------------------
    def held_claims(self) -> list[str]:
        """Claims of the namespace still allocated or reserved."""
        return [
            c["metadata"]["name"]
            for c in claims(self.api, self.ns)
            if allocated(c) or (c.get("status") or {}).get("reservedFor")
        ]


def _binds(s: LiveScheduler) -> float:
    return float(s.metrics.binds.labels("ok")._value.get())


def killed_mid_churn(cp: ControlPlane, tmp_path: Path, tenancy: Path, chaos: DraChaos) -> float:
    """A third of the churn under ``fairgpu run`` processes: the first killed by SIGKILL half
    way, whatever it was doing, a second one taking over. Returns the binds they made."""
    args = (f"--config={tenancy}", "--forecast-seconds=0")
    binds = 0.0
    steps = STEPS // SEGMENTS
    first = SchedulerProcess(cp, tmp_path / "first.log", *args)
    first.wait_ready()
    chaos.note("scheduler process started")
    try:
        for _ in range(steps // 2):
            chaos.step()
        binds += first.metric('fairgpu_binds_total{result="ok"}')
    finally:
        first.kill9()
    chaos.note("scheduler process killed (SIGKILL)")
    second = SchedulerProcess(cp, tmp_path / "second.log", *args)
    second.wait_ready()
    chaos.note("scheduler process started")
    try:
        for i in range(steps - steps // 2):
            chaos.step("apiserver" if i == 0 else None)
        binds += second.metric('fairgpu_binds_total{result="ok"}')
    finally:
        second.terminate()
    return binds


def test_dra_chaos_never_allocates_a_device_twice_and_releases_every_claim(
    cp: ControlPlane, tmp_path: Path
) -> None:
    tenancy = tmp_path / "tenancy.yaml"
    tenancy.write_text(TENANCY)
    tag = uuid.uuid4().hex[:6]
    ns = f"dc-{tag}"
    binds = 0.0
    with cp.client(maxsize=24) as api, cp.client(maxsize=6) as kubelet_api:
        ensure_namespace(api, ns, ca_pem=Path(cp.ca_file).read_text())
        auditor = Auditor(api, namespace=ns)
        auditor.gaps_allowed = True  # every watch resumes with 410 after a restart
        chaos = DraChaos(cp, api, ns, tag, auditor)
        chaos.setup()
        audit = ClaimAudit(api, ns)
        kubelet = FakeKubelet(kubelet_api, namespace=ns, workers=4, grace_seconds=GRACE)
        left: list[str] = []
        held: list[str] = []
        t0 = time.monotonic()
        try:
            with kubelet, auditor.watching(), audit.running():
                assert kubelet.wait_synced(20)
                for segment in range(SEGMENTS):
                    if segment == 1:
                        binds += killed_mid_churn(cp, tmp_path, tenancy, chaos)
                        continue
                    chaos.note("scheduler started")
                    with scheduler(cp, tenancy=tenancy) as s:
                        for i in range(STEPS // SEGMENTS):
                            chaos.step("apiserver" if i == STEPS // SEGMENTS // 2 else None)
                            audit.check()
                        binds += _binds(s)
                chaos.unstick()
                wait_for(
                    lambda: not set(chaos.stuck) & {p["metadata"]["name"] for p in chaos.pods()}
                )
                chaos.restore()
                chaos.note("churn over; scheduler started")
                with scheduler(cp, tenancy=tenancy) as s:
                    try:
                        wait_for(lambda: chaos.settled(), 120)
                        wait_for(lambda: not chaos.held_claims(), 60)
                    finally:
                        left, held = chaos.unfinished(), chaos.held_claims()
                        binds += _binds(s)
                audit.check()
                time.sleep(GRACE + 0.5)  # the last events reach the pod audit
        finally:
            found = auditor.problems() + audit.found
            print(f"seed {SEED}: {chaos.done} in {time.monotonic() - t0:.1f} s")
            print(f"{len(chaos.jobs)} jobs, {binds:g} binds; {audit.checks} claim audits")
            print(f"{auditor.checks} pod states audited, {auditor.gaps} watch gaps")
            print(f"{len(found)} problems:", *found, sep="\n")
            print(f"{len(left)} pods left unfinished:", *left, sep="\n")
            print(f"{len(held)} claims left allocated or reserved:", *held, sep="\n")
            if found or left or held:
                print("what was done:", *chaos.timeline, sep="\n")
    assert found == []
    assert left == []
    assert held == []
    # Not vacuous: the audits ran all along, pods were bound, and the churn happened.
    assert audit.checks > 100 and auditor.checks > 100
    assert binds > 20
    assert {"submit", "delete", "reregister", "driver", "apiserver"} <= set(chaos.done)
