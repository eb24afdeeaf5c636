"""Relocation: a queue below its share takes the place of another queue's pods that can run,
right now, on nodes it cannot use (:mod:`fairgpu.engine.actions.relocate`)."""

from __future__ import annotations

from fairgpu.cluster.state import ClusterState
from fairgpu.commands import _freed_lines
from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.kube.explain import _order, freed_nodes
from fairgpu.model.node_pools import derive_placement
from fairgpu.model.pod import LABEL_WORKLOAD, PodInfo
from fairgpu.model.selectors import Toleration
from fairgpu.tenancy import parse_config
from tests.builders import cluster, pod_info, pool_node


def training(name: str, ns: str, gpus: int = 8) -> PodInfo:
    """A training pod: training and hybrid nodes only."""
    return derive_placement(pod_info(name, ns, gpus=gpus, labels={LABEL_WORKLOAD: "training"}))


def anywhere(name: str, ns: str, gpus: int = 8) -> PodInfo:
    """A pod that tolerates every taint: it may run on any node."""
    return pod_info(name, ns, gpus=gpus, tolerations=(Toleration("", "Exists", "", ""),))


def inference(name: str) -> PodInfo:
    """A one-GPU replica of team-c: inference and hybrid nodes only."""
    return derive_placement(pod_info(name, "team-c", gpus=1, labels={LABEL_WORKLOAD: "inference"}))


def four_nodes(*extra: tuple[PodInfo, str, float]) -> ClusterState:
    """Two training nodes, an inference node and a hybrid node; team-b's three pods that may
    run anywhere fill the training and hybrid nodes (running since t=0)."""
    nodes = [pool_node(n, u) for n, u in (("t0", "training"), ("t1", "training"))]
    nodes += [pool_node("inf", "inference"), pool_node("hyb", "hybrid")]
    placed = [(anywhere(f"b{i}", "team-b"), n, 0.0) for i, n in enumerate(("t0", "t1", "hyb"))]
    return cluster(*nodes, placed=[*placed, *extra])


def moved(res: CycleResult) -> tuple[list[str], list[tuple[str, str]]]:
    return [e.pod.name for e in res.evictions], [(b.pod.name, b.node_name) for b in res.binds]


def test_a_confined_queue_takes_the_place_of_pods_that_can_run_elsewhere() -> None:
    """team-b is at its share (24 of 32 GPUs: it may use every node), so no reclaim rule
    lets team-a in, yet team-a's training pod may use only the nodes team-b fills while the
    inference node stands empty. One of team-b's pods goes, and starts on the inference node
    in the next cycle: team-b ends holding what it held, team-a its share."""
    state, eng = four_nodes(), Engine()
    res = eng.cycle(state, [training("a1", "team-a")], 1000.0)
    assert moved(res) == (["b0"], [("a1", "t0")])
    assert [e.kind for e in res.evictions] == ["relocate"]
    assert res.evictions[0].reason == "preempted by team-a/a1 (relocate) on t0"
    state.release(res.evictions[0].pod.uid)
    res = eng.cycle(state, [anywhere("b0", "team-b")], 1001.0)
    assert moved(res) == ([], [("b0", "inf")])
    _no_stand_ins_left(eng, state)


def _no_stand_ins_left(eng: Engine, state: ClusterState) -> None:
    """Judging where victims could go placed stand-ins for a moment: none is left, and the
    placement score learned no pod shape from them (it learns from the pods it scores)."""
    assert all("elsewhere" not in uid for uid in state.pods)
    learned = eng.scheduler.learned()
    parts = [x for _, got in learned for x in (got if isinstance(got, tuple) else [got])]
    learners = [x for x in parts if hasattr(x, "seen_uids")]
    assert learners and all("elsewhere" not in u for x in learners for u in x.seen_uids)


