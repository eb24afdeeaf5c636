"""The reflector's list-then-watch protocol against a scripted API: relist on 410 Gone (as a
reply or as an ERROR event), resume the watch after a connection error without relisting."""

from __future__ import annotations

import threading
import time
from typing import Any

import msgspec

from fairgpu.kube.client import ApiResponse
from fairgpu.kube.reflector import Reflector


class _Watch:
    def __init__(self, lines: list[bytes], error: ApiResponse | None = None, fail: bool = False):
        self.lines = lines
        self.error = error
        self.fail = fail
        self.closed = threading.Event()

    def __iter__(self) -> Any:
        yield from self.lines
        if self.fail:
            raise ConnectionResetError("peer went away")
        self.closed.wait(5)  # an idle open watch

    def close(self) -> None:
        self.closed.set()


def _obj(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}}


class ScriptedApi:
    """Lists return rv 10, 20, ...; watches follow ``script``."""

    def __init__(self, script: list[_Watch]) -> None:
        self.script = script
        self.lists = 0
        self.watch_rvs: list[str] = []

    def request(self, method: str, path: str, **kw: Any) -> ApiResponse:
        self.lists += 1
        body = {
            "metadata": {"resourceVersion": str(self.lists * 10)},
            "items": [_obj(f"listed-{self.lists}", self.lists * 10)],
        }
        return ApiResponse(200, msgspec.json.encode(body))

    def watch(self, path: str, params: dict[str, Any], timeout_seconds: int) -> _Watch:
        self.watch_rvs.append(params["resourceVersion"])
        return self.script.pop(0) if self.script else _Watch([])


def _event(kind: str, obj: dict[str, Any]) -> bytes:
    return msgspec.json.encode({"type": kind, "object": obj})


def test_relists_on_gone_and_resumes_after_connection_errors() -> None:
    gone_event = _event("ERROR", {"kind": "Status", "code": 410, "message": "too old"})
    api = ScriptedApi(
        [
            _Watch([], error=ApiResponse(410, {"message": "too old"})),  # gone as a reply
            _Watch([_event("ADDED", _obj("a", 11)), gone_event]),  # gone as an event
            _Watch([_event("ADDED", _obj("b", 31))], fail=True),  # connection drops
            _Watch([_event("DELETED", _obj("b", 32))]),  # resumed, no relist
        ]
    )
    seen: list[tuple[str, Any]] = []
    r = Reflector(api, "/api/v1/pods", msgspec.json.decode, lambda t, o: seen.append((t, o)))  # type: ignore[arg-type]
    r.max_backoff = 0.05
    r.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(t == "DELETED" for t, _ in seen):
            time.sleep(0.02)
    finally:
        r.stop()
    kinds = [
        (t, o["metadata"]["name"] if t != "SYNC" else [i["metadata"]["name"] for i in o])
        for t, o in seen
    ]
    assert kinds == [
        ("SYNC", ["listed-1"]),
        ("SYNC", ["listed-2"]),
        ("ADDED", "a"),
        ("SYNC", ["listed-3"]),
        ("ADDED", "b"),
        ("DELETED", "b"),
    ]
    # Each watch starts where the last list or event left off.
    assert api.watch_rvs == ["10", "20", "30", "31"]
    assert r.reconnects == 1 and r.relists == 3 and r.synced.is_set()
