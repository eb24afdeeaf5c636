"""Gangs (all-or-nothing, timeout), starvation reservations, and the no-preemption-cycle rule."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgpu.engine.engine import Engine
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info
from tests.fairness.runner import gpus_by_namespace, run_until_idle


def member(i: int, ns: str = "g", min_member: int = 4, **kw: Any) -> Any:
    return pod_info(f"m{i}", ns, group="job", min_member=min_member, **kw)


def test_partial_gang_is_never_bound() -> None:
    state = cluster(node_info("n1", gpus=3))
    eng = Engine()
    res = eng.cycle(state, [member(i) for i in range(4)], 0.0)
    assert not res.binds and not state.placements
    assert "only 3 of 4 needed members fit together" in res.unschedulable[0].reason
    state = cluster(node_info("n1", gpus=2), node_info("n2", gpus=2))
    res = eng.cycle(state, [member(i) for i in range(4)], 1.0)
    assert len(res.binds) == 4


def test_gang_waits_for_all_members_and_for_its_podgroup() -> None:
    state = cluster(node_info("n1", gpus=8))
    res = Engine().cycle(state, [member(i) for i in range(3)], 0.0)
    assert not res.binds and "waiting for members" in res.unschedulable[0].reason
    cosched = [
        pod_info(f"c{i}", "g", labels={"scheduling.x-k8s.io/pod-group": "pg"}) for i in range(2)
    ]
    res = Engine().cycle(state, cosched, 0.0)
    assert not res.binds and "minMember unknown" in res.unschedulable[0].reason
    eng = Engine()
    eng.register_pod_groups({"g/pg": 2})
    volcano = [
        pod_info(f"v{i}", "g", annotations={"scheduling.k8s.io/group-name": "pg"}) for i in range(2)
    ]
    assert len(eng.cycle(state, volcano, 0.0).binds) == 2


def test_gang_below_min_member_is_released_after_the_timeout() -> None:
    eng = Engine(tenancy=parse_config({"gang": {"timeoutSeconds": 30}}))
    placed = [(member(i), "n1", 0.0) for i in range(2)]  # 2 of 4 survived, e.g. after a crash
    state = cluster(node_info("n1", gpus=2), placed=placed)
    assert not eng.cycle(state, [], 10.0).evictions
    assert not eng.cycle(state, [], 39.0).evictions
    res = eng.cycle(state, [], 41.0)
    assert sorted(e.pod.name for e in res.evictions) == ["m0", "m1"]
    assert {e.kind for e in res.evictions} == {"gang-timeout"} and not state.placements


def test_members_that_ran_to_completion_count_toward_min_member() -> None:
    # Two of three members were bound (the scheduler stopped before the third's bind) and ran
    # to completion: the group ran, so its last member starts alone instead of waiting for
    # siblings that will never come back.
    state = cluster(node_info("n1", gpus=4))
    straggler = member(2, min_member=3)
    res = Engine().cycle(state, [straggler], 0.0)
    assert not res.binds and "1 pending < minMember 3" in res.unschedulable[0].reason
    state.complete(member(0, min_member=3))
    res = Engine().cycle(state, [straggler], 1.0)
    assert not res.binds
    assert "0 running + 1 completed + 1 pending < minMember 3" in res.unschedulable[0].reason
    state.complete(member(1, min_member=3))
    eng = Engine()
    assert [b.pod.name for b in eng.cycle(state, [straggler], 2.0).binds] == ["m2"]
    # Completed members whose objects are deleted no longer count.
    state.release(straggler.uid)
    state.forget_completed(member(1, min_member=3).uid)
    res = eng.cycle(state, [straggler], 3.0)
    assert not res.binds and "1 completed + 1 pending" in res.unschedulable[0].reason


def test_a_group_whose_members_finish_one_by_one_is_not_timed_out() -> None:
    eng = Engine(tenancy=parse_config({"gang": {"timeoutSeconds": 30}}))
    placed = [(member(i, min_member=3), "n1", 0.0) for i in range(1, 3)]
    state = cluster(node_info("n1", gpus=3), placed=placed)
    state.complete(member(0, min_member=3))  # the first member finished early
    assert not eng.cycle(state, [], 10.0).evictions
    assert not eng.cycle(state, [], 100.0).evictions
    assert len(state.placements) == 2


def test_gang_reclaims_as_a_unit_or_not_at_all() -> None:
    placed = [(pod_info(f"a{j}", "a"), "n1" if j < 8 else "n2", 0.0) for j in range(16)]
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8), placed=placed)
    # reclaimMinRuntimeSeconds off: the victims ran only 10 s (the rule here is the gang's).
    guards = parse_config({"preemption": {"reclaimMinRuntimeSeconds": 0}})
    res = Engine(tenancy=guards).cycle(state, [member(i, min_member=8) for i in range(8)], 10.0)
    assert len(res.binds) == 8 and len(res.evictions) == 8
    assert gpus_by_namespace(state) == {"a": 8, "g": 8}
    # Twelve members would need B above A afterwards: the whole gang waits, nothing evicted.
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8), placed=placed)
    res = Engine().cycle(state, [member(i, min_member=12) for i in range(12)], 10.0)
    assert not res.binds and not res.evictions and len(state.placements) == 16


def _a_and_g(weight_a: int) -> Any:
    """Queues a (``weight_a``) and g (1); reclaim's time rules off (the rule here is the
    share's)."""
    return parse_config(
        {
            "queues": [{"name": "a", "weight": weight_a}, {"name": "g", "weight": 1}],
            "preemption": {"reclaimMinRuntimeSeconds": 0, "minRuntimeSeconds": 0},
        }
    )


