"""The record of uids a keeper added or removed since its reader last looked."""

from __future__ import annotations

import pytest

from fairgpu.tenancy import touched as touched_mod
from fairgpu.tenancy.touched import TouchedUids


def test_take_hands_out_each_note_once() -> None:
    record = TouchedUids()
    record.note("a")
    record.note("b")
    record.note("a")
    assert record.take() == {"a", "b"}
    assert record.take() == set()


def test_a_lost_record_says_so_once_then_starts_afresh() -> None:
    record = TouchedUids()
    record.note("a")
    record.lose()
    record.note("b")  # after a loss nothing is worth keeping until the reader looks
    assert record.take() is None
    record.note("c")
    assert record.take() == {"c"}


def test_a_record_nobody_reads_gives_up_instead_of_growing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(touched_mod, "LIMIT", 3)
    record = TouchedUids()
    for uid in "abcdef":
        record.note(uid)
    assert record._uids == set()
    assert record.take() is None
