"""Engine notes: the reclaim cooldown and the protection of reserved starts that an engine
built afresh from the API takes back."""

from __future__ import annotations

import logging

import pytest

from fairgpu.engine.decisions import Bind, ReclaimNote
from fairgpu.engine.engine import Engine
from fairgpu.kube.cache import SchedulerCache
from fairgpu.kube.engine_notes import (
    ANN_PROTECTED_UNTIL,
    ANN_RECLAIM,
    ANN_TORE_DOWN,
    binding_annotations,
    decode,
    encode,
    restore,
)
from fairgpu.model.pod import PodInfo
from tests.builders import cluster, k8s_pod, node_info

T0 = 1_764_540_000.0  # an epoch time, as the live scheduler's clock gives


def test_a_note_reads_back_as_written() -> None:
    note = ReclaimNote(T0 + 0.25, (("n0", "a"), ("n1", "c")), (("n0", 3), ("n0", 4)))
    text = encode(note)
    assert '"at":"2025-11-30T22:00:00.250Z"' in text  # RFC 3339, to the millisecond
    assert decode(text) == note


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"from": []}', "'at' is not an RFC 3339 time"),
        ('{"at": "yesterday"}', "'at' is not an RFC 3339 time"),
        ('{"at": "2025-11-30T22:00:00Z", "from": {}}', "'from' is not a list"),
        ('{"at": "2025-11-30T22:00:00Z", "gpus": [["n0", "3"]]}', "'gpus' holds ['n0', '3']"),
        ('{"at": "2025-11-30T22:00:00Z", "gpus": [["n0", true]]}', "'gpus' holds ['n0', True]"),
        ('{"at": "2025-11-30T22:00:00Z", "from": [["n0"]]}', "'from' holds ['n0']"),
    ],
)
def test_a_malformed_note_is_an_error_naming_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(ValueError, match="^" + why.replace("[", r"\[").replace("]", r"\]")):
        decode(text)


def _with_note(name: str, queue: str, note: str) -> PodInfo:
    pod = k8s_pod(name, queue, gpus="4", cpu="1")
    pod.annotations[ANN_RECLAIM] = note
    return pod


def test_restore_takes_back_what_still_counts_and_skips_what_it_cannot_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Within the cooldown (600 s) a note restores its node flow and GPUs; an older one is
    over, and one that cannot be read is logged and skipped -- never an error."""
    engine = Engine()
    fresh = _with_note("b0", "b", encode(ReclaimNote(T0, (("n0", "a"),), (("n0", 0),))))
    old = _with_note("b1", "b", encode(ReclaimNote(T0 - 900, (("n1", "a"),), (("n1", 0),))))
    bad = _with_note("b2", "b", "{nope")
    with caplog.at_level(logging.WARNING, logger="fairgpu.kube"):
        assert restore(engine, [fresh, old, bad, k8s_pod("c0", "c")], T0 + 60) == 1
    assert engine.state.reclaimed == {("n0", "b", "a"): T0}
    assert engine.state.tenant_changed == {("n0", 0): T0}
    assert [r.getMessage() for r in caplog.records] == ["unreadable engine note"]


def test_a_restored_engine_does_not_undo_the_reclaim_its_predecessor_made() -> None:
    """Queue b reclaimed four GPUs of n0 from queue a, and holds all 8 of them now; a asks
    again two minutes later (past the minimum run before a reclaim, 60 s). An engine that
    remembers the reclaim waits out the cooldown; a fresh one would take b's pods on n0 at
    once -- unless it is handed b's notes."""

    def state_and_pods() -> tuple[object, list[PodInfo], PodInfo]:
        state = cluster(node_info("n0", gpus=8))
        held = []
        for i in range(2):
            note = ""
            if i == 0:  # placed by the reclaim
                note = encode(ReclaimNote(T0, (("n0", "a"),), tuple(("n0", d) for d in range(4))))
            b = _with_note(f"b{i}", "b", note) if note else k8s_pod(f"b{i}", "b", gpus="4")
            state.assign(b, 0, tuple(range(4 * i, 4 * i + 4)), T0 + 1).bound = True
            held.append(b)
        return state, held, k8s_pod("a1", "a", gpus="4", cpu="1")

    state, held, a1 = state_and_pods()
    fresh = Engine().cycle(state, [a1], T0 + 120)
    assert [e.pod.name for e in fresh.evictions]  # without the note: b's pods are taken

    state, held, a1 = state_and_pods()
    engine = Engine()
    assert restore(engine, held, T0 + 120) == 1
    result = engine.cycle(state, [a1], T0 + 120)
    assert not result.evictions and not result.binds
    assert result.unschedulable[0].reason.endswith(
        "reclaim refused: every pod of queue 'b' is held back: 1 on GPUs that changed tenant "
        "within reclaimCooldownSeconds (600), 1 on a node where it would undo a reclaim made "
        "within reclaimCooldownSeconds (600)"
    )