def test_a_gang_reclaims_only_if_its_queue_stays_within_its_share_with_every_member() -> None:
    """A gang starts whole, so the reclaim rule judges its queue holding all its members:
    a first member alone within the share is not enough when the victims' torn-down group
    leaves room for the rest, which would land there without a rule of their own."""
    # 24 GPUs; a (weight 3) deserves 18 and holds all 24: a 2 x 4-GPU group on n1-n2 and
    # sixteen one-GPU pods on n3-n6. g (weight 1) deserves 6 and asks a 2 x 4-GPU gang.
    nodes = [node_info(f"n{i}", gpus=4) for i in range(1, 7)]
    # The group started last: it is the cheapest victim, and its teardown frees two nodes.
    placed = [
        (pod_info(f"ag{j}", "a", group="ag", min_member=2, gpus=4), f"n{j + 1}", 90.0)
        for j in range(2)
    ]
    placed += [(pod_info(f"s{j}", "a"), f"n{3 + j // 4}", 0.0) for j in range(16)]
    gang = [member(i, min_member=2, gpus=4) for i in range(2)]
    state = cluster(*nodes, placed=placed)
    res = Engine(tenancy=_a_and_g(3)).cycle(state, gang, 100.0)
    # Its first member alone (4 of 6) would pass; the gang (8 of 6) does not.
    assert not res.binds and not res.evictions
    assert (
        "reclaim refused: queue 'g' would exceed its fair share after the move, "
        "counting the 2 members its pod group still needs"
    ) in res.unschedulable[0].reason
    assert gpus_by_namespace(state) == {"a": 24}
    # Deserving 8 (weights 2:1 over 24), the same gang reclaims and starts.
    state = cluster(*nodes, placed=placed)
    res = Engine(tenancy=_a_and_g(2)).cycle(state, gang, 100.0)
    assert len(res.binds) == 2 and {e.pod.name for e in res.evictions} == {"ag0", "ag1"}
    assert gpus_by_namespace(state) == {"a": 16, "g": 8}


