"""The reclaim cooldown across restarts: what a placement reclaimed, written on its pod.

The engine remembers, for ``reclaimCooldownSeconds``, which GPUs changed tenant by reclaim
and which queue took which node from which (:mod:`~fairgpu.engine.actions.reclaim`): no
reclaim undoes another within the cooldown. That memory lives in the engine, so a scheduler
restarted -- or a standby replica taking the lease -- would start without it and could take
back at once what its predecessor reclaimed a minute earlier; ``fairgpu explain`` and the
forecasts, which build a fresh engine from the API, would promise such moves too.

So the live scheduler writes each pod's :class:`~fairgpu.engine.decisions.ReclaimNote` into
the pod's Binding (:data:`ANN_RECLAIM`, copied onto the pod with ``spec.nodeName`` in one
write, as the GPU devices are), and an engine built from the API takes the notes of the
bound pods back (:func:`restore`). A note names nodes and queues, not pods, so it keeps
counting whoever runs on those GPUs now. It lives as long as its pod: one deleted before its
cooldown ends takes its note along (a pod that ran to completion keeps it while the pod
object exists).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import UTC, datetime

from fairgpu.engine.decisions import ReclaimNote
from fairgpu.engine.engine import Engine
from fairgpu.kube.decode import parse_time
from fairgpu.model.pod import DOMAIN, PodInfo

log = logging.getLogger("fairgpu.kube")

#: The annotation a pod placed by reclaim carries: when, from which queue on which node, and
#: the GPUs that changed tenant, as JSON.
ANN_RECLAIM = f"{DOMAIN}/reclaim"


def encode(note: ReclaimNote) -> str:
    """``note`` as the JSON of :data:`ANN_RECLAIM`: ``at`` (RFC 3339, milliseconds),
    ``from`` ([node, victim queue] pairs) and ``gpus`` ([node, device] pairs)."""
    at = datetime.fromtimestamp(note.at, UTC).isoformat(timespec="milliseconds")
    body = {
        "at": at.replace("+00:00", "Z"),
        "from": [list(f) for f in note.flows],
        "gpus": [list(g) for g in note.gpus],
    }
    return json.dumps(body, separators=(",", ":"))


def decode(text: str) -> ReclaimNote:
    """The note :func:`encode` wrote (``ValueError`` naming what is wrong otherwise)."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error}") from None
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    at = parse_time(body.get("at")) if isinstance(body.get("at"), str) else None
    if at is None:
        raise ValueError("'at' is not an RFC 3339 time")
    flows = tuple((node, str(queue)) for node, queue in _pairs(body.get("from", []), "from", str))
    gpus = tuple((node, int(str(dev))) for node, dev in _pairs(body.get("gpus", []), "gpus", int))
    return ReclaimNote(at, flows, gpus)


def _pairs(value: object, name: str, second: type) -> list[tuple[str, object]]:
    """``value`` as [node name, ``second``] pairs (``ValueError`` naming ``name``)."""
    if not isinstance(value, list):
        raise ValueError(f"'{name}' is not a list")
    out: list[tuple[str, object]] = []
    for item in value:
        ok = (
            isinstance(item, list)
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(item[1], second)
            and not isinstance(item[1], bool)
        )
        if not ok:
            raise ValueError(f"'{name}' holds {item!r}, not [node, {second.__name__}]")
        out.append((item[0], item[1]))
    return out


def restore(engine: Engine, pods: Iterable[PodInfo], now: float) -> int:
    """Hand ``engine`` the notes of the bound ``pods`` whose cooldown still counts at
    ``now`` (:meth:`~fairgpu.engine.engine.Engine.restore_reclaim`); a note that cannot be
    read is logged and left out -- it only ever protects, so scheduling goes on without it.
    Returns how many were taken back."""
    taken = 0
    for pod in pods:
        text = pod.annotations.get(ANN_RECLAIM)
        if not text:
            continue
        try:
            note = decode(text)
        except ValueError as error:
            log.warning(
                "unreadable reclaim note",
                extra={"pod": pod.key, "annotation": ANN_RECLAIM, "error": str(error)},
            )
            continue
        taken += engine.restore_reclaim(pod, note, now)
    return taken
