"""Replays of random mixes of every kind of work the engine handles at once -- pods alone
of every size, fractional pods, gangs (rigid, elastic, confined to a rack), node pools with
taints, priorities, several users, run times declared, undeclared and outrun, quotas, limits
and a department or none; pods decoded from manifests with Kubernetes' placement constraints (pod
affinity and anti-affinity, topology spread, node selectors, scheduling gates) beside gangs
preferring a rack; the controllers' work from YAML (Jobs with backoff limits and disruption
rules, JobSets with and without failure policies, LeaderWorkerSets of each restart policy,
two priority classes); pods asking GPUs through DRA claim templates (whole GPUs, two at
once, MIG slices) beside device-plugin GPUs -- never stop the engine and never book a node
or a device beyond what it has, nor a queue or department beyond its limit.

Each feature is tested on its own elsewhere; the cycle meets them together only here (a pod
that declares no run time on a node held for a starving gang once stopped the cycle on an
assertion, found this way)."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.model.gang_topology import ANN_TOPOLOGY_PREFERRED, ANN_TOPOLOGY_REQUIRED
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import PodInfo
from fairgpu.model.selectors import Taint, Toleration
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.sim.workloads.kube_yaml import load_kube_yaml
from fairgpu.sim.workloads.nvidia_dra import claim_spec, nvidia_device_classes, nvidia_slice
from fairgpu.tenancy import parse_config
from fairgpu.tenancy.config import DIM_GPU
from tests.builders import k8s_node, k8s_pod, node_info, pod_info

HOSTNAME = "kubernetes.io/hostname"
RACK = "example.com/rack"
POOL = "example.com/pool"
QUEUES = ("team-a", "team-b")  # the namespaces of the mixes read from YAML
QUOTAS = {  # a and c share department x, which weighs what b does and may hold 10 GPUs
    "queues": [
        {"name": "x", "weight": 2, "limit": {"gpu": 10}},
        {"name": "a", "namespaces": ["a"], "quota": {"gpu": 8}, "parent": "x"},
        {"name": "b", "namespaces": ["b"], "weight": 2, "limit": {"gpu": 12}},
        {"name": "c", "namespaces": ["c"], "quota": {"gpu": 4}, "parent": "x"},
    ],
    "starvation": {"reserveAfterSeconds": 60, "drainGraceSeconds": 30},
    "preemption": {"minRuntimeSeconds": 30},
}


def _nodes(rng: random.Random) -> list[NodeInfo]:
    nodes = []
    for i in range(rng.randint(3, 6)):
        node = node_info(f"n{i}", gpus=rng.choice([4, 8]), labels={RACK: f"r{i % 2}"})
        if rng.random() < 0.3:  # a tainted pool only its own pods tolerate
            node.labels = {**node.labels, POOL: "train"}
            node.taints = (Taint(POOL, "train", "NoSchedule"),)
        nodes.append(node)
    return nodes


def _timing(rng: random.Random) -> tuple[float | None, float]:
    """(declared run time or None, the run it really takes: as declared, or three times)."""
    run = float(rng.choice([40, 150, 600, 1500]))
    declared = rng.choice([None, run, run / 3])  # the last one outruns its declaration
    return declared, run


def _pod(rng: random.Random, name: str, queue: str, at: float, **kw: object) -> PodInfo:
    pod = pod_info(
        name,
        queue,
        created=at,
        priority=rng.choice([0, 0, 100]),
        user=f"u{rng.randint(0, 1)}",
        **kw,  # type: ignore[arg-type]
    )
    if rng.random() < 0.3:
        pod.tolerations = (Toleration(POOL, "Equal", "train", "NoSchedule"),)
    return pod


# (GPUs, milli of each) of pods alone: whole devices, shares of one and of several devices.
SIZES = [(0, 1000), (1, 250), (1, 500), (2, 500), (3, 250), (1, 1000), (2, 1000), (4, 1000)]
SIZES += [(8, 1000)]


def _mix(seed: int) -> Workload:
    """Pods alone of every size and gangs (rigid, elastic, some confined to a rack) in
    queues a, b and c, on nodes of two racks, some in a tainted pool."""
    rng = random.Random(seed)
    arrivals: list[PodArrival] = []
    groups: dict[str, int] = {}
    for i in range(rng.randint(10, 40)):
        at = rng.uniform(0, 1200)
        declared, run = _timing(rng)
        size = rng.choice(SIZES)
        pod = _pod(
            rng, f"p{i}", rng.choice("abc"), at, gpus=size[0], milli=size[1], duration=declared
        )
        arrivals.append(PodArrival(pod, at, run))
    for g in range(rng.randint(0, 4)):
        at, members = rng.uniform(0, 1200), rng.randint(2, 4)
        min_member = rng.choice([members, members - 1])
        queue, gpus = rng.choice("abc"), rng.choice([2, 4, 8])
        groups[f"{queue}/g{g}"] = min_member
        declared, run = _timing(rng)
        confined = rng.random() < 0.4
        for m in range(members):
            notes = {ANN_TOPOLOGY_REQUIRED: RACK} if confined else None
            pod = _pod(
                rng,
                f"g{g}-{m}",
                queue,
                at,
                gpus=gpus,
                group=f"g{g}",
                duration=declared,
                annotations=notes,
            )
            arrivals.append(PodArrival(pod, at, run))
    return Workload("random-mix", _nodes(rng), arrivals, pod_groups=groups)


def _constrained_pod(rng: random.Random, i: int, at: float) -> PodInfo:
    """A pod of app ``web`` or ``db`` with some of the placement constraints kube-scheduler
    knows, decoded from its manifest."""
    app = rng.choice(["web", "db"])
    selects = {"labelSelector": {"matchLabels": {"app": app}}}
    spec: dict[str, object] = {"priority": rng.choice([0, 100])}
    affinity: dict[str, object] = {}
    if rng.random() < 0.3:  # one per node
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [{**selects, "topologyKey": HOSTNAME}]
        }
    if rng.random() < 0.3:  # near its own kind
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "podAffinityTerm": {**selects, "topologyKey": RACK}}
            ]
        }
    if affinity:
        spec["affinity"] = affinity
    if rng.random() < 0.3:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": RACK,
                "whenUnsatisfiable": rng.choice(["DoNotSchedule", "ScheduleAnyway"]),
                **selects,
            }
        ]
    if rng.random() < 0.15:
        spec["nodeSelector"] = {RACK: rng.choice(["r0", "r1"])}
    if rng.random() < 0.1:
        spec["schedulingGates"] = [{"name": "example.com/wait"}]
    declared, _ = _timing(rng)
    return k8s_pod(
        f"c{i}",
        rng.choice("abc"),
        cpu="1",
        memory="1Gi",
        gpus=rng.choice([0, 1, 1, 2, 4]),
        labels={"app": app},
        created=at,
        duration=declared,
        **spec,
    )


def _constrained_mix(seed: int) -> Workload:
    """Pods with placement constraints (:func:`_constrained_pod`) and gangs preferring a
    rack, on nodes of two racks."""
    rng = random.Random(seed)
    nodes = [
        k8s_node(f"n{i}", {RACK: f"r{i % 2}"}, cpu="64", memory="256Gi", gpus=rng.choice([4, 8]))
        for i in range(rng.randint(3, 6))
    ]
    arrivals = []
    for i in range(rng.randint(10, 40)):
        at = rng.uniform(0, 1200)
        _, run = _timing(rng)
        arrivals.append(PodArrival(_constrained_pod(rng, i, at), at, run))
    groups: dict[str, int] = {}
    for g in range(rng.randint(0, 3)):
        at, members = rng.uniform(0, 1200), rng.randint(2, 3)
        groups[f"b/g{g}"] = members
        for m in range(members):
            notes = {ANN_TOPOLOGY_PREFERRED: RACK}
            pod = pod_info(f"g{g}-{m}", "b", created=at, gpus=4, group=f"g{g}", annotations=notes)
            arrivals.append(PodArrival(pod, at, float(rng.choice([300, 900]))))
    return Workload("constrained-mix", nodes, arrivals, pod_groups=groups)


PRIORITY_CLASSES = "".join(
    f"---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\n"
    f"metadata: {{name: {name}}}\nvalue: {value}\n"
    for name, value in (("low", 0), ("high", 1000))
)
IGNORE_DISRUPTIONS = (
    "podFailurePolicy: {rules: [{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}]}, "
)


def _pod_template(rng: random.Random, gpus: int) -> str:
    prio = rng.choice(["low", "high"])
    container = f'{{name: m, image: i, resources: {{limits: {{nvidia.com/gpu: "{gpus}"}}}}}}'
    return (
        f"{{spec: {{schedulerName: fairgpu, restartPolicy: Never, "
        f"priorityClassName: {prio}, containers: [{container}]}}}}"
    )


def _head(rng: random.Random, api: str, kind: str, name: str) -> str:
    """An object's first lines: its kind, namespace (queue), arrival and declared run time
    (now and then a run three times as long)."""
    run = rng.choice([60, 300, 900])
    notes = {
        "fairgpu.io/arrival-seconds": f"{rng.uniform(0, 900):.0f}",
        "fairgpu.io/duration-seconds": str(run),
    }
    if rng.random() < 0.2:
        notes["fairgpu.io/actual-run-seconds"] = str(3 * run)
    items = ", ".join(f'{k}: "{v}"' for k, v in notes.items())
    ns = rng.choice(QUEUES)
    meta = f"{{name: {name}, namespace: {ns}, annotations: {{{items}}}}}"
    return f"---\napiVersion: {api}\nkind: {kind}\nmetadata: {meta}\n"


def _job(rng: random.Random, name: str) -> str:
    spec = f"completions: {rng.randint(1, 4)}, parallelism: {rng.randint(1, 3)}, "
    spec += f"backoffLimit: {rng.choice([0, 1, 6])}, "
    if rng.random() < 0.4:  # evictions do not count against the limit
        spec += IGNORE_DISRUPTIONS
    template = _pod_template(rng, rng.choice([1, 2, 4]))
    return _head(rng, "batch/v1", "Job", name) + f"spec: {{{spec}template: {template}}}\n"


def _jobset(rng: random.Random, name: str) -> str:
    policy = rng.choice(
        ["", "failurePolicy: {maxRestarts: 1}, ", "failurePolicy: {maxRestarts: 0}, "]
    )
    jobs = ", ".join(
        f"{{name: r{k}, replicas: {rng.randint(1, 2)}, template: {{spec: {{backoffLimit: "
        f"{rng.choice([0, 2])}, template: {_pod_template(rng, rng.choice([1, 2, 4]))}}}}}}}"
        for k in range(rng.randint(1, 2))
    )
    head = _head(rng, "jobset.x-k8s.io/v1alpha2", "JobSet", name)
    return head + f"spec: {{{policy}replicatedJobs: [{jobs}]}}\n"


def _lws(rng: random.Random, name: str) -> str:
    restart = rng.choice(["RecreateGroupOnPodRestart", "None", "RecreateGroupAfterStart"])
    size, replicas = rng.randint(2, 3), rng.randint(1, 2)
    template = _pod_template(rng, rng.choice([1, 2]))
    group = f"{{size: {size}, restartPolicy: {restart}, workerTemplate: {template}}}"
    head = _head(rng, "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", name)
    return head + f"spec: {{replicas: {replicas}, leaderWorkerTemplate: {group}}}\n"


def _controlled_mix(seed: int) -> Workload:
    """Jobs, JobSets and LeaderWorkerSets read from YAML, as ``fairgpu simulate`` reads
    them, on 8-GPU nodes."""
    rng = random.Random(seed)
    docs = [PRIORITY_CLASSES]
    allocatable = '{cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "8"}'
    for i in range(rng.randint(2, 4)):
        docs.append(
            f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: n{i}}}\n"
            f"status: {{allocatable: {allocatable}}}\n"
        )
    makers = [_job, _job, _jobset, _lws]
    docs.extend(rng.choice(makers)(rng, f"w{k}") for k in range(rng.randint(3, 10)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mix.yaml"
        path.write_text("".join(docs))
        return load_kube_yaml([path])


DRA_TEMPLATES = {"one": (1, ""), "two": (2, ""), "small": (0, "1g.10gb"), "half": (0, "3g.40gb")}


def _dra_mix(seed: int) -> Workload:
    """Pods asking GPUs through claim templates on nodes of NVIDIA-shaped resource slices,
    and pods asking nvidia.com/gpu on a node of the device plugin."""
    rng = random.Random(seed)
    docs: list[dict[str, Any]] = [*nvidia_device_classes()]
    for i in range(rng.randint(2, 3)):
        name = f"n{i}"
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {HOSTNAME: name}},
                "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "50"}},
            }
        )
        docs.append(nvidia_slice(name, gpus=rng.choice([2, 4])))
    docs.append(  # GPUs of the device plugin beside them
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "plain", "labels": {HOSTNAME: "plain"}},
            "status": {
                "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "50", "nvidia.com/gpu": "4"}
            },
        }
    )
    for ns in QUEUES:
        for name, (gpus, mig) in DRA_TEMPLATES.items():
            docs.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"spec": claim_spec(gpus, mig)},
                }
            )
    for k in range(rng.randint(5, 25)):
        declared, run = _timing(rng)
        notes = {"fairgpu.io/arrival-seconds": f"{rng.uniform(0, 900):.0f}"}
        if declared is not None:
            notes["fairgpu.io/duration-seconds"] = f"{declared:g}"
        notes["fairgpu.io/actual-run-seconds"] = f"{run:g}"
        spec: dict[str, Any] = {
            "priority": rng.choice([0, 100]),
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        }
        ask = rng.choice([*DRA_TEMPLATES, "plain"])
        if ask == "plain":
            spec["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
        else:
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": ask}]
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"d{k}",
                    "namespace": rng.choice(QUEUES),
                    "annotations": notes,
                },
                "spec": spec,
            }
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mix.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        return load_kube_yaml([path])


def _within_limits(engine: Engine) -> None:
    """Department x and queue b hold no more than their limits (:data:`QUOTAS`), under the
    fair ordering (kube-scheduler's knows no queues)."""
    book = engine.book
    if book.config.queue("x") is not None and engine.ordering == "fair":
        assert book.department_used("x")[DIM_GPU] <= 10_000 + 1e-6
        assert book.used("b")[DIM_GPU] <= 12_000 + 1e-6


def _booked_within_capacity(cluster: ClusterState) -> None:
    """No node holds more than it has -- requests, each device's compute and memory -- and
    its books match the pods placed on it."""
    n = cluster.size
    assert (cluster.device_milli_free[:n] >= 0).all()
    assert (cluster.device_memory_free[:n] >= 0).all()
    assert (cluster.requested[:n] <= cluster.allocatable[:n]).all()
    assert all(cluster.verify_node(i) == [] for i in range(n))


#: The replays the properties draw: a seed, an ordering, quotas or none, a kind of mix.
REPLAYS = (
    st.integers(0, 1_000_000),
    st.sampled_from(["fair", "kube-default"]),
    st.booleans(),
    st.sampled_from([_mix, _constrained_mix, _controlled_mix, _dra_mix]),
)


def _replay(
    make: Callable[[int], Workload], seed: int, ordering: str, quotas: bool
) -> tuple[Engine, Simulation]:
    """The engine and simulation of one drawn replay, not run yet."""
    wl = make(seed)
    tenancy = parse_config(QUOTAS) if quotas else None
    engine = Engine(seed=seed, tenancy=tenancy, ordering=ordering)  # type: ignore[arg-type]
    engine.register_pod_groups(wl.pod_groups)
    return engine, Simulation(wl, engine, seed=seed, until=5000.0, track_fragmentation=False)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*REPLAYS)
