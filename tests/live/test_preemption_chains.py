"""Preemption under churn against a real kube-apiserver, checked in the API server's own state.

Victims are seen terminating for as long as a test wants: their node's FakeKubelet is stopped
once they run (nothing finishes a graceful deletion then) and started again when they may go.
The :class:`~auditor.Auditor` follows every Pod (of the test's namespace) and Node event and
audits the state after each one, terminating pods included (they hold their GPUs until they
are gone, as kube-scheduler counts them). Every test ends with: no device or node over capacity
at any moment, no pod deleted while unbound (an Eviction of a pod never bound deletes it
outright), no pod bound twice (no rebinding seen, no 409 on a bind).

These tests run their own control plane: the session's FakeKubelet would finish every graceful
deletion at once.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from auditor import Auditor
from live_helpers import (
    A100,
    DOMAIN,
    SchedulerProcess,
    control_plane,
    create,
    pod,
    scheduler,
    wait_for,
)
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.devcluster import (
    ControlPlane,
    FakeKubelet,
    KubeClient,
    NodeSpec,
    create_nodes,
    ensure_namespace,
)
from fairgpu.devcluster.client import STRATEGIC_MERGE_PATCH
from fairgpu.kube import LiveScheduler

pytestmark = pytest.mark.integration

PRIORITIES = {"pc-low": 1, "pc-low-2": 2, "pc-mid": 10, "pc-keep": 50, "pc-high": 1000}


# ---- the audit ----------------------------------------------------------------------------
def assert_clean(audit: Auditor, sched: LiveScheduler | None = None) -> None:
    """No device or node over capacity, no unbound pod deleted, no pod bound twice (no
    rebinding seen by the audit, no 409 on a bind, no Eviction skipped for an unbound pod)."""
    assert audit.checks > 0
    assert audit.problems() == []
    if sched is not None:
        m = sched.metrics
        assert m.binds.labels("conflict")._value.get() == 0, "a bind hit a bound pod"
        assert m.evictions.labels("skipped_unbound")._value.get() == 0


# ---- the world of one test -----------------------------------------------------------------
@pytest.fixture(scope="module")
def cp(live_bin_dir: Path) -> Iterator[ControlPlane]:
    """A control plane of this module only, with the priority classes the tests use."""
    with control_plane(live_bin_dir, PRIORITIES) as plane:
        yield plane


class World:
    """A namespace, nodes labelled for this test only, and helpers."""

    def __init__(self, cp: ControlPlane, api: KubeClient) -> None:
        self.cp = cp
        self.api = api
        self.tag = uuid.uuid4().hex[:6]
        self.ns = f"pc-{self.tag}"
        ensure_namespace(api, self.ns, ca_pem=Path(cp.ca_file).read_text())

    def node(self, suffix: str, gpus: int, group: str = "") -> str:
        name = f"n-{self.tag}-{suffix}"
        labels = {"t": self.tag, "group": group}
        spec = NodeSpec(name, pool="training", gpu_model=A100, gpus=gpus, labels=labels)
        create_nodes(self.api, [spec], domain=DOMAIN)
        return name

    def create(
        self, name: str, priority: str | None, gpus: int = 1, group: str = "", queue: str = ""
    ) -> None:
        """A pod for this test's nodes (those of node ``group`` if given), in ``queue``."""
        selector = {"t": self.tag} | ({"group": group} if group else {})
        labels = {"fairgpu.io/queue": queue} if queue else {}
        manifest = pod(
            name, gpus=gpus, priority_class=priority, node_selector=selector, labels=labels
        )
        create(self.api, self.ns, manifest)

    def get(self, name: str) -> dict[str, Any] | None:
        r = self.api.request("GET", f"/api/v1/namespaces/{self.ns}/pods/{name}")
        return r.body if r.ok else None

    def node_of(self, name: str) -> str:
        p = self.get(name)
        return (p or {}).get("spec", {}).get("nodeName") or ""

    def terminating(self, name: str) -> bool:
        p = self.get(name)
        return p is not None and bool(p["metadata"].get("deletionTimestamp"))

    def nominated(self, name: str) -> str:
        p = self.get(name)
        return (p or {}).get("status", {}).get("nominatedNodeName") or ""

    def pods(self) -> list[dict[str, Any]]:
        return self.api.get(f"/api/v1/namespaces/{self.ns}/pods")["items"]

    def preempted(self) -> list[dict[str, Any]]:
        """The ``Preempted`` Events of this test's pods (events.k8s.io/v1)."""
        path = f"/apis/events.k8s.io/v1/namespaces/{self.ns}/events"
        items = self.api.get(f"{path}?labelSelector=fairgpu.io/preempted-queue")["items"]
        return [e for e in items if e.get("reason") == "Preempted"]

    def describe(self) -> str:
        """One line per pod of the test (node, nomination, deletion, phase): what a failed
        wait prints, so a flaky failure says which state it stopped in."""
        rows = []
        for p in sorted(self.pods(), key=lambda p: p["metadata"]["name"]):
            meta, spec, status = p["metadata"], p["spec"], p.get("status", {})
            rows.append(
                f"{meta['name']}: node={spec.get('nodeName', '')!r} "
                f"nominated={status.get('nominatedNodeName', '')!r} "
                f"deleting={bool(meta.get('deletionTimestamp'))} phase={status.get('phase')}"
            )
        return "\n".join(rows)

    def running(self, names: list[str]) -> bool:
        phases = {p["metadata"]["name"]: p["status"].get("phase") for p in self.pods()}
        return all(phases.get(n) == "Running" for n in names)

    @contextlib.contextmanager
    def kubelet(self, nodes: list[str]) -> Iterator[FakeKubelet]:
        """A FakeKubelet for ``nodes`` while the block runs (it finishes graceful deletions)."""
        client = self.cp.client(maxsize=4)
        k = FakeKubelet(client, nodes=nodes, namespace=self.ns, workers=2).start()
        try:
            assert k.wait_synced(20)
            yield k
        finally:
            k.stop()
            client.close()

    @contextlib.contextmanager
    def audit(self) -> Iterator[Auditor]:
        """The audit of this test's pods (and every node) while the block runs."""
        auditor = Auditor(self.api, namespace=self.ns)
        try:
            with auditor.watching():
                yield auditor
        finally:  # shown with a failure, whatever failed first
            print(f"{auditor.checks} states audited, problems:", *auditor.problems(), sep="\n")

    def fill(self, node: str, pods: dict[str, str], queue: str = "") -> None:
        """Create ``pods`` (name -> priority class) and let them run on ``node``; its kubelet
        is stopped afterwards."""
        with self.kubelet([node]):
            for name, prio in pods.items():
                self.create(name, prio, queue=queue)
            wait_for(lambda: self.running(list(pods)), 20)


