"""The uids a keeper of pods (the queue book's placed pods, the engine's backlog of pending
ones) added or removed since a reader last looked, so that the reader -- the pool demand
index (:class:`~fairgpu.tenancy.pool_share.PoolDemandIndex`) -- follows the changes instead
of comparing every uid in every cycle.

One reader takes the notes (:meth:`TouchedUids.take`). A keeper nobody reads cannot grow
without bound: past :data:`LIMIT` notes the record gives up, and the next reader is told it
has to compare everything (None), as it is after the keeper forgot its pods
(:meth:`TouchedUids.lose`).
"""

from __future__ import annotations

#: Notes kept before the record gives up (then the reader compares everything once).
LIMIT = 100_000


class TouchedUids:
    """The uids added or removed since the last :meth:`take`."""

    __slots__ = ("_lost", "_uids")

    def __init__(self) -> None:
        self._uids: set[str] = set()
        self._lost = False

    def note(self, uid: str) -> None:
        """``uid`` was added or removed."""
        if self._lost:
            return
        self._uids.add(uid)
        if len(self._uids) > LIMIT:
            self.lose()

    def lose(self) -> None:
        """The keeper changed in a way the notes do not tell (it forgot everything)."""
        self._lost = True
        self._uids = set()

    def take(self) -> set[str] | None:
        """The uids noted since the last take, or None when the record was lost since; the
        record starts afresh either way."""
        uids, lost = self._uids, self._lost
        self._uids, self._lost = set(), False
        return None if lost else uids
