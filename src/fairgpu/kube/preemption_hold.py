"""Preemptors waiting for their victims: the live scheduler's preemption-hold state machine.

When the engine plans a preemption it releases the victims from the cache and assumes the
preemptor on their node at once. In the API the victims still run: their Evictions start a
graceful deletion, and they keep the node's CPU, memory and GPU devices until they are gone. So
the preemptor is *held*: its status names the node (``nominatedNodeName``, as kube-scheduler
does) and its Binding is posted only once every victim is gone.

A held preemptor leaves that state in one of these ways:

* every victim is gone: its Bind is handed back to be posted (once);
* it is *dropped*: its pod was deleted, its node removed, it was bound by someone else, or the
  engine placed it again — whatever no longer leaves it assumed on its node;
* it is *abandoned*: its victims did not go in time, or an eviction was refused; it is forgotten
  and requeued after a backoff that doubles per failure (so a victim a PodDisruptionBudget
  protects does not cause an eviction storm);
* a member of a pod group leaves with its group: the engine has every member of a group wait
  for all of its victims, and when one held member is dropped or abandoned the others are too
  (one bound while its siblings are requeued would run alone -- and once it finished, the
  group could never again reach minMember);
* it is *displaced* (:meth:`PreemptionHolds.displaced`): a pod the engine's victim rules allow
  to preempt it -- were it running: higher priority inside its queue, the reclaim rules across
  queues -- took its place (kube-scheduler clears the nominations of lower priority on the
  node it nominates a pod to). The engine offers every held preemptor as a victim
  (:meth:`PreemptionHolds.displaceable`; it loses no work, so it goes before any running pod)
  and reports a :class:`~fairgpu.engine.decisions.Displace`, never an Eviction: it is
  unbound. Its hold is dropped, its assumption forgotten, its nomination cleared, and it is
  requeued at once (no backoff, nothing failed). Its victims still terminate in the API: each
  goes back in the cache as terminating if its node has room for it beside the pods taking
  its place (it holds its own room until gone); the others are *transferred*: each pod taking
  its place -- every pod the displacing job placed, on any node, which names the displaced pod
  in its ``wait_for`` (a pod group's members may take the place of one another's victims, and
  the victims of a displaced group's members are all of its victims, on every node) -- is
  held and waits for them as well as for victims of its own. The engine displaces at
  most one held preemptor per node in a cycle, and holds the room the displaced pod had
  beyond what the pods taking its place take for the rest of the cycle
  (:mod:`~fairgpu.engine.lingering`); then its victims' remainders are held again against
  those pods (:meth:`SchedulerCache.linger`). So that room is never handed out while its
  victims exist, and other jobs' binds of the cycle onto that node go ahead.

Invariants (what :class:`PreemptionHolds` keeps true between two calls):

1. A waiting bind is never posted while one of its victims exists in the API, and never for a
   preemptor that is no longer assumed on that node (:meth:`PreemptionHolds.reconcile`).
2. A victim's capacity is never handed out while it exists: while its preemptor is held, the
   preemptor's assumption holds what the preemptor takes and the victim's *remainder* the rest
   (the engine puts it back at once, :mod:`~fairgpu.engine.lingering`; after a displacement
   it is held again against the pod that took the place, :meth:`SchedulerCache.linger`); when
   the preemptor is dropped or abandoned the whole victim is put back in the cache as
   *terminating* (its eviction was posted), keeping its node until its deletion is observed
   and never chosen as a victim again. Only a refused eviction puts a victim back as running.
3. Each victim belongs to at most one held preemptor, and is forgotten here once gone (a
   transfer moves it from the displaced preemptor to the first of the pods that took its
   place; the others wait for it too, without owning it).
4. A preemptor that was nominated keeps its nomination after it is abandoned; while a
   lower-priority pod on that node is terminating it may be placed but may not preempt again
   (:meth:`PreemptionHolds.no_preemption`, kube-scheduler's ``PodEligibleToPreemptOthers``):
   re-planning after a timeout never evicts more while earlier victims still terminate. A
   displaced preemptor loses its nomination with its victims (they are no longer its own):
   it may preempt again, as kube-scheduler's requeued pod may.
5. No Eviction is ever posted for a held preemptor: it is only ever displaced.

Pure bookkeeping over a :class:`~fairgpu.kube.cache.SchedulerCache`: no I/O, no clock (``now``
is passed in), used by the scheduling loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from fairgpu.engine.engine import Bind, Displace
from fairgpu.engine.preemption import may_preempt_again
from fairgpu.kube.cache import SchedulerCache
from fairgpu.model.pod import PodInfo

__all__ = ["Held", "PreemptionHolds"]

log = logging.getLogger("fairgpu.kube.preemption")

#: Longest backoff (seconds) before an abandoned preemptor is tried again.
MAX_BACKOFF = 30.0


@dataclass(slots=True)
class Held:
    """A preemptor assumed on ``bind.node_name`` whose bind waits until ``waiting`` victims
    are gone, or until ``deadline`` (then it is abandoned)."""

    bind: Bind
    waiting: set[str]
    deadline: float
    group: str = ""


class PreemptionHolds:
    """Held preemptors, their victims and the backoff of abandoned ones.

    Args:
        cache: the scheduler cache the preemptors are assumed in.
        wait: seconds a preemptor waits for its victims before it is abandoned.
    """

    def __init__(self, cache: SchedulerCache, wait: float) -> None:
        self.cache = cache
        self.wait = wait
        self.held: dict[str, Held] = {}
        self.victims: dict[str, tuple[str, PodInfo]] = {}  # victim -> (preemptor, victim pod)
        self.backoff: dict[str, tuple[float, int]] = {}  # preemptor -> (retry at, failures)
        # Victims transferred to a preemptor placed in this cycle, until its hold begins.
        self.transferred: dict[str, set[str]] = {}

    # ---- entering --------------------------------------------------------------------------
    def evicting(self, victim: PodInfo, preemptor: str | None) -> None:
        """``victim`` was released by a plan and its Eviction is about to be posted."""
        self.cache.mark_evicting(victim.uid)
        if preemptor is not None:
            self.victims[victim.uid] = (preemptor, victim)

    def hold(self, bind: Bind, now: float, group: str = "") -> bool:
        """The engine assumed ``bind.pod``; True if its bind must wait (held), False if it can
        be posted now. An earlier hold of the same pod (it was placed again) is dropped.
        ``group``: the key of its pod group, whose held members leave the hold together."""
        uid = bind.pod.uid
        if uid in self.held:
            self._drop(uid, now, forget=False)
        cache = self.cache
        mine = (*bind.wait_for, *self.transferred.pop(uid, ()))
        waiting = {v for v in mine if v in cache.bound or v in cache.evicting}
        if not waiting:
            return False
        self.held[uid] = Held(bind, waiting, now + self.wait, group)
        cache.nominated[uid] = bind.node_name
        return True

    # ---- leaving ---------------------------------------------------------------------------
    def gone(self, uids: set[str], now: float) -> list[Bind]:
        """Pods ``uids`` are gone from the API; returns the binds whose victims are all gone."""
        for uid in uids:
            self.victims.pop(uid, None)
        ready: list[Bind] = []
        for p_uid in list(self.held):
            if p_uid in uids:
                self._drop(p_uid, now)
                continue
            held = self.held[p_uid]
            held.waiting -= uids
            if not held.waiting:
                del self.held[p_uid]
                ready.append(held.bind)
        return ready

    def reconcile(self, now: float) -> bool:
        """Drop every held preemptor no longer assumed on its node (deleted, node removed,
        bound elsewhere, forgotten); True if the cache changed."""
        cache = self.cache
        changed = False
        for p_uid, held in list(self.held.items()):
            if p_uid not in self.held:
                continue  # dropped with its group
            node = held.bind.node_name
            if cache.assumed.get(p_uid) == node and cache.node_name_of(p_uid) == node:
                continue
            log.info(
                "preemptor no longer waits on its node; cancelling its bind",
                extra={"pod": held.bind.pod.key, "node": node},
            )
            changed |= self._drop(p_uid, now)
        return changed

    def expire(self, now: float) -> bool:
        """Abandon preemptors whose victims did not go by their deadline; True if any."""
        late = [u for u, h in self.held.items() if now > h.deadline]
        for p_uid in late:
            log.warning("victims did not go in time; requeueing preemptor", extra={"pod": p_uid})
            self._drop(p_uid, now, backoff=True)
        return bool(late)

    def refused(self, victim: PodInfo, now: float, spare_until: float) -> bool:
        """``victim``'s eviction was refused or failed: it runs on (put back, spared until
        ``spare_until``) and its preemptor is abandoned. True if the cache changed."""
        entry = self.victims.pop(victim.uid, None)
        changed = False
        if entry is not None:
            # First the preemptor gives the capacity back, then the victim takes it again.
            changed = self._drop(entry[0], now, backoff=True)
        return self.cache.restore(victim.uid, victim, spare_until) or changed

    def _drop(self, p_uid: str, now: float, *, backoff: bool = False, forget: bool = True) -> bool:
        """Stop holding ``p_uid`` -- and, unless it was placed again, its pod group's other
        held members: forget their assumptions, then put their victims back as terminating
        (in that order, so a victim never comes back on room a member still holds); True if
        there was a hold."""
        held = self.held.pop(p_uid, None)
        if held is None:
            return False
        leaving = [(p_uid, held)]
        if forget and held.group:
            group = [u for u, h in self.held.items() if h.group == held.group]
            leaving += [(u, self.held.pop(u)) for u in group]
        for uid, _ in leaving:
            if forget:
                self.cache.forget(uid)
            if backoff:
                _, failures = self.backoff.get(uid, (0.0, 0))
                self.backoff[uid] = (now + min(MAX_BACKOFF, 2.0**failures), failures + 1)
        for _, gone in leaving:
            for v in gone.waiting:
                entry = self.victims.pop(v, None)
                if entry is not None:
                    self.cache.restore(v, entry[1], now, terminating=True)
        return True

    def without_preemptor(self, victims: list[PodInfo], now: float) -> None:
        """Pods evicted for no preemptor (a pod group's timeout) keep their node until they
        are gone: the engine held their room for the rest of its cycle
        (:mod:`~fairgpu.engine.lingering`), and they are recorded here as terminating (the
        cycle's binds need not wait)."""
        for v in victims:
            self.cache.restore(v.uid, v, now, terminating=True)

    def displaced(self, displaced: list[Displace], binds: list[Bind], now: float) -> list[PodInfo]:
        """Apply the cycle's displacements (module docstring) before its ``binds`` are held
        or posted (all may go ahead); returns the displaced pods, whose nominations the
        caller clears in the API (they are cleared here in the cache).

        The victims a displaced preemptor waited for are those of its whole statement, on
        every node (a pod group's members wait for all of them), so they go to every pod
        that took the place of any member of it, whatever its node: handed only to the pods
        on one member's node, the pods on another's were bound at once, on GPUs a victim
        there still ran on."""
        if not displaced:
            return []
        cache = self.cache
        # Per displaced statement (its pod group, or the pod alone): the pods taking its
        # places and the victims it waited for.
        batches: dict[str, tuple[dict[str, PodInfo], list[tuple[str, PodInfo]]]] = {}
        gone: list[PodInfo] = []
        for d in displaced:
            held = self.held.pop(d.pod.uid, None)
            if held is None:
                continue  # not held any more (the engine is offered held pods only)
            log.info(
                "preemptor displaced; requeued without eviction",
                extra={"pod": d.pod.key, "by": d.preemptor.key, "node": held.bind.node_name},
            )
            cache.forget(d.pod.uid)
            cache.nominated.pop(d.pod.uid, None)
            gone.append(d.pod)
            takers, victims = batches.setdefault(held.group or d.pod.uid, ({}, []))
            takers.update(_taking(d, binds))
            for v in held.waiting:
                entry = self.victims.pop(v, None)
                if entry is not None:
                    victims.append((v, entry[1]))
        for takers, victims in batches.values():
            if victims:
                self._transfer(list(takers.values()), victims, now)
        return gone

    def _transfer(
        self, takers: list[PodInfo], victims: list[tuple[str, PodInfo]], now: float
    ) -> None:
        """A displaced preemptor's ``victims``: back in the cache as terminating where there
        is room beside ``takers`` (the pods that took its place, on any node), the others
        theirs -- each of them waits for every one (all back, if none was kept). What those
        hold beyond the takers' room, and their own victims' beyond it, is held again against
        them (:meth:`SchedulerCache.linger`): they may take less than the displaced pod did."""
        cache = self.cache
        moved: list[tuple[str, PodInfo]] = []
        for v, pod in victims:
            if not takers:
                cache.restore(v, pod, now, terminating=True)
            elif not cache.restore_if_room(v, pod, now):
                self.victims[v] = (takers[0].uid, pod)
                for t in takers:
                    self.transferred.setdefault(t.uid, set()).add(v)
                moved.append((v, pod))
        if takers and moved:
            uids = {t.uid for t in takers}
            own = [(v, pod) for v, (p, pod) in self.victims.items() if p in uids]
            mine = {v for v, _ in moved}
            cache.linger([*[o for o in own if o[0] not in mine], *moved], takers, now)

    # ---- the engine's input ----------------------------------------------------------------
    def displaceable(self) -> frozenset[str]:
        """The held preemptors, which the engine may displace (never evict) this cycle."""
        return frozenset(self.held)

    def ready(self, pending: Iterable[PodInfo], now: float) -> list[PodInfo]:
        """``pending`` without the abandoned preemptors still backing off."""
        pending = list(pending)
        if not self.backoff:
            return pending
        for uid in [u for u in self.backoff if u not in self.cache.pending]:
            del self.backoff[uid]
        return [p for p in pending if self.backoff.get(p.uid, (0.0, 0))[0] <= now]

    def stale_nominations(
        self, unschedulable: Iterable[str], no_preemption: Iterable[str]
    ) -> list[str]:
        """Pods left unschedulable whose nomination no longer means anything, forgotten here.

        kube-scheduler clears ``nominatedNodeName`` when a pod that was eligible to preempt
        finds no victims (``NewPostFilterResultWithNominatedNode("")``) and keeps it while the
        pod may not preempt again (its earlier victims still terminate there, invariant 4):
        so a stale nomination neither misleads a person nor blocks the pod's next preemption.
        ``no_preemption``: the pods of this cycle that kept theirs for that reason.
        """
        nominated, keep = self.cache.nominated, set(no_preemption)
        stale = [
            u for u in unschedulable if u in nominated and u not in keep and u not in self.held
        ]
        for uid in stale:
            del nominated[uid]
        return stale

    def no_preemption(self, pending: Iterable[PodInfo]) -> frozenset[str]:
        """Pending pods that may be placed but must not preempt: their nominated node still
        holds a terminating pod of lower priority (invariant 4)."""
        cache = self.cache
        cluster = cache.cluster
        return frozenset(
            p.uid
            for p in pending
            if (node := cache.nominated.get(p.uid)) and not may_preempt_again(p, cluster, node)
        )


def _taking(d: Displace, binds: list[Bind]) -> dict[str, PodInfo]:
    """The pods of this cycle that take displaced ``d``'s place: the binds that wait for it
    (every pod its displacer's statement placed, on any node), else the displacer itself
    if it was placed."""
    here = {b.pod.uid: b.pod for b in binds if d.pod.uid in b.wait_for}
    if here:
        return here
    return {b.pod.uid: b.pod for b in binds if b.pod.uid == d.preemptor.uid}
