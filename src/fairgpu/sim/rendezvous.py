"""Gang rendezvous: the workers of a distributed job compute only once enough of them run.

A pod group with ``minMember`` n is one job split over at least n pods (ranks). A worker that
starts before its peers blocks in the job's rendezvous barrier (torch elastic, MPI, NCCL
initialisation): it holds its GPUs and does no work. kube-scheduler has no gangs, so under the
``kube-default`` ordering a group's members start one by one as room frees. A simulator that
let each member run its work from its own start would credit the baseline with training that
no real cluster does, and make a scheduler that starts no usable job look as busy as one that
does.

:class:`Rendezvous` keeps, per group, the running members that wait for their peers:

- a member bound while fewer than minMember members of its group run *waits*: it holds its
  node and devices, and its run time has not begun;
- when the minMember-th member binds, every waiting member starts working at that instant
  (each then runs its own run time from it);
- a member bound into a group already at minMember (an elastic group's extra) works at once;
- members that waited ``timeout`` seconds without the group reaching minMember give up, as a
  rendezvous does when its join timeout passes (torch elastic's dynamic rendezvous waits
  600 s by default): their pods fail and the job controller creates them again, so they queue
  anew. Without it two half-started jobs could hold each other's GPUs for ever;
- a job whose members gave up ``backoff_limit`` times fails for good (a Job's
  ``backoffLimit``, 6 by default): its pods stop queueing. Two jobs whose members keep
  arriving interleaved can block each other at every attempt; the limit ends that, as it
  does on a real cluster, and guarantees a replay ends.

Pods without a group, or in a group without minMember, always work from their bind. A gang
placed all-or-nothing (fairgpu's fair ordering) binds its members in one cycle, so it works
from that cycle on, exactly as before this model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DEFAULT_BACKOFF_LIMIT", "DEFAULT_TIMEOUT", "Rendezvous"]

#: Seconds a worker waits for its peers before it fails (torch elastic's default join timeout).
DEFAULT_TIMEOUT = 600.0

#: Give-ups after which a job fails for good (a Kubernetes Job's default ``backoffLimit``).
DEFAULT_BACKOFF_LIMIT = 6


@dataclass(slots=True)
class Rendezvous:
    """Which running gang members wait for their peers, since when, and how often their
    groups gave up.

    ``timeout``: seconds a group may wait below minMember before its waiting members fail
    (None: they wait for ever); ``backoff_limit``: give-ups after which the group fails for
    good.
    """

    timeout: float | None = DEFAULT_TIMEOUT
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    gave_up: dict[str, int] = field(default_factory=dict)  # group -> give-ups so far
    waiting: dict[str, set[str]] = field(default_factory=dict)  # group -> uids
    since: dict[str, float] = field(default_factory=dict)  # group -> first wait

    def bind(
        self, group: str, min_member: int | None, running: set[str], uid: str, now: float
    ) -> list[str]:
        """``uid`` was bound; ``running`` holds its group's running members, ``uid`` included.
        Return the members that start working now (none while the group waits)."""
        if not group or not min_member or min_member <= 1 or len(running) >= min_member:
            self.since.pop(group, None)
            return sorted(self.waiting.pop(group, set()) | {uid}) if group else [uid]
        self.waiting.setdefault(group, set()).add(uid)
        self.since.setdefault(group, now)
        return []

    def leave(self, group: str, uid: str) -> None:
        """``uid`` stopped running (completed, evicted or failed)."""
        members = self.waiting.get(group)
        if members is not None:
            members.discard(uid)
            if not members:
                del self.waiting[group]
                self.since.pop(group, None)

    def deadline(self, group: str) -> float | None:
        """When ``group``'s waiting members give up (None: not waiting, or no timeout)."""
        since = self.since.get(group)
        return None if since is None or self.timeout is None else since + self.timeout

    def expired(self, group: str, now: float) -> list[str]:
        """The waiting members of ``group`` whose wait reached the timeout at ``now``."""
        deadline = self.deadline(group)
        if deadline is None or now < deadline:
            return []
        return sorted(self.waiting.get(group, ()))

    def give_up(self, group: str) -> bool:
        """Count one give-up of ``group``; True when it reached the backoff limit (the job
        fails for good)."""
        self.gave_up[group] = self.gave_up.get(group, 0) + 1
        return self.gave_up[group] >= self.backoff_limit