def test_a_placement_by_reclaim_carries_its_note() -> None:
    """The Bind of a pod that reclaimed names the node and queue it took from and the GPUs
    that changed tenant -- what the live scheduler writes on the pod."""
    state = cluster(node_info("n0", gpus=8))
    for i in range(2):
        a = k8s_pod(f"a{i}", "a", gpus="4", cpu="1")
        state.assign(a, 0, tuple(range(4 * i, 4 * i + 4)), T0 - 3600).bound = True
    b = k8s_pod("b0", "b", gpus="4", cpu="1")
    result = Engine().cycle(state, [b], T0)
    assert len(result.evictions) == 1 and result.evictions[0].kind == "reclaim"
    (bind,) = result.binds
    assert bind.reclaim is not None and bind.reclaim.at == T0
    assert bind.reclaim.flows == (("n0", "a"),)
    assert [d for _, d in bind.reclaim.gpus] == sorted(bind.devices) and all(
        n == "n0" for n, _ in bind.reclaim.gpus
    )


def _gang(protected_until: str | None) -> tuple[object, list[PodInfo]]:
    """Queue a's 8 x 1-GPU gang runs on n0 since 500 s (started from its reservation)."""
    state = cluster(node_info("n0", gpus=8))
    members = []
    for m in range(8):
        pod = k8s_pod(f"big{m}", "a", gpus="1", cpu="1", group="big", min_member=8)
        if protected_until is not None:
            pod.annotations[ANN_PROTECTED_UNTIL] = protected_until
        state.assign(pod, 0, (m,), T0 + 500).bound = True
        members.append(pod)
    return state, members


def test_a_restored_engine_keeps_a_reserved_start_protected() -> None:
    """At 600 s a pod of queue a with a higher priority arrives: a fresh engine takes the
    gang (priority preemption inside the queue); one handed the gang's notes -- protected
    until 2 300 s, reservedMinRuntimeSeconds after its reserved start -- leaves it running."""
    urgent = k8s_pod("urgent", "a", gpus="1", cpu="1", priority=100)
    state, _ = _gang(None)
    assert Engine().cycle(state, [urgent], T0 + 600).evictions

    state, members = _gang(
        binding_annotations(Bind(urgent, "n0", protected_until=T0 + 2300))[ANN_PROTECTED_UNTIL]
    )
    engine = Engine()
    assert restore(engine, members, T0 + 600) == 8
    result = engine.cycle(state, [urgent], T0 + 600)
    assert not result.evictions and not result.binds
    # Past its end, the protection is over: nothing to take back.
    assert restore(Engine(), members, T0 + 2300) == 0


def test_an_unreadable_protection_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    _, members = _gang("soon")
    with caplog.at_level(logging.WARNING, logger="fairgpu.kube"):
        assert restore(Engine(), members[:1], T0) == 0
    assert caplog.records[0].annotation == ANN_PROTECTED_UNTIL  # type: ignore[attr-defined]


def test_a_cache_hands_over_the_notes_of_placed_and_of_nominated_pending_pods() -> None:
    """A preemptor nominated while its victims terminate carries its reclaim's note before
    it is bound: an engine built from the cache takes it back from the pending pod too, and
    a pod both placed and still listed pending is handed over once."""
    cache = SchedulerCache("fairgpu")
    cache.cluster.add_node(node_info("n0", gpus=8))
    placed = _with_note("b0", "b", encode(ReclaimNote(T0, (("n0", "a"),), (("n0", 0),))))
    cache.cluster.assign(placed, 0, (0, 1, 2, 3), T0).bound = True
    waiting = _with_note("b1", "b", encode(ReclaimNote(T0 + 5, (("n0", "c"),), (("n0", 1),))))
    cache.pending[waiting.uid] = waiting
    cache.pending[placed.uid] = placed  # assumed: listed in both until its bind is seen
    assert [p.name for p in cache.noted_pods()] == ["b0", "b1"]
    engine = Engine()
    assert restore(engine, cache.noted_pods(), T0 + 60) == 2
    assert engine.state.reclaimed == {("n0", "b", "a"): T0, ("n0", "b", "c"): T0 + 5}


def test_a_teardown_note_restores_the_groups_not_running_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The pod whose placement tore groups g and h down names them: an engine handed the
    notes takes back g, whose members are all pending again, not h, one of whose members
    runs (it started since); an unreadable note is logged and skipped."""
    bind = Bind(k8s_pod("b0", "b"), "n0", tore_down=("a/g", "a/h"))
    notes = binding_annotations(bind)
    assert notes == {ANN_TORE_DOWN: '["a/g","a/h"]'}
    preemptor = k8s_pod("b0", "b", annotations=notes)
    preemptor.node_name = "n0"
    g = [k8s_pod(f"g{i}", "a", group="g", min_member=2) for i in range(2)]
    h = [k8s_pod(f"h{i}", "a", group="h", min_member=2) for i in range(2)]
    h[0].node_name = "n1"
    bad = k8s_pod("b1", "b", annotations={ANN_TORE_DOWN: '{"a/g": 1}'})
    engine = Engine()
    with caplog.at_level(logging.WARNING, logger="fairgpu.kube"):
        assert restore(engine, [preemptor, *g, *h, bad], T0) == 1
    assert engine.state.torn_down == {"a/g"}
    assert [r.getMessage() for r in caplog.records] == ["unreadable engine note"]
