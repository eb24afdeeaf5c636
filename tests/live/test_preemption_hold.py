"""The preemption-hold state machine on a real cache and engine, without an API server: a
waiting preemptor binds only once every victim is gone, is cancelled when its pod or node goes,
and victims of a preemptor that gave up keep their capacity until they are gone."""

from __future__ import annotations

from typing import Any

import msgspec

from fairgpu.engine.engine import Bind, Engine, Ordering
from fairgpu.kube.cache import CacheChanges, SchedulerCache, decode_node, decode_pod
from fairgpu.kube.preemption_hold import MAX_BACKOFF, PreemptionHolds

WAIT = 120.0


def node_json(name: str, gpus: int = 2) -> bytes:
    alloc = {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    meta = {"name": name, "labels": {"kubernetes.io/hostname": name}}
    return msgspec.json.encode({"metadata": meta, "status": {"allocatable": alloc}})


def pod_json(
    name: str,
    *,
    priority: int = 0,
    node: str = "",
    device: int | None = None,
    deleting: bool = False,
    gpus: int = 1,
    host: str = "",
    nominated: str = "",
    group: str = "",
) -> bytes:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if device is not None:
        meta["annotations"] = {"fairgpu.io/gpu-devices": str(device)}
    if group:  # a pod group of two
        meta["labels"] = {"fairgpu.io/pod-group": group}
        meta["annotations"] = {**meta.get("annotations", {}), "fairgpu.io/min-member": "2"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    limits = {"nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {
        "schedulerName": "fairgpu",
        "nodeName": node,
        "priority": priority,
        "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1", **limits}, "limits": limits}}
        ],
    }
    if host:
        spec["nodeSelector"] = {"kubernetes.io/hostname": host}
    status: dict[str, Any] = {"phase": "Running"}
    if nominated:
        status["nominatedNodeName"] = nominated
    return msgspec.json.encode({"metadata": meta, "spec": spec, "status": status})


class World:
    """A cache with nodes n1 and n2 (2 GPUs each), the engine, and the hold machine, wired
    as the live scheduler wires them (minus the API calls)."""

    def __init__(self, ordering: Ordering = "kube-default") -> None:
        self.cache = SchedulerCache("fairgpu")
        self.cache.sync_nodes(
            [decode_node(node_json(n)) for n in ("n1", "n2")], 0.0, CacheChanges()
        )
        self.engine = Engine(ordering=ordering)
        self.engine.victims_linger = True  # as the live scheduler runs it
        self.holds = PreemptionHolds(self.cache, WAIT)
        self.posted: list[Bind] = []
        self.evictions_posted: list[str] = []  # every Eviction the loop would post
        self.displaced: list[str] = []  # held preemptors displaced (nomination cleared)

    def pod(self, etype: str, raw: bytes, now: float = 1.0) -> CacheChanges:
        out = CacheChanges()
        self.cache.apply_pod(etype, decode_pod(raw, "fairgpu"), now, out)
        return out

    def drain(self, out: CacheChanges, now: float) -> None:
        """What the loop does after a batch of events."""
        self.holds.reconcile(now)
        self.posted += self.holds.gone(out.gone, now)

    def cycle(self, now: float) -> list[str]:
        """One engine cycle; returns the names of the evicted pods (binds without victims are
        'posted' at once, like the live scheduler's)."""
        pending = self.holds.ready(self.cache.schedulable(), now)
        self.engine.no_preemption = self.holds.no_preemption(pending)
        self.engine.displaceable = self.holds.displaceable()
        result = self.engine.cycle(self.cache.cluster, pending, now)
        for ev in result.evictions:
            self.holds.evicting(ev.pod, ev.preemptor.uid if ev.preemptor else None)
            self.evictions_posted.append(ev.pod.name)
        displaced = self.holds.displaced(result.displaced, result.binds, now)
        self.displaced += [p.name for p in displaced]
        for b in result.binds:
            self.cache.assumed_by_engine(b.pod.uid, b.node_name)
            ref = self.engine.pod_group(b.pod)
            if not self.holds.hold(b, now, ref.key if ref is not None else ""):
                self.posted.append(b)
        return [e.pod.name for e in result.evictions]

    def free_gpus(self, node: str) -> int:
        idx = self.cache.cluster.node_index[node]
        return int((self.cache.cluster.device_milli_free[idx, :2] == 1000).sum())


