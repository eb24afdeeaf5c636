"""Table-driven semantics of every built-in filter, compared with kube-scheduler's behaviour."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fairgpu.engine.scheduler import Scheduler
from tests.builders import cluster, expr, k8s_node, k8s_pod, node_affinity, taint
from tests.engine.profiles import feasible, profile

# ---- NodeAffinity: nodeSelector and required node affinity ---------------------------------------
AFFINITY_NODES = [
    k8s_node("n1", labels={"zone": "a", "disktype": "ssd", "gen": "3"}),
    k8s_node("n2", labels={"zone": "b", "disktype": "hdd", "gen": "10"}),
    k8s_node("n3", labels={"zone": "c", "gen": "x"}),
    k8s_node("n4", labels={"gen": "1_000"}),
    k8s_node("n5", labels={"gen": "-7", "zone": "A"}),
]

AFFINITY_CASES = [
    pytest.param({"nodeSelector": {"zone": "a"}}, ["n1"], id="nodeSelector"),
    pytest.param({"nodeSelector": {"zone": "a", "disktype": "hdd"}}, [], id="nodeSelector-AND"),
    pytest.param({"nodeSelector": {"zone": ""}}, [], id="nodeSelector-empty-value"),
    pytest.param(
        {"affinity": node_affinity([expr("zone", "In", "a", "b")])}, ["n1", "n2"], id="In"
    ),
    pytest.param(
        {"affinity": node_affinity([expr("zone", "NotIn", "a")])},
        ["n2", "n3", "n4", "n5"],
        id="NotIn-matches-nodes-without-the-label",
    ),
    pytest.param(
        {"affinity": node_affinity([expr("disktype", "Exists")])}, ["n1", "n2"], id="Exists"
    ),
    pytest.param(
        {"affinity": node_affinity([expr("zone", "DoesNotExist")])}, ["n4"], id="DoesNotExist"
    ),
    pytest.param(
        {"affinity": node_affinity([expr("gen", "Gt", "5")])},
        ["n2"],
        id="Gt-ignores-non-integer-labels",
    ),
    pytest.param(
        {"affinity": node_affinity([expr("gen", "Lt", "5")])}, ["n1", "n5"], id="Lt-negative"
    ),
    pytest.param(
        {"affinity": node_affinity([expr("gen", "Gt", "5.5")])}, [], id="Gt-non-integer-bound"
    ),
    pytest.param(
        {"affinity": node_affinity([expr("gen", "Gt", "999")])},
        [],
        id="Gt-underscored-label-is-not-an-integer",
    ),
    pytest.param(
        {"affinity": node_affinity([expr("missing", "Lt", "100")])}, [], id="Lt-missing-label"
    ),
    pytest.param(
        {"affinity": node_affinity([expr("zone", "In", "a", "b"), expr("disktype", "In", "ssd")])},
        ["n1"],
        id="expressions-ANDed",
    ),
    pytest.param(
        {"affinity": node_affinity([expr("zone", "In", "c")], [expr("disktype", "In", "hdd")])},
        ["n2", "n3"],
        id="terms-ORed",
    ),
    pytest.param({"affinity": node_affinity([])}, [], id="empty-term-matches-nothing"),
    pytest.param(
        {"affinity": node_affinity([], [expr("zone", "In", "c")])},
        ["n3"],
        id="empty-term-ORed-with-real-term",
    ),
    pytest.param(
        {"affinity": node_affinity(fields=[expr("metadata.name", "In", "n2")])},
        ["n2"],
        id="matchFields-In",
    ),
    pytest.param(
        {"affinity": node_affinity(fields=[expr("metadata.name", "NotIn", "n2")])},
        ["n1", "n3", "n4", "n5"],
        id="matchFields-NotIn",
    ),
    pytest.param(
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [expr("gen", "Exists")],
                                "matchFields": [expr("metadata.name", "In", "n3")],
                            }
                        ]
                    }
                }
            }
        },
        ["n3"],
        id="matchFields-ANDed-with-expressions",
    ),
    pytest.param(
        {
            "nodeSelector": {"disktype": "ssd"},
            "affinity": node_affinity([expr("zone", "In", "b")]),
        },
        [],
        id="nodeSelector-AND-affinity",
    ),
    pytest.param(
        {"affinity": node_affinity([expr("zone", "In", "a")]) | {"podAffinity": None}},
        ["n1"],
        id="values-are-case-sensitive",
    ),
    pytest.param(
        {
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 5, "preference": {"matchExpressions": [expr("zone", "In", "a")]}}
                    ]
                }
            }
        },
        ["n1", "n2", "n3", "n4", "n5"],
        id="preferred-terms-do-not-filter",
    ),
]


@pytest.mark.parametrize(("spec", "expected"), AFFINITY_CASES)
def test_node_affinity(spec: dict[str, Any], expected: list[str]) -> None:
    state = cluster(*AFFINITY_NODES)
    assert feasible(["NodeAffinity"], k8s_pod(**spec), state) == expected


# ---- TaintToleration -----------------------------------------------------------------------------
TAINT_NODES = [
    k8s_node("clean"),
    k8s_node("nosched", taints=[taint("k", "v", "NoSchedule")]),
    k8s_node("noexec", taints=[taint("k", "v", "NoExecute")]),
    k8s_node("prefer", taints=[taint("k", "v", "PreferNoSchedule")]),
    k8s_node("two", taints=[taint("a", "1", "NoSchedule"), taint("b", "2", "NoSchedule")]),
    k8s_node("novalue", taints=[taint("gpu", "", "NoSchedule")]),
]
ALL_TAINT_NODES = sorted(n.name for n in TAINT_NODES)


def tol(**kw: str) -> dict[str, str]:
    return kw


TAINT_CASES = [
    pytest.param([], ["clean", "prefer"], id="no-tolerations"),
    pytest.param(
        [tol(key="k", operator="Equal", value="v", effect="NoSchedule")],
        ["clean", "nosched", "prefer"],
        id="Equal-with-effect",
    ),
    pytest.param(
        [tol(key="k", value="v")],
        ["clean", "noexec", "nosched", "prefer"],
        id="default-operator-Equal-empty-effect-matches-all-effects",
    ),
    pytest.param([tol(key="k", value="w")], ["clean", "prefer"], id="Equal-wrong-value"),
    pytest.param([tol(key="K", value="v")], ["clean", "prefer"], id="keys-case-sensitive"),
    pytest.param(
        [tol(key="k", operator="Exists")],
        ["clean", "noexec", "nosched", "prefer"],
        id="Exists-any-value",
    ),
    pytest.param(
        [tol(key="k", operator="Exists", effect="NoExecute")],
        ["clean", "noexec", "prefer"],
        id="Exists-effect-must-match",
    ),
    pytest.param([tol(operator="Exists")], ALL_TAINT_NODES, id="empty-key-Exists-tolerates-all"),
    pytest.param(
        [tol(operator="Exists", effect="NoSchedule")],
        ["clean", "nosched", "novalue", "prefer", "two"],
        id="empty-key-Exists-with-effect",
    ),
    pytest.param(
        [tol(key="a", operator="Exists")], ["clean", "prefer"], id="one-of-two-taints-tolerated"
    ),
    pytest.param(
        [tol(key="a", operator="Exists"), tol(key="b", value="2", effect="NoSchedule")],
        ["clean", "prefer", "two"],
        id="both-taints-tolerated",
    ),
    pytest.param(
        [tol(key="gpu", operator="Equal", value="")],
        ["clean", "novalue", "prefer"],
        id="Equal-empty-value",
    ),
    pytest.param(
        [tol(key="k", operator="Exists", effect="PreferNoSchedule")],
        ["clean", "prefer"],
        id="PreferNoSchedule-toleration-does-not-lift-NoSchedule",
    ),
]


@pytest.mark.parametrize(("tolerations", "expected"), TAINT_CASES)
def test_taint_toleration(tolerations: list[dict[str, str]], expected: list[str]) -> None:
    state = cluster(*TAINT_NODES)
    assert feasible(["TaintToleration"], k8s_pod(tolerations=tolerations), state) == expected


def test_untolerated_taint_reason_names_the_taint() -> None:
    state = cluster(k8s_node("a", taints=[taint("dedicated", "infer", "NoExecute")]))
    result = Scheduler(profile(["TaintToleration"])).schedule(k8s_pod(), state)
    assert result.reason() == (
        "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: infer}."
    )


# ---- NodeUnschedulable and NodeName --------------------------------------------------------------
@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        pytest.param([], ["up"], id="cordoned-skipped"),
        pytest.param(
            [tol(key="node.kubernetes.io/unschedulable", operator="Exists", effect="NoSchedule")],
            ["cordoned", "up"],
            id="tolerates-unschedulable-taint",
        ),
        pytest.param([tol(operator="Exists")], ["cordoned", "up"], id="empty-key-Exists"),
        pytest.param(
            [tol(key="node.kubernetes.io/unschedulable", operator="Exists", effect="NoExecute")],
            ["up"],
            id="wrong-effect",
        ),
    ],
)
def test_node_unschedulable(tolerations: list[dict[str, str]], expected: list[str]) -> None:
    state = cluster(k8s_node("up"), k8s_node("cordoned", unschedulable=True))
    assert feasible(["NodeUnschedulable"], k8s_pod(tolerations=tolerations), state) == expected


@pytest.mark.parametrize(
    ("node_name", "expected"),
    [("", ["n1", "n2"]), ("n2", ["n2"]), ("elsewhere", [])],
    ids=["unset", "named", "unknown-node"],
)
def test_node_name(node_name: str, expected: list[str]) -> None:
    state = cluster(k8s_node("n1"), k8s_node("n2"))
    assert feasible(["NodeName"], k8s_pod(nodeName=node_name), state) == expected


def test_removed_node_is_never_feasible() -> None:
    state = cluster(k8s_node("n1"), k8s_node("n2"))
    state.remove_node("n1")
    assert feasible(["NodeName"], k8s_pod(), state) == ["n2"]
    assert feasible(["NodeName"], k8s_pod(nodeName="n1"), state) == []


# ---- NodeResourcesFit ----------------------------------------------------------------------------
def busy(name: str, **requests: Any) -> Any:
    return k8s_pod(name, requests=requests)


FIT_CASES = [
    pytest.param({"cpu": "4"}, ["big", "small"], id="cpu-fits-exactly"),
    pytest.param({"cpu": "4001m"}, ["big"], id="cpu-one-milli-over"),
    pytest.param({"memory": "8Gi"}, ["big", "small"], id="memory-fits-exactly"),
    pytest.param({"memory": "8589934593"}, ["big"], id="memory-one-byte-over"),
    pytest.param({"ephemeral-storage": "10Gi"}, ["big"], id="ephemeral-storage"),
    pytest.param({"example.com/fpga": "1"}, ["big"], id="extended-resource-missing-on-node"),
    pytest.param({"example.com/fpga": "3"}, [], id="extended-resource-too-few"),
    pytest.param({}, ["big", "small"], id="no-requests"),
]


@pytest.mark.parametrize(("requests", "expected"), FIT_CASES)
def test_node_resources_fit(requests: dict[str, Any], expected: list[str]) -> None:
    state = cluster(
        k8s_node(
            "big",
            cpu="16",
            memory="64Gi",
            extra={"ephemeral-storage": "100Gi", "example.com/fpga": 2},
        ),
        k8s_node("small", cpu="4", memory="8Gi"),
    )
    assert feasible(["NodeResourcesFit"], k8s_pod(requests=requests), state) == expected


def test_placed_pods_reduce_free_resources() -> None:
    state = cluster(
        k8s_node("n1", cpu="4"),
        k8s_node("n2", cpu="4"),
        placed=[(busy("a", cpu="3"), "n1"), (busy("b", cpu="1"), "n2")],
    )
    assert feasible(["NodeResourcesFit"], k8s_pod(requests={"cpu": "2"}), state) == ["n2"]
    state.release(state.node_pods[0]["default/a"].uid)
    assert feasible(["NodeResourcesFit"], k8s_pod(requests={"cpu": "2"}), state) == ["n1", "n2"]


def test_pod_count_limit() -> None:
    state = cluster(k8s_node("n1", pods=2), k8s_node("n2", pods=3))
    for i in range(2):
        state.assign(k8s_pod(f"x{i}"), 0)
        state.assign(k8s_pod(f"y{i}"), 1)
    result = Scheduler(profile(["NodeResourcesFit"])).schedule(k8s_pod(), state)
    assert result.node_name == "n2"
    state.assign(k8s_pod("y2"), 1)
    result = Scheduler(profile(["NodeResourcesFit"])).schedule(k8s_pod(), state)
    assert result.reason() == "0/2 nodes are available: 2 Too many pods."


def test_zero_request_fits_an_overcommitted_node() -> None:
    # kube-scheduler only checks resources the pod asks for.
    state = cluster(k8s_node("n1", cpu="1"), placed=[(busy("hog", cpu="1"), "n1")])
    state.assign(busy("late", cpu="2"), 0)  # e.g. bound by another scheduler
    assert feasible(["NodeResourcesFit"], k8s_pod(requests={"memory": "1Gi"}), state) == ["n1"]
    assert feasible(["NodeResourcesFit"], k8s_pod(requests={"cpu": "1m"}), state) == []


def test_every_insufficient_resource_is_reported() -> None:
    state = cluster(k8s_node("n1", cpu="1", memory="1Gi"), k8s_node("n2", cpu="8", memory="1Gi"))
    result = Scheduler(profile(["NodeResourcesFit"])).schedule(
        k8s_pod(requests={"cpu": "2", "memory": "2Gi"}), state
    )
    assert result.reason() == (
        "0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient memory."
    )


# ---- InterPodAffinity ----------------------------------------------------------------------------
def ipa_cluster(extra: list[tuple[Any, str]] | None = None) -> Any:
    nodes = [
        k8s_node("n1", labels={"zone": "a"}),
        k8s_node("n2", labels={"zone": "a"}),
        k8s_node("n3", labels={"zone": "b"}),
        k8s_node("n4", labels={"zone": "b"}),
        k8s_node("n5"),
    ]
    placed = [
        (k8s_pod("web", labels={"app": "web", "tier": "front"}), "n1"),
        (k8s_pod("db", labels={"app": "db"}), "n3"),
        (k8s_pod("web2", namespace="other", labels={"app": "web2"}), "n4"),
        *(extra or []),
    ]
    return cluster(*nodes, placed=placed)


def term(key: str, labels: dict[str, str] | None, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"topologyKey": key, **kw}
    if labels is not None:
        out["labelSelector"] = {"matchLabels": labels}
    return out


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def anti(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


HOST = "kubernetes.io/hostname"
IPA_CASES = [
    pytest.param({}, {}, ["n1", "n2", "n3", "n4", "n5"], id="no-terms"),
    pytest.param({}, affinity(term("zone", {"app": "web"})), ["n1", "n2"], id="affinity-zone"),
    pytest.param({}, affinity(term(HOST, {"app": "web"})), ["n1"], id="affinity-hostname"),
    pytest.param({}, affinity(term("zone", {"app": "none"})), [], id="affinity-no-match"),
    pytest.param(
        {"app": "cache"},
        affinity(term("zone", {"app": "cache"})),
        ["n1", "n2", "n3", "n4"],
        id="first-of-self-affine-group-needs-the-key-only",
    ),
    pytest.param(
        {},
        affinity(term("zone", {"app": "web2"})),
        [],
        id="affinity-other-namespace-not-seen",
    ),
    pytest.param(
        {},
        affinity(term("zone", {"app": "web2"}, namespaces=["other"])),
        ["n3", "n4"],
        id="affinity-listed-namespace",
    ),
    pytest.param(
        {},
        affinity(term("zone", {"app": "web2"}, namespaceSelector={})),
        ["n3", "n4"],
        id="empty-namespaceSelector-means-all-namespaces",
    ),
    pytest.param({}, affinity(term("zone", None)), [], id="null-selector-matches-no-pod"),
    pytest.param(
        {},
        affinity(term("zone", {})),
        ["n1", "n2", "n3", "n4"],
        id="empty-selector-matches-every-pod-in-namespace",
    ),
    pytest.param(
        {},
        affinity(term("zone", {"app": "web"}), term("zone", {"tier": "front"})),
        ["n1", "n2"],
        id="several-terms-one-pod-must-match-all",
    ),
    pytest.param(
        {},
        affinity(term("zone", {"app": "web"}), term("zone", {"app": "db"})),
        [],
        id="several-terms-no-single-pod-matches",
    ),
    pytest.param(
        {},
        affinity(term("zone", {"app": "web"}), term(HOST, {"tier": "front"})),
        ["n1"],
        id="several-terms-different-topologies",
    ),
    pytest.param(
        {"app": "web", "tier": "front"},
        affinity(term("zone", {"app": "web"}), term("zone", {"app": "db"})),
        [],
        id="self-match-exception-needs-all-terms",
    ),
    pytest.param({}, anti(term("zone", {"app": "web"})), ["n3", "n4", "n5"], id="anti-zone"),
    pytest.param(
        {}, anti(term(HOST, {"app": "web"})), ["n2", "n3", "n4", "n5"], id="anti-hostname"
    ),
    pytest.param(
        {},
        anti(term("zone", {"app": "web"}), term("zone", {"app": "db"})),
        ["n5"],
        id="anti-terms-each-exclude",
    ),
]


@pytest.mark.parametrize(("labels", "spec_affinity", "expected"), IPA_CASES)
def test_inter_pod_affinity(
    labels: dict[str, str], spec_affinity: dict[str, Any], expected: list[str]
) -> None:
    incoming = k8s_pod("new", labels=labels, affinity=spec_affinity or None)
    assert feasible(["InterPodAffinity"], incoming, ipa_cluster()) == expected


def test_affinity_terms_split_across_pods_do_not_count() -> None:
    # Zone b holds one pod per term but none matching both: kube-scheduler counts only pods
    # matching every term (podMatchesAllAffinityTerms), so only zone a qualifies.
    state = ipa_cluster(
        [
            (k8s_pod("w3", labels={"app": "web"}), "n3"),
            (k8s_pod("f3", labels={"tier": "front"}), "n4"),
        ]
    )
    incoming = k8s_pod(
        "new", affinity=affinity(term("zone", {"app": "web"}), term("zone", {"tier": "front"}))
    )
    assert feasible(["InterPodAffinity"], incoming, state) == ["n1", "n2"]


def test_existing_pods_anti_affinity_is_symmetric() -> None:
    loner = k8s_pod("loner", labels={"app": "loner"}, affinity=anti(term(HOST, {"app": "web"})))
    zonal = k8s_pod("zonal", affinity=anti(term("zone", {"role": "batch"})))
    state = ipa_cluster([(loner, "n3"), (zonal, "n2")])
    assert feasible(["InterPodAffinity"], k8s_pod("w", labels={"app": "web"}), state) == [
        "n1",
        "n2",
        "n4",
        "n5",
    ]
    assert feasible(["InterPodAffinity"], k8s_pod("b", labels={"role": "batch"}), state) == [
        "n3",
        "n4",
        "n5",
    ]
    assert feasible(["InterPodAffinity"], k8s_pod("x", labels={"app": "other"}), state) == [
        "n1",
        "n2",
        "n3",
        "n4",
        "n5",
    ]


def test_affinity_reasons_count_each_node_once() -> None:
    loner = k8s_pod("loner", labels={"app": "loner"}, affinity=anti(term("zone", {"app": "web"})))
    state = ipa_cluster([(loner, "n3")])  # zone b refuses web pods
    incoming = k8s_pod(
        "w",
        labels={"app": "web"},
        affinity=affinity(term("zone", {"app": "db"})) | anti(term(HOST, {"app": "db"})),
    )
    result = Scheduler(profile(["InterPodAffinity"])).schedule(incoming, state)
    assert result.reason() == (
        # n5 lacks the zone key and zone a has no db pod: affinity; zone b: existing anti only.
        "0/5 nodes are available: "
        "2 node(s) didn't satisfy existing pods anti-affinity rules, "
        "3 node(s) didn't match pod affinity rules."
    )


# ---- all filters together and the Diagnosis message ----------------------------------------------
def test_diagnosis_attributes_each_node_to_its_first_failing_filter() -> None:
    state = cluster(
        k8s_node("cordoned", unschedulable=True),
        k8s_node("tainted", taints=[taint("gpu", "a100", "NoSchedule")]),
        k8s_node("wrong-zone", labels={"zone": "b"}),
        k8s_node("small", labels={"zone": "a"}, cpu="1"),
        k8s_node("small2", labels={"zone": "a"}, cpu="1", unschedulable=True),
    )
    sched = Scheduler(
        profile(["NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodeResourcesFit"])
    )
    result = sched.schedule(k8s_pod(requests={"cpu": "2"}, nodeSelector={"zone": "a"}), state)
    assert not result.ok
    assert result.reason() == (
        "0/5 nodes are available: "
        "1 Insufficient cpu, "
        "1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {gpu: a100}, "
        "2 node(s) were unschedulable."
    )
    assert result.diagnosis is not None and result.diagnosis.total_nodes == 5


def test_diagnosis_on_an_empty_cluster() -> None:
    result = Scheduler(profile(["NodeResourcesFit"])).schedule(k8s_pod(), cluster())
    assert result.reason() == "0/0 nodes are available: no nodes in the cluster."


def test_diagnosis_ignores_removed_nodes_and_counts_restrict() -> None:
    state = cluster(k8s_node("n1"), k8s_node("n2"), k8s_node("gone"))
    state.remove_node("gone")
    restrict = np.zeros(state.size, dtype=bool)
    restrict[0] = True
    result = Scheduler(profile(["NodeResourcesFit"])).schedule(
        k8s_pod(requests={"cpu": "100"}), state, restrict=restrict
    )
    assert result.reason() == (
        "0/2 nodes are available: 1 Insufficient cpu, "
        "1 node(s) excluded by the scheduling decision."
    )


def test_invalid_pod_reports_its_decode_error() -> None:
    from fairgpu.model.pod import invalid_pod

    bad = invalid_pod({"metadata": {"name": "x"}}, ValueError("Pod default/x: field a: bad"))
    result = Scheduler(profile(["NodeResourcesFit"])).schedule(bad, cluster(k8s_node("n1")))
    assert not result.ok
    assert result.reason() == "Pod default/x: field a: bad"


def test_static_filter_cache_follows_node_changes() -> None:
    state = cluster(k8s_node("n1", labels={"zone": "a"}), k8s_node("n2", labels={"zone": "b"}))
    sched = Scheduler(profile(["NodeAffinity"]))
    p = k8s_pod(nodeSelector={"zone": "a"})
    assert sched.schedule(p, state).node_name == "n1"
    state.update_node(k8s_node("n1", labels={"zone": "c"}))
    state.update_node(k8s_node("n2", labels={"zone": "a"}))
    assert sched.schedule(k8s_pod("q", nodeSelector={"zone": "a"}), state).node_name == "n2"
