"""Gang domains: a pod group whose members must (or should) share a topology domain is
placed one domain at a time.

A training job asks that its workers share a rack, a network block or a node in one of two
ways: the Kubernetes way, each member carrying a pod-affinity term that selects the group's
own pods with ``topologyKey`` the rack label (required or preferred); or with the
``fairgpu.io/topology-required`` / ``-preferred`` annotations naming the labels
(:mod:`fairgpu.model.gang_topology`). :func:`confinement` reads either; a job may name both a
required label and a finer preferred one (a block, and a rack inside it).

kube-scheduler places pods one by one: with a required term, the first member may go to any
node that has the key (no pod it selects is placed yet, and it selects itself), the others
only to its domain. For a gang placed all-or-nothing that is a trap: when the first member
lands in a domain too small for the rest, the attempt fails -- and, the state unchanged,
fails the same way every cycle, though another domain could hold the whole gang. (Measured
in the simulator before this module: a 2 x 8-GPU gang on five 8-GPU nodes in three racks --
one rack of a single node, one with a GPU taken, one empty -- never started under the
default and ``binpack`` placement.) With a preferred term the members spread over racks
whenever the first lands in a small one.

So the allocator tries such a gang with every member confined to one domain at a time
(:func:`attempts`), in this order:

0. with both labels, a preferred domain inside a required one where the whole gang fits now,
   the tightest first (so a block with a rack that holds the gang goes before a block that
   holds it only across racks);
1. domains where the whole gang fits now, without evicting anyone: the tightest first (the
   fewest copies of a member fit there), so a larger domain stays whole for a larger gang
   (``benchmarks/gang_topology``, seeds 0-2 at three loads: gang wait p50 0/478/0 s at the
   light load where the roomiest first gave 0/1 645/206 s; over all nine runs a mean p50 of
   2 394 s against its 2 247 s and the same useful allocation, 68.7%, within noise);
2. required: then domains where it would fit with every pod the victim policy may evict
   gone, the roomiest first (the fewest victims to find); preferred: then anywhere, as
   without a domain.

A required gang no domain can hold even so is not tried (:func:`no_domain` says why);
domains beyond :data:`MOST_DOMAINS` are not tried (a cycle's cost stays bounded on a
cluster of many racks). Members of the group already running (an elastic group's first
members) fix the domain: only theirs is tried. What fits is counted as the gang screen counts
it (:func:`~fairgpu.engine.actions.gang_screen.copies_per_node`), an upper bound: an attempt
may still fail inside a domain, and the next is tried. Inside a domain the scheduler's
filters and scores decide as for any pod. A starvation reservation for a required gang holds
the nodes of one domain, the one that drains first (:func:`every_domain`,
:mod:`~fairgpu.engine.actions.reserve`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from fairgpu.engine.actions.gang_screen import copies_per_node
from fairgpu.engine.jobs import Job
from fairgpu.engine.session import Session
from fairgpu.model.gang_topology import GangTopology
from fairgpu.model.pod import PodInfo
from fairgpu.model.selectors import PodAffinityTerm

if TYPE_CHECKING:  # preempt imports reserve, which imports this module
    from fairgpu.engine.actions.preempt import VictimPolicy

# At most this many domains are tried for one gang in one cycle.
MOST_DOMAINS = 8
# How an attempt confined to one domain counts the nodes it leaves out (with those that
# reservations hold for other jobs), in kube-scheduler's "N node(s) ..." form.
OUTSIDE_DOMAIN = "node(s) outside the topology domain tried or held for other jobs"


def confinement(session: Session, job: Job) -> GangTopology | None:
    """The domains ``job``'s members must and should share: the labels its annotations
    name, else those of its pod-affinity terms that select the pod itself -- required terms
    for the required label, preferred ones for the preferred (the key with the most domains
    when several terms do: the finest; the filter still enforces every required term). None
    for a pod alone or a gang without either."""
    if job.group is None:
        return None
    pod = job.pods[0]
    asked = pod.gang_topology or GangTopology()
    required = asked.required or _self_selecting(session, pod, pod.affinity_terms)
    preferred = asked.preferred or _self_selecting(session, pod, pod.preferred_affinity)
    if preferred == required:
        preferred = None
    if required is None and preferred is None:
        return None
    return GangTopology(required, preferred)


def _self_selecting(session: Session, pod: PodInfo, terms: Sequence[PodAffinityTerm]) -> str | None:
    if not terms:
        return None
    ns_labels = session.cluster.namespace_labels
    keys = {t.topology_key for t in terms if t.selects(pod.namespace, pod.labels, ns_labels)}
    if not keys:
        return None
    return max(sorted(keys), key=lambda k: len(session.cluster.label_codes(k)[1]))


def attempts(
    session: Session,
    job: Job,
    topology: GangTopology,
    victims: VictimPolicy,
    allowed: np.ndarray | None,
) -> list[np.ndarray | None]:
    """The node masks to try ``job``'s members in, in order (None: every node); see the
    module docstring. ``allowed``: the nodes reservations leave the job (None: all). Empty
    when a required gang has no domain to try."""
    fallback: list[np.ndarray | None] = [] if topology.required else [None]
    key = topology.required or topology.preferred
    assert key is not None
    found = _domain_codes(session, job, key, allowed)
    if found is None:
        return fallback
    nodes, codes = found
    fixed = _running_domains(session, job, codes)
    if fixed:
        return [nodes & np.isin(codes, fixed), *fallback]
    head = job.pods[0]
    now_per_node = copies_per_node(session, head, ())
    now = _per_domain(nodes, codes, now_per_node)
    masks: list[np.ndarray | None] = []
    if topology.required and topology.preferred:  # a preferred domain inside a required one
        pairs = _pair_codes(session, codes, topology.preferred)
        masks += _tightest(nodes, pairs, _per_domain(nodes, pairs, now_per_node), job.need)
    masks += _tightest(nodes, codes, now, job.need)
    if topology.required:
        pool: Iterable[str] = victims.freeable(job, head) if victims.may_preempt(head) else ()
        most = _per_domain(nodes, codes, copies_per_node(session, head, pool))
        room = [d for d in range(now.size) if now[d] < job.need <= most[d]]
        masks += [nodes & (codes == d) for d in sorted(room, key=lambda d: (-now[d], d))]
    return [*masks[:MOST_DOMAINS], *fallback]


def _tightest(
    nodes: np.ndarray, codes: np.ndarray, per_domain: np.ndarray, need: int
) -> list[np.ndarray | None]:
    """Masks of the domains (``codes``) among ``nodes`` that hold ``need`` members by
    ``per_domain``, the tightest first."""
    fit = sorted(np.flatnonzero(per_domain >= need).tolist(), key=lambda d: (per_domain[d], d))
    return [nodes & (codes == d) for d in fit]


def _pair_codes(session: Session, codes: np.ndarray, key: str) -> np.ndarray:
    """Per node, a code for its (``codes`` domain, ``key`` value) pair: a domain of ``key``
    inside a domain of ``codes`` (-1 where either label is missing)."""
    finer = session.cluster.label_codes(key)[0][: codes.size]
    both = (codes >= 0) & (finer >= 0)
    pairs = np.full(codes.size, -1, dtype=np.int64)
    if both.any():
        joined = codes[both].astype(np.int64) * (int(finer.max()) + 1) + finer[both]
        pairs[both] = np.unique(joined, return_inverse=True)[1]
    return pairs


def no_domain(topology: GangTopology, job: Job) -> str:
    """Why a required gang has no domain to try."""
    return (
        f"no {topology.required} domain has room for its {job.need} members together, even "
        "with every pod it may preempt evicted"
    )


def every_domain(session: Session, job: Job) -> list[np.ndarray]:
    """Node masks of every domain a required gang's members may use (only its running
    members' domain once some run); [] for any other job. A reservation for such a gang
    holds nodes of one domain (:mod:`~fairgpu.engine.actions.reserve`)."""
    topology = confinement(session, job)
    if topology is None or topology.required is None:
        return []
    found = _domain_codes(session, job, topology.required, None)
    if found is None:
        return []
    nodes, codes = found
    fixed = _running_domains(session, job, codes)
    domains = fixed or np.unique(codes[nodes]).tolist()
    return [nodes & (codes == d) for d in domains]


def _domain_codes(
    session: Session, job: Job, key: str, allowed: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """(the nodes the job's members may use that carry ``key``, each node's domain code),
    or None when no such node exists."""
    cluster = session.cluster
    n = cluster.size
    codes = cluster.label_codes(key)[0][:n]
    nodes = session.scheduler.static_mask(job.pods[0], cluster)[:n] & (codes >= 0)
    if allowed is not None:
        nodes &= allowed[:n]
    if not nodes.any():
        return None
    return nodes, codes


def _running_domains(session: Session, job: Job, codes: np.ndarray) -> list[int]:
    """The domains (codes) the group's running members are in (not those terminating: a
    group torn down starts afresh wherever it fits)."""
    if job.group is None:
        return []
    running = session.book.group_running.get(job.group.key, ())
    placements = session.cluster.placements
    nodes = [
        pl.node for uid in running if (pl := placements.get(uid)) is not None and not pl.terminating
    ]
    return sorted({int(codes[i]) for i in nodes if i < codes.size and codes[i] >= 0})


def _per_domain(nodes: np.ndarray, codes: np.ndarray, per_node: np.ndarray) -> np.ndarray:
    """Sum of ``per_node`` over ``nodes`` in each domain (``codes``; -1: none), indexed by
    domain code."""
    where = np.flatnonzero(nodes & (codes >= 0))
    if where.size == 0:
        return np.zeros(0)
    return np.bincount(codes[where], weights=per_node[where], minlength=int(codes[where].max()) + 1)