def test_a_random_mix_never_stops_the_engine_nor_overbooks(
    seed: int, ordering: str, quotas: bool, make: Callable[[int], Workload]
) -> None:
    engine, sim = _replay(make, seed, ordering, quotas)
    cycle = engine.cycle

    def checked(cluster: ClusterState, *args: Any, **kw: Any) -> CycleResult:
        result = cycle(cluster, *args, **kw)
        _booked_within_capacity(cluster)  # after every cycle's decisions, not only the last
        _within_limits(engine)
        return result

    engine.cycle = checked  # type: ignore[method-assign]
    result = sim.run()
    assert max(result.timeline.gpu_allocated_milli, default=0) <= result.gpu_capacity_milli
    _booked_within_capacity(sim.cluster)
    assert np.isfinite(result.end_time)


def _last_words(
    make: Callable[[int], Workload], seed: int, ordering: str, quotas: bool, kept: bool
) -> dict[str, tuple[Any, ...]]:
    """Each pod's last start, node, preemptions and reason in a replay whose engine keeps
    its backlog and reports only changed reasons (``kept``) or groups afresh and reports
    everything."""
    engine, sim = _replay(make, seed, ordering, quotas)
    engine.keep_backlog = kept
    return {r.pod.uid: (r.start, r.node, r.preempted, r.reason) for r in sim.run().records}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(2, "kube-default", True, _mix)  # a gang member that started and came back at once
@given(*REPLAYS)
def test_a_kept_backlog_says_and_decides_what_a_fresh_grouping_does(
    seed: int, ordering: str, quotas: bool, make: Callable[[int], Workload]
) -> None:
    """What the engine keeps between cycles (its backlog, the last reason it reported for
    each pod) changes nothing a replay shows: every pod's start, node, preemptions and last
    reason are those of an engine that starts from scratch every cycle."""
    kept = _last_words(make, seed, ordering, quotas, kept=True)
    assert kept == _last_words(make, seed, ordering, quotas, kept=False)