def full_world() -> World:
    """n1: v0 and v1 (priorities 0, 4, bound); n2: w0 and w1 (priorities 5, 6, bound)."""
    world = World()
    for i in range(2):
        world.pod("ADDED", pod_json(f"v{i}", priority=4 * i, node="n1", device=i))
        world.pod("ADDED", pod_json(f"w{i}", priority=5 + i, node="n2", device=i))
    return world


def p_waiting_for_v0() -> World:
    """The full world where preemptor p (priority 10, one GPU) has evicted v0 at time 2."""
    world = full_world()
    world.pod("ADDED", pod_json("p", priority=10))
    assert world.cycle(2.0) == ["v0"]
    return world


def test_preemptor_binds_only_once_every_victim_is_gone() -> None:
    w = full_world()
    w.pod("ADDED", pod_json("p", priority=10, gpus=2))
    assert sorted(w.cycle(2.0)) == ["v0", "v1"]
    assert w.holds.held["uid-p"].waiting == {"uid-v0", "uid-v1"}
    # The victims' deletion is observed: first as terminating, then gone, one by one.
    w.drain(w.pod("MODIFIED", pod_json("v0", node="n1", device=0, deleting=True)), 3.0)
    w.drain(w.pod("DELETED", pod_json("v0", node="n1", device=0, deleting=True)), 4.0)
    assert w.posted == []  # v1 still holds its GPU
    w.drain(w.pod("DELETED", pod_json("v1", node="n1", device=1, deleting=True)), 5.0)
    assert [b.pod.name for b in w.posted] == ["p"]
    w.drain(w.pod("DELETED", pod_json("v1", node="n1", device=1)), 6.0)
    assert [b.pod.name for b in w.posted] == ["p"]  # posted once


def test_a_chain_displaces_waiting_preemptors_and_never_evicts_them() -> None:
    w = full_world()
    w.pod("ADDED", pod_json("p1", priority=2))
    assert w.cycle(2.0) == ["v0"]
    w.pod("MODIFIED", pod_json("v0", node="n1", device=0, deleting=True))
    # p2 takes the waiting p1's place (no work lost) rather than evict a running pod.
    w.pod("ADDED", pod_json("p2", priority=10))
    assert w.cycle(3.0) == []
    w.pod("ADDED", pod_json("p3", priority=20))
    assert w.cycle(4.0) == []  # and p3 takes p2's
    assert w.displaced == ["p1", "p2"]
    assert {h.bind.pod.name: h.waiting for h in w.holds.held.values()} == {"p3": {"uid-v0"}}
    # p2, requeued and no longer nominated, may preempt again: v1 (priority 4) goes for it.
    assert w.cycle(5.0) == ["v1"]
    assert w.evictions_posted == ["v0", "v1"]  # never p1 nor p2 (unbound), nor v0 twice
    assert {h.bind.pod.name for h in w.holds.held.values()} == {"p2", "p3"}
    assert w.free_gpus("n1") == 0 and w.free_gpus("n2") == 0
    assert w.posted == []


def test_displacement_transfers_the_waiting_victims_and_requeues_the_preemptor() -> None:
    w = p_waiting_for_v0()
    assert w.cache.nominated["uid-p"] == "n1"
    w.pod("ADDED", pod_json("q", priority=20))
    assert w.cycle(3.0) == []  # w0 (priority 5) runs on: q takes p's place instead
    assert w.displaced == ["p"] and w.evictions_posted == ["v0"]
    assert list(w.holds.held) == ["uid-q"] and w.holds.held["uid-q"].waiting == {"uid-v0"}
    assert w.holds.victims["uid-v0"][0] == "uid-q"  # v0 belongs to q alone now
    assert "uid-p" not in w.cache.nominated and w.cache.nominated["uid-q"] == "n1"
    assert "uid-p" not in w.cache.cluster.placements  # requeued, at once
    assert [p.name for p in w.holds.ready(w.cache.schedulable(), 3.0)] == ["p"]
    assert w.free_gpus("n1") == 0  # v0 still holds its GPU, through q's assumption
    w.drain(w.pod("DELETED", pod_json("v0", node="n1", device=0, deleting=True)), 4.0)
    assert [b.pod.name for b in w.posted] == ["q"]


