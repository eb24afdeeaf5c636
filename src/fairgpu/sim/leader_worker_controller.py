"""The LeaderWorkerSet controller's part in a simulation: an evicted pod takes its group down.

Under ``restartPolicy: RecreateGroupOnPodRestart`` (the default) the controller deletes a
group's leader when any pod of the group is deleted, and the leader's deletion takes the
group's workers with it (:mod:`~fairgpu.engine.leader_worker_groups`): the whole group is
created again and starts over. ``RecreateGroupAfterStart`` does so only once every pod of
the group has started; before, the evicted pod is replaced alone. The simulator asks
:meth:`GroupRestarts.taken_with` for each pod the scheduler evicted and ends those pods'
runs too -- they wait again as themselves, the pods the controller creates anew.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable


class GroupRestarts:
    """The groups (their pods' uids, and whether only once all of them started) one evicted
    pod recreates."""

    def __init__(self, groups: Iterable[tuple[tuple[str, ...], bool]]) -> None:
        self._group: dict[str, tuple[tuple[str, ...], bool]] = {}
        for uids, after_start in groups:
            for uid in uids:
                self._group[uid] = (uids, after_start)

    def taken_with(
        self, uid: str, running: Callable[[str], bool], gone: Collection[str] = ()
    ) -> list[str]:
        """The other running pods (``running(uid)``, not already ``gone`` this cycle) that
        go because pod ``uid`` was evicted: the rest of its group, or none (not in such a
        group, or -- after start only -- a pod of the group had not started)."""
        group = self._group.get(uid)
        if group is None:
            return []
        uids, after_start = group
        if after_start and not all(u == uid or u in gone or running(u) for u in uids):
            return []
        return [u for u in uids if u != uid and u not in gone and running(u)]
