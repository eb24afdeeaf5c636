"""PodTopologySpread, NodePorts, SchedulingGates and the completed InterPodAffinity.

Expected results follow kube-scheduler 1.34's rules (the differential test in
tests/differential checks the same against the real binary).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from fairgpu.api.errors import InvalidObjectError
from fairgpu.engine.engine import Engine
from fairgpu.engine.plugins.pod_topology_spread import PodTopologySpread
from fairgpu.engine.policies import policy
from fairgpu.engine.scheduler import Scheduler
from tests.builders import cluster, k8s_node, k8s_pod
from tests.engine.profiles import feasible, profile

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def spread(
    key: str = ZONE, skew: int = 1, hard: bool = True, sel: dict[str, str] | None = None, **kw: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "topologyKey": key,
        "maxSkew": skew,
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        "labelSelector": {"matchLabels": sel if sel is not None else {"app": "web"}},
    }
    out.update(kw)
    return out


def zones(*layout: str) -> list[Any]:
    """Nodes n1.. in the given zones ('-' for a node without a zone label)."""
    return [
        k8s_node(f"n{i}", labels={} if z == "-" else {ZONE: z})
        for i, z in enumerate(layout, start=1)
    ]


def web(name: str, **kw: Any) -> Any:
    return k8s_pod(name, labels={"app": "web"}, **kw)


# ---- filter -----------------------------------------------------------------------------------


def test_skew_counts_domains_and_self_match() -> None:
    # zone a: 2 web pods, zone b: 0 -> only zone b keeps the skew within 1.
    state = cluster(*zones("a", "a", "b"), placed=[(web("w1"), "n1"), (web("w2"), "n2")])
    incoming = web("new", topologySpreadConstraints=[spread()])
    assert feasible(["PodTopologySpread"], incoming, state) == ["n3"]
    # A pod its own selector does not match adds nothing: 2 - 0 = 2 > 1 still fails in a.
    other = k8s_pod("x", labels={"app": "db"}, topologySpreadConstraints=[spread(skew=2)])
    assert feasible(["PodTopologySpread"], other, state) == ["n1", "n2", "n3"]


def test_node_without_the_key_fails_and_is_not_a_domain() -> None:
    state = cluster(*zones("a", "-"), placed=[(web("w1"), "n2")])
    incoming = web("new", topologySpreadConstraints=[spread()])
    # n2 lacks the key (missing label); its pod counts for no domain, so zone a is at 0.
    assert feasible(["PodTopologySpread"], incoming, state) == ["n1"]
    sched = Scheduler(profile(["PodTopologySpread"]))
    state2 = cluster(*zones("-"))
    result = sched.schedule(incoming, state2)
    assert "missing required label" in result.reason()


def test_min_domains_treats_the_global_minimum_as_zero() -> None:
    # Two zones, each with one web pod: skew 1 ok everywhere... unless minDomains 3 says the
    # minimum is 0, then 1 + 1 - 0 = 2 > 1 everywhere.
    state = cluster(*zones("a", "b"), placed=[(web("w1"), "n1"), (web("w2"), "n2")])
    plain = web("new", topologySpreadConstraints=[spread()])
    assert feasible(["PodTopologySpread"], plain, state) == ["n1", "n2"]
    strict = web("new", topologySpreadConstraints=[spread(minDomains=3)])
    assert feasible(["PodTopologySpread"], strict, state) == []
    assert feasible(
        ["PodTopologySpread"], web("n", topologySpreadConstraints=[spread(minDomains=2)]), state
    ) == ["n1", "n2"]


def test_node_affinity_policy_decides_which_domains_count() -> None:
    # Zone c holds no web pod but the pod's nodeSelector excludes it: with Honor (default) zone
    # c is not a domain, so the minimum is 1 (zone b); with Ignore it is 0.
    nodes = [
        k8s_node("n1", labels={ZONE: "a", "pool": "x"}),
        k8s_node("n2", labels={ZONE: "b", "pool": "x"}),
        k8s_node("n3", labels={ZONE: "c", "pool": "y"}),
    ]
    placed = [(web("w1"), "n1"), (web("w2"), "n1"), (web("w3"), "n2")]
    state = cluster(*nodes, placed=placed)
    honor = web("h", nodeSelector={"pool": "x"}, topologySpreadConstraints=[spread()])
    assert feasible(["PodTopologySpread"], honor, state) == ["n2", "n3"]
    ignore = web(
        "i",
        nodeSelector={"pool": "x"},
        topologySpreadConstraints=[spread(nodeAffinityPolicy="Ignore")],
    )
    assert feasible(["PodTopologySpread"], ignore, state) == ["n3"]


def test_node_taints_policy_honor_drops_untolerated_domains() -> None:
    nodes = [
        k8s_node("n1", labels={ZONE: "a"}),
        k8s_node(
            "n2", labels={ZONE: "b"}, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]
        ),
    ]
    state = cluster(*nodes, placed=[(web("w1"), "n1")])
    ignore = web("i", topologySpreadConstraints=[spread()])
    assert feasible(["PodTopologySpread"], ignore, state) == ["n2"]
    honor = web("h", topologySpreadConstraints=[spread(nodeTaintsPolicy="Honor")])
    # Zone b is not a domain: the minimum is zone a's 1, so a passes (1 + 1 - 1 = 1).
    assert feasible(["PodTopologySpread"], honor, state) == ["n1", "n2"]


def test_match_label_keys_narrow_the_selector_to_the_pods_own_value() -> None:
    old = [k8s_pod(f"o{i}", labels={"app": "web", "rev": "1"}) for i in range(2)]
    state = cluster(*zones("a", "b"), placed=[(old[0], "n1"), (old[1], "n1")])
    plain = k8s_pod("p", labels={"app": "web", "rev": "2"}, topologySpreadConstraints=[spread()])
    assert feasible(["PodTopologySpread"], plain, state) == ["n2"]
    keyed = k8s_pod(
        "k",
        labels={"app": "web", "rev": "2"},
        topologySpreadConstraints=[spread(matchLabelKeys=["rev"])],
    )
    assert feasible(["PodTopologySpread"], keyed, state) == ["n1", "n2"]


def test_only_pods_of_the_same_namespace_count() -> None:
    state = cluster(*zones("a", "b"), placed=[(k8s_pod("w", "other", labels={"app": "web"}), "n1")])
    incoming = web("new", topologySpreadConstraints=[spread()])
    assert feasible(["PodTopologySpread"], incoming, state) == ["n1", "n2"]


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"maxSkew": 0}, "maxSkew"),
        ({"whenUnsatisfiable": "Maybe"}, "whenUnsatisfiable"),
        ({"minDomains": 2, "whenUnsatisfiable": "ScheduleAnyway"}, "minDomains"),
        ({"nodeTaintsPolicy": "Sometimes"}, "nodeTaintsPolicy"),
        ({"topologyKey": ""}, "topologyKey"),
    ],
)
def test_invalid_constraints_name_the_field(bad: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObjectError, match=f"topologySpreadConstraints\\[0\\].{field}"):
        web("bad", topologySpreadConstraints=[spread(**bad)])


def test_counts_stay_exact_across_assign_and_release() -> None:
    rng = random.Random(7)
    state = cluster(*zones("a", "a", "b", "b", "c"))
    sched = Scheduler(profile(["PodTopologySpread"]))
    placed: list[str] = []
    for i in range(60):
        if placed and rng.random() < 0.3:
            state.release(placed.pop(rng.randrange(len(placed))))
            continue
        p = web(f"w{i}", topologySpreadConstraints=[spread(skew=1)])
        result = sched.schedule(p, state)
        assert result.ok
        state.assign(p, result.node)
        placed.append(p.uid)
        per_zone: dict[str, int] = {}
        for uid in placed:
            z = state.node(state.placements[uid].node).labels[ZONE]
            per_zone[z] = per_zone.get(z, 0) + 1
        counts = [per_zone.get(z, 0) for z in "abc"]
        assert max(counts) - min(counts) <= 1, counts


# ---- score ------------------------------------------------------------------------------------


def _scores(p: Any, state: Any, plugin: PodTopologySpread | None = None) -> list[float]:
    plugin = plugin or PodTopologySpread()
    nodes = np.arange(state.size)
    return list(plugin.normalize(plugin.score(None, p, state, nodes)))  # type: ignore[arg-type]


def test_schedule_anyway_prefers_emptier_domains() -> None:
    placed = [(web("w1"), "n1"), (web("w2"), "n1"), (web("w3"), "n2")]
    state = cluster(*zones("a", "b", "c"), placed=placed)
    incoming = web("p", topologySpreadConstraints=[spread(hard=False)])
    # raw = count*log(3+2) + 0 -> a: 2*1.609=3.2 -> 3, b: 1.6 -> 2, c: 0; max 3, min 0:
    # 100*(3+0-s)/3 -> a 0, b 33, c 100.
    assert _scores(incoming, state) == [0.0, 33.0, 100.0]


def test_score_ignores_nodes_without_the_key() -> None:
    state = cluster(*zones("a", "-"), placed=[(web("w1"), "n1")])
    incoming = web("p", topologySpreadConstraints=[spread(hard=False)])
    assert _scores(incoming, state) == [100.0, 0.0]


def test_system_default_constraints_apply_to_controller_pods_only() -> None:
    state = cluster(*zones("a", "a"), placed=[(web("w1"), "n1")])
    bare = web("bare")
    assert _scores(bare, state) == [0.0, 0.0]  # no constraints at all: no preference

    owned = k8s_pod(
        "owned",
        labels={"app": "web"},
    )
    owned.owner_kind = "ReplicaSet"
    # hostname maxSkew 3: n1 raw = 1*log(2+2) + 2 = 3.39 -> 3, n2 = 2; zone: both a -> equal.
    scores = _scores(owned, state)
    assert scores[1] > scores[0]
    assert _scores(owned, state, PodTopologySpread(default_constraints="none")) == [0.0, 0.0]
    with pytest.raises(ValueError, match="default_constraints"):
        PodTopologySpread(default_constraints=[{"topologyKey": "", "maxSkew": 1}])


def test_a_statefulsets_pods_spread_over_its_other_pods_not_their_own_names() -> None:
    """A StatefulSet's pods carry labels of their own (name, index, revision) that its
    selector never holds: the default spreading counts its other pods -- vllm-0 on n1 makes
    n2 the better node for vllm-1 -- not only pods with vllm-1's own name (none)."""

    def replica(i: int, revision: str) -> Any:
        labels = {
            "app": "vllm",
            "statefulset.kubernetes.io/pod-name": f"vllm-{i}",
            "apps.kubernetes.io/pod-index": str(i),
            "controller-revision-hash": revision,
        }
        pod = k8s_pod(f"vllm-{i}", labels=labels)
        pod.owner_kind = "StatefulSet"
        return pod

    state = cluster(*zones("a", "a"), placed=[(replica(0, "rev-1"), "n1")])
    scores = _scores(replica(1, "rev-2"), state)
    assert scores[1] > scores[0]


