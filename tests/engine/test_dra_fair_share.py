"""GPUs asked through DRA claims count as GPUs for fair shares, quotas and metrics, and
evicting a pod frees its claim's devices for the preemptor: a tenant gets the same share
whether its pods ask for ``nvidia.com/gpu`` or for GPUs through ResourceClaims."""

from __future__ import annotations

from typing import Any

import pytest

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.model.dra import decode_dra
from fairgpu.sim.simulator import Simulation, SimulationResult
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.sim.workloads.nvidia_dra import (
    claim_spec,
    nvidia_device_classes,
    nvidia_slice,
)
from fairgpu.tenancy import parse_config
from fairgpu.tenancy.config import DIM_GPU_MEMORY
from tests.builders import k8s_node, k8s_pod
from tests.engine.dra_builders import (
    claim_doc,
    claim_pod,
    device_class,
    dra_cluster,
    gpu,
    place,
    request,
    scheduler,
    slice_doc,
)
from tests.engine.engine_builders import pod

TENANCY = {
    "mode": "dynamic",
    "preemption": {"enabled": True, "minRuntimeSeconds": 0, "reclaimMinRuntimeSeconds": 0},
    "queues": [{"name": "a", "namespaces": ["a"]}, {"name": "b", "namespaces": ["b"]}],
}


def _template(namespace: str, gpus: int = 1, mig: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu", "namespace": namespace},
        "spec": {"spec": claim_spec(gpus, mig)},
    }


def _pod(name: str, ns: str, dra: bool, mig: bool = False) -> Any:
    if not dra:
        return k8s_pod(name, ns, gpus=1, cpu="1")
    refs = [{"name": "gpu", "resourceClaimTemplateName": "mig" if mig else "gpu"}]
    return k8s_pod(name, ns, cpu="1", resourceClaims=refs)


def _workload(dra: bool, arrivals: list[PodArrival], mig: bool = False) -> Workload:
    """Two nodes of two GPUs: device-plugin GPUs, or the same GPUs as DRA devices."""
    nodes = [k8s_node(n, gpus=0 if dra else 2, cpu="32") for n in ("n0", "n1")]
    extra: dict[str, Any] = {}
    if dra:
        docs = [*nvidia_device_classes(), *(nvidia_slice(n, gpus=2, mig=mig) for n in ("n0", "n1"))]
        for ns in ("a", "b"):
            docs.append(_template(ns))
            docs.append(
                {**_template(ns, mig="3g.40gb"), "metadata": {"name": "mig", "namespace": ns}}
            )
        extra["dra"] = [decode_dra(d) for d in docs]
    return Workload("dra-share", nodes, arrivals, extra=extra)


def _run(dra: bool) -> SimulationResult:
    # a fills the four GPUs with long jobs; b comes later and reclaims its fair half.
    arrivals = [PodArrival(_pod(f"a{i}", "a", dra), 0.0, 1000.0) for i in range(4)]
    arrivals += [PodArrival(_pod(f"b{i}", "b", dra), 10.0, 100.0) for i in range(2)]
    engine = Engine(tenancy=parse_config(TENANCY))
    return Simulation(_workload(dra, arrivals), engine).run()


def test_tenant_asking_through_claims_gets_the_share_of_one_asking_for_nvidia_gpu() -> None:
    plugin, dra = _run(dra=False), _run(dra=True)
    starts = {r.pod.name: (r.start, r.preempted) for r in plugin.records}
    assert {r.pod.name: (r.start, r.preempted) for r in dra.records} == starts
    assert starts["b0"] == (10.0, 0) and starts["b1"] == (10.0, 0)  # b reclaimed its half
    for tenant in ("a", "b"):
        assert dra.timeline.tenant_gpu_milli[tenant] == plugin.timeline.tenant_gpu_milli[tenant]
    assert max(dra.timeline.tenant_gpu_milli["b"]) == 2000
    assert max(dra.timeline.gpu_allocated_milli) == 4000


