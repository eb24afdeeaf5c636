"""Generated placement cases for the differential test against the real kube-scheduler.

A case is a handful of nodes, pods already bound to them, and one pod to place, in namespaces
of its own. Everything a case's selectors can match carries the case's own label value and
every topology domain but the hostname is keyed per case, so the cases of one control plane
never see each other's pods: the pods to place can all be created at once.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
KINDS = (
    "spread", "affinity", "gates", "ports", "mixed", "defaults", "stateful", "resources",
    "images", "taints", "preferred", "extended",
)  # fmt: skip

#: The labels the StatefulSet controller puts on each of its pods, which its selector never
#: holds.
STATEFUL_POD_LABELS = (
    "statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index", "controller-revision-hash"
)  # fmt: skip


@dataclass
class Case:
    """One generated case: Node, Namespace and Pod manifests, and the pod to place."""

    cid: str
    kind: str
    nodes: list[dict[str, Any]] = field(default_factory=list)
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    existing: list[dict[str, Any]] = field(default_factory=list)
    incoming: dict[str, Any] = field(default_factory=dict)
    # "defaults" cases: the ReplicaSet owning the pod to place (and some existing pods);
    # "stateful" cases: a StatefulSet; the pods' ownerReferences get its uid once it exists.
    replica_set: dict[str, Any] | None = None
    # "defaults" cases with a Service instead: it selects the (unowned) pods.
    service: dict[str, Any] | None = None
    # "resources" cases: the status the kubelet would show for existing pods (by name) in
    # the middle of an in-place resize, written through the status subresource.
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def zone_key(self) -> str:
        return f"zone.example.com/{self.cid}"

    @property
    def main_ns(self) -> str:
        return f"{self.cid}-a"


def _pod(case: Case, name: str, ns: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    spec.setdefault(
        "containers",
        [{"name": "c", "image": "registry.invalid/x:1", "resources": {"requests": {"cpu": "10m"}}}],
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"case": case.cid, **labels}},
        "spec": spec,
    }


def _sel(case: Case, rng: random.Random) -> dict[str, Any]:
    labels = {"case": case.cid}
    if rng.random() < 0.8:
        labels["app"] = rng.choice(["web", "db"])
    out: dict[str, Any] = {"matchLabels": labels}
    if rng.random() < 0.2:
        out["matchExpressions"] = [{"key": "rev", "operator": "In", "values": ["1", "2"]}]
    return out


def _nodes(case: Case, rng: random.Random) -> None:
    count = rng.randint(2, 5)
    for j in range(count):
        labels = {HOST: f"{case.cid}-n{j}", "case": case.cid}
        if rng.random() < 0.85:
            zone = rng.choice("abc")
            labels[case.zone_key] = zone
            labels[ZONE] = f"{case.cid}-{zone}"
        labels["pool"] = rng.choice(["x", "x", "y"])
        taints = []
        if rng.random() < 0.2:
            taints.append({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"})
        case.nodes.append({"name": f"{case.cid}-n{j}", "labels": labels, "taints": taints})
    case.namespaces = [
        {"name": f"{case.cid}-a", "labels": {"case": case.cid, "tier": "prod"}},
        {
            "name": f"{case.cid}-b",
            "labels": {"case": case.cid, "tier": rng.choice(["prod", "dev"])},
        },
    ]


def _existing(case: Case, rng: random.Random, ports: bool, anti: bool) -> None:
    for k in range(rng.randint(0, 7)):
        node = rng.choice(case.nodes)["name"]
        ns = case.main_ns if rng.random() < 0.75 else f"{case.cid}-b"
        labels = {"app": rng.choice(["web", "web", "db"]), "rev": rng.choice(["1", "2"])}
        spec: dict[str, Any] = {"nodeName": node, "tolerations": [{"operator": "Exists"}]}
        if ports and rng.random() < 0.5:
            spec["containers"] = [_port_container(rng)]
        if anti and rng.random() < 0.25:
            spec["affinity"] = {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": _sel(case, rng), "topologyKey": _topology(case, rng)}
                    ]
                }
            }
        case.existing.append(_pod(case, f"e{k}", ns, labels, **spec))


def _port_container(rng: random.Random) -> dict[str, Any]:
    port: dict[str, Any] = {"containerPort": 8080, "hostPort": rng.choice([80, 81])}
    if rng.random() < 0.3:
        port["protocol"] = "UDP"
    if rng.random() < 0.3:
        port["hostIP"] = rng.choice(["10.0.0.1", "10.0.0.2", "0.0.0.0"])
    return {
        "name": "c",
        "image": "registry.invalid/x:1",
        "ports": [port],
        "resources": {"requests": {"cpu": "10m"}},
    }


def _topology(case: Case, rng: random.Random) -> str:
    return rng.choice([HOST, case.zone_key])


def _spread(case: Case, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    keys = [HOST, case.zone_key]
    rng.shuffle(keys)
    # The API refuses two constraints with the same key and whenUnsatisfiable.
    for key in keys[: rng.choice([1, 1, 2])]:
        hard = rng.random() < 0.75
        c: dict[str, Any] = {
            "maxSkew": rng.choice([1, 1, 2]),
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
            "labelSelector": _sel(case, rng),
        }
        if hard and rng.random() < 0.3:
            c["minDomains"] = rng.randint(2, 4)
        if rng.random() < 0.3:
            c["nodeAffinityPolicy"] = rng.choice(["Honor", "Ignore"])
        if rng.random() < 0.3:
            c["nodeTaintsPolicy"] = rng.choice(["Honor", "Ignore"])
        if rng.random() < 0.3 and "matchExpressions" not in c["labelSelector"]:
            c["matchLabelKeys"] = ["rev"]  # the API refuses a key the selector names too
        out.append(c)
    return out


def _term(case: Case, rng: random.Random) -> dict[str, Any]:
    """A pod (anti-)affinity term: the case's selector, a hostname or zone key, namespaces
    by selector (all, or labelled), by name, or the pod's own, sometimes label keys."""
    t: dict[str, Any] = {"labelSelector": _sel(case, rng), "topologyKey": _topology(case, rng)}
    r = rng.random()
    if r < 0.3:
        t["namespaceSelector"] = {"matchLabels": {"case": case.cid, "tier": "prod"}}
    elif r < 0.45:
        t["namespaceSelector"] = {}
    elif r < 0.6:
        t["namespaces"] = [f"{case.cid}-b"]
    if rng.random() < 0.25 and "matchExpressions" not in t["labelSelector"]:
        t["matchLabelKeys" if rng.random() < 0.5 else "mismatchLabelKeys"] = ["rev"]
    return t