def test_two_gangs_of_one_shape_are_each_told_their_own_reclaim_refusal() -> None:
    """The gang memo hands a refusal to every gang of the same shape: no reason may name
    another group (it once said "counting the 2 members g/first still needs" to g/second)."""
    nodes = [node_info(f"n{i}", gpus=4) for i in range(1, 7)]
    placed = [(pod_info(f"s{j}", "a"), f"n{1 + j // 4}", 0.0) for j in range(24)]
    gangs = [
        pod_info(f"{g}{i}", "g", group=g, min_member=2, gpus=4, created=float(k))
        for k, g in enumerate(("first", "second"))
        for i in range(2)
    ]
    state = cluster(*nodes, placed=placed)
    res = Engine(tenancy=_a_and_g(3)).cycle(state, gangs, 100.0)
    assert not res.binds and not res.evictions
    reasons = {u.pod.name: u.reason for u in res.unschedulable}
    assert set(reasons) == {"first0", "first1", "second0", "second1"}
    for name, reason in sorted(reasons.items(), reverse=True):  # the second gang first
        group = name.rstrip("01")
        other = "second" if group == "first" else "first"
        assert reason.startswith(f"pod group g/{group}:"), reason
        assert f"g/{other}" not in reason, reason
        assert "counting the 2 members its pod group still needs" in reason


def starving(reserve: bool) -> tuple[int | None, list[Any]]:
    """A stream of 1-GPU pods against an 8-GPU gang, preemption off."""
    config = {
        "preemption": {"enabled": False},
        "starvation": {"enabled": reserve, "reserveAfterSeconds": 10, "minGangPods": 8},
    }
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8))
    arrivals = [
        (j * 0.5, pod_info(f"s{j}", "s", created=j * 0.5, duration=20), 20.0) for j in range(300)
    ]
    arrivals += [(5.0, member(i, min_member=8, created=5.0), 30.0) for i in range(8)]
    results, _ = run_until_idle(Engine(tenancy=parse_config(config)), state, arrivals, 100)
    start = next(
        (t for t, r in enumerate(results) if any(b.pod.namespace == "g" for b in r.binds)), None
    )
    return start, results


def test_large_gang_gets_a_reservation_and_starts_within_the_bound() -> None:
    start, results = starving(reserve=True)
    # Reserved after 10 s of waiting at t=5; reserved nodes drain within one run time (20 s).
    assert start is not None and start <= 5 + 10 + 20
    assert any(r.reserved for r in results)
    never, _ = starving(reserve=False)
    assert never is None