def test_no_relocation_onto_room_another_queue_below_its_share_waits_for() -> None:
    """A second inference node where team-c runs one replica and waits with another:
    moving team-b's pod onto the inference nodes would take room team-c (below its share)
    waits for, so team-a waits too; without team-c's pending replica the move goes ahead."""

    def run(c_waits: bool) -> CycleResult:
        state = four_nodes()
        state.add_node(pool_node("inf1", "inference"))
        state.assign(inference("c0"), state.node_index["inf1"], (0,), started=0.0)
        pending = [training("a1", "team-a"), *([inference("c1")] if c_waits else [])]
        return Engine().cycle(state, pending, 1000.0)

    res = run(c_waits=True)
    assert not res.evictions and ("a1", "t0") not in moved(res)[1]
    assert moved(run(c_waits=False))[0] == ["b0"]


def test_explain_judges_a_relocation_with_the_pending_work_the_cycle_sees() -> None:
    """``fairgpu explain``'s per-node answer asks the same victim policy as the cycle, with
    the same pending jobs: team-c's waiting replica keeps team-b's pod off the inference
    nodes there too, so the pod is not offered as one that may go."""
    state = four_nodes()
    state.add_node(pool_node("inf1", "inference"))
    state.assign(inference("c0"), state.node_index["inf1"], (0,), started=0.0)
    a1 = training("a1", "team-a")
    for pending, may_go in (([a1, inference("c1")], False), ([a1], True)):
        _, rules = _order(Engine(), state, pending, a1, 1000.0)
        assert (rules.why_not("team-b/b0") is None) is may_go


def test_explain_says_which_pods_would_run_elsewhere() -> None:
    """``fairgpu explain``'s "fits if these left" names a pod a relocation would move as
    such -- not as a reclaim from a queue that is at its share."""
    state, a1 = four_nodes(), training("a1", "team-a")
    eng = Engine()
    _, rules = _order(eng, state, [a1], a1, 1000.0)
    freed = freed_nodes(eng, a1, state, ["t0"], 1000.0, rules)
    [victim] = freed[0]["would_have_to_go"]
    assert victim["preemptible_by_rules"] and victim["runs_elsewhere"]
    report = {"fits_now": False, "state": "pending", "fits_on_empty_nodes": ["t0"]}
    report |= {"nodes_total": 4, "fair_order": {"job_pods": 1}}
    lines = _freed_lines(report | {"if_freed": freed})
    assert lines[1] == (
        "  t0: fits if these left: team-b/b0 (queue team-b, priority 0; "
        "it may run elsewhere now: relocation)"
    )


def test_judging_where_victims_could_go_leaves_nothing_behind() -> None:
    """Two free inference nodes: the victim's stand-in has a choice of nodes (which the
    placement score, learning shapes from the pods it scores, would be asked to make)."""
    nodes = [pool_node("t0", "training"), pool_node("inf0", "inference")]
    nodes.append(pool_node("inf1", "inference"))
    state = cluster(*nodes, placed=[(anywhere("b0", "team-b"), "t0", 0.0)])
    eng = Engine()
    res = eng.cycle(state, [training("a1", "team-a")], 1000.0)
    assert moved(res) == (["b0"], [("a1", "t0")])
    _no_stand_ins_left(eng, state)


def test_what_was_relocated_is_not_taken_back() -> None:
    """team-c's inference pod takes the inference node before team-b's evicted pod is back:
    team-b, now below its share, may neither reclaim from team-a (at its share) nor relocate
    team-a's pod (it may run nowhere team-b may not) -- it waits."""
    state, eng = four_nodes(), Engine()
    res = eng.cycle(state, [training("a1", "team-a")], 1000.0)
    state.release(res.evictions[0].pod.uid)
    c0 = derive_placement(pod_info("c0", "team-c", gpus=8, labels={LABEL_WORKLOAD: "inference"}))
    res = eng.cycle(state, [c0], 1001.0)
    assert moved(res) == ([], [("c0", "inf")])
    for t in (1002.0, 5000.0):  # within the cooldown and long after it
        res = eng.cycle(state, [anywhere("b0", "team-b")], t)
        assert moved(res) == ([], [])