def test_default_constraints_apply_to_a_bare_pod_a_service_selects() -> None:
    front = {"app": "web", "tier": "front"}
    placed = [(web("w1"), "n1"), (k8s_pod("w2", labels=front), "n2")]
    state = cluster(*zones("a", "a"), placed=placed)
    bare = k8s_pod("bare", labels=front)
    assert _scores(bare, state) == [0.0, 0.0]  # no Service, no owner: no default constraints
    # Services of another namespace, or selecting other pods, or none at all: still none.
    state.service_selectors = {"other": [{"app": "web"}], "default": [{"app": "db"}, {}]}
    assert _scores(bare, state) == [0.0, 0.0]
    # Two Services select the pod: the merged selector {app: web, tier: front} counts w2
    # only, so hostname spreading prefers n1 (w1 lacks the tier label).
    state.service_selectors = {"default": [{"app": "web"}, {"tier": "front"}, {"app": "db"}]}
    scores = _scores(bare, state)
    assert scores[0] > scores[1]
    # One Service selecting {app: web} counts both: no preference between n1 and n2.
    state.service_selectors = {"default": [{"app": "web"}]}
    assert _scores(bare, state) == [100.0, 100.0]
    assert _scores(bare, state, PodTopologySpread(default_constraints="none")) == [0.0, 0.0]