# ---- no preemption cycles ------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    holdings=st.lists(st.integers(0, 8), min_size=3, max_size=3),
    weights=st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=3, max_size=3),
    sizes=st.lists(st.sampled_from([1, 2]), min_size=3, max_size=3),
)
def test_no_preemption_cycle(holdings: list[int], weights: list[float], sizes: list[int]) -> None:
    """After any cycle, re-running with the victims pending and nothing else changed never
    evicts a pod of the queue that just preempted in favour of a queue that just lost one."""
    names = ["q0", "q1", "q2"]
    # The reclaim rule alone: without the minimum runtime and the cooldown (both on by
    # default), which would make this vacuous (victims ran 10 s, the GPUs just moved).
    config = parse_config(
        {
            "queues": [{"name": n, "weight": w} for n, w in zip(names, weights, strict=True)],
            "preemption": {"reclaimMinRuntimeSeconds": 0, "reclaimCooldownSeconds": 0},
        }
    )
    state = cluster(node_info("n1", gpus=8), node_info("n2", gpus=8), node_info("n3", gpus=8))
    eng = Engine(tenancy=config)
    slots = iter(range(24))
    for qi, count in enumerate(holdings):
        for j in range(count):
            s = next(slots)
            state.assign(pod_info(f"r{j}", names[qi]), s // 8, (s % 8,), started=0.0)
    pending = [
        pod_info(f"p{j}", n, gpus=sizes[i], created=j)
        for i, n in enumerate(names)
        for j in range(6)
    ]
    first = eng.cycle(state, pending, 10.0)
    taken = {
        (eng.tenant(e.preemptor).queue, eng.tenant(e.pod).queue)
        for e in first.evictions
        if e.preemptor
    }
    still = [p for p in pending if p.uid not in state.placements] + [e.pod for e in first.evictions]
    second = eng.cycle(state, still, 10.0)
    for e in second.evictions:
        back = (eng.tenant(e.preemptor).queue, eng.tenant(e.pod).queue)
        assert (back[1], back[0]) not in taken, (back, taken)


@settings(max_examples=200, deadline=None)
@given(
    usage=st.lists(st.integers(0, 16), min_size=2, max_size=2),
    take=st.integers(1, 4),
    give=st.integers(1, 4),
    weights=st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=2, max_size=2),
)
def test_reclaim_rule_is_antisymmetric(
    usage: list[int], take: int, give: int, weights: list[float]
) -> None:
    """If Q may reclaim from V, then in the resulting state V may never reclaim from Q."""
    config = parse_config(
        {"queues": [{"name": "q", "weight": weights[0]}, {"name": "v", "weight": weights[1]}]}
    )
    eng = Engine(tenancy=config)
    state = cluster(
        node_info("n1", gpus=8),
        node_info("n2", gpus=8),
        node_info("n3", gpus=8),
        node_info("n4", gpus=8),
    )
    slots = iter(range(32))
    victims = []
    for name, count in zip(("q", "v"), usage, strict=True):
        for j in range(count):
            s = next(slots)
            p = pod_info(f"r{j}", name, gpus=1)
            state.assign(p, s // 8, (s % 8,), started=0.0)
            if name == "v" and j < give:
                victims.append(p)
    eng.book.sync(state)
    if len(victims) < give or sum(usage) - give + take > 32:
        return  # too few victims, or no room on the 32 GPUs for the preemptor's pods
    vec = eng.book.pending_vector(pod_info("x", "q", gpus=take))
    if not eng.reclaim_allowed("q", vec, victims):
        return
    for v in victims:  # apply the move
        state.release(v.uid)
    placed = []
    for j in range(take):
        free = np.argwhere(state.device_milli_free[: state.size] >= 1000)
        n, d = (int(x) for x in free[0])
        p = pod_info(f"new{j}", "q", gpus=1)
        state.assign(p, n, (d,), started=1.0)
        placed.append(p)
    eng.book.sync(state)
    for k in range(1, len(placed) + 1):
        back = eng.book.pending_vector(pod_info("y", "v", gpus=1))
        assert not eng.reclaim_allowed("v", back, placed[:k])


def test_a_gang_refused_by_both_rules_is_told_the_reclaim_rule_first() -> None:
    """Queue g's user g-hi submits a gang of two 8-GPU members at priority 10; g-lo holds 4
    GPUs at priority 0, queue a 10 (above its share of 8). The gang would take g above its
    share (counting both members) and g-hi above its share of g: the reason names the
    reclaim rule, why queue a gives nothing back, and then the within-queue rule."""
    nodes = [node_info(f"n{i}", gpus=8) for i in (1, 2)]
    placed = [(pod_info(f"a{j}", "a"), f"n{1 + j // 8}", 0.0) for j in range(10)]
    placed += [(pod_info(f"lo{j}", "g", user="g-lo"), "n2", 0.0) for j in range(4)]
    gang = [
        pod_info(f"hi{i}", "g", group="hi", min_member=2, gpus=8, priority=10, user="g-hi")
        for i in range(2)
    ]
    pending = [*gang, pod_info("a8", "a"), pod_info("lo4", "g", user="g-lo")]
    res = Engine(tenancy=_a_and_g(1)).cycle(cluster(*nodes, placed=placed), pending, 100.0)
    assert not res.evictions and not any(b.pod.name.startswith("hi") for b in res.binds)
    reason = next(u.reason for u in res.unschedulable if u.pod.name == "hi0")
    share = reason.index("reclaim refused: queue 'g' would exceed its fair share after the move")
    within = reason.index("priority preemption refused: user 'g-hi' would be above its share")
    assert share < within, reason
