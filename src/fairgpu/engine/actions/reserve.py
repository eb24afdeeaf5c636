"""Starvation reservations and backfill around them.

A large job (many whole GPUs, or a big gang) that stays blocked at the head of fair order for
``starvation.reserve_after_seconds`` gets nodes held for it
(:func:`~fairgpu.engine.gang.reservation_places`) -- if its queue is below its fair share: a
queue at or above its share is not starving, and what it started there reclaim would take back.
(The job itself may be larger than what its queue lacks.) While the reservation exists, other
pods may use those nodes only if they cannot delay the job (:func:`allowed_nodes`, backfill:
their declared run time ends before the nodes are expected to drain).

"Drain" means: have room for the members the job is to place there
(:func:`~fairgpu.engine.victim_cost.room_times`, :func:`expected_room`), not be empty. The
nodes are the members' places that come free first, a node holding as many members as fit
(:func:`~fairgpu.engine.gang.reservation_places`). A gang of 4-GPU members on 8-GPU nodes
then waits for half a node, not for a fractional inference replica that runs for hours beside
it; a member as large as its node waits, as before, for the node to empty. On
``benchmarks/fairness``'s flood mix (4 x 4-GPU gangs on 8-GPU nodes), seeds 0-3, waiting for
empty nodes gave useful allocation 95.88/96.07/96.33/95.35%, lowest share ratio
.777/.843/.910/.815 and gang wait p50 1 177/1 924/1 350/998 s; waiting for room gives
96.16/95.31/96.06/96.42%, .871/.868/.912/.902 and 898/591/1 148/850 s. The built-in demo
(seeds 0-7), the pool mix and the fair-cycle-speed scenario (members as large as a node)
decide exactly as before.

A reservation holds until its nodes are expected to drain (:func:`hold_end`): the declared run
times of the pods there, else the run time observed for their queue
(:class:`~fairgpu.tenancy.runtimes.ObservedRuntimes`), plus ``drainGraceSeconds``; at least
``gang.timeoutSeconds``, and only that long when no run time is known. It ends earlier when its
job starts or leaves. A job started from its reservation is no preemption victim until it has
run its declared run time, within ``reservedMinRuntimeSeconds`` and
``reservedMaxRuntimeSeconds`` (:func:`protected_until`): evicting it sooner would waste
both its run and the idle GPU time its nodes spent draining for it. So is a pod group that
starts again after a preemption tore it down (:func:`note_torn_down`): a second teardown
would waste a second run.

A pod overdue by more than ``drainGraceSeconds`` says nothing any more about when its node
frees up (:func:`~fairgpu.engine.victim_cost.declared_end`, as for "waiting is cheaper"):
what a held job is told (:func:`_explain`) then comes from the run time observed for the
pod's queue, as for a pod that declares none, or is unknown -- not its declared end, long
past, which read "expected free by" that moment for ever. The decisions -- which nodes are
held, backfill onto them, the hold's end -- still take declarations at their word (a past
end counts as room now). Judging them the same way was measured on
``benchmarks/backfill_contract`` (preemption off; its ``liar`` pods declare 5 minutes and
run an hour, so every node runs overdue pods; seeds 0/1/2): ``train``'s useful share went
from 25.58/25.73/32.97% to 12.53/16.64/32.97% with the backfill contract and from
18.31/18.64/32.97% to 0/0/32.97% without it, the liars' evicted runs from 6.4/7.8 to
39.8/24.3 GPU-hours -- every held node's drain unknown, each hold lasted only
``gang.timeoutSeconds`` and let on whatever declared to end by then: declaring short paid
again. Also learning such pods' run times as if they declared none (so the fallback is
known), seeds 0/1 (seed 2 needs no reservation and never moved): 23.48/21.93% and 0/0% (a
backfilled liar that overruns then moves the drain, and the hold, later); judging only the
choice of nodes that way: 25.58/21.93% and 18.49/18.62%, lost 6.9/20.4 GPU-hours.
``benchmarks/fairness`` (no pod outlives its declaration) decided exactly as before with
the first; so do it, ``benchmarks/backfill_contract`` and the fair-cycle-speed fingerprint
with this change, which alters only the text.

The reservation is also dropped as soon as its queue is no longer below its fair share while
another queue is (:func:`_sated`): a queue that made one while just below its share, then
started other work, would otherwise keep nodes draining for a job of a queue that is not
starving -- idle GPUs and blocked backfill paid by the queues that are. (A queue alone keeps
it: its job starves only behind its own queue's work.) On the built-in demo (seeds 0-2) the
queue with the largest share made the most reservations and kept them while above its share;
dropping them raised useful allocation from 69.5/72.2/68.1% to 68.6/77.1/76.9% of capacity
and brought that queue from 1.05-1.17x its share to 0.92-0.97x (``benchmarks/fairness``).

Where the GPUs on held nodes go (``benchmarks/fairness/reservations.py``, whole GPUs idle on
held nodes while GPU pods of other jobs are pending, GPU-hours, demo seeds 0/1/2 and the
pool mix): pending pods fit but all end after the held job's start 33/48/43/20; no pending
pod fits the node's pool or its idle GPUs 12/18/14/19; only gang members would end in time
0/11/4/11; a run time unknown or a pod alone that would end in time but was held by another
rule: 0. About half of it is on nodes already empty, waiting for the reservation's other
nodes. Backfill judged against each node's own drain instead of the job's start would fill
none of it (the start is the latest drain), so the rule above stays. Tried and rejected:
backfill that may delay the start by a fixed 600 s (demo useful 68.6 -> 66.7%, held idle
up) or by half the time to the start (a gang started 3 times); holding, among the nodes
that drain by the start, the busiest (demo useful 68.6/77.1/76.9 -> 67.6/74.5/76.0%);
dropping a reservation only for a queue below its share that can use the held nodes' pools
(pool mix 54.0 -> 50.2%); or only once its queue is above its share by the 5% band (demo
and pool mix useful down 1-10 points); or judging the queue without the pods it started
since the reservation was made, so its own later work does not end the reservation of its
older job (the pool mix's one gang its share allowed at arrival waits 1 445 s instead of
3 633 s, but pool mix useful 50.5 -> 46.1%, demo seeds 1/2 76.1/76.1 -> 72.5/67.5% and
their lowest share ratio 0.721/0.740 -> 0.577/0.522).

Also tried, judged over nine runs (the demo on seeds 0-5, the pool mix on seeds 0-1, the
flood mix; mean useful allocation and mean lowest share ratio, 71.8% and 0.753 with the
rules above): at most one or two reservations at a time (71.0% / 0.698, 71.7% / 0.728);
``reserveAfterSeconds`` 60 instead of 300 (72.5% / 0.733); reserving at once for a large job
whose preemption was refused because waiting is cheaper (71.5% / 0.761, within the spread);
holding reservations for a queue only while the jobs it has reservations for are smaller
than what it lacks (demo useful 68.8/76.1/75.8% -> 67.0/77.1/75.1%, lowest share ratio up
0.09 on seed 0 but down 0.02-0.14 on seeds 1-2 and the flood mix, pool mix useful 50.5 ->
54.6% but its lowest ratio 0.84 -> 0.66); and, on seeds 0-2 and the pool mix, running
another cycle at once after a reservation is dropped here, so the freed nodes are filled
without waiting for the next event (useful allocation down 1.3-8.5 points: what fills them
first is often long work that then holds them from the next gang). Keeping a queue's own
other jobs off its reserved nodes, so its backfill cannot make it sated (:func:`_sated`)
and end the reservation: demo seeds 0/1/2 lowest share ratio .768/.721/.755 ->
.673/.677/.713, pool mix useful allocation 50.48 -> 44.90%. Reserving at once for a pod
group whose queue's share holds the whole group (no ``reserveAfterSeconds`` wait): the pool
mix's qualified gang waits 726 s instead of 3 633 s, but the lowest share ratio falls -- pool
mix .839 -> .751, demo seeds 1/2 .721/.755 -> .659/.627 (seed 0 .768 -> .771, demo-
departments .756 -> .805) -- and pool mix useful allocation 50.48 -> 48.00%; reserving at once
only when the held nodes are expected to have room within ``reserveAfterSeconds``: pool mix
unchanged, demo seeds 1/2 .682/.685.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable

import numpy as np

from fairgpu.engine.actions.gang_domains import every_domain
from fairgpu.engine.actions.precedence_nodes import open_reserved
from fairgpu.engine.actions.reclaim import below_share
from fairgpu.engine.gang import (
    Place,
    Reservation,
    backfill_mask,
    declared_runtime,
    held_slots,
    reservation_places,
    whole_gpus,
)
from fairgpu.engine.jobs import Job
from fairgpu.engine.report_changes import unrecorded
from fairgpu.engine.session import Session
from fairgpu.engine.victim_cost import declared_end, room_times
from fairgpu.model.node_pools import workload_type
from fairgpu.model.pod import CPU, MEMORY, PodInfo

# What a pending reason calls the nodes other jobs' reservations keep from a pod.
HELD_FOR_OTHERS = "node(s) held for other jobs"


def allowed_nodes(session: Session, job: Job, pod: PodInfo) -> np.ndarray | None:
    """Nodes ``pod`` of ``job`` may use given other jobs' reservations (None: all).

    For a pod asking GPUs the answer depends only on its declared run time, its workload
    type (pool precedence rules open some held nodes to some types:
    :func:`~fairgpu.engine.actions.precedence_nodes.open_reserved`) and on whether
    its own job holds a reservation (drain times and reservations stay fixed between two
    :func:`reservation_drain` calls), so it is memoised: a backlog of identical pods costs
    one mask, not one per attempt. Pods without GPUs depend on the nodes' free CPU and
    memory and are not memoised."""
    reservations = session.state.reservations
    if not reservations or (len(reservations) == 1 and job.key in reservations):
        return None
    memo = session.state.backfill
    own = job.key if job.key in reservations else None
    key = (own, declared_runtime(pod), workload_type(pod))
    if pod.gpu.count:
        got = memo.get(key)
        if got is not None:
            return got
    others = [r for k, r in reservations.items() if k != job.key]
    mask = backfill_mask(pod, session.cluster, others, session.drain, session.now)
    rules = session.tenancy.preemption.pool_precedence
    if rules:  # nodes held for work a rule puts this pod's kind before
        mask = open_reserved(rules, session.cluster, pod, others, mask)
    if pod.gpu.count:
        memo[key] = mask
    return mask


def expected_drain(
    session: Session, node: int, declared_only: bool = False, grace: float = math.inf
) -> float:
    """When node slot ``node`` is expected to be empty: the latest of its pods' ends
    (:func:`expected_ends`; 0 for an empty node, inf if a pod's end is not known)."""
    ends = expected_ends(session, node, declared_only, grace)
    return max((end for end, _ in ends), default=0.0)


def expected_ends(
    session: Session, node: int, declared_only: bool = False, grace: float = math.inf
) -> list[tuple[float, str]]:
    """``(end, uid)`` of the pods on node slot ``node``, soonest first: from each one's
    declared run time, else (unless ``declared_only``) the run time observed for its queue;
    ``inf`` when neither is known. A pod overdue by more than ``grace`` seconds counts as one
    that declares nothing (:func:`~fairgpu.engine.victim_cost.declared_end`); by default
    declarations are taken at their word, however overdue (module docstring: measured)."""
    cluster = session.cluster
    runtimes = session.state.runtimes
    ends: list[tuple[float, str]] = []
    for uid, pod in cluster.node_pods[node].items():
        placement = cluster.placements[uid]
        end = declared_end(pod, placement, session.now, grace)
        if end is None and not declared_only:
            runtime = runtimes.expected(session.resolver.resolve(pod).queue)
            if runtime is not None:
                end = placement.started + runtime
        ends.append((math.inf if end is None else end, uid))
    ends.sort()
    return ends


def expected_room(
    session: Session,
    res: Reservation,
    at: int,
    declared_only: bool = False,
    grace: float = math.inf,
) -> float:
    """When ``res.nodes[at]`` is expected to have room for the members it is to hold
    (:func:`~fairgpu.engine.victim_cost.room_times`; 0 when it has now), or without a
    member noted, to be empty (:func:`expected_drain`); inf: unknown. ``grace``: as in
    :func:`expected_ends`."""
    node = int(res.nodes[at])
    cluster = session.cluster
    if res.member is None or res.slots is None:
        return expected_drain(session, node, declared_only, grace)
    k = int(res.slots[at])
    version = int(cluster.node_version[node])
    runtimes = session.state.runtimes.version
    key = (node, version, k, runtimes, declared_only, grace, id(cluster))
    got = res.room.get(key)
    now = session.now
    if got is None or now > got[1]:
        ends = expected_ends(session, node, declared_only, grace)
        room = max(0.0, room_times(res.member, cluster, node, ends, k)[k - 1])
        # Valid until the first pod there becomes overdue by more than the grace, when its
        # declared end stops counting (an end from an observed run time may pass that mark
        # too: then it is only computed again). Never, with the grace infinite.
        until = min((e + grace for e, _ in ends if now <= e + grace), default=math.inf)
        if len(res.room) > 256:  # old versions: forget them
            res.room.clear()
        res.room[key] = got = (room, until)
    return got[0]


def nodes_drain(
    session: Session, res: Reservation, declared_only: bool = False, grace: float = math.inf
) -> float:
    """When the last node of ``res`` is expected to have room for its members (inf:
    unknown): when the job can start. ``grace``: as in :func:`expected_ends`."""
    n = session.cluster.size
    return max(
        (
            expected_room(session, res, at, declared_only, grace)
            for at, i in enumerate(res.nodes.tolist())
            if i < n
        ),
        default=math.inf,
    )


def hold_end(session: Session, res: Reservation) -> float:
    """Until when ``res`` holds: the latest drain of its nodes expected so far
    (:func:`track_drain`; a node that emptied drained when it was expected to, not at time 0)
    plus ``drainGraceSeconds``, at least ``gang.timeoutSeconds`` after it was made (only that
    when the drain is unknown)."""
    floor = res.since + session.tenancy.gang.timeout_seconds
    if not math.isfinite(res.drain):
        return floor
    return max(floor, res.drain + session.tenancy.starvation.drain_grace_seconds)


def track_drain(session: Session, res: Reservation) -> None:
    """Fold the nodes' current expected drain into ``res.drain`` (the latest so far)."""
    res.drain = max(res.drain, nodes_drain(session, res))


def reservation_drain(session: Session) -> dict[int, float]:
    """When each reserved node is expected to be empty; where unknown, when its reservation
    ends (backfill must not outlast the hold)."""
    n = session.cluster.size
    out: dict[int, float] = {}
    session.state.backfill.clear()  # drain times change: backfill masks are stale
    for res in session.state.reservations.values():
        for at, i in enumerate(res.nodes.tolist()):
            if i < n:
                out[i] = expected_room(session, res, at)
        if any(math.isinf(out.get(int(i), 0.0)) for i in res.nodes if i < n):
            end = hold_end(session, res)
            for i in res.nodes:
                if i < n and math.isinf(out[int(i)]):
                    out[int(i)] = end
    return out


def note_placed(session: Session, job: Job) -> None:
    """``job`` started: its starvation clock and reservation end; started from its
    reservation, or a pod group starting again after a preemption tore it down
    (:func:`note_torn_down`), its pods are protected from preemption for their declared run
    time (within ``reservedMinRuntimeSeconds`` and ``reservedMaxRuntimeSeconds``)."""
    state = session.state
    state.blocked_since.pop(job.key, None)
    restarted = job.key in state.torn_down
    state.torn_down.discard(job.key)
    if state.reservations.pop(job.key, None) is not None:
        state.backfill.clear()  # its nodes are no longer held for it
    elif not restarted:
        return
    cfg = session.tenancy.starvation
    placements = session.cluster.placements
    for pod in job.pods:
        if pod.uid in placements:
            declared = declared_runtime(pod) or 0.0
            span = max(
                cfg.reserved_min_runtime_seconds, min(declared, cfg.reserved_max_runtime_seconds)
            )
            state.protected[pod.uid] = session.protected_now[pod.uid] = session.now + span


def note_torn_down(session: Session, victims: Iterable[PodInfo]) -> tuple[str, ...]:
    """A committed preemption evicted ``victims``: the pod groups among them were torn down
    (the victim search evicts a group's members together). When such a group starts again
    it is protected as a job started from its reservation (:func:`note_placed`): torn down a
    second time it would lose a second run, and a gang that keeps being restarted never
    finishes (on the built-in demo, seed 1, a 2 x 8-GPU gang was reclaimed after 462 s, and
    again 1 017 s after its restart, by another queue). Kept by group key, which a job
    controller's new pods share, until the group starts again or is gone
    (:func:`expire_reservations`). Returns the keys of the groups torn down."""
    running = session.book.group_running  # the statement's evictions already show here
    tore: list[str] = []
    for pod in victims:
        ref = session.resolver.pod_group(pod)
        # A member beyond minMember of an elastic group goes alone: the group still runs.
        if ref is not None and not running.get(ref.key) and ref.key not in tore:
            session.state.torn_down.add(ref.key)
            tore.append(ref.key)
    return tuple(tore)


def protected_until(session: Session, uid: str) -> float | None:
    """When the protection of ``uid`` -- a pod started from a reservation, protected from
    preemption (reclaim, and priority inside its queue) -- ends; None when it is not
    protected now. The victim policy asks for a cycle at that moment when it may matter
    (:class:`~fairgpu.engine.actions.victim_eligibility.HeldBack`)."""
    until = session.state.protected.get(uid)
    return None if until is None or session.now >= until else until


def _is_large(session: Session, job: Job, needed: list[PodInfo]) -> bool:
    cfg = session.tenancy.starvation
    return whole_gpus(needed) >= cfg.min_gpus or (
        job.group is not None and job.need >= cfg.min_gang_pods
    )


def note_blocked(session: Session, job: Job) -> None:
    """A job at the head of fair order did not fit: start or check its starvation clock, and
    hold nodes for it once it has waited long enough."""
    cfg = session.tenancy.starvation
    state = session.state
    if not cfg.enabled or job.key in state.reservations:
        return
    needed = job.pods[: job.need]
    if not _is_large(session, job, needed):
        return
    since = state.blocked_since.setdefault(job.key, session.now)
    if not _starving(session, job):
        return
    due = since + cfg.reserve_after_seconds
    if session.now < due:
        # The live scheduler's periodic cycles reserve when it is due; a replay, which runs
        # cycles on events, asks for one then (else the reservation waits for the next
        # event, and the job may start without it -- unprotected -- or be backfilled past).
        session.out.retry_no_later_than(due)
        return
    res = _reserve(session, job, needed)
    if res is None:
        return
    track_drain(session, res)
    state.reservations[job.key] = res
    session.drain = reservation_drain(session)
    _wake_at_end(session, res)


def _wake_at_end(session: Session, res: Reservation) -> None:
    """Ask for a cycle just after ``res`` is held past :func:`hold_end` (then it is dropped
    and what it kept out may start) -- as the live scheduler's periodic cycles would."""
    session.out.retry_no_later_than(math.nextafter(hold_end(session, res), math.inf))


def _starving(session: Session, job: Job) -> bool:
    """Is ``job``'s queue below its fair share? (A queue at or above it is not starving.)
    Without the cycle's shares (no fair cycle): yes."""
    deserved = session.deserved
    if deserved is None:
        return True
    return below_share(session.book, deserved, job.tenant.queue)


def _sated(session: Session, res: Reservation) -> bool:
    """Has ``res``'s queue come up to its fair share since the reservation was made (its other
    work started, or its share fell) while another queue is below its own? Then its nodes
    should not stand idle draining for a queue that is not starving while one that is waits
    (and what it would start there, reclaim would take back). A queue alone, or with every
    other queue at its share, keeps its reservation: the job starves only behind its own
    queue's work. (Without the cycle's shares, no fair cycle: never.)

    Counting only the queues below their share whose GPU pods may use the reserved nodes was
    measured (``benchmarks/fairness``, demo seeds 0-7 and the mixes on seeds 0 and 1): only
    the pool mix on seed 0 moved -- useful allocation 50.48% -> 51.78%, lost 0.54% -> 0.16%,
    but every gang's wait p50 12 307 s -> 14 332 s, and its qualified gang still waited
    3 633 s (a queue that may use those nodes was below its share when it was dropped).
    Not counting the queue's own pods placed on the reserved nodes since (backfill, gone by
    contract before the job starts): that gang waits 1 445 s and the pool mix's useful
    allocation rises 50.48% -> 56.10%, but its lowest share ratio falls .839 -> .684 and the
    demo's (seeds 0/1/2) .768/.721/.755 -> .725/.637/.708."""
    deserved = session.deserved
    if deserved is None or below_share(session.book, deserved, res.queue):
        return False
    return any(q != res.queue and below_share(session.book, deserved, q) for q in deserved)


def _reserve(session: Session, job: Job, needed: list[PodInfo]) -> Reservation | None:
    cluster = session.cluster
    scheduler = session.scheduler
    taken = np.zeros(cluster.size, dtype=bool)
    for res in session.state.reservations.values():
        taken[res.nodes[res.nodes < cluster.size]] = True
    head = needed[0]
    ranks = scheduler.ranks(cluster)

    def places(outside: np.ndarray) -> list[Place] | None:
        return reservation_places(
            needed,
            cluster,
            lambda p: scheduler.static_mask(p, cluster),
            outside,
            ranks,
            lambda node, most: room_times(head, cluster, node, expected_ends(session, node), most),
        )

    confined = every_domain(session, job)
    if confined:  # one domain's nodes: the one where the job can start first
        options = [got for d in confined if (got := places(taken | ~d)) is not None]
        chosen = min(options, key=lambda got: got[-1][0]) if options else None
    else:
        chosen = places(taken)
    if chosen is None:
        return None
    nodes, slots = held_slots(chosen)
    per_node = int(slots.max())
    return Reservation(
        job.key,
        job.tenant.queue,
        nodes,
        session.now,
        cpu=float(head.requests.get(CPU, 0) * per_node),
        memory=float(head.requests.get(MEMORY, 0) * per_node),
        node_names=[cluster.node(int(i)).name for i in nodes],
        member=head,
        slots=slots,
        present=frozenset(uid for i in nodes.tolist() for uid in cluster.node_pods[i]),
    )


def expire_reservations(
    session: Session, pending_keys: Container[str], pending_groups: Container[str]
) -> None:
    """Drop reservations of jobs no longer pending, held past :func:`hold_end` or whose queue
    is no longer below its fair share (:func:`_sated`), starvation clocks of jobs no longer
    pending, protections that ended and torn-down groups that are gone (no pod pending --
    ``pending_groups``: the keys of the groups with a pod pending -- and none running);
    learn run times."""
    state = session.state
    now = session.now
    _observe_runtimes(session, pending_keys)
    for key in list(state.reservations):
        res = state.reservations[key]
        track_drain(session, res)
        if key not in pending_keys or now > hold_end(session, res) or _sated(session, res):
            del state.reservations[key]
            if key in pending_keys:
                state.blocked_since[key] = now  # wait again before the next reservation
        else:
            _wake_at_end(session, res)
    for key in list(state.blocked_since):
        if key not in pending_keys:
            del state.blocked_since[key]
    placements = session.cluster.placements
    for uid in [u for u, t in state.protected.items() if t <= now or u not in placements]:
        del state.protected[uid]
    if state.torn_down:
        # Groups with no pod pending and none running are gone (deleted, or finished): one
        # re-created under the same name later starts afresh, unprotected.
        running = session.book.group_running
        state.torn_down = {k for k in state.torn_down if k in pending_groups or running.get(k)}


def drop_sated_reservations(session: Session) -> None:
    """After the cycle's placements, drop the reservations whose queue they made sated
    (:func:`_sated`), as :func:`expire_reservations` would at the start of the next cycle.

    Why at the end too: a cycle's end state must be one the next cycle leaves alone when
    nothing happened in between. The live scheduler runs a cycle every few seconds, the
    simulator (and so a forecast) only when something happens; a drop left to the next cycle
    happened seconds later live but only at the next event simulated, by when an arrival may
    have put the queue below its share again -- and the two worlds (and a forecast and the
    run it predicts) then decide differently. On the prediction benchmark's built-in demo
    (seed 0, declared run times), a forecast told the real future arrivals missed by up to
    48% of the wait at p90 with the drop left to the next cycle, 18.5% with it here. Its
    cost in ``benchmarks/fairness`` (fair ordering, demo seeds 0/1/2, pool-mix): useful
    allocation 68.59/77.11/76.94/54.02% before, 68.84/77.11/76.11/52.52% after; the lowest
    share ratio .735/.628/.717/.720 before, .704/.636/.715/.864 after; no target changed."""
    state = session.state
    for key in [k for k, res in state.reservations.items() if _sated(session, res)]:
        del state.reservations[key]
        state.blocked_since[key] = session.now  # wait again before the next reservation


def _observe_runtimes(session: Session, pending_keys: Container[str]) -> None:
    """Feed the running pods that declare no run time to the observed run times."""
    if not session.tenancy.starvation.enabled:
        return
    cluster, resolver = session.cluster, session.resolver

    def watch(uid: str) -> tuple[str, float] | None:
        pod = cluster.pods.get(uid)
        if pod is None or declared_runtime(pod) is not None:
            return None
        return resolver.resolve(pod).queue, cluster.placements[uid].started

    running = cluster.placements.keys()
    session.state.runtimes.observe(running, watch, pending_keys, session.now)


def publish_reservations(session: Session) -> None:
    """List the held nodes in the result and explain them in the held jobs' pending
    reasons."""
    out = session.out
    if out.evictions:
        session.state.runtimes.evicted(e.pod.uid for e in out.evictions)
    reservations = session.state.reservations
    for key, res in reservations.items():
        out.reserved[key] = list(res.node_names)
    if reservations:
        _explain(session)


def _explain(session: Session) -> None:
    """Tell a held job's pending pods where GPUs are held for them and when those should be
    free: the latest declared end (``fairgpu.io/duration-seconds``) of the pods on the held
    nodes, else with the run times observed for their queues. A pod overdue by more than
    ``drainGraceSeconds`` counts as declaring none (module docstring). The time is absolute,
    so the reason stays the same from cycle to cycle."""
    notes: dict[str, str] = {}
    reservations = session.state.reservations
    owner = _held_pods(session)
    # Settled followers' reports are left out: such a pod holds no reservation (one that
    # does goes alone), and they are most of a large backlog's reports.
    for item in unrecorded(session.out.unschedulable, session.recorded):
        if owner is not None:
            key = owner.get(item.pod.uid)
            if key is None:
                continue
        else:
            group = session.resolver.pod_group(item.pod)
            key = group.key if group is not None else item.pod.uid
            if key not in reservations:
                key = item.pod.uid  # a member of a group that already runs goes alone
        res = reservations.get(key)
        if res is None:
            continue
        note = notes.get(key)
        if note is None:
            note = notes[key] = _hold_note(session, res)
        item.reason += note


def _held_pods(session: Session) -> dict[str, str] | None:
    """The reservation key of each pending pod a reservation holds nodes for -- a group's
    members by the group's key, a pod alone (or a member of a group that already runs) by
    its uid --, from the backlog's groups; None without a backlog. A cycle reports many
    pending pods and few are held for: each is looked up, not resolved to its group."""
    backlog = session.backlog
    if backlog is None:
        return None
    owner: dict[str, str] = {}
    for key in session.state.reservations:
        members = backlog.groups.get(key)
        if members is None:
            owner.setdefault(key, key)
            continue
        for pod in members.values():
            owner[pod.uid] = key
    return owner


def _hold_note(session: Session, res: Reservation) -> str:
    names = res.node_names
    held = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    grace = session.tenancy.starvation.drain_grace_seconds
    end = nodes_drain(session, res, declared_only=True, grace=grace)
    if math.isfinite(end):
        when = f"expected free by {session.time_label(end)} (the declared run times there)"
    elif math.isfinite(expected := nodes_drain(session, res, grace=grace)):
        when = f"expected free by {session.time_label(expected)} (run times observed there)"
    else:
        when = "when they free up is unknown (pods there declare no run time or outran it)"
    return f"; GPUs are held for it on {held}, {when}"