def test_a_service_gives_defaults_to_a_pod_of_another_controller() -> None:
    state = cluster(*zones("a", "a"), placed=[(web("w1"), "n1")])
    job_pod = web("job-pod")
    job_pod.owner_kind = "Job"  # not a kind kube's DefaultSelector reads
    assert _scores(job_pod, state) == [0.0, 0.0]
    state.service_selectors = {"default": [{"app": "web"}]}
    scores = _scores(job_pod, state)
    assert scores[1] > scores[0]


# ---- NodePorts --------------------------------------------------------------------------------


def ports(*items: dict[str, Any], init_sidecar: bool = False) -> dict[str, Any]:
    container = {"name": "c", "ports": list(items)}
    if init_sidecar:
        return {"initContainers": [{**container, "restartPolicy": "Always"}]}
    return {"containers": [container]}


@pytest.mark.parametrize(
    ("existing", "wanted", "ok"),
    [
        ({"hostPort": 80}, {"hostPort": 80}, False),
        ({"hostPort": 80}, {"hostPort": 81}, True),
        ({"hostPort": 80, "protocol": "UDP"}, {"hostPort": 80}, True),
        ({"hostPort": 80, "hostIP": "10.0.0.1"}, {"hostPort": 80, "hostIP": "10.0.0.2"}, True),
        ({"hostPort": 80, "hostIP": "10.0.0.1"}, {"hostPort": 80}, False),
        ({"hostPort": 80}, {"hostPort": 80, "hostIP": "10.0.0.2"}, False),
        ({"containerPort": 80}, {"containerPort": 80}, True),
    ],
)
def test_node_ports(existing: dict[str, Any], wanted: dict[str, Any], ok: bool) -> None:
    def with_ports(name: str, spec: dict[str, Any]) -> Any:
        return k8s_pod(name, **ports({"containerPort": 8080, **spec}))

    state = cluster(k8s_node("n1"), k8s_node("n2"), placed=[(with_ports("a", existing), "n1")])
    expected = ["n1", "n2"] if ok else ["n2"]
    assert feasible(["NodePorts"], with_ports("b", wanted), state) == expected


