"""Vectorised evaluation of label requirements against every node slot."""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.model.selectors import NodeSelectorTerm, Requirement, parse_int64


def _lookup(codes: np.ndarray, vocab: list[str], hit: list[bool]) -> np.ndarray:
    # One boolean per vocabulary entry plus a trailing False that code -1 (label absent) picks:
    # a gather is much cheaper than np.isin over thousands of nodes.
    table = np.zeros(len(vocab) + 1, dtype=bool)
    table[: len(hit)] = hit
    return np.asarray(table[codes])


def requirement_mask(cluster: ClusterState, req: Requirement) -> np.ndarray:
    """Mask of node slots whose labels satisfy ``req`` (kube-scheduler semantics)."""
    codes, vocab = cluster.label_codes(req.key)
    op = req.operator
    if op in ("In", "NotIn"):
        hit = _lookup(codes, vocab, [v in req.values for v in vocab])
        return hit if op == "In" else ~hit
    if op == "Exists":
        return codes >= 0
    if op == "DoesNotExist":
        return codes < 0
    if op in ("Gt", "Lt") and len(req.values) == 1:
        # Both sides must parse as int64 (strconv.ParseInt); compared exactly, per value.
        bound = parse_int64(req.values[0])
        if bound is None:
            return np.zeros(codes.shape, dtype=bool)
        numbers = [parse_int64(v) for v in vocab]
        if op == "Gt":
            hits = [x is not None and x > bound for x in numbers]
        else:
            hits = [x is not None and x < bound for x in numbers]
        return _lookup(codes, vocab, hits)
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
