"""What one cycle decides: binds, evictions and the reasons pods stay pending."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from fairgpu.model.pod import PodInfo


@dataclass(frozen=True, slots=True)
class ReclaimNote:
    """What a placement that reclaimed changed, for the reclaim cooldown
    (:mod:`~fairgpu.engine.actions.reclaim`): at ``at`` its queue took from each (node name,
    victim queue) of ``flows``, and the GPUs (node name, device) of ``gpus`` changed tenant.

    The engine keeps these in its state between cycles. An adapter whose engine may start
    afresh while they still count -- the live scheduler restarted, or another replica
    leading -- writes each down with the pod it placed and hands it back
    (:meth:`~fairgpu.engine.engine.Engine.restore_reclaim`): otherwise the first cycle of
    a fresh engine could undo a reclaim its predecessor made a minute earlier."""

    at: float
    flows: tuple[tuple[str, str], ...] = ()
    gpus: tuple[tuple[str, int], ...] = ()


@dataclass(slots=True)
class Bind:
    """Bind ``pod`` to ``node_name`` using GPU ``devices``.

    ``wait_for`` lists the uids of the pods its job evicted to make room (for it, or for
    another member of its pod group): the live adapter posts the binding only once they are
    gone (the simulator removes them at once). ``reclaim``: what its placement reclaimed
    (None: nothing). ``protected_until``: until when it is no preemption victim, started
    from its job's reservation (:mod:`~fairgpu.engine.actions.reserve`; None: not
    protected). ``tore_down``: the keys of the pod groups its job's preemption tore down,
    protected once they start again (:func:`~fairgpu.engine.actions.reserve.note_torn_down`).
    An adapter whose engine may start afresh writes all three down with the pod
    (:meth:`~fairgpu.engine.engine.Engine.restore_reclaim`,
    :meth:`~fairgpu.engine.engine.Engine.restore_protection`,
    :meth:`~fairgpu.engine.engine.Engine.restore_torn_down`).
    """

    pod: PodInfo
    node_name: str
    devices: tuple[int, ...] = ()
    wait_for: tuple[str, ...] = ()
    reclaim: ReclaimNote | None = None
    protected_until: float | None = None
    tore_down: tuple[str, ...] = ()


@dataclass(slots=True)
class Evict:
    """Evict ``pod`` (a preemption victim) to make room for ``preemptor``.

    ``kind``: ``reclaim`` (between queues), ``priority`` (inside a queue, or kube-default),
    ``relocate`` and ``precedence`` (see the victim policy), ``gang-timeout`` (a pod group
    stayed below minMember too long), ``backfill-overrun`` (a pod backfilled onto held nodes
    outlived its declared run time).
    """

    pod: PodInfo
    preemptor: PodInfo | None = None
    reason: str = ""
    kind: str = ""


@dataclass(slots=True)
class Displace:
    """Take ``pod``'s place for ``preemptor``: ``pod`` is a preemptor the adapter holds on its
    node, unbound, waiting for its own victims to go (one of the engine's ``displaceable``
    pods). Nothing is evicted -- an Eviction of an unbound pod would delete it: the adapter
    drops ``pod``'s hold, clears its nomination and requeues it, and ``preemptor`` (placed
    on that node in the same cycle, ``pod``'s uid in its ``wait_for``) waits for the victims
    ``pod`` was waiting for. Never decided in the simulator (nothing is held there)."""

    pod: PodInfo
    preemptor: PodInfo
    reason: str = ""


class Unschedulable(msgspec.Struct, gc=False):
    """``pod`` stays pending for ``reason``; ``resolvable`` is False if no change can help.

    A struct the garbage collector does not track (it refers to nothing that refers back):
    a cycle over a large backlog reports thousands of these, and as tracked objects they
    made the collector run again and again."""

    pod: PodInfo
    reason: str
    resolvable: bool = True


@dataclass(frozen=True, slots=True)
class Deallocate:
    """Clear the allocation of ResourceClaim ``claim`` (``namespace/name``, uid
    ``claim_uid``): it is allocated but reserved by no pod (or only by ``pod``), and the
    allocation keeps ``pod`` off nodes where it would otherwise fit (kube-scheduler's
    DynamicResources PostFilter). The adapter writes ``status`` without allocation and
    reservations; the next attempt allocates the claim afresh."""

    claim: str
    claim_uid: str
    pod: PodInfo


@dataclass(slots=True)
class CycleResult:
    """All decisions of one cycle, in the order they were made.

    ``deallocations``: stale ResourceClaim allocations to clear (:class:`Deallocate`).
    ``displaced``: held preemptors whose place another pod took (:class:`Displace`).
    ``reserved`` maps a large job's key to the node names held for it after this cycle.
    ``retry_at``: the earliest later time at which a time rule changes what a cycle may do
    although nothing else changed -- a pod it kept from being a victim (the minimum run before
    a reclaim, the reclaim cooldown, a reservation's protection) becomes one, a blocked large
    job's reservation falls due or a reservation ends, a pod group below minMember times out.
    An adapter that runs cycles only on events (the simulator) schedules one for it; the live
    scheduler's periodic cycles need none. None when no such rule is pending.
    """

    binds: list[Bind] = field(default_factory=list)
    evictions: list[Evict] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)
    reserved: dict[str, list[str]] = field(default_factory=dict)
    retry_at: float | None = None
    deallocations: list[Deallocate] = field(default_factory=list)
    displaced: list[Displace] = field(default_factory=list)

    def retry_no_later_than(self, when: float) -> None:
        """Ask for a cycle at ``when`` (the earliest of all such requests wins)."""
        if self.retry_at is None or when < self.retry_at:
            self.retry_at = when