def test_sidecar_ports_count_and_plain_init_ports_do_not() -> None:
    sidecar = k8s_pod(
        "s",
        **ports({"containerPort": 1, "hostPort": 90}, init_sidecar=True),
        containers=[{"name": "m"}],
    )
    plain = k8s_pod(
        "i", initContainers=[{"name": "c", "ports": [{"containerPort": 1, "hostPort": 91}]}]
    )
    assert [p.port for p in sidecar.host_ports] == [90]
    assert plain.host_ports == ()


def test_a_host_network_pods_container_ports_are_host_ports() -> None:
    # As the API server defaults them: a pod read from a file gets the same.
    web = k8s_pod("w", hostNetwork=True, **ports({"containerPort": 8080}))
    assert [(p.port, p.host_ip) for p in web.host_ports] == [(8080, "0.0.0.0")]
    other = k8s_pod("o", **ports({"containerPort": 8080, "hostPort": 8080}))
    state = cluster(k8s_node("n1"), k8s_node("n2"), placed=[(web, "n1")])
    assert feasible(["NodePorts"], other, state) == ["n2"]
    assert k8s_pod("p", **ports({"containerPort": 8080})).host_ports == ()


# ---- SchedulingGates --------------------------------------------------------------------------


@pytest.mark.parametrize("ordering", ["fair", "kube-default"])
def test_gated_pods_are_not_scheduled_nor_counted(ordering: str) -> None:
    state = cluster(k8s_node("n1"))
    gated = k8s_pod("g", schedulingGates=[{"name": "example.com/wait"}, {"name": "b"}])
    free = k8s_pod("f")
    engine = Engine(policy("spread"), ordering=ordering)  # type: ignore[arg-type]
    out = engine.cycle(state, [gated, free], 0.0)
    assert [b.pod.name for b in out.binds] == ["f"]
    reasons = {u.pod.name: u.reason for u in out.unschedulable}
    assert reasons == {"g": "waiting for scheduling gates: [example.com/wait b]"}
    # Gates removed: the next cycle binds it.
    ungated = k8s_pod("g")
    out = engine.cycle(state, [ungated], 1.0)
    assert [b.pod.name for b in out.binds] == ["g"]


