"""A LeaderWorkerSet group is one victim: evicting any pod of it restarts the whole group
(its default restartPolicy), so it costs all of the group's running work and goes whole."""

from __future__ import annotations

from fairgpu.engine.engine import Engine
from fairgpu.engine.leader_worker_groups import LABEL_GROUP_INDEX, LABEL_NAME, group_key
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info

TENANCY = {"queues": [{"name": "q", "namespaces": ["q"]}], "preemption": {"enabled": True}}


def lws_pod(group: int, worker: int, labelled: bool = True, priority: int = 0) -> object:
    """Worker ``worker`` (0: the leader) of group ``group`` of LeaderWorkerSet ``vllm``
    (1 GPU), labelled as its controller labels it."""
    name = f"vllm-{group}" if worker == 0 else f"vllm-{group}-{worker}"
    labels = {LABEL_NAME: "vllm", LABEL_GROUP_INDEX: str(group)} if labelled else {}
    return pod_info(name, "q", gpus=1, labels=labels, priority=priority)


def scene(labelled: bool) -> list[tuple[str, str]]:
    """One 8-GPU node: group 0 of ``vllm`` (a leader and three workers, 1 GPU each) ran
    500 s (2 000 GPU-s together); ``solo`` (4 GPUs) ran 300 s (1 200 GPU-s); an urgent 1-GPU
    pod of the same queue needs a GPU. Alone, a worker is the cheapest victim (500 GPU-s);
    with its group it costs 2 000 -- and ``solo`` is cheaper."""
    placed = [(lws_pod(0, w, labelled), "n1", 0.0) for w in range(4)]
    placed.append((pod_info("solo", "q", gpus=4), "n1", 200.0))
    state = cluster(node_info("n1", gpus=8), placed=placed)
    engine = Engine(tenancy=parse_config(TENANCY))
    result = engine.cycle(state, [pod_info("urgent", "q", gpus=1, priority=1000)], now=500.0)
    assert [b.pod.name for b in result.binds] == ["urgent"]
    return sorted((e.pod.name, e.kind) for e in result.evictions)


def test_without_the_labels_one_worker_is_the_cheapest_victim() -> None:
    [(name, kind)] = scene(labelled=False)
    assert name.startswith("vllm-0") and kind == "priority"


def test_a_group_costs_all_its_running_pods() -> None:
    assert scene(labelled=True) == [("solo", "priority")]


def test_a_group_goes_whole_when_it_must_go_and_other_groups_stay() -> None:
    """The urgent pod fits only on the A100 node, where one worker of group 0 runs: the
    whole of group 0 goes (its other pods on the T4 node as collateral); group 1 stays."""
    placed = [(lws_pod(0, 1), "n1", 0.0), (lws_pod(0, 0), "n2", 0.0)]
    placed += [(lws_pod(1, w), "n2", 0.0) for w in range(2)]
    a100, t4 = node_info("n1", gpus=1, model="A100"), node_info("n2", gpus=4, model="T4")
    state = cluster(a100, t4, placed=placed)
    engine = Engine(tenancy=parse_config(TENANCY))
    urgent = pod_info("urgent", "q", gpus=1, priority=1000, models=frozenset({"A100"}))
    result = engine.cycle(state, [urgent], now=500.0)
    assert [(b.pod.name, b.node_name) for b in result.binds] == [("urgent", "n1")]
    assert sorted((e.pod.name, e.kind) for e in result.evictions) == [
        ("vllm-0", "gang-restart"),
        ("vllm-0-1", "priority"),
    ]


def test_the_group_key_needs_both_labels() -> None:
    assert group_key(lws_pod(3, 1)) == "lws:q/vllm/3"  # type: ignore[arg-type]
    assert group_key(lws_pod(3, 1, labelled=False)) == ""  # type: ignore[arg-type]
    named_only = pod_info("x", "q", gpus=1, labels={LABEL_NAME: "vllm"})
    assert group_key(named_only) == ""
