"""What the engine remembers between cycles that must outlive the scheduler process.

Two of the engine's time rules rest on memory kept in the engine
(:class:`~fairgpu.engine.session.EngineState`):

* the reclaim cooldown (:mod:`~fairgpu.engine.actions.reclaim`): which GPUs changed tenant
  by reclaim and which queue took which node from which, so that no reclaim undoes another
  within ``reclaimCooldownSeconds``;
* the protection of a job started from its reservation (:mod:`~fairgpu.engine.actions.
  reserve`): no preemption victim for its declared run time, so the idle time its nodes
  spent draining for it is not thrown away with its run -- and the same protection of a pod
  group a preemption tore down, once it starts again, for which the engine remembers which
  groups were torn down.

A scheduler restarted -- or a standby replica taking the lease -- would start without them,
and could take back at once what its predecessor reclaimed a minute earlier, or reclaim a
gang an hour into the run its reservation bought, or tear a gang down a second time;
``fairgpu explain`` and the forecasts, which build a fresh engine from the API, would promise
such moves too.

So the live scheduler writes them into each pod's Binding (copied onto the pod with
``spec.nodeName`` in one write, as the GPU devices are): the pod's
:class:`~fairgpu.engine.decisions.ReclaimNote` (:data:`ANN_RECLAIM`), the end of its
protection (:data:`ANN_PROTECTED_UNTIL`) and the pod groups its placement's preemption tore
down (:data:`ANN_TORE_DOWN`; their pods are gone, the preemptor stays). A preemptor that
waits for its victims gets its notes earlier, with its nomination (a status patch keeps
annotations): a scheduler stopped before the victims are gone never binds it, and the next
one, finding the room free, binds it as a placement of its own that reclaimed nothing. An
engine built from the API takes the notes of the bound pods and of the pending ones back
(:func:`restore`). A reclaim note names nodes and queues, not pods, so it keeps counting
whoever runs on those GPUs now. A note lives as long as its pod: one deleted before its
cooldown ends takes its note along.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from fairgpu.engine.decisions import Bind, ReclaimNote
from fairgpu.engine.engine import Engine
from fairgpu.kube.decode import parse_time, time_label_ms
from fairgpu.model.pod import DOMAIN, PodInfo

log = logging.getLogger("fairgpu.kube")

#: The annotation a pod placed by reclaim carries: when, from which queue on which node, and
#: the GPUs that changed tenant, as JSON.
ANN_RECLAIM = f"{DOMAIN}/reclaim"
#: The annotation a pod started from its job's reservation carries: until when (RFC 3339)
#: it is no preemption victim.
ANN_PROTECTED_UNTIL = f"{DOMAIN}/protected-until"
#: The annotation a pod whose placement tore pod groups down carries: their keys
#: (``namespace/name``), as a JSON list.
ANN_TORE_DOWN = f"{DOMAIN}/tore-down"


def binding_annotations(bind: Bind) -> dict[str, str]:
    """The notes of ``bind`` to write into its Binding (none for most pods)."""
    out: dict[str, str] = {}
    if bind.reclaim is not None:
        out[ANN_RECLAIM] = encode(bind.reclaim)
    if bind.protected_until is not None:
        out[ANN_PROTECTED_UNTIL] = time_label_ms(bind.protected_until)
    if bind.tore_down:
        out[ANN_TORE_DOWN] = json.dumps(list(bind.tore_down), separators=(",", ":"))
    return out


def decode_tore_down(text: str) -> list[str]:
    """The pod group keys of :data:`ANN_TORE_DOWN` (``ValueError`` naming what is wrong)."""
    keys = _json(text)
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        raise ValueError("not a JSON list of pod group keys")
    return keys


def encode(note: ReclaimNote) -> str:
    """``note`` as the JSON of :data:`ANN_RECLAIM`: ``at`` (RFC 3339, milliseconds),
    ``from`` ([node, victim queue] pairs) and ``gpus`` ([node, device] pairs)."""
    body = {
        "at": time_label_ms(note.at),
        "from": [list(f) for f in note.flows],
        "gpus": [list(g) for g in note.gpus],
    }
    return json.dumps(body, separators=(",", ":"))


def decode(text: str) -> ReclaimNote:
    """The note :func:`encode` wrote (``ValueError`` naming what is wrong otherwise)."""
    body = _json(text)
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    at = parse_time(body.get("at")) if isinstance(body.get("at"), str) else None
    if at is None:
        raise ValueError("'at' is not an RFC 3339 time")
    flows = _pairs(body.get("from", []), "from", str)
    gpus = _pairs(body.get("gpus", []), "gpus", int)
    return ReclaimNote(at, flows, gpus)


def _json(text: str) -> Any:
    """A note's JSON (``ValueError`` when it is not JSON)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error}") from None


def _pairs(value: object, name: str, second: type) -> tuple[tuple[str, Any], ...]:
    """``value`` as [node name, ``second``] pairs (``ValueError`` naming ``name``)."""
    if not isinstance(value, list):
        raise ValueError(f"'{name}' is not a list")
    out: list[tuple[str, Any]] = []
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
    return tuple(out)


def restore(engine: Engine, pods: Iterable[PodInfo], now: float) -> int:
    """Hand ``engine`` the notes of ``pods`` (bound, or waiting nominated) that count at ``now``
    (:meth:`~fairgpu.engine.engine.Engine.restore_reclaim`,
    :meth:`~fairgpu.engine.engine.Engine.restore_protection`,
    :meth:`~fairgpu.engine.engine.Engine.restore_torn_down`); a note that cannot be read is
    logged and left out -- it only ever holds pods back, so scheduling goes on without it.
    A pod group a note says was torn down is taken back only while none of its pods runs:
    one running again has started since (its pods carry their own protection). (A group
    created anew under the same name after the old one ended, and pending at such a restart,
    is taken for it while the pod with the note runs: its start is protected too -- for at
    most ``reservedMaxRuntimeSeconds``.)
    Returns how many were taken back."""
    pods = list(pods)
    running = {ref.key for p in pods if p.node_name and (ref := engine.pod_group(p)) is not None}
    taken = 0
    for pod in pods:
        taken += _restore_tore_down(engine, pod, running)
        text = pod.annotations.get(ANN_RECLAIM)
        if text:
            try:
                taken += engine.restore_reclaim(pod, decode(text), now)
            except ValueError as error:
                _unreadable(pod, ANN_RECLAIM, str(error))
        text = pod.annotations.get(ANN_PROTECTED_UNTIL)
        if text:
            until = parse_time(text)
            if until is None:
                _unreadable(pod, ANN_PROTECTED_UNTIL, "not an RFC 3339 time")
            else:
                taken += engine.restore_protection(pod, until, now)
    return taken


def _restore_tore_down(engine: Engine, pod: PodInfo, running: set[str]) -> int:
    """Hand ``engine`` the pod groups ``pod``'s note says it tore down, but those ``running``
    again; returns how many."""
    text = pod.annotations.get(ANN_TORE_DOWN)
    if not text:
        return 0
    try:
        keys = [k for k in decode_tore_down(text) if k not in running]
    except ValueError as error:
        _unreadable(pod, ANN_TORE_DOWN, str(error))
        return 0
    for key in keys:
        engine.restore_torn_down(key)
    return len(keys)


def _unreadable(pod: PodInfo, annotation: str, error: str) -> None:
    log.warning(
        "unreadable engine note", extra={"pod": pod.key, "annotation": annotation, "error": error}
    )