def test_scheduler_refuses_a_gated_pod_directly() -> None:
    state = cluster(k8s_node("n1"))
    result = Scheduler(policy("spread")).schedule(
        k8s_pod("g", schedulingGates=[{"name": "x"}]), state
    )
    assert not result.ok and "scheduling gates" in result.reason()


# ---- InterPodAffinity: namespaceSelector, matchLabelKeys, mismatchLabelKeys --------------------


def aff_term(sel: dict[str, str], key: str = HOST, **kw: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": sel}, "topologyKey": key, **kw}


def test_namespace_selector_uses_namespace_labels() -> None:
    state = cluster(
        k8s_node("n1"),
        k8s_node("n2"),
        placed=[(k8s_pod("a", "team-a", labels={"app": "db"}), "n1")],
    )
    term = aff_term({"app": "db"}, namespaceSelector={"matchLabels": {"tier": "prod"}})
    incoming = k8s_pod(
        "p", affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    )
    # team-a unknown/unlabelled: no pod matches, and the incoming pod does not match itself.
    assert feasible(["InterPodAffinity"], incoming, state) == []
    state.namespace_labels = {"team-a": {"tier": "prod"}}
    assert feasible(["InterPodAffinity"], incoming, state) == ["n1"]
    # The metadata.name label every Namespace carries selects by name.
    by_name = aff_term(
        {"app": "db"},
        namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
    )
    state.namespace_labels = {}
    anti = k8s_pod(
        "q",
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [by_name]}},
    )
    assert feasible(["InterPodAffinity"], anti, state) == ["n2"]


def test_match_and_mismatch_label_keys() -> None:
    placed = [
        (k8s_pod("v1", labels={"app": "web", "rev": "1"}), "n1"),
        (k8s_pod("v2", labels={"app": "web", "rev": "2"}), "n2"),
    ]
    state = cluster(k8s_node("n1"), k8s_node("n2"), k8s_node("n3"), placed=placed)
    match = k8s_pod(
        "m",
        labels={"app": "web", "rev": "2"},
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    aff_term({"app": "web"}, matchLabelKeys=["rev"])
                ]
            }
        },
    )
    assert feasible(["InterPodAffinity"], match, state) == ["n1", "n3"]
    mismatch = k8s_pod(
        "x",
        labels={"app": "web", "rev": "2"},
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    aff_term({"app": "web"}, mismatchLabelKeys=["rev"])
                ]
            }
        },
    )
    assert feasible(["InterPodAffinity"], mismatch, state) == ["n2", "n3"]


def test_a_gated_pod_preempts_nobody() -> None:
    state = cluster(k8s_node("n1", cpu="1"))
    low = k8s_pod("low", requests={"cpu": "1"}, priority=0)
    state.assign(low, 0)
    gated = k8s_pod("high", requests={"cpu": "1"}, priority=1000, schedulingGates=[{"name": "x"}])
    engine = Engine(policy("spread"), ordering="kube-default")
    out = engine.cycle(state, [gated], 0.0)
    assert out.evictions == [] and out.binds == []
    assert "low" in {p.name for p in state.pods.values()}


@pytest.mark.parametrize("ordering", ["fair", "kube-default"])
def test_a_port_conflict_is_not_borrowed_by_a_pod_without_ports(ordering: str) -> None:
    # The cycle reuses a failure for pods of the same shape; a host port is part of it.
    state = cluster(k8s_node("n1"))
    state.assign(k8s_pod("holder", **ports({"containerPort": 1, "hostPort": 80})), 0)
    clash = k8s_pod("clash", requests={"cpu": "1"}, **ports({"containerPort": 1, "hostPort": 80}))
    plain = k8s_pod("plain", requests={"cpu": "1"})
    plain.created = clash.created + 1  # tried after the clash in both orderings
    engine = Engine(policy("spread"), ordering=ordering)  # type: ignore[arg-type]
    out = engine.cycle(state, [clash, plain], 0.0)
    assert [b.pod.name for b in out.binds] == ["plain"]


