"""Where an allocation of devices may be used, when that is more than one node.

kube-scheduler pins an allocation to the node whose slice gave a device; devices of slices
that select nodes by label give it those slices' selector instead (their requirements merged
in one term), and a pod using the claim may then run on any node the selector admits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from fairgpu.api.errors import InvalidObjectError
from fairgpu.api.objects import NodeSelectorTerm as ApiNodeSelectorTerm
from fairgpu.api.objects import decode
from fairgpu.model.selectors import NodeSelectorTerm, compile_node_term


@dataclass(frozen=True, slots=True)
class NodePin:
    """An allocation's ``nodeSelector`` that is more than one node name (devices of slices
    that select nodes by label): one term, compiled, and as the API writes it."""

    term: NodeSelectorTerm
    doc: dict[str, Any] = field(compare=False, hash=False)

    def admits(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod using the allocation may run on the node."""
        return self.term.matches(node_name, labels)

    def selector(self) -> dict[str, Any]:
        """``status.allocation.nodeSelector``."""
        return {"nodeSelectorTerms": [self.doc]}


def merge_pins(terms: list[dict[str, Any]]) -> NodePin | None:
    """kube-scheduler's allocation nodeSelector for devices of label-selecting slices: the
    requirements of every slice's single term, without repeats, in one term (None if none)."""
    merged: dict[str, list[Any]] = {"matchFields": [], "matchExpressions": []}
    for term in terms:
        for part in ("matchFields", "matchExpressions"):
            for req in term.get(part, ()):
                if not any(_same_requirement(req, r) for r in merged[part]):
                    merged[part].append(req)
    doc = {k: v for k, v in merged.items() if v}
    if not doc:
        return None
    compiled = compile_node_term(decode(doc, ApiNodeSelectorTerm), "nodeSelector")
    return NodePin(compiled, doc)


def _same_requirement(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (a["key"], a["operator"], set(a.get("values", ()))) == (
        b["key"],
        b["operator"],
        set(b.get("values", ())),
    )


def pin_from_k8s(selector: Any, obj: str) -> NodePin:
    """Decode an allocation's nodeSelector of one term (raises naming ``obj``)."""
    terms = selector.node_selector_terms
    at = "status.allocation.nodeSelector.nodeSelectorTerms"
    if len(terms) != 1:
        raise InvalidObjectError(obj, at, "must have exactly one term")
    try:
        term = compile_node_term(terms[0], f"{at}[0]")
    except ValueError as error:
        raise InvalidObjectError(obj, at, str(error)) from None
    return NodePin(term, msgspec.to_builtins(terms[0]))