def test_displaced_preemptors_victims_the_new_one_does_not_need_keep_their_gpus() -> None:
    # p (two GPUs, priority 5: below neither w0 nor w1) waits for v0 and v1; q needs one GPU
    # and r, in the same cycle, another.
    w = full_world()
    w.pod("ADDED", pod_json("p", priority=5, gpus=2))
    assert sorted(w.cycle(2.0)) == ["v0", "v1"]
    w.pod("ADDED", pod_json("q", priority=20))
    w.pod("ADDED", pod_json("r", priority=0))
    assert w.cycle(3.0) == []
    assert w.displaced == ["p"]
    # One victim q waits for; the other holds its own GPU again, as terminating: r, which
    # the engine put on it, is not bound over it (it is placed again next cycle).
    (waiting,) = w.holds.held["uid-q"].waiting
    other = ({"uid-v0", "uid-v1"} - {waiting}).pop()
    placed = w.cache.cluster.placements
    assert placed[other].terminating and "uid-r" not in placed
    assert w.posted == [] and w.free_gpus("n1") == 0
    assert w.cycle(4.0) == [] and w.posted == []  # p and r find nothing to evict
    w.drain(w.pod("DELETED", pod_json(other[4:], node="n1", deleting=True)), 5.0)
    assert w.posted == []  # q still waits for its victim
    w.cycle(6.0)
    assert [b.pod.name for b in w.posted] == ["r"]  # r gets the GPU that went


def test_preemptor_deleted_while_waiting_is_never_bound_and_victims_keep_their_gpus() -> None:
    w = p_waiting_for_v0()
    w.drain(w.pod("DELETED", pod_json("p", priority=10)), 3.0)
    assert w.holds.held == {}
    # v0 still terminates: its GPU stays taken, and it is not chosen again.
    assert w.free_gpus("n1") == 0
    assert w.cache.cluster.placements["uid-v0"].terminating
    w.pod("ADDED", pod_json("q", priority=10))
    assert w.cycle(4.0) == ["v1"]
    w.drain(w.pod("DELETED", pod_json("v0", node="n1", device=0)), 5.0)
    assert w.posted == []  # q waits for v1; p is never bound
    assert w.free_gpus("n1") == 1


def test_node_removed_while_waiting_cancels_the_bind() -> None:
    w = p_waiting_for_v0()
    out = CacheChanges()
    w.cache.apply_node("DELETED", decode_node(node_json("n1")), 3.0, out)
    w.drain(out, 3.0)
    assert w.holds.held == {}
    w.drain(w.pod("DELETED", pod_json("v0", node="n1", device=0)), 4.0)
    assert w.posted == []  # no stale bind onto the removed node
    assert w.cache.schedulable()[0].name == "p"  # pending again


def test_timeout_requeues_without_evicting_more_while_victims_terminate() -> None:
    w = p_waiting_for_v0()
    w.pod("MODIFIED", pod_json("v0", node="n1", device=0, deleting=True))
    late = 2.0 + WAIT + 1
    assert w.holds.expire(late)
    assert w.holds.held == {} and "uid-p" not in w.cache.cluster.placements
    # v0 holds its GPU until it is gone; p backs off, then may not preempt again.
    assert w.free_gpus("n1") == 0
    assert [p.name for p in w.holds.ready(w.cache.schedulable(), late)] == []
    assert w.cycle(late + MAX_BACKOFF) == []
    assert w.holds.no_preemption(w.cache.schedulable()) == {"uid-p"}
    # v0 goes: p preempts again (or fits); here the freed GPU is enough.
    w.drain(w.pod("DELETED", pod_json("v0", node="n1", device=0)), late + 40)
    assert w.cycle(late + 41) == []
    assert [b.pod.name for b in w.posted] == ["p"]