def test_quota_limits_gpus_asked_through_claims() -> None:
    config = parse_config(
        {"mode": "static", "queues": [{"name": "a", "namespaces": ["a"], "quota": {"gpu": 1}}]}
    )
    arrivals = [PodArrival(_pod(f"a{i}", "a", True), 0.0, 100.0) for i in range(3)]
    result = Simulation(_workload(True, arrivals), Engine(tenancy=config)).run()
    assert max(result.timeline.tenant_gpu_milli["a"]) == 1000
    assert sorted(r.start for r in result.records) == [0.0, 100.0, 200.0]


def test_namespace_cap_counts_gpus_asked_through_claims() -> None:
    """``requests.nvidia.com/gpu: 1`` on namespace ``a``: its pods asking a GPU through
    claims run one at a time, as pods asking ``nvidia.com/gpu`` would."""
    config = parse_config(
        {
            "queues": [{"name": "a", "namespaces": ["a"]}],
            "namespaceQuotas": {"a": {"requests.nvidia.com/gpu": 1}},
        }
    )
    arrivals = [PodArrival(_pod(f"a{i}", "a", True), 0.0, 100.0) for i in range(3)]
    sim = Simulation(_workload(True, arrivals), Engine(tenancy=config), until=50.0)
    result = sim.run()
    assert max(result.timeline.tenant_gpu_milli["a"]) == 1000
    waiting = [r for r in result.records if r.start is None]
    assert len(waiting) == 2
    assert all("namespace 'a' quota exceeded: requests.nvidia.com/gpu" in r.reason for r in waiting)


def _mig_cluster() -> ClusterState:
    """The two DRA nodes of :func:`_workload` with MIG partitions, no pod placed."""
    workload = _workload(True, [], mig=True)
    state = ClusterState()
    for n in workload.nodes:
        state.add_node(n)
    for obj in workload.extra["dra"]:
        state.dra.add(obj)
    return state


def test_mig_partition_counts_as_its_fraction_of_a_gpu() -> None:
    state = _mig_cluster()
    assert state.gpu_capacity_milli() == 4000
    p = _pod("m", "a", True, mig=True)
    state.dra.create_pod_claims(p)
    # The mean of its shares of the GPU's counters: 4 of 8 memory slices, 40 of 80 GiB,
    # 42 of 108 SMs.
    share = (4 + 40 / 80 + 42 / 108) / 10
    assert state.dra.asked_gpu_milli(p, state) == round(1000 * share)


def test_gpu_memory_asked_and_held_through_claims_counts_in_the_dominant_share() -> None:
    """GPU memory is one of the book's dimensions: a GPU asked through a claim brings its
    memory capacity, a MIG partition its own; the slices' GPUs add theirs to the cluster's."""
    state = _mig_cluster()
    engine = Engine(tenancy=parse_config(TENANCY))
    book = engine.book
    book.sync(state)
    gib = 1024  # MiB
    assert book.capacity[DIM_GPU_MEMORY] == 4 * 80 * gib  # two nodes of two 80 GiB GPUs
    whole, mig = _pod("w", "a", True), _pod("m", "b", True, mig=True)
    for p in (whole, mig):
        state.dra.create_pod_claims(p)
    assert book.pending_vector(whole)[DIM_GPU_MEMORY] == 80 * gib
    assert book.pending_vector(mig)[DIM_GPU_MEMORY] == 40 * gib
    assert place(scheduler(), state, mig).ok
    book.sync(state)
    assert book.used("b")[DIM_GPU_MEMORY] == 40 * gib
    # Half a GPU's memory of the cluster's four: b's dominant share is its memory, 1/8.
    assert book.dominant(book.used("b")) == pytest.approx(max(1 / 8, 489 / 4000))


