"""Vectorised evaluation of label requirements against every node slot."""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.model.selectors import NodeSelectorTerm, Requirement


def requirement_mask(cluster: ClusterState, req: Requirement) -> np.ndarray:
    """Mask of node slots whose labels satisfy ``req`` (kube-scheduler semantics)."""
    codes, vocab = cluster.label_codes(req.key)
    op = req.operator
    if op in ("In", "NotIn"):
        wanted = [i for i, v in enumerate(vocab) if v in req.values]
        hit = np.isin(codes, wanted) if wanted else np.zeros(codes.shape, dtype=bool)
        return hit if op == "In" else ~hit
    if op == "Exists":
        return codes >= 0
    if op == "DoesNotExist":
        return codes < 0
    if op in ("Gt", "Lt") and len(req.values) == 1:
        try:
            bound = int(req.values[0], 10)
        except ValueError:
            return np.zeros(codes.shape, dtype=bool)
        numbers = cluster.label_numbers(req.key)
        with np.errstate(invalid="ignore"):
            return numbers > bound if op == "Gt" else numbers < bound
    return np.zeros(codes.shape, dtype=bool)


def field_mask(cluster: ClusterState, req: Requirement) -> np.ndarray:
    """Mask for a ``matchFields`` requirement (only ``metadata.name`` is defined)."""
    names = cluster.node_names()
    if req.key != "metadata.name":
        return np.zeros(names.shape, dtype=bool)
    hit = np.isin(names, list(req.values)) if req.values else np.zeros(names.shape, dtype=bool)
    if req.operator == "In":
        return hit
    if req.operator == "NotIn":
        return ~hit
    return np.zeros(names.shape, dtype=bool)


def term_mask(cluster: ClusterState, term: NodeSelectorTerm) -> np.ndarray:
    """Mask for one node selector term: all expressions and fields AND'ed; empty matches none."""
    if not term.expressions and not term.fields:
        return np.zeros(cluster.size, dtype=bool)
    mask = np.ones(cluster.size, dtype=bool)
    for req in term.expressions:
        mask &= requirement_mask(cluster, req)
    for req in term.fields:
        mask &= field_mask(cluster, req)
    return mask
