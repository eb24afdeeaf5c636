"""Gang timeout: a pod group that runs below its minMember for longer than
``gang.timeoutSeconds`` (members evicted or failed) releases its remaining pods, so they stop
holding GPUs a partial group cannot use. Members that ran to completion count toward
minMember: the group ran whole, and its last members finishing later are not partial."""

from __future__ import annotations

from fairgpu.engine.session import Session


def expire_partial_groups(session: Session) -> None:
    """Evict the pods of every group that has stayed below minMember too long."""
    state = session.state
    book = session.book
    timeout = session.tenancy.gang.timeout_seconds
    for key in list(state.partial_since):
        if not book.group_running.get(key, set()):
            del state.partial_since[key]
    for key, uids in book.group_running.items():
        if not uids:
            continue
        some = session.cluster.pods.get(next(iter(uids)))
        ref = session.resolver.pod_group(some) if some is not None else None
        if ref is None or ref.min_member is None or book.members_toward_min(key) >= ref.min_member:
            state.partial_since.pop(key, None)
            continue
        since = state.partial_since.setdefault(key, session.now)
        if session.now < since + timeout:
            # A replay runs cycles on events: ask for the one the live scheduler's periodic
            # cycles would run when the group times out.
            session.out.retry_no_later_than(since + timeout)
            continue
        reason = (
            f"pod group {key} ran with {len(uids)} < minMember {ref.min_member} for "
            f"more than {timeout:g}s; releasing its pods"
        )
        stmt = session.statement()
        for uid in sorted(uids):
            pod = session.cluster.pods.get(uid)
            if pod is not None:
                stmt.evict(pod, None, reason, "gang-timeout")
        stmt.commit()
        del state.partial_since[key]