@pytest.fixture
def world(cp: ControlPlane) -> Iterator[World]:
    with cp.client(maxsize=16) as api:
        yield World(cp, api)


def _stays(pred: Callable[[], bool], seconds: float) -> bool:
    """``pred`` holds throughout ``seconds`` (sampled)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pred():
            return False
        time.sleep(0.1)
    return True


# ---- scenarios -----------------------------------------------------------------------------
def test_chain_never_evicts_a_waiting_preemptor_nor_binds_over_terminating_victims(
    world: World,
) -> None:
    a = world.node("a", gpus=2)
    with world.audit() as audit, scheduler(world.cp) as s:
        world.fill(a, {"low": "pc-low", "keep": "pc-keep"})
        world.create("mid", "pc-mid")  # evicts low, then waits: low never finishes
        wait_for(lambda: world.terminating("low") and world.nominated("mid") == a, 15)
        # mid waits, unbound: were it evicted, the API would delete it outright, and high
        # would bind at once over low, still terminating. high takes its place instead.
        world.create("high", "pc-high")
        wait_for(lambda: world.nominated("high") == a and world.nominated("mid") == "", 15)
        assert not world.terminating("keep")  # nothing running was evicted for high
        world.create("high-2", "pc-high")  # keep goes for it: the only pod left to take
        wait_for(lambda: world.terminating("keep") and world.nominated("high-2") == a, 15)
        assert _stays(lambda: not any(world.node_of(n) for n in ("mid", "high", "high-2")), 2.0)
        assert s.metrics.evictions.labels("ok")._value.get() == 2
        with world.kubelet([a]):  # the victims go; the highs bind, mid never started
            wait_for(lambda: world.node_of("high") == a and world.node_of("high-2") == a, 20)
            assert _stays(lambda: not world.node_of("mid") and not world.terminating("mid"), 1.0)
        assert s.metrics.evictions.labels("ok")._value.get() == 2
    assert_clean(audit, s)


def test_nothing_binds_onto_what_a_terminating_victim_holds_beyond_its_preemptor(
    world: World,
) -> None:
    """wide (two GPUs) is evicted for mid (one GPU). While wide terminates it still holds
    both GPUs: other, which fits a's second GPU, is not bound there until wide is gone."""
    a = world.node("a", gpus=2)
    with world.audit() as audit, scheduler(world.cp) as s:
        with world.kubelet([a]):
            world.create("wide", "pc-low", gpus=2)
            wait_for(lambda: world.running(["wide"]), 20)
        world.create("mid", "pc-mid")
        wait_for(lambda: world.terminating("wide") and world.nominated("mid") == a, 15)
        world.create("other", "pc-low")
        assert _stays(lambda: not world.node_of("other") and not world.node_of("mid"), 2.0)
        with world.kubelet([a]):  # wide goes: mid binds on its GPU, other on the second
            wait_for(lambda: world.node_of("mid") == a and world.node_of("other") == a, 20)
    assert_clean(audit, s)