def test_refused_eviction_puts_the_victim_back_running_and_abandons_the_preemptor() -> None:
    w = p_waiting_for_v0()
    v0 = w.cache.bound and w.holds.victims["uid-v0"][1]
    assert w.holds.refused(v0, 3.0, 63.0)
    assert w.holds.held == {}
    pl = w.cache.cluster.placements["uid-v0"]
    assert not pl.terminating and pl.bound and pl.started == 63.0
    assert w.free_gpus("n1") == 0
    assert w.holds.backoff["uid-p"][0] == 4.0  # one second after the first failure


def test_replanned_preemptor_drops_its_earlier_hold() -> None:
    w = p_waiting_for_v0()
    first = w.holds.held["uid-p"].bind
    assert w.holds.hold(Bind(first.pod, "n2", (0,), ()), 3.0) is False
    assert "uid-p" not in w.holds.held
    # The earlier victim keeps its node while it terminates.
    assert w.cache.cluster.placements["uid-v0"].terminating


def test_pod_group_timeout_victims_keep_their_node_and_same_cycle_binds_go_ahead() -> None:
    w = full_world()
    # What the engine's pod-group timeout does: evict v0 for no preemptor, in a statement.
    v0 = w.cache.cluster.pods["uid-v0"]
    session = w.engine.session(w.cache.cluster, 2.0)
    stmt = session.statement()
    assert stmt.evict(v0, None, "timed out", "gang-timeout")
    stmt.commit()
    w.holds.evicting(v0, None)
    # v0's GPU stays v0's for the rest of the cycle: q fits nowhere, r (no GPU) binds.
    w.pod("ADDED", pod_json("q", priority=0))
    w.pod("ADDED", pod_json("r", gpus=0, host="n1"))
    result = w.engine.cycle(w.cache.cluster, w.cache.schedulable(), 2.0)
    assert [(b.pod.name, b.node_name) for b in result.binds] == [("r", "n1")]
    w.holds.without_preemptor([v0], 2.0)
    assert "uid-r" in w.cache.cluster.placements  # r's bind goes ahead
    assert w.cache.cluster.placements["uid-v0"].terminating
    assert w.free_gpus("n1") == 0
    assert w.cycle(3.0) == [] and w.posted == []  # q waits while v0 terminates
    w.drain(w.pod("DELETED", pod_json("v0", node="n1", device=0)), 4.0)
    w.cycle(5.0)
    assert [b.pod.name for b in w.posted] == ["q"]


def big_victim_world(ordering: Ordering = "kube-default") -> World:
    """n1 runs b (two GPUs, priority 0), n2 runs w0 and w1 (priorities 5, 6)."""
    world = World(ordering)
    world.pod("ADDED", pod_json("b", node="n1", gpus=2))
    for i in range(2):
        world.pod("ADDED", pod_json(f"w{i}", priority=5 + i, node="n2", device=i))
    return world


def test_a_victims_gpu_its_preemptor_does_not_take_is_not_bound_over() -> None:
    # p (one GPU) evicts b (two): b's second GPU stays b's while b terminates, so r, in the
    # same cycle or the next, is not bound onto it; once b is gone, p binds and r follows.
    w = big_victim_world()
    w.pod("ADDED", pod_json("p", priority=10))
    w.pod("ADDED", pod_json("r", priority=3))
    assert w.cycle(2.0) == ["b"]
    assert w.posted == [] and w.free_gpus("n1") == 0
    rest = w.cache.cluster.placements["uid-b"]
    assert rest.remainder and rest.terminating and len(rest.devices) == 1
    assert w.cycle(3.0) == [] and w.posted == []
    w.drain(w.pod("DELETED", pod_json("b", node="n1", gpus=2)), 4.0)
    assert [b.pod.name for b in w.posted] == ["p"]
    w.cycle(5.0)
    assert [b.pod.name for b in w.posted] == ["p", "r"]


