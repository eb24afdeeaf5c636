"""A flood with reclaim, twice, with every node deleted and re-created between the two runs.

Queue ``qa`` floods one-GPU pods that fill the cluster; queue ``qb`` then asks for its share,
which is taken back from ``qa`` (its victims stay terminating for a grace period, as a kubelet
stopping containers leaves them), and while ``qb``'s pods wait for their victims to go, ``qb``
adds a few pods of higher priority beyond its share: those take the places of waiting ``qb``
pods, which are requeued, never evicted (an Eviction of a pod never bound deletes it
outright). Then every
Node is deleted and created again under its name, its status written after the object (so it
shows 0 GPUs first), while ``qa``'s first pods still run there; once ``qb``'s first pods have
finished, the flood and the reclaim run again.

The :class:`~auditor.Auditor` follows every Pod and Node event of the API server and audits
the state after each one: no device or node over capacity (terminating pods included), no pod
deleted while unbound, no pod moving to another node.

It runs its own control plane: the session's FakeKubelet finishes every deletion at once.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from auditor import Auditor
from live_helpers import (
    A100,
    CHURN_TENANCY,
    DOMAIN,
    condition,
    control_plane,
    create_many,
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
    delete_nodes,
    ensure_namespace,
)
from fairgpu.devcluster.kubelet import DURATION_ANNOTATION
from fairgpu.devcluster.nodes import node_manifest, node_status, node_taints
from fairgpu.kube import LiveScheduler

pytestmark = pytest.mark.integration

NODES, GPUS = 3, 8  # 24 GPUs
FLOOD = 36  # qa's first flood: 24 run, 12 wait
SHARE = (NODES * GPUS) // 2  # qb's fair share with two queues of equal weight
URGENT = 2  # qb's pods of higher priority beyond its share, added while its reclaimers wait
GRACE = 1.5  # seconds a victim stays terminating
QA_SECONDS, QB_SECONDS = 120, 7  # qa runs through both rounds; qb's first pods end between
# The churn guards off: the flood's pods are seconds old when reclaimed, and the second run
# reclaims the same (re-created) nodes' GPUs again within minutes.
TENANCY = (
    CHURN_TENANCY
    + """queues:
  - {name: qa}
  - {name: qb}