def test_higher_priority_pod_takes_a_waiting_preemptors_place_without_evicting_it(
    world: World,
) -> None:
    """kube-scheduler's nomination takeover: mid waits on a for its victim; high needs
    exactly a. high ends bound there, mid's nomination is cleared and mid is never evicted
    or deleted -- and nothing binds over low while it terminates."""
    a = world.node("a", gpus=1)
    with world.audit() as audit, scheduler(world.cp) as s:
        world.fill(a, {"low": "pc-low"})
        world.create("mid", "pc-mid")
        wait_for(lambda: world.terminating("low") and world.nominated("mid") == a, 15)
        world.create("high", "pc-high")
        wait_for(lambda: world.nominated("high") == a and world.nominated("mid") == "", 15)
        # low still holds a's GPU: neither binds, and mid is still there, pending, unharmed.
        assert _stays(lambda: not world.node_of("high") and not world.node_of("mid"), 1.5)
        assert world.get("mid") is not None and not world.terminating("mid")
        with world.kubelet([a]):
            wait_for(lambda: world.node_of("high") == a, 20)
            assert _stays(lambda: not world.node_of("mid") and world.nominated("mid") == "", 1.0)
        assert world.get("mid") is not None and not world.terminating("mid")
        assert s.metrics.evictions.labels("ok")._value.get() == 1  # low's, for mid, only
        events = wait_for(lambda: world.preempted(), 10)
        assert [e["regarding"]["name"] for e in events] == ["low"]
    assert_clean(audit, s)
    assert audit.unbound_deleted == []