def test_a_preemptor_that_gives_up_leaves_its_victim_holding_all_it_had() -> None:
    w = big_victim_world()
    w.pod("ADDED", pod_json("p", priority=10))
    assert w.cycle(2.0) == ["b"]
    assert w.holds.expire(2.0 + WAIT + 1)
    placed = w.cache.cluster.placements["uid-b"]
    assert not placed.remainder and placed.terminating and len(placed.devices) == 2
    assert "uid-p" not in w.cache.cluster.placements and w.free_gpus("n1") == 0


def test_a_smaller_pod_taking_a_preemptors_place_leaves_the_rest_held() -> None:
    # p (two GPUs) waits for b; q (one GPU, higher priority) takes p's place: b's other GPU,
    # which q does not take, stays b's until b is gone.
    w = big_victim_world()
    w.pod("ADDED", pod_json("p", priority=2, gpus=2))
    assert w.cycle(2.0) == ["b"]
    w.pod("ADDED", pod_json("q", priority=20))
    assert w.cycle(3.0) == [] and w.displaced == ["p"]
    assert w.holds.held["uid-q"].waiting == {"uid-b"}
    rest = w.cache.cluster.placements["uid-b"]
    assert rest.remainder and len(rest.devices) == 1 and w.free_gpus("n1") == 0
    assert w.cycle(4.0) == [] and w.posted == []  # p finds nothing free, evicts nothing
    w.drain(w.pod("DELETED", pod_json("b", node="n1", gpus=2)), 5.0)
    assert [b.pod.name for b in w.posted] == ["q"]


def test_every_member_of_a_group_taking_a_preemptors_place_waits_for_its_victims() -> None:
    # p (two GPUs) waits for b; a pod group of two one-GPU members of higher priority takes
    # p's place on n1: its first member displaces p, the second lands on b's other GPU. Both
    # wait for b, which still runs on both GPUs; none is bound before b is gone. (The fair
    # ordering: kube-default's places a group's pods one by one.)
    w = big_victim_world("fair")
    w.pod("ADDED", pod_json("p", priority=2, gpus=2))
    assert w.cycle(2.0) == ["b"]
    for i in range(2):
        w.pod("ADDED", pod_json(f"g{i}", priority=20, host="n1", group="g"))
    assert w.cycle(3.0) == [] and w.displaced == ["p"]
    assert {n: h.waiting for n, h in w.holds.held.items()} == {
        "uid-g0": {"uid-b"},
        "uid-g1": {"uid-b"},
    }
    assert w.posted == [] and w.free_gpus("n1") == 0
    w.drain(w.pod("DELETED", pod_json("b", node="n1", gpus=2)), 4.0)
    assert sorted(b.pod.name for b in w.posted) == ["g0", "g1"]


def group_waiting_for_b() -> World:
    """n1 runs b (two GPUs), n2 has one GPU free; a pod group of two one-GPU members of
    higher priority (the fair ordering) has placed one on n2's free GPU and the other on n1,
    evicting b at time 2: both are held for b -- one bound at once would run alone."""
    w = World("fair")
    w.pod("ADDED", pod_json("b", node="n1", gpus=2))
    w.pod("ADDED", pod_json("w0", priority=5, node="n2", device=0))
    for i in range(2):
        w.pod("ADDED", pod_json(f"g{i}", priority=20, group="g"))
    assert w.cycle(2.0) == ["b"]
    assert {n: h.waiting for n, h in w.holds.held.items()} == {
        "uid-g0": {"uid-b"},
        "uid-g1": {"uid-b"},
    }
    assert w.posted == []
    return w


def test_a_group_binds_together_and_leaves_its_hold_together() -> None:
    # When n1 goes while b terminates, both members leave the hold together: none is ever
    # bound, both are pending again.
    w = group_waiting_for_b()
    w.cache.apply_node("DELETED", decode_node(node_json("n1")), 3.0, CacheChanges())
    w.drain(CacheChanges(), 3.0)
    assert w.holds.held == {} and w.posted == []
    assert {p.name for p in w.cache.schedulable()} == {"g0", "g1"}