"""
)
PRIORITIES = {"fl-low": 1, "fl-high": 100}


@pytest.fixture(scope="module")
def cp(live_bin_dir: Path) -> Iterator[ControlPlane]:
    """A control plane of this module only, with its priority classes."""
    with control_plane(live_bin_dir, PRIORITIES) as plane:
        yield plane


class Flood:
    """The namespace, nodes and pods of the scenario, read back from the API."""

    def __init__(self, api: KubeClient, ns: str, tag: str, nodes: int = NODES) -> None:
        self.api = api
        self.ns = ns
        self.tag = tag
        self.specs = [
            NodeSpec(f"fl-{tag}-{i}", pool="training", gpu_model=A100, gpus=GPUS, labels={"t": tag})
            for i in range(nodes)
        ]

    def create_nodes(self) -> None:
        """Each Node as a kubelet registers it: the object first, its status a moment later
        (it shows 0 GPUs until then), then the not-ready taint lifted."""
        for spec in self.specs:
            r = self.api.request("POST", "/api/v1/nodes", node_manifest(spec, domain=DOMAIN))
            assert r.ok, r
        time.sleep(0.5)  # long enough for the scheduler to see the nodes without GPUs
        for spec in self.specs:
            path = f"/api/v1/nodes/{spec.name}"
            self.api.patch(f"{path}/status", {"status": node_status(spec)})
            self.api.patch(path, {"spec": {"taints": node_taints(spec, domain=DOMAIN)}})

    def recreate_nodes(self) -> None:
        names = [s.name for s in self.specs]
        delete_nodes(self.api, names)
        wait_for(lambda: not any(self.api.request("GET", f"/api/v1/nodes/{n}").ok for n in names))
        self.create_nodes()

    def submit(self, prefix: str, count: int, queue: str, seconds: int, prio: str) -> None:
        manifests = [
            pod(
                f"{prefix}-{i:02d}",
                gpus=1,
                node_selector={"t": self.tag},
                labels={"fairgpu.io/queue": queue},
                annotations={DURATION_ANNOTATION: str(seconds)},
                priority_class=prio,
            )
            for i in range(count)
        ]
        create_many(self.api, self.ns, manifests)

    def pods(self, prefix: str = "") -> list[dict[str, Any]]:
        items = self.api.get(f"/api/v1/namespaces/{self.ns}/pods")["items"]
        return [p for p in items if p["metadata"]["name"].startswith(prefix)]

    def holding(self, prefix: str) -> list[str]:
        """Pods of ``prefix`` that hold a GPU now: bound, not finished, not terminating."""
        return [
            p["metadata"]["name"]
            for p in self.pods(prefix)
            if p["spec"].get("nodeName")
            and p["status"].get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
        ]

    def summary(self) -> dict[str, dict[str, int]]:
        """Per pod-name prefix, how many pods are pending, bound, terminating or done."""
        out: dict[str, dict[str, int]] = {}
        for p in self.pods():
            if p["metadata"].get("deletionTimestamp"):
                state = "terminating"
            elif p["status"].get("phase") in ("Succeeded", "Failed"):
                state = "done"
            else:
                state = "bound" if p["spec"].get("nodeName") else "pending"
            counts = out.setdefault(p["metadata"]["name"].split("-")[0], {})
            counts[state] = counts.get(state, 0) + 1
        return out

    def terminating(self, prefix: str) -> int:
        return sum(bool(p["metadata"].get("deletionTimestamp")) for p in self.pods(prefix))

    def cancel_pending(self, prefix: str, expected: set[str]) -> None:
        """Delete the pods of ``prefix`` not bound (as their user would), each added to
        ``expected`` (the audit's expected deletes) first."""
        for p in self.pods(prefix):
            if not p["spec"].get("nodeName"):
                name = p["metadata"]["name"]
                expected.add(f"{self.ns}/{name}")
                self.api.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{name}")

    def finished(self, prefix: str) -> bool:
        return all(p["status"].get("phase") == "Succeeded" for p in self.pods(prefix))


def _evictions(s: LiveScheduler) -> float:
    return float(s.metrics.evictions.labels("ok")._value.get())


class Evictions(logging.Handler):
    """The scheduler's own eviction decisions, from its "evicting" log records: pod key ->
    kind (reclaim, priority, ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "evicting":
            self.kinds[str(getattr(record, "pod", ""))] = str(getattr(record, "kind", ""))


def flood_and_reclaim(flood: Flood, s: LiveScheduler, run: int, qa_submit: int) -> int:
    """qa floods ``qa_submit`` more pods and fills the cluster; qb takes its share back and
    adds urgent pods while its reclaimers wait, which take the places of two of them (those
    two are requeued). Returns how many qa pods were evicted."""
    total = NODES * GPUS
    qa, qb, urgent = f"qa{run}", f"qb{run}", f"qu{run}"
    flood.submit(qa, qa_submit, "qa", QA_SECONDS, "fl-low")
    wait_for(lambda: len(flood.holding("qa")) == total, 30)
    qa_before = len(flood.pods("qa"))
    evicted_before = _evictions(s)
    flood.submit(qb, SHARE, "qb", QB_SECONDS, "fl-low")
    # The reclaimers wait (nominated, unbound) for victims that are still terminating.
    wait_for(lambda: flood.terminating("qa") > 0, 15)
    flood.submit(urgent, URGENT, "qb", QB_SECONDS, "fl-high")
    wait_for(lambda: len(flood.holding(urgent)) == URGENT, 30)
    wait_for(lambda: len(flood.holding("qb")) + len(flood.holding("qu")) == SHARE, 30)
    evicted = qa_before - len(flood.pods("qa"))  # gone from the API: evicted, not finished
    print(
        f"run {run}: qb holds {SHARE} GPUs, {evicted} qa pods evicted, "
        f"{_evictions(s) - evicted_before:.0f} evictions in all"
    )
    return evicted


def test_flood_with_reclaim_twice_with_all_nodes_recreated(
    cp: ControlPlane, tmp_path: Path
) -> None:
    tenancy = tmp_path / "tenancy.yaml"
    tenancy.write_text(TENANCY)
    tag = uuid.uuid4().hex[:6]
    ns = f"fl-{tag}"
    with cp.client(maxsize=24) as api, cp.client(maxsize=6) as kubelet_api:
        ensure_namespace(api, ns, ca_pem=Path(cp.ca_file).read_text())
        flood = Flood(api, ns, tag)
        flood.create_nodes()
        auditor = Auditor(api, namespace=ns)
        kubelet = FakeKubelet(kubelet_api, namespace=ns, workers=4, grace_seconds=GRACE)
        evictions = Evictions()
        logger = logging.getLogger("fairgpu")
        level = logger.level
        logger.setLevel(logging.INFO)  # the "evicting" records are INFO
        logger.addHandler(evictions)
        t0 = time.monotonic()
        try:
            with kubelet, auditor.watching(), scheduler(cp, tenancy=tenancy) as s:
                assert kubelet.wait_synced(20)
                first = flood_and_reclaim(flood, s, 1, FLOOD)
                # The reclaimers the urgent pods displaced are cancelled: left pending, they
                # would start only once qb's others end, and the second run would meet older
                # qa pods, whose eviction would lose more than waiting for qb's own to end.
                flood.cancel_pending("qb1", auditor.expected_deletes)
                running = flood.holding("qa1")
                # Every node goes and comes back under its name while qa's first pods run.
                flood.recreate_nodes()
                wait_for(lambda: flood.finished("qb1") and flood.finished("qu1"), 30)
                lost = sorted(set(running) - set(flood.holding("qa1")))
                second = flood_and_reclaim(flood, s, 2, SHARE)
                time.sleep(GRACE + 0.5)  # let the last victims go and any stray bind land
                conflicts = s.metrics.binds.labels("conflict")._value.get()
                skipped = s.metrics.evictions.labels("skipped_unbound")._value.get()
        finally:  # what the audit saw, whatever failed
            elapsed = time.monotonic() - t0
            found = auditor.problems()
            print(f"{auditor.checks} states audited in {elapsed:.1f} s, {len(found)} problems:")
            print("\n".join(found))
            print(f"pods at the end: {flood.summary()}")
            logger.removeHandler(evictions)
            logger.setLevel(level)
    assert auditor.problems() == []
    assert auditor.checks > 200  # the audit saw the whole history, not a sample
    # The reclaim happened in both runs (so a clean audit is not vacuous): qb's share came
    # from qa's evicted pods, and its urgent pods got GPUs too.
    assert first >= SHARE and second >= SHARE
    assert conflicts == 0 and skipped == 0
    # A qa pod running before the re-creation may leave only through the scheduler's own
    # reclaim decision (qb's pods still pending then), never through lost bookkeeping.
    reclaimed = [k for k, kind in evictions.kinds.items() if kind == "reclaim"]
    assert len(reclaimed) >= first + second  # the scheduler's log was read
    unexplained = [p for p in lost if evictions.kinds.get(f"{ns}/{p}") != "reclaim"]
    print(f"qa pods reclaimed around the re-creation: {lost}")
    assert unexplained == [], "qa pods running before the nodes were re-created were lost"


def test_the_auditor_sees_unbound_pods_deleted_and_devices_booked_twice(cp: ControlPlane) -> None:
    tag = uuid.uuid4().hex[:6]
    ns = f"fl-{tag}"
    with cp.client(maxsize=8) as api:
        ensure_namespace(api, ns, ca_pem=Path(cp.ca_file).read_text())
        flood = Flood(api, ns, tag, nodes=1)
        node = flood.specs[0].name
        flood.create_nodes()
        auditor = Auditor(api, namespace=ns)
        with auditor.watching():
            for name in ("gone", "mine"):  # nobody schedules them; both deleted unbound
                create_many(api, ns, [pod(name, gpus=1, scheduler="nobody")])
            auditor.expected_deletes.add(f"{ns}/mine")
            for name in ("gone", "mine"):
                api.delete(f"/api/v1/namespaces/{ns}/pods/{name}")
            for i in range(2):  # bound without a scheduler, both on device 5
                p = pod(f"twice-{i}", gpus=1, annotations={"fairgpu.io/gpu-devices": "5"})
                create_many(api, ns, [p | {"spec": {**p["spec"], "nodeName": node}}])
            wait_for(lambda: len(auditor.problems()) == 2, 10)
    assert auditor.unbound_deleted == [f"{ns}/gone"]
    assert auditor.violations == [
        f"node {node}: GPU 5 booked 2000m by [('{ns}/twice-0', 1000), ('{ns}/twice-1', 1000)]"
    ]


def two_queues(tmp_path: Path, cooldown: int) -> tuple[str, str, str, str, Path]:
    """A fresh tag, its namespace ``fl-<tag>``, queues ``qa-<tag>`` and ``qb-<tag>`` of
    equal weight and their tenancy file: no usage history, no minimum run before a
    preemption, ``cooldown`` seconds of reclaim cooldown."""
    tag = uuid.uuid4().hex[:6]
    qa, qb = f"qa-{tag}", f"qb-{tag}"
    tenancy = tmp_path / "tenancy.yaml"
    tenancy.write_text(
        "mode: dynamic\nhistory: {halfLifeSeconds: 0}\npreemption:\n"
        "  {enabled: true, minRuntimeSeconds: 0, reclaimMinRuntimeSeconds: 0,"
        f" reclaimCooldownSeconds: {cooldown}}}\n"
        f"queues:\n  - {{name: {qa}}}\n  - {{name: {qb}}}\n"
    )
    return tag, f"fl-{tag}", qa, qb, tenancy


def fill(flood: Flood, qa: str) -> None:
    """Queue ``qa``'s pods ``qa1-*`` fill the node (one GPU each)."""
    flood.submit("qa1", GPUS, qa, QA_SECONDS, "fl-low")
    wait_for(lambda: len(flood.holding("qa1")) == GPUS, 30)


def fill_then_ask(flood: Flood, qa: str, qb: str) -> None:
    """Queue ``qa``'s pods ``qa1-*`` fill the node (one GPU each); then queue ``qb`` asks for
    all of it (``qb-*``)."""
    fill(flood, qa)
    flood.submit("qb", GPUS, qb, QA_SECONDS, "fl-low")


def holds(flood: Flood, want: dict[str, int], held: dict[str, int]) -> Callable[[], bool]:
    """A :func:`wait_for` condition: the pods of each name prefix of ``want`` hold that many
    GPUs; ``held`` keeps what they held when last asked (for the test's report)."""

    def settled() -> bool:
        held.update({prefix: len(flood.holding(prefix)) for prefix in want})
        return held == want

    return settled


def scheduler_said(api: KubeClient, ns: str, name: str) -> str:
    """The message of pod ``ns/name``'s PodScheduled condition ("" without one)."""
    got = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    return (condition(got) or {}).get("message", "")


@contextmanager
def one_node(
    cp: ControlPlane, tag: str, held: dict[str, int], grace: float = 0.5
) -> Iterator[tuple[KubeClient, Flood, Auditor]]:
    """Namespace ``fl-<tag>`` with one 8-GPU node of its own, its fake kubelet (whose deleted
    pods stay terminating ``grace`` seconds) and the namespace's audit running: the API
    client, the :class:`Flood` helper and the audit. On the way out, whatever failed, it
    prints ``held`` (what the test last saw held), the pods and the audit's problems."""
    ns = f"fl-{tag}"
    with cp.client(maxsize=12) as api, cp.client(maxsize=4) as kubelet_api:
        ensure_namespace(api, ns, ca_pem=Path(cp.ca_file).read_text())
        flood = Flood(api, ns, tag, nodes=1)
        flood.create_nodes()
        kubelet = FakeKubelet(kubelet_api, namespace=ns, workers=4, grace_seconds=grace)
        auditor = Auditor(api, namespace=ns)
        try:
            with kubelet, auditor.watching():
                assert kubelet.wait_synced(20)
                yield api, flood, auditor
        finally:
            print(f"held at the end: {held}; pods: {flood.summary()}")
            print("\n".join(auditor.problems()))


def test_a_reclaim_whose_victims_outlive_the_scheduler_keeps_its_cooldown(
    cp: ControlPlane, tmp_path: Path
) -> None:
    """qb reclaims half of an 8-GPU node from qa; the scheduler stops while qa's victims are
    still terminating (qb's pods wait for them, nominated, unbound), and another starts once
    they are gone. It binds qb's pods into the free room, a placement of its own -- the
    reclaim was its predecessor's. The reclaim note travels on the waiting pods from their
    nomination (:mod:`fairgpu.kube.engine_notes`), so when qa's other pods are deleted and qa
    asks again, the new scheduler lets it wait out reclaimCooldownSeconds instead of taking
    qb's pods back at once (as it did without the note: qa 4, qb 4)."""
    tag, ns, qa, qb, tenancy = two_queues(tmp_path, cooldown=600)
    half = GPUS // 2
    held: dict[str, int] = {}
    noted: list[str] = []
    with one_node(cp, tag, held, grace=8.0) as (api, flood, auditor):
        with scheduler(cp, tenancy=tenancy):
            fill_then_ask(flood, qa, qb)
            wait_for(lambda: flood.terminating("qa1") == half, 30)

            def nominated() -> list[str]:
                return [
                    p["metadata"]["name"]
                    for p in flood.pods("qb")
                    if p["status"].get("nominatedNodeName")
                ]

            wait_for(lambda: len(nominated()) == half, 10)
        waiting = nominated()
        assert flood.terminating("qa1") == half, "the victims went before the stop"
        # No scheduler while they go: the next one finds the room free.
        wait_for(lambda: flood.terminating("qa1") == 0, 30)
        assert flood.holding("qb") == []
        noted = [
            p["metadata"]["name"]
            for p in flood.pods("qb")
            if "fairgpu.io/reclaim" in p["metadata"].get("annotations", {})
        ]
        with scheduler(cp, tenancy=tenancy):
            wait_for(lambda: len(flood.holding("qb")) == half, 30)
            for name in flood.holding("qa1"):  # their user deletes qa's other pods
                api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
            wait_for(lambda: len(flood.holding("qb")) == GPUS, 30)
            flood.submit("qa2", half, qa, QA_SECONDS, "fl-low")
            probe = f"qa2-{0:02d}"

            def decided() -> bool:  # refused, or (wrongly) reclaimed
                said = scheduler_said(api, ns, probe)
                return "reclaim refused" in said or bool(flood.holding("qa2"))

            wait_for(decided, 30)
            time.sleep(3)  # several cycles: none takes qb's pods
            held.update({q: len(flood.holding(q)) for q in ("qa2", "qb")})
            message = scheduler_said(api, ns, probe)
    assert auditor.problems() == []
    assert sorted(noted) == sorted(waiting)  # the note is written with the nomination
    assert held == {"qa2": 0, "qb": GPUS}
    assert "would undo a reclaim made within reclaimCooldownSeconds (600)" in message, message


def test_a_gang_torn_down_before_a_restart_is_protected_when_it_starts_again(
    cp: ControlPlane, tmp_path: Path
) -> None:
    """qa runs four one-GPU pods and then a gang of 2 x 2 GPUs on an 8-GPU node; qb's
    4-GPU pod reclaims the gang, the cheaper victim (it has run less). The scheduler
    stops, the gang's pods are created again (as their controller would) and another
    scheduler starts; the gang starts again when qb's pod is deleted. A gang torn down once
    is protected when it starts again -- a second teardown would lose a second run: the new
    scheduler knows of the teardown from the note on qb's pod
    (:mod:`fairgpu.kube.engine_notes`), so when qb asks again it reclaims qa's older pods
    instead. Without the note it tore the gang down a second time. (The cooldown and minimum
    run times are off.)"""
    tag, ns, qa, qb, tenancy = two_queues(tmp_path, cooldown=0)
    half = GPUS // 2
    # Long runs: waiting for them to end always costs more than a preemption.
    long = {DURATION_ANNOTATION: "3600"}

    def gang(run: str) -> list[dict[str, Any]]:
        return [
            pod(
                f"g{run}-{i}",
                gpus=2,
                node_selector={"t": tag},
                labels={"fairgpu.io/queue": qa, "fairgpu.io/pod-group": f"g-{tag}"},
                annotations={**long, "fairgpu.io/min-member": "2"},
                priority_class="fl-low",
            )
            for i in range(2)
        ]

    def claim(name: str) -> list[dict[str, Any]]:
        labels = {"fairgpu.io/queue": qb}
        return [pod(name, gpus=half, node_selector={"t": tag}, labels=labels, annotations=long)]

    held: dict[str, int] = {}
    noted: list[str] = []
    with one_node(cp, tag, held) as (api, flood, auditor):
        with scheduler(cp, tenancy=tenancy):
            flood.submit("fa", half, qa, 3600, "fl-low")
            wait_for(lambda: len(flood.holding("fa")) == half, 30)
            time.sleep(2)  # the gang runs less than qa's other pods
            create_many(api, ns, gang("a"))
            wait_for(lambda: len(flood.holding("ga")) == 2, 30)
            create_many(api, ns, claim("qb1"))
            wait_for(lambda: len(flood.holding("qb1")) == 1, 30)
            wait_for(lambda: not flood.pods("ga"), 30)  # torn down: both evicted
        noted = [
            p["metadata"]["name"]
            for p in flood.pods("qb1")
            if "fairgpu.io/tore-down" in p["metadata"].get("annotations", {})
        ]
        create_many(api, ns, gang("b"))  # its controller creates the gang again
        with scheduler(cp, tenancy=tenancy):
            api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/qb1")
            wait_for(lambda: len(flood.holding("gb")) == 2, 30)
            create_many(api, ns, claim("qb2"))
            wait_for(lambda: flood.holding("qb2") == ["qb2"], 30)
            time.sleep(1)
            held.update({q: len(flood.holding(q)) for q in ("fa", "gb", "qb2")})
    assert auditor.problems() == []
    assert noted == ["qb1"]  # the pod whose reclaim tore the gang down
    assert held == {"fa": 0, "gb": 2, "qb2": 1}


def test_pods_of_a_missing_queue_take_no_share_on_a_live_cluster(
    cp: ControlPlane, tmp_path: Path
) -> None:
    """Beside qb's pods wait eight whose queue label names no queue; the scheduler keeps
    them pending (and says why) cycle after cycle. They must not count as demand: qb
    reclaims its half of the node from qa, as without them (counted, they held qb to a
    quarter)."""
    tag, ns, qa, qb, tenancy = two_queues(tmp_path, cooldown=0)
    held: dict[str, int] = {}
    with one_node(cp, tag, held) as (api, flood, auditor), scheduler(cp, tenancy=tenancy):
        fill(flood, qa)
        flood.submit("ghost", GPUS, f"missing-{tag}", QA_SECONDS, "fl-low")
        wait_for(lambda: "does not exist" in scheduler_said(api, ns, "ghost-00"), 20)
        flood.submit("qb", GPUS, qb, QA_SECONDS, "fl-low")
        wait_for(lambda: len(flood.holding("qb")) >= GPUS // 4, 30)
        time.sleep(3)  # several cycles, the ghosts pending in each
        half = GPUS // 2
        wait_for(holds(flood, {"qa1": half, "qb": half, "ghost": 0}, held), 20)
    assert auditor.problems() == []


def test_departments_share_first_on_a_live_cluster(cp: ControlPlane, tmp_path: Path) -> None:
    """Queues qa and qb form a department weighing as much as queue qc. qa fills an 8-GPU
    node; then qb and qc ask for all of it: qc takes back half the node and qb a quarter,
    qa keeps a quarter -- not a third each, as queue weights alone would split it. The live
    scheduler reclaims by the shares the simulator reports, departments first."""
    tag = uuid.uuid4().hex[:6]
    # Queues of this test only: the module's other test leaves pods of its queues running.
    queue = {q: f"{q}-{tag}" for q in ("qa", "qb", "qc")}
    tenancy = tmp_path / "tenancy.yaml"
    tenancy.write_text(
        CHURN_TENANCY
        + f"""queues:
  - {{name: dept-{tag}}}
  - {{name: {queue["qa"]}, parent: dept-{tag}}}
  - {{name: {queue["qb"]}, parent: dept-{tag}}}
  - {{name: {queue["qc"]}}}
"""
    )
    held: dict[str, int] = {}
    with one_node(cp, tag, held) as (_, flood, auditor), scheduler(cp, tenancy=tenancy):
        flood.submit("qa", GPUS, queue["qa"], QA_SECONDS, "fl-low")
        wait_for(lambda: len(flood.holding("qa")) == GPUS, 30)
        flood.submit("qb", GPUS, queue["qb"], QA_SECONDS, "fl-low")
        flood.submit("qc", GPUS, queue["qc"], QA_SECONDS, "fl-low")
        wait_for(holds(flood, {"qa": 2, "qb": 2, "qc": 4}, held), 45)
    assert auditor.problems() == []


def test_a_restarted_scheduler_keeps_the_reclaim_cooldown(cp: ControlPlane, tmp_path: Path) -> None:
    """qb reclaims half of an 8-GPU node from qa, then gets the rest when qa's other pods
    are deleted; the scheduler restarts; qa asks for its half again. Taking qb's pods on the
    node back within reclaimCooldownSeconds would undo the reclaim: the restarted scheduler
    knows of it from the note on qb's pods (:mod:`fairgpu.kube.engine_notes`) and lets qa
    wait -- as ``fairgpu explain`` says -- instead of reclaiming at once, as an engine
    started without that memory did."""
    tag, ns, qa, qb, tenancy = two_queues(tmp_path, cooldown=600)
    half = GPUS // 2
    held: dict[str, int] = {}
    with one_node(cp, tag, held) as (api, flood, auditor):
        with scheduler(cp, tenancy=tenancy):
            fill_then_ask(flood, qa, qb)
            wait_for(lambda: len(flood.holding("qb")) == half, 30)
            for name in flood.holding("qa1"):  # their user deletes qa's other pods
                api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
            wait_for(lambda: len(flood.holding("qb")) == GPUS, 30)
        noted = [
            p["metadata"]["name"]
            for p in flood.pods("qb")
            if "fairgpu.io/reclaim" in p["metadata"].get("annotations", {})
        ]
        with scheduler(cp, tenancy=tenancy):
            flood.submit("qa2", half, qa, QA_SECONDS, "fl-low")
            probe = f"qa2-{0:02d}"
            wait_for(lambda: "reclaim refused" in scheduler_said(api, ns, probe), 20)
            time.sleep(3)  # several cycles: none takes qb's pods
            held.update({q: len(flood.holding(q)) for q in ("qa2", "qb")})
            message = scheduler_said(api, ns, probe)
            args = ["--kubeconfig", str(cp.kubeconfig_path), "--config", str(tenancy)]
            explained = CliRunner().invoke(app, ["explain", f"{ns}/{probe}", *args])
    assert auditor.problems() == []
    assert len(noted) == half  # the pods placed by the reclaim, and only they
    assert held == {"qa2": 0, "qb": GPUS}
    assert "would undo a reclaim made within reclaimCooldownSeconds (600)" in message, message
    # explain, from the API alone, foresees the same: no reclaim in the next cycle.
    assert explained.exit_code == 0, explained.output
    assert "Next cycle: stays pending" in explained.output, explained.output
