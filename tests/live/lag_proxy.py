"""A TCP proxy in front of the API server that holds back what the server sends: watch lag.

A client connected through :class:`LagProxy` sees every byte the API server sends -- watch
events, list and request replies -- :attr:`LagProxy.lag` seconds late, in order, while its own
requests reach the server at once and every other client (the kubelet, the auditor, the test)
talks to the server directly. That is what a scheduler lives with when its watches fall behind:
it decides on a world that has moved on -- pods already gone or finished, nodes already
re-registered, victims already terminated -- and learns of its own binds late.

The proxy forwards TLS as opaque bytes (the server's certificate names 127.0.0.1, whatever the
port), so the client and server are the real ones. When the server closes a connection (an API
server restart), the proxy closes the client's side once what it held back is delivered.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time

CHUNK = 65536


class LagProxy:
    """Listens on ``127.0.0.1:port`` and forwards to ``127.0.0.1:target_port``.

    Set :attr:`lag` (seconds) at any time: bytes the server sends from then on are delivered
    that long after they arrived (never before bytes that arrived earlier)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.lag = 0.0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="lag-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        """The proxy's ``https://`` URL (the API server's, on the proxy's port)."""
        return f"https://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop accepting and cut every connection."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.close()
            self._sockets.clear()

    def __enter__(self) -> LagProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                server.settimeout(None)
            except OSError:  # the API server is down: the client sees the connection refused
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, server))
            held: queue.Queue[tuple[float, bytes]] = queue.Queue()
            for target, args in (
                (self._pump, (client, server)),  # requests go at once
                (self._hold, (server, held)),  # replies and events are held back ...
                (self._deliver, (held, client, server)),  # ... and delivered late
            ):
                threading.Thread(target=target, args=args, daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(CHUNK):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def _hold(self, src: socket.socket, held: queue.Queue[tuple[float, bytes]]) -> None:
        try:
            while data := src.recv(CHUNK):
                held.put((time.monotonic() + self.lag, data))
        except OSError:
            pass
        held.put((time.monotonic() + self.lag, b""))  # the server closed: close after the rest

    def _deliver(
        self, held: queue.Queue[tuple[float, bytes]], dst: socket.socket, src: socket.socket
    ) -> None:
        try:
            while True:
                due, data = held.get()
                wait = due - time.monotonic()
                if wait > 0 and self._closed.wait(wait):
                    break
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (dst, src):
            with contextlib.suppress(OSError):
                s.close()
            with self._lock:
                self._sockets.discard(s)