def test_reclaim_chain_never_evicts_a_waiting_preemptor(world: World, tmp_path: Path) -> None:
    a = world.node("a", gpus=4)
    # Victims here are seconds old: reclaimMinRuntimeSeconds (default 60) would hold them.
    tenancy = tmp_path / "tenancy.yaml"
    tenancy.write_text("preemption: {reclaimMinRuntimeSeconds: 0}\n")
    with world.audit() as audit, scheduler(world.cp, tenancy=tenancy) as s:
        held = [f"a{i}" for i in range(4)]
        world.fill(a, dict.fromkeys(held, "pc-low"), queue="qa")  # qa holds every GPU
        for i in range(2):  # qb reclaims two; its pods wait for their victims
            world.create(f"b{i}", "pc-low", queue="qb")
        wait_for(lambda: sum(world.terminating(n) for n in held) == 2, 15)
        wait_for(lambda: world.nominated("b0") == a and world.nominated("b1") == a, 15)
        # qa and qb are equally far above their shares: qc takes from qa only, never one of
        # qb's waiting (unbound) pods.
        world.create("c0", "pc-low", queue="qc")
        wait_for(lambda: sum(world.terminating(n) for n in held) == 3, 15)
        assert world.get("b0") is not None and world.get("b1") is not None
        assert _stays(lambda: not any(world.node_of(n) for n in ("b0", "b1", "c0")), 1.0)
        with world.kubelet([a]):
            wait_for(lambda: all(world.node_of(n) == a for n in ("b0", "b1", "c0")), 20)
        assert s.metrics.evictions.labels("ok")._value.get() == 3
        # Each victim got a Preempted Event naming its preemptor, labelled with its queue.
        events = wait_for(lambda: len(world.preempted()) == 3 and world.preempted(), 15)
        assert {e["metadata"]["labels"]["fairgpu.io/preempted-queue"] for e in events} == {"qa"}
        assert {e["regarding"]["name"] for e in events} <= set(held)
        assert all(e["type"] == "Normal" and e["reason"] == "Preempted" for e in events)
        assert sorted(e["note"].split(" (")[0] for e in events) == [
            f"preempted by {world.ns}/{p}" for p in ("b0", "b1", "c0")
        ]
        # `fairgpu queues` counts them for qa (in the last hour).
        kubeconfig = str(world.cp.kubeconfig_path)
        args = ["queues", "--kubeconfig", kubeconfig, "--config", str(tenancy), "-o", "json"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        rows = {r["queue"]: r for r in json.loads(result.stdout)}
        assert rows["qa"]["preemptions_last_hour"] == 3
        assert rows["qb"]["preemptions_last_hour"] == 0
    assert_clean(audit, s)


def test_priority_at_the_quota_cap_evicts_once_per_pod_while_victims_terminate(
    world: World, tmp_path: Path
) -> None:
    """qcap may hold 3 GPUs and holds them with low pods; the node has room to spare. Each
    high pod takes one low pod's place in the quota and waits, unbound, while its victim
    terminates (the kubelet is stopped): two highs, two evictions, never a third while the
    first victim is still there; once the victims are gone the queue holds its quota, never
    more."""
    a = world.node("a", gpus=6)
    tenancy = tmp_path / "tenancy.yaml"
    tenancy.write_text("queues:\n- {name: qcap, quota: {gpu: 3}, borrowingLimit: {gpu: 0}}\n")
    lows = ["low0", "low1", "low2"]

    def in_quota() -> int:
        return sum(
            1
            for p in world.pods()
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
        )

    with world.audit() as audit, scheduler(world.cp, tenancy=tenancy) as s:
        world.fill(a, dict.fromkeys(lows, "pc-low"), queue="qcap")
        world.create("high", "pc-high", queue="qcap")
        wait_for(lambda: sum(world.terminating(n) for n in lows) == 1, 15)
        world.create("high-2", "pc-high", queue="qcap")
        wait_for(lambda: sum(world.terminating(n) for n in lows) == 2, 15)
        assert _stays(lambda: sum(world.terminating(n) for n in lows) == 2, 2.0)
        assert in_quota() <= 3
        with world.kubelet([a]):
            wait_for(lambda: world.node_of("high") == a and world.node_of("high-2") == a, 20)
        assert s.metrics.evictions.labels("ok")._value.get() == 2
        assert in_quota() == 3
        events = wait_for(lambda: len(world.preempted()) == 2 and world.preempted(), 15)
        assert all("make room in its queue's quota" in e["note"] for e in events)
    assert_clean(audit, s)


def test_victims_that_never_terminate_time_out_without_more_evictions(
    world: World, tmp_path: Path
) -> None:
    a = world.node("a", gpus=2)
    tenancy = tmp_path / "tenancy.yaml"
    tenancy.write_text("preemption: {enabled: true, minRuntimeSeconds: 3}\n")
    with world.audit() as audit, scheduler(world.cp, tenancy=tenancy, preemption_wait=2.0) as s:
        world.fill(a, {"low": "pc-low", "keep": "pc-low-2"})
        time.sleep(3.5)  # both ran long enough to be victims; low goes first
        world.create("mid", "pc-mid")
        wait_for(lambda: world.terminating("low") and world.nominated("mid") == a, 15)
        # The hold times out (2 s) and mid is tried again (after 1 s) while low still
        # terminates: it is not evicted again, and keep is never evicted.
        assert _stays(lambda: not world.terminating("keep") and not world.node_of("mid"), 6.0)
        assert s.metrics.evictions.labels("ok")._value.get() == 1
        with world.kubelet([a]):
            wait_for(lambda: world.node_of("mid") == a, 20)
        assert not world.terminating("keep")
    assert_clean(audit, s)


def test_node_removed_while_a_preemptor_waits_cancels_its_bind(world: World) -> None:
    a = world.node("a", gpus=2)
    with world.audit() as audit, scheduler(world.cp) as s:
        world.fill(a, {"low": "pc-low", "keep": "pc-keep"})
        world.create("mid", "pc-mid")
        wait_for(lambda: world.terminating("low") and world.nominated("mid") == a, 15)
        world.api.request("DELETE", f"/api/v1/nodes/{a}")
        with world.kubelet([a]):  # low goes: a stale bind to the deleted node would fire now
            wait_for(lambda: world.get("low") is None, 15)
            assert _stays(lambda: not world.node_of("mid"), 1.5)
        b = world.node("b", gpus=1)  # somewhere to go: mid is placed afresh
        wait_for(lambda: world.node_of("mid") == b, 15)
        time.sleep(0.5)
    assert_clean(audit, s)
    assert world.node_of("mid") == b


def _nominate(world: World, name: str, node: str) -> None:
    body = {"status": {"nominatedNodeName": node}}
    path = f"/api/v1/namespaces/{world.ns}/pods/{name}/status"
    r = world.api.request("PATCH", path, body, content_type=STRATEGIC_MERGE_PATCH)
    assert r.ok, r.body


def test_stale_nomination_is_cleared_and_a_live_one_kept(world: World) -> None:
    """As kube-scheduler: a pod that may preempt but finds no victims loses its
    ``nominatedNodeName``; one whose earlier victim still terminates there keeps it."""
    with world.audit() as audit, scheduler(world.cp) as s:
        a = world.node("a", gpus=1)
        world.fill(a, {"keep": "pc-keep"})  # nobody below pc-keep: no victims on a
        b = world.node("b", gpus=1)  # created once a is full: low can only go there
        world.fill(b, {"low": "pc-low"})
        world.api.request("DELETE", f"/api/v1/namespaces/{world.ns}/pods/low")
        wait_for(lambda: world.terminating("low"), 10)  # no kubelet: it stays terminating
        for name in ("stale", "waiting"):
            world.create(name, "pc-mid")
        _nominate(world, "stale", a)
        _nominate(world, "waiting", b)
        wait_for(lambda: world.nominated("stale") == "", 15)
        assert _stays(lambda: world.nominated("waiting") == b, 2.0)
        assert not world.node_of("stale") and not world.node_of("waiting")
        with world.kubelet([b]):  # low goes: one of them takes its GPU
            wait_for(lambda: b in (world.node_of("stale"), world.node_of("waiting")), 20)
    assert_clean(audit, s)


def test_preemptor_deleted_while_waiting_leaves_its_victims_gpus_held(world: World) -> None:
    a = world.node("a", gpus=2)
    with world.audit() as audit, scheduler(world.cp) as s:
        world.fill(a, {"low": "pc-low", "keep": "pc-keep"})
        world.create("mid", "pc-mid")
        wait_for(lambda: world.terminating("low") and world.nominated("mid") == a, 15)
        audit.expected_deletes.add(f"{world.ns}/mid")
        world.api.request("DELETE", f"/api/v1/namespaces/{world.ns}/pods/mid")
        wait_for(lambda: world.get("mid") is None, 10)
        world.create("next", "pc-mid")  # low's GPU is not free until low is gone
        assert _stays(lambda: not world.node_of("next"), 2.0)
        with world.kubelet([a]):
            wait_for(lambda: world.node_of("next") == a, 20)
    assert_clean(audit, s)


@contextlib.contextmanager
def _explained(world: World, sched: SchedulerProcess) -> Iterator[None]:
    """A failed wait inside the block also prints the pods' state and the scheduler's log."""
    try:
        yield
    except pytest.fail.Exception as e:
        log = Path(sched.log_path).read_text(errors="replace").splitlines()[-40:]
        pytest.fail(f"{e}\n{world.describe()}\n--- scheduler log ---\n" + "\n".join(log))


def test_kill_9_during_a_preemption_storm(world: World, tmp_path: Path) -> None:
    nodes = [world.node("a", gpus=4, group="ab"), world.node("b", gpus=4, group="ab")]
    lows = {f"low-{i}": "pc-low" for i in range(8)}
    first = SchedulerProcess(world.cp, tmp_path / "first.log", "--no-leader-elect")
    with world.audit() as audit:
        try:
            first.wait_ready()
            with world.kubelet(nodes):
                for name in lows:
                    world.create(name, "pc-low", group="ab")
                wait_for(lambda: world.running(list(lows)), 30)
            # Eight preemptors, each evicting a low pod that never finishes, then four more
            # of higher priority, which take the places of four of them (nothing is evicted
            # for them: the mids are unbound); the scheduler dies in the middle.
            for i in range(8):
                world.create(f"mid-{i}", "pc-mid", group="ab")
            wait_for(lambda: sum(world.terminating(n) for n in lows) == 8, 20)
            for i in range(4):
                world.create(f"high-{i}", "pc-high")
            with _explained(world, first):
                wait_for(lambda: all(world.nominated(f"high-{i}") for i in range(4)), 15)
            time.sleep(1.0)
        finally:
            first.kill9()
        # While it is down, a pod of priority 2 starts on a new node: one the highs could
        # evict, were they allowed to preempt again while their victims still terminate (the
        # mids, of group ab, cannot go there).
        spare_node = world.node("c", gpus=1, group="c")
        spare = pod("spare", gpus=1, priority_class="pc-low-2", node_selector={"group": "c"})
        spare["spec"]["nodeName"] = spare_node
        create(world.api, world.ns, spare)
        second = SchedulerProcess(world.cp, tmp_path / "second.log", "--no-leader-elect")
        try:
            second.wait_ready()
            time.sleep(2.0)  # the new leader sees terminating victims and nominated pods
            # No waiting preemptor was evicted (deleted) by the higher-priority ones, before
            # or after the crash, and none is bound while its victims still terminate.
            assert audit.unbound_deleted == []
            assert all(world.get(f"mid-{i}") is not None for i in range(8))
            assert not any(world.node_of(f"mid-{i}") for i in range(8))
            # The restarted scheduler sees the highs nominated where their victims (taken
            # over from the mids) still terminate: they evict nobody more (spare runs on).
            assert not world.terminating("spare")
            assert second.metric("fairgpu_evictions_total") == 0
            with world.kubelet([*nodes, spare_node]), _explained(world, second):
                wait_for(lambda: sum(bool(world.node_of(f"high-{i}")) for i in range(4)) == 4, 30)
                wait_for(lambda: sum(bool(world.node_of(f"mid-{i}")) for i in range(8)) == 4, 30)
                time.sleep(1.0)
            assert second.metric('fairgpu_binds_total{result="conflict"}') == 0
            assert second.metric('fairgpu_evictions_total{result="skipped_unbound"}') == 0
        finally:
            second.terminate()
    assert_clean(audit)
    # 4 highs and 4 mids on a and b; spare on c, never evicted.
    assert sum(bool(p["spec"].get("nodeName")) for p in world.pods()) == 9
    assert world.node_of("spare") == spare_node and not world.terminating("spare")


def test_fake_kubelet_finishes_a_deletion_that_began_while_it_started_the_pod(
    world: World,
) -> None:
    """The fake kubelet's start of a pod and the pod's eviction race: a deletion seen while the
    start is in flight used to be dropped, leaving the pod terminating for ever (and a
    preemptor waiting on it). A real kubelet stops such a pod; so must the fake."""
    node = world.node("k", gpus=1)
    manifest = pod("racer", gpus=1, priority_class="pc-low")
    manifest["spec"]["nodeName"] = node
    create(world.api, world.ns, manifest)
    client = world.cp.client(maxsize=4)
    k = FakeKubelet(client, nodes=[node], namespace=world.ns, workers=2)
    release, starting = threading.Event(), threading.Event()
    patch = k._patch_status

    def held_start(ns: str, name: str, uid: str, status: dict[str, Any]) -> bool:
        if status.get("phase") != "Running":
            return patch(ns, name, uid, status)
        starting.set()
        release.wait(10)  # the eviction lands while the start is in flight
        ok = patch(ns, name, uid, status)
        time.sleep(0.5)  # ... and every event about it is seen before the start returns
        return ok

    k._patch_status = held_start  # type: ignore[method-assign]
    try:
        k.start()
        assert starting.wait(20)
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "racer"}}
        path = f"/api/v1/namespaces/{world.ns}/pods/racer/eviction"
        assert world.api.request("POST", path, eviction).status == 201
        wait_for(lambda: world.terminating("racer"), 10)
        release.set()
        wait_for(lambda: world.get("racer") is None, 10)
    finally:
        release.set()
        k.stop()
        client.close()
