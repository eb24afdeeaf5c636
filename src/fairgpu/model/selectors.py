"""Label selectors, node selector terms and tolerations, compiled for repeated evaluation."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fairgpu.api import objects as k8s

NODE_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
LABEL_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


_INT64 = re.compile(r"[+-]?[0-9]+")


def parse_int64(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: ASCII digits only, in int64 range, else None.

    Python's ``int`` is laxer (``" 5"``, ``"1_000"``, non-ASCII digits), which would make Gt/Lt
    match labels Kubernetes rejects.
    """
    if not isinstance(text, str) or not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``key operator values`` expression of a node selector term or label selector."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this expression (kube-scheduler semantics)."""
        op = self.operator
        present = self.key in labels
        if op == "In":
            return present and labels[self.key] in self.values
        if op == "NotIn":
            return not present or labels[self.key] not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op in ("Gt", "Lt"):
            # Both sides must be integers; anything else never matches.
            if not present or len(self.values) != 1:
                return False
            want = parse_int64(self.values[0])
            have = parse_int64(labels[self.key])
            if want is None or have is None:
                return False
            return have > want if op == "Gt" else have < want
        return False


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """A term of ``requiredDuringScheduling`` node affinity: expressions and fields, AND'ed."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """An empty term matches nothing, as in Kubernetes."""
        if not self.expressions and not self.fields:
            return False
        if not all(r.matches(labels) for r in self.expressions):
            return False
        return all(r.matches({"metadata.name": node_name}) for r in self.fields)


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A compiled ``metav1.LabelSelector``; ``None`` selectors are represented by ``None``."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Empty selector matches everything."""
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        return all(r.matches(labels) for r in self.expressions)


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        """``v1.Toleration.ToleratesTaint``: empty effect matches all effects; empty key with
        Exists matches every taint."""
        if self.effect and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        if self.operator == "Exists":
            return True
        # Equal (the default): an empty key with Equal is invalid in the API and never matches.
        return bool(self.key) and self.value == value


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A required or preferred inter-pod (anti-)affinity term, with its weight (1 if required)."""

    selector: LabelSelector | None
    topology_key: str
    namespaces: frozenset[str]
    all_namespaces: bool
    weight: int = 1
    # A non-empty namespaceSelector: namespaces whose labels it matches count too.
    namespace_selector: LabelSelector | None = None

    def selects(
        self,
        namespace: str,
        labels: Mapping[str, str],
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> bool:
        """Whether a pod with ``labels`` in ``namespace`` is matched by this term.

        ``namespace_labels``: the known Namespaces' labels; a namespace not listed there has
        only the ``kubernetes.io/metadata.name`` label the API server sets on every Namespace.
        """
        if self.selector is None:
            return False
        if not self.all_namespaces and namespace not in self.namespaces:
            if self.namespace_selector is None:
                return False
            ns_labels = (namespace_labels or {}).get(namespace)
            if ns_labels is None:
                ns_labels = {"kubernetes.io/metadata.name": namespace}
            if not self.namespace_selector.matches(ns_labels):
                return False
        return self.selector.matches(labels)


def compile_requirements(
    reqs: Sequence[k8s.NodeSelectorRequirement | k8s.LabelSelectorRequirement],
    allowed: frozenset[str],
    where: str,
) -> tuple[Requirement, ...]:
    """Compile expressions, raising ``ValueError`` naming ``where`` for an unknown operator."""
    out = []
    for i, req in enumerate(reqs):
        if req.operator not in allowed:
            raise ValueError(f"{where}[{i}].operator: unknown operator {req.operator!r}")
        if req.operator in ("In", "NotIn") and not req.values:
            raise ValueError(f"{where}[{i}].values: must be non-empty for {req.operator}")
        if req.operator in ("Gt", "Lt") and len(req.values) != 1:
            raise ValueError(f"{where}[{i}].values: must have exactly one value for {req.operator}")
        if req.operator in ("Exists", "DoesNotExist") and req.values:
            raise ValueError(f"{where}[{i}].values: must be empty for {req.operator}")
        out.append(Requirement(req.key, req.operator, tuple(req.values)))
    return tuple(out)


def compile_node_term(term: k8s.NodeSelectorTerm, where: str) -> NodeSelectorTerm:
    """Compile a node selector term.

    ``matchFields`` is validated as the API server does: key ``metadata.name``, operator In or
    NotIn, exactly one value.
    """
    for i, req in enumerate(term.match_fields):
        at = f"{where}.matchFields[{i}]"
        if req.key != "metadata.name":
            raise ValueError(f"{at}.key: only metadata.name is supported, got {req.key!r}")
        if req.operator not in ("In", "NotIn"):
            raise ValueError(f"{at}.operator: must be In or NotIn, got {req.operator!r}")
        if len(req.values) != 1:
            raise ValueError(f"{at}.values: must have exactly one value")
    return NodeSelectorTerm(
        compile_requirements(
            term.match_expressions, NODE_SELECTOR_OPERATORS, f"{where}.matchExpressions"
        ),
        compile_requirements(term.match_fields, NODE_SELECTOR_OPERATORS, f"{where}.matchFields"),
    )


def compile_label_selector(sel: k8s.LabelSelector | None, where: str) -> LabelSelector | None:
    """Compile a label selector (``None`` stays ``None``: it selects nothing)."""
    if sel is None:
        return None
    return LabelSelector(
        tuple(sorted(sel.match_labels.items())),
        compile_requirements(
            sel.match_expressions, LABEL_SELECTOR_OPERATORS, f"{where}.matchExpressions"
        ),
    )