def test_a_group_leaving_its_hold_forgets_every_member_before_its_victims_come_back() -> None:
    # n2 goes -- the node of the member that evicted nothing: b comes back whole on n1 only
    # once n1's member is forgotten too (never counted over it).
    w = group_waiting_for_b()
    w.cache.apply_node("DELETED", decode_node(node_json("n2")), 3.0, CacheChanges())
    w.drain(CacheChanges(), 3.0)
    assert w.holds.held == {} and w.posted == []
    assert w.cache.overcommits == 0
    assert w.cache.cluster.placements["uid-b"].terminating and w.free_gpus("n1") == 0


def test_other_binds_onto_a_displacements_node_go_ahead_in_the_same_cycle() -> None:
    # q takes the waiting p's place on n1; g (no GPU) fits n1 beside everything that is
    # there or will be: it is bound in the same cycle (a pod group's member there would
    # otherwise be held back while its group's others bind).
    w = p_waiting_for_v0()
    w.pod("ADDED", pod_json("q", priority=20))
    w.pod("ADDED", pod_json("g", gpus=0, host="n1"))
    assert w.cycle(3.0) == [] and w.displaced == ["p"]
    assert [(b.pod.name, b.node_name) for b in w.posted] == [("g", "n1")]
    assert w.holds.held["uid-q"].waiting == {"uid-v0"} and w.free_gpus("n1") == 0


def test_a_nomination_the_api_reports_cleared_is_cleared_in_the_cache() -> None:
    # q takes the waiting p's place: p's nomination is cleared here at once and in the API
    # later. An event from before that write still shows it; the next one clears it again.
    w = p_waiting_for_v0()
    w.pod("ADDED", pod_json("q", priority=20))
    assert w.cycle(3.0) == [] and w.displaced == ["p"]
    assert "uid-p" not in w.cache.nominated
    w.pod("MODIFIED", pod_json("p", priority=10, nominated="n1"))
    assert w.cache.nominated["uid-p"] == "n1"
    w.pod("MODIFIED", pod_json("p", priority=10))
    assert "uid-p" not in w.cache.nominated


def test_a_group_displacing_a_group_across_nodes_waits_on_every_node() -> None:
    # Group g (two members of two GPUs) evicted b1 on n1 and b2 on n2; both members wait for
    # both. Group h, of higher priority, takes both places. The member on each node waits
    # for the victim still terminating there -- each gets all of g's victims, not only the
    # member on the node of the first displaced pod handled (the other was bound at once, on
    # GPUs its node's victim still ran on).
    w = World("fair")
    for i, node in ((1, "n1"), (2, "n2")):
        w.pod("ADDED", pod_json(f"b{i}", node=node, gpus=2))
    for i in range(2):
        w.pod("ADDED", pod_json(f"g{i}", priority=10, gpus=2, group="g"))
    assert sorted(w.cycle(2.0)) == ["b1", "b2"]
    assert [h.waiting for h in w.holds.held.values()] == [{"uid-b1", "uid-b2"}] * 2
    for i in range(2):
        w.pod("ADDED", pod_json(f"h{i}", priority=20, gpus=2, group="h"))
    assert w.cycle(3.0) == [] and sorted(w.displaced) == ["g0", "g1"]
    assert w.posted == []
    assert {n: h.waiting for n, h in w.holds.held.items()} == {
        "uid-h0": {"uid-b1", "uid-b2"},
        "uid-h1": {"uid-b1", "uid-b2"},
    }
    assert w.cache.overcommits == 0 and w.free_gpus("n1") == w.free_gpus("n2") == 0
    w.drain(w.pod("DELETED", pod_json("b1", node="n1", gpus=2)), 4.0)
    assert w.posted == []
    w.drain(w.pod("DELETED", pod_json("b2", node="n2", gpus=2)), 5.0)
    assert sorted(b.pod.name for b in w.posted) == ["h0", "h1"]