def _affinity(case: Case, rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rng.random() < 0.6:
        out["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [_term(case, rng)]}
    if rng.random() < 0.6 or not out:
        out["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [_term(case, rng)]
        }
    return out


def _node_affinity(case: Case, rng: random.Random) -> dict[str, Any]:
    exprs = [{"key": "case", "operator": "In", "values": [case.cid]}]
    if rng.random() < 0.3:
        exprs.append({"key": "pool", "operator": "In", "values": ["x"]})
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": exprs}]
        }
    }


def _owned(case: Case, pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` owned by the case's controller; a StatefulSet's pod also gets the labels its
    controller puts on each pod (its name, index and revision)."""
    assert case.replica_set is not None
    kind = case.replica_set["kind"]
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": kind,
            "name": case.replica_set["metadata"]["name"],
            "uid": "",
            "controller": True,
        }
    ]
    if kind == "StatefulSet":
        name = pod["metadata"]["name"]
        index = str(sum(map(ord, name)) % 7)
        revision = f"{case.cid}-{'ab'[len(name) % 2]}"
        per_pod = dict(zip(STATEFUL_POD_LABELS, (name, index, revision), strict=True))
        pod["metadata"]["labels"].update(per_pod)
    return pod


def _service(case: Case, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{case.cid}-svc", "namespace": case.main_ns},
        "spec": {"clusterIP": "None", "selector": selector, "ports": [{"port": 80}]},
    }


def _replica_set(case: Case, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": f"{case.cid}-rs", "namespace": case.main_ns},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]},
            },
        },
    }


def _defaults_case(case: Case, rng: random.Random, service: bool, stateful: bool = False) -> None:
    """A ReplicaSet's pod without constraints of its own: kube's system default spread
    constraints (hostname maxSkew 3, zone maxSkew 5, ScheduleAnyway) score its nodes. With
    ``service``, no ReplicaSet: a Service selects the pods, which gives them the same; with
    ``stateful`` a StatefulSet owns them, each pod labelled with its own name, index and
    revision, which the StatefulSet's selector leaves out."""
    selector = {"app": "web", "case": case.cid}
    if service:
        case.service = _service(case, selector)
    else:
        case.replica_set = _replica_set(case, selector)
        if stateful:
            case.replica_set.update(kind="StatefulSet")
            case.replica_set["metadata"]["name"] = f"{case.cid}-sts"
            case.replica_set["spec"]["serviceName"] = f"{case.cid}-sts"
    for k in range(rng.randint(0, 9)):
        node = rng.choice(case.nodes)["name"]
        owned = rng.random() < 0.8
        labels = {"app": "web"} if owned or rng.random() < 0.5 else {"app": "db"}
        pod = _pod(case, f"e{k}", case.main_ns, labels, nodeName=node)
        case.existing.append(_owned(case, pod) if owned and not service else pod)
    spec = {
        "affinity": {"nodeAffinity": _node_affinity(case, rng)},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    }
    incoming = _pod(case, "incoming", case.main_ns, {"app": "web"}, **spec)
    case.incoming = incoming if service else _owned(case, incoming)


def _container(name: str, rng: random.Random, **kw: Any) -> dict[str, Any]:
    requests = {}
    cpu = rng.choice([None, "100m", "250m", "500m"])
    memory = rng.choice([None, "256Mi", "512Mi"])
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    return {
        "name": name,
        "image": "registry.invalid/x:1",
        "resources": {"requests": requests},
        **kw,
    }


def _shape(rng: random.Random, pod_level: bool) -> dict[str, Any]:
    """Containers (one or two, sometimes a sidecar or a plain init container) and, with
    ``pod_level``, pod-level requests or limits above what the containers ask (the API
    refuses less): every way kube-scheduler 1.34 adds up a pod's requests."""
    spec: dict[str, Any] = {
        "containers": [_container(f"c{j}", rng) for j in range(rng.randint(1, 2))]
    }
    init = []
    if rng.random() < 0.3:
        init.append(_container("side", rng, restartPolicy="Always"))
    if rng.random() < 0.2:
        init.append({**_container("init", rng), "resources": {"requests": {"cpu": "1200m"}}})
    if init:
        spec["initContainers"] = init
    if pod_level:
        r = rng.random()
        if r < 0.4:
            spec["resources"] = {"requests": {"cpu": rng.choice(["2", "2500m"])}}
        elif r < 0.7:
            spec["resources"] = {"requests": {"cpu": "2", "memory": rng.choice(["2Gi", "3Gi"])}}
        else:  # limits only: the API server defaults the requests
            spec["resources"] = {"limits": {"cpu": "3", "memory": "3Gi"}}
    return spec


# An existing pod's container in the middle of an in-place resize: (spec cpu, what the
# kubelet configured and admitted, PodResizePending reason or "").
RESIZES = (("250m", "1500m", ""), ("3", "500m", "Infeasible"), ("2", "500m", "Deferred"))


def _resources_case(case: Case, rng: random.Random) -> None:
    """Nodes of 2-4 CPUs and 4-8 GiB, pods on them shaped every way requests add up
    (:func:`_shape`), some in the middle of a resize; the pod to place asks enough that the
    sums decide where it fits and how the nodes score."""
    for n in case.nodes:
        n["cpu"] = rng.choice(["2", "4"])
        n["memory"] = rng.choice(["4Gi", "8Gi"])
    for k in range(rng.randint(1, 6)):
        node = rng.choice(case.nodes)["name"]
        spec: dict[str, Any] = {"nodeName": node, "tolerations": [{"operator": "Exists"}]}
        if rng.random() < 0.35:
            cpu, held, reason = rng.choice(RESIZES)
            spec["containers"] = [
                {
                    "name": "c",
                    "image": "registry.invalid/x:1",
                    "resources": {"requests": {"cpu": cpu}},
                }
            ]
            status: dict[str, Any] = {
                "containerStatuses": [
                    {
                        "name": "c",
                        "image": "registry.invalid/x:1",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "resources": {"requests": {"cpu": held}},
                        "allocatedResources": {"cpu": held},
                    }
                ]
            }
            if reason:
                status["conditions"] = [
                    {"type": "PodResizePending", "status": "True", "reason": reason}
                ]
            case.statuses[f"e{k}"] = status
        else:
            spec.update(_shape(rng, pod_level=rng.random() < 0.5))
        case.existing.append(_pod(case, f"e{k}", case.main_ns, {"app": "web"}, **spec))
    spec = {
        "affinity": {"nodeAffinity": _node_affinity(case, rng)},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        **_shape(rng, pod_level=rng.random() < 0.6),
    }
    case.incoming = _pod(case, "incoming", case.main_ns, {"app": "web"}, **spec)


GB = 10**9
# Images the nodes of "images" cases may have pulled, shared by every case: kube-scheduler
# weighs an image by the share of all nodes that have it, so an image on few nodes of a large
# cluster scores little.
IMAGES = (
    ("registry.example/pytorch:24.05", 40 * GB),
    ("registry.example/train:latest", 18 * GB),
    ("registry.example/serve:v2", 9 * GB),
    ("registry.example/tools:1", 3 * GB),
)


def _images_case(case: Case, rng: random.Random) -> None:
    """Nodes that report some of :data:`IMAGES`; the pod to place runs one or two of them
    (the ``:latest`` one named without its tag, as kube normalizes it), so image locality
    decides between nodes otherwise alike."""
    for n in case.nodes:
        n["images"] = [
            {"names": [name, f"{name.rsplit(':', 1)[0]}@sha256:{i:064x}"], "sizeBytes": size}
            for i, (name, size) in enumerate(IMAGES)
            if rng.random() < 0.5
        ]
    names = [name.removesuffix(":latest") for name, _ in IMAGES]
    containers = [
        {"name": f"c{j}", "image": rng.choice(names), "resources": {"requests": {"cpu": "10m"}}}
        for j in range(rng.choice([1, 1, 2]))
    ]
    spec = {
        "affinity": {"nodeAffinity": _node_affinity(case, rng)},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        "containers": containers,
    }
    case.incoming = _pod(case, "incoming", case.main_ns, {"app": "web"}, **spec)


PREFER = "PreferNoSchedule"
# Taints the nodes of "taints" cases may carry, every effect: NoSchedule and NoExecute ones
# filter, PreferNoSchedule ones score (TaintToleration), a cordoned node is a filter of its own
# (NodeUnschedulable).
TAINTS = (
    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "gpu", "effect": "PreferNoSchedule"},
    {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
    {"key": "team", "value": "a", "effect": "PreferNoSchedule"},
    {"key": "maintenance", "value": "", "effect": "NoExecute"},
    {"key": "example.com/flaky", "value": "yes", "effect": "NoExecute"},
)
# Tolerations of the pod to place: matching by key alone, by key and value, by effect, or not
# at all (a wrong value; a NoSchedule toleration does not tolerate a PreferNoSchedule taint).
TOLERATIONS = (
    {"key": "dedicated", "operator": "Exists"},
    {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Equal", "value": "cpu"},
    {"key": "spot", "operator": "Equal", "value": "true", "effect": "PreferNoSchedule"},
    {"key": "team", "operator": "Exists", "effect": "PreferNoSchedule"},
    {"key": "maintenance", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "example.com/flaky", "operator": "Equal", "value": "yes"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists", "effect": "PreferNoSchedule"},
)
# Node-selector requirements on the labels of "taints" cases' nodes (disk, gen).
REQUIREMENTS = (
    {"key": "disk", "operator": "In", "values": ["ssd"]},
    {"key": "disk", "operator": "NotIn", "values": ["hdd"]},
    {"key": "disk", "operator": "Exists"},
    {"key": "disk", "operator": "DoesNotExist"},
    {"key": "gen", "operator": "Gt", "values": ["3"]},
    {"key": "gen", "operator": "Lt", "values": ["4"]},
    {"key": "pool", "operator": "In", "values": ["x"]},
)


def _taints_case(case: Case, rng: random.Random) -> None:
    """Nodes with taints of every effect (:data:`TAINTS`), some cordoned, labelled ``disk``
    and ``gen``, loaded by pods asking different CPUs; the pod to place tolerates some taints
    (:data:`TOLERATIONS`), may select nodes by ``nodeSelector``, by required terms (ORed, each
    with :data:`REQUIREMENTS`, some with a field selector on the node's name) and prefers some by
    weighted terms -- so NodeAffinity's and TaintToleration's filters and scores, and
    NodeUnschedulable, decide against the resource scores."""
    for j in range(len(case.nodes), rng.randint(4, 6)):  # enough nodes left to score
        name = f"{case.cid}-n{j}"
        labels = {HOST: name, "case": case.cid, "pool": rng.choice(["x", "x", "y"])}
        case.nodes.append({"name": name, "labels": labels, "taints": []})
    for n in case.nodes:
        n["taints"] = [
            dict(t) for t in TAINTS if rng.random() < (0.3 if t["effect"] == PREFER else 0.1)
        ]
        n["unschedulable"] = rng.random() < 0.1
        if rng.random() < 0.8:
            n["labels"]["disk"] = rng.choice(["ssd", "hdd"])
        if rng.random() < 0.8:
            n["labels"]["gen"] = str(rng.randint(1, 6))
    for k in range(rng.randint(0, 5)):
        node = rng.choice(case.nodes)["name"]
        cpu = rng.choice(["1", "4", "16", "40"])
        container = {
            "name": "c",
            "image": "registry.invalid/x:1",
            "resources": {"requests": {"cpu": cpu, "memory": rng.choice(["1Gi", "64Gi"])}},
        }
        spec = {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [container],
        }
        case.existing.append(_pod(case, f"e{k}", case.main_ns, {"app": "db"}, **spec))
    own = {"key": "case", "operator": "In", "values": [case.cid]}
    terms = []
    for _ in range(rng.choice([1, 1, 2])):
        term: dict[str, Any] = {
            "matchExpressions": [own, *rng.sample(REQUIREMENTS, rng.choice([0, 0, 1, 2]))]
        }
        if rng.random() < 0.15:  # the API allows one node name, In or NotIn
            name = rng.choice(case.nodes)["name"]
            op = rng.choice(["In", "NotIn"])
            term["matchFields"] = [{"key": "metadata.name", "operator": op, "values": [name]}]
        terms.append(term)
    node_affinity: dict[str, Any] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
    }
    preferred = [
        {"weight": rng.randint(1, 100), "preference": {"matchExpressions": [r]}}
        for r in rng.sample(REQUIREMENTS, rng.randint(0, 3))
    ]
    if preferred:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    spec = {
        "affinity": {"nodeAffinity": node_affinity},
        "tolerations": [dict(t) for t in TOLERATIONS if rng.random() < 0.35],
    }
    if rng.random() < 0.05:
        spec["tolerations"] = [{"operator": "Exists"}]
    if rng.random() < 0.2:
        spec["nodeSelector"] = {"pool": "x"}
    case.incoming = _pod(case, "incoming", case.main_ns, {"app": "web"}, **spec)


def _preferred_case(case: Case, rng: random.Random) -> None:
    """Soft constraints only, so the scores decide: existing pods carrying preferred
    affinity and anti-affinity terms and required affinity terms (kube-scheduler counts
    them for the pod to place: hardPodAffinityWeight), the pod to place preferring or
    avoiding pods by weighted terms (the same namespace options as required terms), and
    ScheduleAnyway spread constraints -- InterPodAffinity's score with its min-max
    normalisation, and PodTopologySpread's."""

    def weighted(n: int) -> list[dict[str, Any]]:
        return [
            {"weight": rng.randint(1, 100), "podAffinityTerm": _term(case, rng)} for _ in range(n)
        ]

    for k in range(rng.randint(2, 8)):
        node = rng.choice(case.nodes)["name"]
        ns = case.main_ns if rng.random() < 0.75 else f"{case.cid}-b"
        labels = {"app": rng.choice(["web", "web", "db"]), "rev": rng.choice(["1", "2"])}
        spec: dict[str, Any] = {"nodeName": node, "tolerations": [{"operator": "Exists"}]}
        affinity: dict[str, Any] = {}
        r = rng.random()
        if r < 0.3:
            affinity["podAffinity"] = {
                "preferredDuringSchedulingIgnoredDuringExecution": weighted(rng.randint(1, 2))
            }
        elif r < 0.5:
            affinity["podAntiAffinity"] = {
                "preferredDuringSchedulingIgnoredDuringExecution": weighted(1)
            }
        elif r < 0.65:
            affinity["podAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [_term(case, rng)]
            }
        if affinity:
            spec["affinity"] = affinity
        case.existing.append(_pod(case, f"e{k}", ns, labels, **spec))
    affinity = {"nodeAffinity": _node_affinity(case, rng)}
    if rng.random() < 0.7:
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": weighted(rng.randint(1, 3))
        }
    if rng.random() < 0.6:
        affinity["podAntiAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": weighted(rng.randint(1, 2))
        }
    spec = {"affinity": affinity, "tolerations": [{"key": "dedicated", "operator": "Exists"}]}
    if rng.random() < 0.4:
        spec["topologySpreadConstraints"] = [
            {**c, "whenUnsatisfiable": "ScheduleAnyway"}
            for c in _spread(case, rng)
            if "minDomains" not in c
        ]
    labels = {"app": rng.choice(["web", "db"]), "rev": rng.choice(["1", "2"])}
    case.incoming = _pod(case, "incoming", case.main_ns, labels, **spec)


def _asks(rng: random.Random, most: int) -> dict[str, str]:
    """Requests of up to ``most`` of: an extended resource, 2 MiB huge pages (with the memory
    the API asks beside them), ephemeral storage; always some CPU."""
    asks = {"cpu": rng.choice(["100m", "1", "3"])}
    for name, amounts in rng.sample(EXTENDED, rng.randint(0, most)):
        asks[name] = rng.choice(amounts)
    if "hugepages-2Mi" in asks:
        asks["memory"] = "64Mi"
    return asks


# What "extended" cases ask besides CPU: an extended resource, huge pages, ephemeral storage.
EXTENDED = (
    ("example.com/fpga", ["1", "2"]),
    ("hugepages-2Mi", ["256Mi", "512Mi", "1Gi"]),
    ("ephemeral-storage", ["5Gi", "15Gi", "30Gi"]),
)


def _extended_case(case: Case, rng: random.Random) -> None:
    """Nodes with few pods' room (3-5), some ephemeral storage, an extended resource and huge
    pages (or none of them), pods using them; the pod to place asks some of them -- the
    filter on every resource a pod asks and on the node's pod count, and what the scores make
    of a node that lacks a resource the pod does not ask."""
    for n in case.nodes:
        n["cpu"] = rng.choice(["4", "8"])
        n["memory"] = "16Gi"
        n["pods"] = rng.randint(3, 5)
        n["ephemeral-storage"] = rng.choice(["20Gi", "50Gi"])
        n["extra"] = {}
        if rng.random() < 0.6:
            n["extra"]["example.com/fpga"] = rng.choice(["1", "2", "4"])
        if rng.random() < 0.6:
            n["extra"]["hugepages-2Mi"] = rng.choice(["512Mi", "1Gi"])
    for k in range(rng.randint(1, 8)):
        node = rng.choice(case.nodes)
        asks = {
            name: amount
            for name, amount in _asks(rng, 2).items()
            if name in ("cpu", "memory", "ephemeral-storage") or name in node["extra"]
        }
        container = {
            "name": "c",
            "image": "registry.invalid/x:1",
            "resources": {"requests": asks, "limits": _limits(asks)},
        }
        spec = {"nodeName": node["name"], "tolerations": [{"operator": "Exists"}]}
        spec["containers"] = [container]
        case.existing.append(_pod(case, f"e{k}", case.main_ns, {"app": "db"}, **spec))
    asks = _asks(rng, 3)
    container = {
        "name": "c",
        "image": "registry.invalid/x:1",
        "resources": {"requests": asks, "limits": _limits(asks)},
    }
    spec = {
        "affinity": {"nodeAffinity": _node_affinity(case, rng)},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        "containers": [container],
    }
    case.incoming = _pod(case, "incoming", case.main_ns, {"app": "web"}, **spec)


def _limits(asks: dict[str, str]) -> dict[str, str]:
    """The limits the API requires beside such requests: equal for extended resources and
    huge pages (which may not be overcommitted)."""
    return {k: v for k, v in asks.items() if k in ("example.com/fpga", "hugepages-2Mi")}


# Kinds whose cases are built by a function of their own (after the nodes).
OWN_CASES: dict[str, Callable[[Case, random.Random], None]] = {
    "resources": _resources_case,
    "images": _images_case,
    "taints": _taints_case,
    "preferred": _preferred_case,
    "extended": _extended_case,
}


def make_case(i: int, kind: str, rng: random.Random, service: bool = False) -> Case:
    """Case number ``i`` of ``kind`` (one of :data:`KINDS`); a "defaults" case with
    ``service`` has a Service select its pods instead of a ReplicaSet owning them."""
    case = Case(f"c{i:03d}", kind)
    _nodes(case, rng)
    if kind in ("defaults", "stateful"):
        _defaults_case(
            case, rng, service=service and kind == "defaults", stateful=kind == "stateful"
        )
        return case
    whole = OWN_CASES.get(kind)
    if whole is not None:
        whole(case, rng)
        return case
    mixed = kind == "mixed"
    _existing(case, rng, ports=kind in ("ports", "mixed"), anti=kind in ("affinity", "mixed"))
    labels = {"app": rng.choice(["web", "db"]), "rev": rng.choice(["1", "2"])}
    spec: dict[str, Any] = {"affinity": {"nodeAffinity": _node_affinity(case, rng)}}
    if rng.random() < 0.5:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    if kind in ("spread", "mixed") or (kind == "gates" and rng.random() < 0.5):
        spec["topologySpreadConstraints"] = _spread(case, rng)
    if kind in ("affinity", "mixed"):
        spec["affinity"].update(_affinity(case, rng))
    if kind in ("ports", "mixed"):
        spec["containers"] = [_port_container(rng)]
        if rng.random() < 0.3:
            spec["initContainers"] = [
                {**_port_container(rng), "name": "side", "restartPolicy": "Always"}
            ]
    if kind == "gates" or (mixed and rng.random() < 0.1):
        spec["schedulingGates"] = [{"name": "example.com/hold"}]
    case.incoming = _pod(case, "incoming", case.main_ns, labels, **spec)
    return case


def make_cases(count: int, seed: int = 16) -> list[Case]:
    """``count`` cases cycling through :data:`KINDS` (spread and affinity twice as often)."""
    rng = random.Random(seed)
    kinds = [
        "spread", "spread", "affinity", "affinity", "ports", "gates", "mixed", "defaults",
        "stateful", "resources", "images", "taints", "preferred", "extended",
    ]  # fmt: skip
    # Every other "defaults" case has a Service.
    return [
        make_case(i, kinds[i % len(kinds)], rng, service=i // len(kinds) % 2 == 1)
        for i in range(count)
    ]
