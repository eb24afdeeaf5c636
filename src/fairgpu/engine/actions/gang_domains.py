"""Gang domains: a pod group whose members must share a topology domain is placed one
domain at a time.

A training job asks that its workers share a rack, a network block or a node the Kubernetes
way: each member carries a required pod-affinity term that selects the group's own pods,
with ``topologyKey`` the rack label. kube-scheduler places such pods one by one: the first
may go to any node that has the key (no pod it selects is placed yet, and it selects
itself), the others only to that node's domain. For a gang placed all-or-nothing that is a
trap: when the first member lands in a domain too small for the rest, the attempt fails --
and, the state unchanged, fails the same way the next cycle and every one after, though
another domain could hold the whole gang. (Measured in the simulator before this module:
a 2 x 8-GPU gang on five 8-GPU nodes in three racks -- one rack of a single node, one with a
GPU taken, one empty -- never started under the default and ``binpack`` placement.)

So the allocator places such a gang with its members confined to one domain at a time
(:func:`domains`), in this order:

1. domains where the whole gang fits now, without evicting anyone: the tightest first (the
   fewest copies of a member fit there), so a larger domain stays whole for a larger gang;
2. then domains where it would fit with every pod the victim policy may evict gone: the
   roomiest first (the fewest victims to find).

A domain where not even that holds the gang is not tried; neither is one beyond
:data:`MOST_DOMAINS` (a cycle's cost stays bounded on a cluster of many racks). Without
a confining term, or for a pod alone, the list is empty and nothing changes. Inside a
domain the scheduler's filters and scores decide as for any pod (the term itself keeps the
members together once the first is placed); what fits is counted as the gang screen counts
it (:func:`~fairgpu.engine.actions.gang_screen.copies_per_node`), an upper bound: an
attempt may still fail inside a domain, and the next is tried.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from fairgpu.engine.actions.gang_screen import copies_per_node
from fairgpu.engine.jobs import Job
from fairgpu.engine.session import Session
from fairgpu.model.pod import PodInfo

if TYPE_CHECKING:  # preempt imports reserve, which imports this module
    from fairgpu.engine.actions.preempt import VictimPolicy

# At most this many domains are tried for one gang in one cycle.
MOST_DOMAINS = 8
# How an attempt confined to one domain counts the nodes it leaves out (with those that
# reservations hold for other jobs), in kube-scheduler's "N node(s) ..." form.
OUTSIDE_DOMAIN = "node(s) outside the topology domain tried or held for other jobs"


def confining_key(session: Session, pod: PodInfo) -> str | None:
    """The topology key of ``pod``'s required pod-affinity terms that select the pod itself
    -- the key with the most domains among the cluster's nodes when there are several (the
    finest; the filter still enforces every term) --, or None without such a term."""
    terms = pod.affinity_terms
    if not terms:
        return None
    ns_labels = session.cluster.namespace_labels
    keys = {t.topology_key for t in terms if t.selects(pod.namespace, pod.labels, ns_labels)}
    if not keys:
        return None
    return max(sorted(keys), key=lambda k: len(session.cluster.label_codes(k)[1]))


def domains(
    session: Session, job: Job, victims: VictimPolicy, allowed: np.ndarray | None
) -> list[np.ndarray]:
    """Node masks, one per topology domain, to try ``job``'s members in, in order (see the
    module docstring); [] when the job is not a gang confined to one domain. ``allowed``:
    the nodes reservations leave the job (None: all)."""
    found = _domain_codes(session, job, allowed)
    if found is None:
        return []
    nodes, codes, size = found
    head = job.pods[0]
    where = np.flatnonzero(nodes)
    pool: Iterable[str] = victims.freeable(job, head) if victims.may_preempt(head) else ()
    now = _per_domain(codes, where, copies_per_node(session, head, ()), size)
    most = _per_domain(codes, where, copies_per_node(session, head, pool), size)
    fit = [d for d in range(size) if now[d] >= job.need]
    room = [d for d in range(size) if now[d] < job.need <= most[d]]
    fit.sort(key=lambda d: (now[d], d))
    room.sort(key=lambda d: (-now[d], d))
    return [nodes & (codes == d) for d in (fit + room)[:MOST_DOMAINS]]


def every_domain(session: Session, job: Job) -> list[np.ndarray]:
    """Node masks of every topology domain ``job``'s members may use, [] when the job is not
    a gang confined to one domain: a reservation for such a gang holds nodes of one domain
    (:mod:`~fairgpu.engine.actions.reserve`)."""
    found = _domain_codes(session, job, None)
    if found is None:
        return []
    nodes, codes, _ = found
    return [nodes & (codes == d) for d in np.unique(codes[nodes]).tolist()]


def _domain_codes(
    session: Session, job: Job, allowed: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(the nodes the gang's members may use that have the confining key, each node's
    domain code, how many codes), or None for a job that is not a confined gang or has no
    such node."""
    if job.group is None or job.need < 2:
        return None
    head = job.pods[0]
    key = confining_key(session, head)
    if key is None:
        return None
    cluster = session.cluster
    n = cluster.size
    codes, vocab = cluster.label_codes(key)
    codes = codes[:n]
    nodes = session.scheduler.static_mask(head, cluster)[:n] & (codes >= 0)
    if allowed is not None:
        nodes &= allowed[:n]
    if not nodes.any():
        return None
    return nodes, codes, len(vocab)


def _per_domain(
    codes: np.ndarray, where: np.ndarray, per_node: np.ndarray, size: int
) -> np.ndarray:
    """Sum of ``per_node`` over the nodes ``where`` of each domain (label code)."""
    return np.bincount(codes[where], weights=per_node[where], minlength=size)