def test_a_spread_failure_clears_when_a_matching_pod_lands_elsewhere() -> None:
    # Zone b's node has room for small pods only: the spread pod fails in zone a (1 + 1 - 0).
    state = cluster(
        k8s_node("n1", labels={ZONE: "a"}),
        k8s_node("n2", cpu="1", labels={ZONE: "b"}),
        placed=[(web("w1"), "n1")],
    )
    big = web("big", requests={"cpu": "2"}, topologySpreadConstraints=[spread()])
    engine = Engine(policy("spread"), ordering="kube-default")
    assert engine.cycle(state, [big], 0.0).binds == []
    # A matching pod lands in zone b (an assign: nothing is released), so the minimum is 1.
    state.assign(web("small", requests={"cpu": "100m"}), 1)
    assert [b.node_name for b in engine.cycle(state, [big], 1.0).binds] == ["n1"]


def test_pod_indexes_match_a_full_scan_under_churn() -> None:
    from fairgpu.engine.plugins._pod_counts import carried_terms, matching_counts
    from fairgpu.model.selectors import LabelSelector

    rng = random.Random(3)
    state = cluster(*[k8s_node(f"n{i}", labels={ZONE: "ab"[i % 2]}) for i in range(6)])
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST}
            ]
        }
    }
    sel = LabelSelector((("app", "web"),))

    def extract(p: Any) -> tuple[Any, ...]:
        return tuple((t, t.selector) for t in p.anti_affinity_terms)

    placed: list[str] = []
    for i in range(120):
        roll = rng.random()
        if roll < 0.3 and placed:
            state.release(placed.pop(rng.randrange(len(placed))))
        elif roll < 0.33:
            name = f"n{rng.randrange(6)}"
            placed = [u for u in placed if state.node(state.placements[u].node).name != name]
            state.remove_node(name)
            state.add_node(k8s_node(name, labels={ZONE: "c"}))
        else:
            app = rng.choice(["web", "db"])
            p = k8s_pod(f"p{i}", labels={"app": app}, affinity=anti if rng.random() < 0.3 else None)
            state.assign(p, rng.choice([s for s, _ in state.active_nodes()]))
            placed.append(p.uid)
        counts = matching_counts(state, (sel,), lambda p: sel.matches(p.labels))
        expected = np.zeros(state.size, dtype=np.int64)
        carriers = np.zeros(state.size, dtype=np.int64)
        for uid, p in state.pods.items():
            expected[state.placements[uid].node] += p.labels.get("app") == "web"
            carriers[state.placements[uid].node] += bool(p.anti_affinity_terms)
        assert counts.tolist() == expected.tolist()
        found = carried_terms(state, "anti-test", extract, {"app": "db"})
        total = sum((arr for _, arr in found), np.zeros(state.size, dtype=np.int64))
        assert total.tolist() == carriers.tolist()
        assert carried_terms(state, "anti-test", extract, {"app": "web"}) == []


def test_terminating_pods_do_not_count_for_spread_but_do_for_affinity() -> None:
    # Zone a holds a web pod whose deletion has begun; kube-scheduler's spread skips it (a
    # rolling update is not blocked by the pods it replaces), so zone a is at 0 like zone b.
    state = cluster(*zones("a", "b"), placed=[(web("w1"), "n1")])
    incoming = web("new", topologySpreadConstraints=[spread()])
    assert feasible(["PodTopologySpread"], incoming, state) == ["n2"]
    state.mark_terminating(next(u for u, p in state.pods.items() if p.name == "w1"), True)
    assert feasible(["PodTopologySpread"], incoming, state) == ["n1", "n2"]
    # Required anti-affinity still sees it (InterPodAffinity counts terminating pods).
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ZONE}
            ]
        }
    }
    loner = k8s_pod("loner", affinity=anti)
    assert feasible(["InterPodAffinity"], loner, state) == ["n2"]