def test_no_relocation_without_room_elsewhere_or_before_the_minimum_run() -> None:
    # The inference node's CPUs are taken (a CPU-only pod of team-c): its GPUs are free but
    # team-b's pods do not fit there. team-a waits, nothing is evicted.
    cpu_only = pod_info(
        "c0", "team-c", gpus=0, cpu=64_000, tolerations=anywhere("x", "").tolerations
    )
    res = Engine().cycle(four_nodes((cpu_only, "inf", 0.0)), [training("a1", "team-a")], 1000.0)
    assert moved(res) == ([], [])
    # team-b's pods ran 30 s: too young to go (reclaimMinRuntimeSeconds, 60 s).
    res = Engine().cycle(four_nodes(), [training("a1", "team-a")], 30.0)
    assert moved(res) == ([], [])
    assert "ran less than reclaimMinRuntimeSeconds (60)" in res.unschedulable[0].reason


def test_the_victims_must_fit_elsewhere_together() -> None:
    """team-b's one-GPU pods fill t0: team-a's 8-GPU pod would evict eight of them. With 8
    GPUs free on the inference node they all fit there; with 4 they do not, and nothing
    goes (four would be left without a place, and team-b is not above its share)."""

    def run(free_on_inf: int) -> CycleResult:
        nodes = [pool_node(n, u) for n, u in (("t0", "training"), ("inf", "inference"))]
        placed = [(anywhere(f"b{j}", "team-b", gpus=1), "t0", 0.0) for j in range(8)]
        placed += [
            (anywhere(f"b{8 + j}", "team-b", gpus=1), "inf", 0.0) for j in range(8 - free_on_inf)
        ]
        return Engine().cycle(cluster(*nodes, placed=placed), [training("a1", "team-a")], 1000.0)

    evicted, binds = moved(run(8))
    assert len(evicted) == 8 and binds == [("a1", "t0")]
    assert moved(run(4)) == ([], [])


def test_relocation_never_takes_the_preemptor_above_its_share() -> None:
    """team-c (weight 2) holds one training node and wants the other; team-b's pod on it
    could run on the inference node. team-a's share of the 16 training GPUs is a third (5.3):
    its 8-GPU pod would take it above, so team-b's pod stays -- however free the inference
    node."""
    nodes = [pool_node(n, u) for n, u in (("t0", "training"), ("t1", "training"))]
    nodes.append(pool_node("inf", "inference"))
    placed = [(anywhere("b0", "team-b"), "t0", 0.0), (training("c0", "team-c"), "t1", 0.0)]

    def run(c_weight: float) -> CycleResult:
        config = parse_config({"queues": [{"name": "team-c", "weight": c_weight}]})
        pending = [training("a1", "team-a"), training("c1", "team-c")]
        return Engine(tenancy=config).cycle(cluster(*nodes, placed=placed), pending, 1000.0)

    res = run(2.0)
    assert moved(res) == ([], [])
    reason = next(u.reason for u in res.unschedulable if u.pod.name == "a1")
    assert "reclaim refused: queue 'team-a' would exceed its fair share after the move" in reason
    # With team-c of weight 1 team-a's share is 8: the move goes ahead.
    assert moved(run(1.0)) == (["b0"], [("a1", "t0")])


def test_a_relocation_refused_by_the_order_rule_says_so() -> None:
    """team-a holds 8 GPUs on the hybrid node, its share 16 (team-b may use the inference
    node); team-b holds 8, its share. Both hold as much for their weight: team-a does not come
    before team-b, so team-b's pod stays -- and team-a is told why."""
    nodes = [pool_node(n, u) for n, u in (("t0", "training"), ("inf", "inference"))]
    nodes.append(pool_node("hyb", "hybrid"))
    placed = [(anywhere("b0", "team-b"), "t0", 0.0), (training("a0", "team-a"), "hyb", 0.0)]
    res = Engine().cycle(cluster(*nodes, placed=placed), [training("a1", "team-a")], 1000.0)
    assert moved(res) == ([], [])
    assert res.unschedulable[0].reason.endswith(
        "; relocation refused: queue 'team-a' does not come before 'team-b' in reclaim order"
    ), res.unschedulable[0].reason


def test_reclaim_off_means_no_relocation_either() -> None:
    config = parse_config({"queues": [{"name": "team-a", "preemption": {"reclaim": False}}]})
    res = Engine(tenancy=config).cycle(four_nodes(), [training("a1", "team-a")], 1000.0)
    assert moved(res) == ([], [])
