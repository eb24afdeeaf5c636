"""List-then-watch one resource, relisting on 410 Gone and reconnecting with backoff.

A :class:`Reflector` runs in its own thread. It lists (paginated, a consistent read), hands the
full set of objects to its sink as one ``SYNC`` (so the consumer can drop what disappeared while
it was not watching), then watches from the list's resourceVersion. Watch events go to the
sink one by one. On ``410 Gone`` (the resourceVersion is too old) it relists; on a connection
error (e.g. kube-apiserver restarting) it backs off exponentially and resumes the watch from the
last resourceVersion it saw, relisting only if the server says that version is gone.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from fairgpu.kube.client import CONNECTION_ERRORS, RestClient, WatchLines

__all__ = ["Reflector", "Sink", "stop_all"]

log = logging.getLogger("fairgpu.kube.reflector")

#: ``sink(event_type, payload)``: ``("SYNC", [objects])`` after a list, else
#: ``("ADDED"|"MODIFIED"|"DELETED", object)``; objects are what ``decode`` returned.
Sink = Callable[[str, Any], None]


class _ListMeta(msgspec.Struct):
    resourceVersion: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class _List(msgspec.Struct):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] = []


class _Meta(msgspec.Struct):
    resourceVersion: str = ""


class _Obj(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    code: int = 0
    message: str = ""


class _Event(msgspec.Struct):
    type: str
    object: msgspec.Raw


_list_decoder = msgspec.json.Decoder(_List)
_event_decoder = msgspec.json.Decoder(_Event)
_obj_decoder = msgspec.json.Decoder(_Obj)


def stop_all(reflectors: Iterable[Reflector], timeout: float = 5.0) -> None:
    """Stop ``reflectors`` together: each is told to stop before any is waited for, and all
    share one ``timeout``. A watch still being opened -- its request sent, the reply not
    back (a slow or lagging API server) -- cannot be closed, so its thread ends only when
    the reply comes; stopped one by one, a scheduler watching a dozen collections waited the
    whole timeout for each of them and did not stop within a pod's 30 s grace period."""
    items = list(reflectors)
    for r in items:
        r.halt()
    deadline = time.monotonic() + timeout
    for r in items:
        r.join(max(0.0, deadline - time.monotonic()))


class _Gone(Exception):
    """The watch's resourceVersion is too old: relist."""


class Reflector:
    """Keep a sink up to date with one collection.

    Args:
        client: API client (its rate limiter is bypassed: lists and watches are reads the
            informer needs regardless).
        path: collection path, e.g. ``/api/v1/pods``.
        decode: raw JSON bytes of one object -> what the sink receives.
        sink: see :data:`Sink`; called from the reflector thread.
        params: extra query parameters (``fieldSelector``, ``labelSelector``).
        page_size: list page size.
        watch_timeout: server-side watch timeout (seconds, jittered).
        max_backoff: longest wait between reconnection attempts.
    """

    def __init__(
        self,
        client: RestClient,
        path: str,
        decode: Callable[[bytes], Any],
        sink: Sink,
        *,
        params: dict[str, str] | None = None,
        page_size: int = 1000,
        watch_timeout: int = 300,
        max_backoff: float = 5.0,
        name: str = "",
    ) -> None:
        self.client = client
        self.path = path
        self.decode = decode
        self.sink = sink
        self.params = dict(params or {})
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.max_backoff = max_backoff
        self.name = name or path
        self.synced = threading.Event()
        self.relists = 0
        self.reconnects = 0
        self._stop = threading.Event()
        self._watch: WatchLines | None = None
        self._thread: threading.Thread | None = None
        self._rv = ""

    def start(self) -> Reflector:
        """Start the background thread; returns ``self``."""
        self._thread = threading.Thread(
            target=self._run, name=f"reflector-{self.name}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching and join the thread (several at once: :func:`stop_all`)."""
        self.halt()
        self.join(timeout)

    def halt(self) -> None:
        """Tell the thread to stop and close its watch, without waiting for it."""
        self._stop.set()
        w = self._watch
        if w is not None:
            w.close()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread to end."""
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- internals ---------------------------------------------------------------------------
    def _run(self) -> None:
        backoff = 0.1
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch_once()
                backoff = 0.1
            except _Gone:
                log.info("watch expired; relisting", extra={"resource": self.name})
                need_list = True
            except CONNECTION_ERRORS as error:
                if self._stop.is_set():
                    return
                self.reconnects += 1
                log.warning(
                    "API server unreachable; retrying",
                    extra={"resource": self.name, "error": str(error), "backoff_s": backoff},
                )
                self._stop.wait(backoff * (0.5 + random.random()))
                backoff = min(self.max_backoff, backoff * 2)
            except Exception as error:  # a bug or an unexpected reply: relist, never die
                if self._stop.is_set():
                    return
                log.exception("reflector error; relisting", extra={"resource": self.name})
                need_list = True
                del error
                self._stop.wait(backoff)
                backoff = min(self.max_backoff, backoff * 2)

    def _list(self) -> None:
        items: list[Any] = []
        cont = ""
        while True:
            params = dict(self.params, limit=str(self.page_size))
            if cont:
                params["continue"] = cont
            resp = self.client.request("GET", self.path, params=params, limited=False, raw=True)
            if resp.status == 410:
                cont = ""  # the continue token expired: start the list again
                items.clear()
                continue
            if not resp.ok:
                raise RuntimeError(f"list {self.path}: HTTP {resp.status}: {resp.message}")
            page = _list_decoder.decode(resp.body)
            items.extend(self.decode(bytes(raw)) for raw in page.items)
            cont = page.metadata.continue_
            if not cont:
                self._rv = page.metadata.resourceVersion
                break
        self.relists += 1
        self.sink("SYNC", items)
        self.synced.set()

    def _watch_once(self) -> None:
        params = dict(
            self.params,
            resourceVersion=self._rv,
            allowWatchBookmarks="true",
        )
        timeout = int(self.watch_timeout * (0.8 + 0.4 * random.random()))
        w = self.client.watch(self.path, params, timeout_seconds=timeout)
        self._watch = w
        try:
            if w.error is not None:
                if w.error.status == 410:
                    raise _Gone
                raise RuntimeError(f"watch {self.path}: HTTP {w.error.status}: {w.error.message}")
            for line in w:
                if self._stop.is_set():
                    return
                ev = _event_decoder.decode(line)
                raw = bytes(ev.object)
                if ev.type == "ERROR":
                    status = _obj_decoder.decode(raw)
                    if status.code == 410:
                        raise _Gone
                    raise RuntimeError(f"watch {self.path}: error event: {status.message}")
                meta = _obj_decoder.decode(raw).metadata
                if meta.resourceVersion:
                    self._rv = meta.resourceVersion
                if ev.type == "BOOKMARK":
                    continue
                self.sink(ev.type, self.decode(raw))
        finally:
            self._watch = None
            w.close()
