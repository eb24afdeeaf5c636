"""Pool precedence: one kind of work goes before another on some nodes, whatever the shares.

Clusters with training, inference and hybrid pools let each kind overflow into the hybrid
pool. When the hybrid nodes are contended, an operator may decide that inference -- serving
traffic now -- goes first there: a rule of ``preemption.poolPrecedence``
(:class:`~fairgpu.tenancy.config.PoolPrecedence`) names the nodes (by labels), the workload
type (``fairgpu.io/workload-type``) that goes first and the one that gives way.

**Who may be evicted.** A pending pod of the rule's ``preemptor`` type may evict running pods
of its ``victims`` type on the rule's nodes, of any queue (its own included), whatever their
priority and whatever the queues hold against their shares: the operator put that kind of
work first there, so neither priority nor a share rule is asked. For the same reason a
reservation for a job of the ``victims`` type does not hold the rule's nodes against it
(:mod:`~fairgpu.engine.actions.precedence_nodes`).
Everything else is as for reclaim: the victims pass the time rules of
:class:`~fairgpu.engine.actions.victim_eligibility.ReclaimEligibility` (run at least
``reclaimMinRuntimeSeconds``, not on GPUs that changed tenant within the cooldown, not
protected after starting from a reservation), a queue marked not ``preemptible`` gives
nothing, the victim search takes the least work lost with a pod group as one victim
(:mod:`~fairgpu.engine.victim_cost`), and a kill that loses more than waiting for declared run
times costs is refused. A plan that also evicts pods the rule does not cover (a victim's
pod group running elsewhere, other queues' pods) must pass the reclaim rule for those.

**Who may not.** A pending pod of the rule's ``victims`` type never evicts pods of its
``preemptor`` type on the rule's nodes, by any kind of preemption: otherwise a training
queue below its share would reclaim the hybrid GPUs inference just took, and the nodes
would change hands back and forth. So on those nodes the order between the two kinds is
the rule's alone, and no eviction between them is ever reversed by another.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from fairgpu.engine.actions.precedence_nodes import rule_nodes
from fairgpu.engine.actions.victim_eligibility import HeldBack, ReclaimEligibility
from fairgpu.engine.session import Session
from fairgpu.model.node_pools import workload_type
from fairgpu.model.pod import PodInfo


class PoolPrecedences:
    """The rules of one cycle: the pods a pending pod may evict by precedence
    (:meth:`victims`) and those it may never evict (:meth:`shielded`)."""

    def __init__(self, session: Session, eligibility: ReclaimEligibility, min_run: float):
        self.s = session
        self.rules = session.tenancy.preemption.pool_precedence
        self.eligibility = eligibility
        self.min_run = min_run
        self._nodes: dict[int, tuple[tuple[int, int], np.ndarray]] = {}

    def __bool__(self) -> bool:
        return bool(self.rules)

    def victims(self, queue: str, pod: PodInfo, held: HeldBack) -> list[str]:
        """The running pods ``pod`` (of ``queue``) may evict by a rule naming its workload
        type as the preemptor, sorted; the candidates a time rule holds back go to
        ``held``."""
        kind = workload_type(pod)
        if not kind:
            return []
        found: set[str] = set()
        for i, rule in enumerate(self.rules):
            if rule.preemptor == kind:
                found.update(self._eligible(queue, self._of_type(i, rule.victims), held))
        return sorted(found)

    def shielded(self, pod: PodInfo) -> frozenset[str]:
        """The running pods ``pod`` may never evict: those of a rule's preemptor type on its
        nodes, for every rule naming ``pod``'s workload type as the one that gives way."""
        kind = workload_type(pod)
        if not kind:
            return frozenset()
        out: set[str] = set()
        for i, rule in enumerate(self.rules):
            if rule.victims == kind:
                out.update(self._of_type(i, rule.preemptor))
        return frozenset(out)

    def _of_type(self, i: int, kind: str) -> Iterable[str]:
        """The pods of workload type ``kind`` placed on rule ``i``'s nodes."""
        cluster = self.s.cluster
        for n in np.flatnonzero(self._rule_nodes(i)):
            for uid, placed in cluster.node_pods[int(n)].items():
                if workload_type(placed) == kind:
                    yield uid

    def _rule_nodes(self, i: int) -> np.ndarray:
        """:func:`rule_nodes` of rule ``i``, kept while the nodes do not change."""
        c = self.s.cluster
        version = (c.static_version, c.size)
        got = self._nodes.get(i)
        if got is None or got[0] != version:
            got = self._nodes[i] = (version, rule_nodes(c, self.rules[i]))
        return got[1]

    def _eligible(self, queue: str, uids: Iterable[str], held: HeldBack) -> list[str]:
        """Those of ``uids`` the reclaim time rules let go for a preemptor of ``queue``, of
        queues that may be preempted (``queue`` itself always may); those the time rules
        hold back go to ``held``."""
        s = self.s
        book, resolver, pods = s.book, s.resolver, s.cluster.pods
        ok: dict[str, tuple[set[str], HeldBack]] = {}
        out: list[str] = []
        for uid in uids:
            other = resolver.resolve(pods[uid]).queue
            got = ok.get(other)
            if got is None:
                later = HeldBack()  # the queue's held pods; only candidates are passed on
                kept: list[str] = []
                if other == queue or book.queue_limits(other).preemption.preemptible:
                    kept, _, _ = self.eligibility.kept(other, queue, self.min_run, later)
                got = ok[other] = (set(kept), later)
            if uid in got[0]:
                out.append(uid)
            elif uid in got[1].pods:
                held.add(uid, got[1].pods[uid])
        return out