@pytest.mark.parametrize("shared", [False, True])
def test_eviction_frees_the_claims_devices_unless_another_pod_shares_them(shared: bool) -> None:
    """One GPU; a low-priority pod holds it through a claim, a high-priority pod needs it."""
    state = dra_cluster(["n1"], device_class(), slice_doc("n1", gpu("g0")))
    state.dra.add(decode_dra(claim_doc("low")))
    state.dra.add(decode_dra(claim_doc("high")))
    sched = scheduler()
    assert place(sched, state, claim_pod("victim", "low")).ok
    if shared:  # a pod the preemptor may not evict shares the claim
        refs = [{"name": "c0", "resourceClaimName": "low"}]
        buddy = pod("buddy", requests={"cpu": "100m"}, priority=5000, resourceClaims=refs)
        assert place(sched, state, buddy).ok
    engine = Engine()
    refs = [{"name": "c0", "resourceClaimName": "high"}]
    high = pod("preemptor", requests={"cpu": "100m"}, priority=1000, resourceClaims=refs)
    result = engine.cycle(state, [high], now=0.0)
    victims = {e.pod.name for e in result.evictions}
    if shared:  # evicting the victim alone would not free the device
        assert not result.binds and not result.evictions
        return
    assert victims == {"victim"} and [b.pod.name for b in result.binds] == ["preemptor"]


@pytest.mark.parametrize("linger", [True, False])
def test_a_victims_dra_devices_stay_held_while_it_lingers(linger: bool) -> None:
    # victim holds both GPUs of n1 through one claim; high needs one through its own, other
    # one more. While the victim terminates its claim keeps both devices: other waits.
    state = dra_cluster(["n1"], device_class(), slice_doc("n1", gpu("g0"), gpu("g1")))
    for name, count in (("low", 2), ("high", 1), ("more", 1)):
        state.dra.add(decode_dra(claim_doc(name, request(count=count))))
    assert place(scheduler(), state, claim_pod("victim", "low")).ok
    engine = Engine(ordering="kube-default")
    engine.victims_linger = linger
    refs = [{"name": "c0", "resourceClaimName": "high"}]
    high = pod("preemptor", requests={"cpu": "100m"}, priority=1000, resourceClaims=refs)
    refs = [{"name": "c0", "resourceClaimName": "more"}]
    other = pod("other", requests={"cpu": "100m"}, priority=1000, resourceClaims=refs)
    other.created = 1.0
    out = engine.cycle(state, [high, other], now=0.0)
    assert [e.pod.name for e in out.evictions] == ["victim"]
    placed = sorted(b.pod.name for b in out.binds)
    assert placed == (["preemptor"] if linger else ["other", "preemptor"])


def test_metrics_count_gpus_held_and_asked_through_claims() -> None:
    from fairgpu.kube.cache import SchedulerCache
    from fairgpu.kube.metrics import Metrics
    from fairgpu.kube.metrics_export import MetricsExporter

    cache = SchedulerCache("fairgpu")
    workload = _workload(True, [])
    for n in workload.nodes:
        cache.cluster.add_node(n)
    for obj in workload.extra["dra"]:
        cache.cluster.dra.add(obj)
    running, waiting = _pod("run", "a", True), _pod("wait", "a", True)
    assert place(scheduler(), cache.cluster, running).ok
    cache.cluster.dra.create_pod_claims(waiting)
    cache.pending[waiting.uid] = waiting
    metrics = Metrics()
    MetricsExporter(metrics).export(cache, Engine())

    def gauge(name: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"queue": "a"})

    assert gauge("fairgpu_queue_gpus_allocated") == 1.0
    assert gauge("fairgpu_queue_gpus_pending") == 1.0
    assert gauge("fairgpu_queue_gpus_fair_share") == 2.0  # holds one, asks for one more


def test_fair_shares_see_gpus_of_slices_published_after_the_nodes() -> None:
    workload = _workload(True, [])
    state = ClusterState()
    for n in workload.nodes:
        state.add_node(n)
    engine = Engine(tenancy=parse_config(TENANCY))
    waiting = _pod("w", "a", True)
    assert engine.fair_shares(state, [waiting]) == {"a": 0.0}  # no GPUs published yet
    for obj in workload.extra["dra"]:  # the driver's slices arrive later (live: a watch)
        state.dra.add(obj)
    state.dra.create_pod_claims(waiting)
    assert engine.fair_shares(state, [waiting]) == {"a": 1000.0}
    assert engine.book.capacity[0] == 4000
