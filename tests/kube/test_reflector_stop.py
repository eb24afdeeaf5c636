"""Stopping the scheduler's watches while the API server does not answer: a watch whose
request is out and whose reply never comes cannot be closed, so its thread waits until the
stop's timeout; stopping a dozen of them one by one took a dozen timeouts."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from fairgpu.kube.client import Connection, RestClient
from fairgpu.kube.reflector import Reflector, stop_all


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An HTTP address that accepts connections and reads requests, and never replies."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    done.set()
    thread.join(5)
    for conn in held:
        conn.close()
    listener.close()


def test_reflectors_waiting_on_a_silent_server_stop_together(silent_server: str) -> None:
    client = RestClient(Connection(silent_server, "token", None), timeout=60.0)
    reflectors = [
        Reflector(client, f"/api/v1/things{i}", bytes, lambda *_: None).start() for i in range(6)
    ]
    time.sleep(0.3)  # every thread has sent its list request and waits for the reply
    started = time.monotonic()
    stop_all(reflectors, timeout=0.5)
    elapsed = time.monotonic() - started
    # One shared half-second, not one each (3 s): a wide margin for a loaded machine.
    assert elapsed < 1.5
    assert all(r._stop.is_set() for r in reflectors)
    client.close()
