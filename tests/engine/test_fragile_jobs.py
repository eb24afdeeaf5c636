"""A Job one more eviction fails is one victim: evicting a pod of it costs all of its
running pods' work, and they all go together."""

from __future__ import annotations

from fairgpu.engine.engine import Engine
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info

TENANCY = {"queues": [{"name": "q", "namespaces": ["q"]}], "preemption": {"enabled": True}}


def job_pod(i: int) -> object:
    """Pod ``i`` of Job ``sweep`` (1 GPU, owned by the Job of uid ``job-uid``)."""
    return pod_info(f"sweep-{i}", "q", gpus=1, owner="job-uid", owner_kind="Job")


def scene(fragile: bool) -> list[tuple[str, str]]:
    """One 8-GPU node: Job ``sweep``'s four 1-GPU pods ran 500 s (2 000 GPU-s in all), pod
    ``solo`` (4 GPUs) ran 300 s (1 200 GPU-s); an urgent 1-GPU pod of the same queue needs
    a GPU. Alone, a pod of the Job is the cheapest victim (500 GPU-s); if the Job fails with
    it, all four go -- and ``solo`` is cheaper."""
    placed = [(job_pod(i), "n1", 0.0) for i in range(4)]
    placed.append((pod_info("solo", "q", gpus=4), "n1", 200.0))
    state = cluster(node_info("n1", gpus=8), placed=placed)
    engine = Engine(tenancy=parse_config(TENANCY))
    if fragile:
        engine.fragile_jobs = frozenset({"job-uid"})
    urgent = pod_info("urgent", "q", gpus=1, priority=1000)
    result = engine.cycle(state, [urgent], now=500.0)
    assert [b.pod.name for b in result.binds] == ["urgent"]
    return sorted((e.pod.name, e.kind) for e in result.evictions)


def test_a_pod_of_a_job_that_tolerates_the_eviction_is_the_cheapest_victim() -> None:
    [(name, kind)] = scene(fragile=False)
    assert name.startswith("sweep-") and kind == "priority"


def test_a_fragile_job_costs_all_its_running_pods() -> None:
    assert scene(fragile=True) == [("solo", "priority")]


def test_a_fragile_job_goes_whole_when_it_must_go() -> None:
    """Only the Job runs: its pods all go, the one the preemptor needs and the rest (which
    the Job controller would delete) as collateral."""
    state = cluster(node_info("n1", gpus=4), placed=[(job_pod(i), "n1", 0.0) for i in range(4)])
    engine = Engine(tenancy=parse_config(TENANCY))
    engine.fragile_jobs = frozenset({"job-uid"})
    result = engine.cycle(state, [pod_info("urgent", "q", gpus=1, priority=1000)], now=500.0)
    kinds = sorted(e.kind for e in result.evictions)
    assert kinds == ["gang-restart", "gang-restart", "gang-restart", "priority"]


JOBSET = {"jobset.sigs.k8s.io/jobset-name": "llm"}


def jobset_pod(name: str, owner: str, priority: int = 0) -> object:
    """A 1-GPU pod of JobSet ``llm``'s child Job ``owner``."""
    return pod_info(
        name, "q", gpus=1, owner=owner, owner_kind="Job", labels=dict(JOBSET), priority=priority
    )


def jobset_scene(fragile: frozenset[str], workers_priority: int = 0) -> list[tuple[str, str]]:
    """One 8-GPU node: JobSet ``llm`` runs child Jobs ``leader`` (1 pod) and ``workers`` (3
    pods), all 1 GPU for 500 s (2 000 GPU-s); ``solo`` (4 GPUs) ran 300 s (1 200 GPU-s); an
    urgent 1-GPU pod (priority 1 000) needs a GPU."""
    placed = [(jobset_pod("llm-leader-0", "leader-uid"), "n1", 0.0)]
    placed += [
        (jobset_pod(f"llm-workers-{i}", "workers-uid", workers_priority), "n1", 0.0)
        for i in range(3)
    ]
    placed.append((pod_info("solo", "q", gpus=4), "n1", 200.0))
    state = cluster(node_info("n1", gpus=8), placed=placed)
    engine = Engine(tenancy=parse_config(TENANCY))
    engine.fragile_jobs = fragile
    result = engine.cycle(state, [pod_info("urgent", "q", gpus=1, priority=1000)], now=500.0)
    assert [b.pod.name for b in result.binds] == ["urgent"]
    return sorted((e.pod.name, e.kind) for e in result.evictions)


def test_a_fragile_child_job_costs_its_whole_jobset() -> None:
    """Only the leader's Job fails at one eviction, but its failure restarts (or fails) the
    JobSet: the workers (priority 2 000, which the urgent pod may not preempt) would go
    too. So the leader -- 500 GPU-s alone -- may not go, and ``solo`` does."""
    assert jobset_scene(frozenset({"leader-uid"}), workers_priority=2000) == [("solo", "priority")]


def test_a_tolerant_sibling_still_goes_alone_at_its_own_cost() -> None:
    """A worker's Job tolerates the eviction: its pod (500 GPU-s) goes alone, JobSet or not."""
    [(name, kind)] = jobset_scene(frozenset({"leader-uid"}))
    assert name.startswith("llm-workers-") and kind == "priority"


def test_a_jobset_whose_every_child_is_fragile_is_spared_as_a_whole() -> None:
    assert jobset_scene(frozenset({"leader-uid", "workers-uid"})) == [("solo", "priority")]


def test_a_fragile_child_job_takes_its_jobset_down_when_it_must_go() -> None:
    """The urgent pod fits only on the leader's node (an A100 one): the leader goes, and the
    workers (tolerant, on a T4 node) go with it -- the JobSet restarts or fails."""
    placed = [(jobset_pod("llm-leader-0", "leader-uid"), "n1", 0.0)]
    placed += [(jobset_pod(f"llm-workers-{i}", "workers-uid"), "n2", 0.0) for i in range(2)]
    a100, t4 = node_info("n1", gpus=1, model="A100"), node_info("n2", gpus=2, model="T4")
    state = cluster(a100, t4, placed=placed)
    engine = Engine(tenancy=parse_config(TENANCY))
    engine.fragile_jobs = frozenset({"leader-uid"})
    urgent = pod_info("urgent", "q", gpus=1, priority=1000, models=frozenset({"A100"}))
    result = engine.cycle(state, [urgent], now=500.0)
    assert [(b.pod.name, b.node_name) for b in result.binds] == [("urgent", "n1")]
    assert sorted((e.pod.name, e.kind) for e in result.evictions) == [
        ("llm-leader-0", "priority"),
        ("llm-workers-0", "gang-restart"),
        ("llm-workers-1", "gang-restart"),
    ]
