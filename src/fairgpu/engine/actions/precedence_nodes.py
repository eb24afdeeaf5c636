"""The nodes of pool precedence rules (:mod:`~fairgpu.engine.actions.pool_precedence`), and
the reserved nodes a rule opens to the work it puts first.

Kept apart from the victim side so the reservation code (:mod:`.reserve`, below the victim
rules) can ask it too: a reservation for a job of a rule's ``victims`` type does not hold
the rule's nodes against the work the rule puts first -- on those nodes that work goes
before the held job as it goes before its running pods.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.gang import Reservation
from fairgpu.model.node_pools import workload_type
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.config import PoolPrecedence


def rule_nodes(cluster: ClusterState, rule: PoolPrecedence) -> np.ndarray:
    """Node slots whose labels include all of ``rule.nodes`` (active nodes only)."""
    mask = cluster.active[: cluster.size].copy()
    for key, value in rule.nodes.items():
        codes, vocab = cluster.label_codes(key)
        if value not in vocab:
            return np.zeros(cluster.size, dtype=bool)
        mask &= codes[: cluster.size] == vocab.index(value)
    return mask


def open_reserved(
    rules: Iterable[PoolPrecedence],
    cluster: ClusterState,
    pod: PodInfo,
    reservations: Iterable[Reservation],
    mask: np.ndarray,
) -> np.ndarray:
    """``mask`` (the nodes other jobs' reservations leave ``pod``) with the nodes opened
    that a rule putting ``pod``'s workload type first holds for a job of its ``victims``
    type (a reservation's ``member`` says the job's type); ``mask`` itself if none."""
    kind = workload_type(pod)
    # Per rule putting the pod's type first: the type it puts second and the rule's nodes.
    opens = [(r.victims, rule_nodes(cluster, r)) for r in rules if kind and r.preemptor == kind]
    if not opens:
        return mask
    out = mask
    for res in reservations:
        held = workload_type(res.member) if res.member is not None else ""
        nodes = res.nodes[res.nodes < mask.size]
        for victims, on_rule in opens:
            opened = nodes[on_rule[nodes]] if held == victims else nodes[:0]
            if opened.size:
                out = out.copy() if out is mask else out
                out[opened] = True
    return out
