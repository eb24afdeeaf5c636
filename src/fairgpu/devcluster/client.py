"""A small raw JSON client for the Kubernetes API, built on urllib3.

The official client's typed models are far too slow for thousands of objects and raise on
some valid replies (a Binding returns a ``Status``), so the dev cluster talks to the API
server directly: one pooled, thread-safe HTTPS connection pool, JSON in, JSON out, and the
caller checks the status code.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import msgspec
import urllib3

__all__ = ["ApiError", "KubeClient", "Response", "WatchStream"]

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@dataclass(slots=True)
class Response:
    """One API reply: HTTP status and the decoded JSON body (``None`` when empty)."""

    status: int
    body: Any

    @property
    def ok(self) -> bool:
        """True for any 2xx status."""
        return 200 <= self.status < 300

    @property
    def reason(self) -> str:
        """The ``reason`` of a ``Status`` body (e.g. ``AlreadyExists``), or ``""``."""
        if isinstance(self.body, dict):
            return str(self.body.get("reason", ""))
        return ""


class ApiError(RuntimeError):
    """An API call returned an unexpected HTTP status."""

    def __init__(self, method: str, path: str, response: Response) -> None:
        msg = response.body.get("message") if isinstance(response.body, dict) else response.body
        super().__init__(f"{method} {path}: HTTP {response.status}: {msg}")
        self.response = response
        self.status = response.status


class KubeClient:
    """Thread-safe raw client for one API server.

    Args:
        url: ``https://host:port`` of the API server.
        token: bearer token.
        ca_file: PEM bundle to verify the serving certificate; ``None`` disables verification.
        maxsize: connections kept in the pool (set it to at least the number of threads).
        timeout: default per-request timeout in seconds.
    """

    def __init__(
        self,
        url: str,
        token: str,
        ca_file: str | None = None,
        *,
        maxsize: int = 32,
        timeout: float = 30.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        parts = urlsplit(self.url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(f"expected an https:// URL, got {url!r}")
        self._headers = {"Authorization": f"Bearer {token}", "Accept": JSON}
        kwargs: dict[str, Any] = {}
        if ca_file:
            kwargs.update(cert_reqs=ssl.CERT_REQUIRED, ca_certs=ca_file)
        else:
            kwargs.update(cert_reqs=ssl.CERT_NONE, assert_hostname=False)
        self._pool = urllib3.HTTPSConnectionPool(
            parts.hostname,
            parts.port or 443,
            maxsize=maxsize,
            block=True,
            retries=False,
            **kwargs,
        )
        if not ca_file:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

    def close(self) -> None:
        """Close all pooled connections."""
        self._pool.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _target(path: str, params: Mapping[str, Any] | None) -> str:
        if not params:
            return path
        clean = {k: v for k, v in params.items() if v is not None}
        return f"{path}?{urlencode(clean)}" if clean else path

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> Response:
        """Send one request and return the reply; never raises on an HTTP error status.

        Args:
            method: HTTP verb.
            path: API path such as ``/api/v1/nodes``.
            body: JSON-serialisable body, or ``bytes`` sent as is.
            params: query parameters (``None`` values are dropped).
            content_type: body media type (use the patch types for PATCH).
            timeout: overrides the client's default timeout.
        """
        headers = dict(self._headers)
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else _json_encode(body)
            headers["Content-Type"] = content_type
        r = self._pool.urlopen(
            method,
            self._target(path, params),
            body=data,
            headers=headers,
            timeout=urllib3.Timeout(total=timeout or self.timeout),
            preload_content=True,
            redirect=False,
        )
        raw = r.data
        decoded: Any = None
        if raw:
            try:
                decoded = _json_decode(raw)
            except msgspec.DecodeError:
                decoded = raw.decode("utf-8", "replace")
        return Response(r.status, decoded)

    def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        """Like :meth:`request` but raise :class:`ApiError` unless the status is 2xx."""
        resp = self.request(method, path, body, **kwargs)
        if not resp.ok:
            raise ApiError(method, path, resp)
        return resp.body

    def get(self, path: str, **kwargs: Any) -> Any:
        """GET ``path`` and return the decoded body; raise :class:`ApiError` on failure."""
        return self.call("GET", path, **kwargs)

    def post(self, path: str, body: Any, **kwargs: Any) -> Any:
        """POST ``body`` to ``path``; raise :class:`ApiError` on failure."""
        return self.call("POST", path, body, **kwargs)

    def patch(self, path: str, body: Any, *, content_type: str = MERGE_PATCH, **kw: Any) -> Any:
        """PATCH ``path`` (JSON merge patch by default); raise :class:`ApiError` on failure."""
        return self.call("PATCH", path, body, content_type=content_type, **kw)

    def delete(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        """DELETE ``path``; raise :class:`ApiError` on failure."""
        return self.call("DELETE", path, body, **kwargs)

    def watch(
        self,
        path: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout_seconds: int = 300,
    ) -> WatchStream:
        """Open a watch on ``path`` and return it as an iterable of events.

        Each event is ``{"type": ..., "object": ...}``. The stream ends when the server closes
        it (after ``timeout_seconds``) or :meth:`WatchStream.close` is called from any thread.
        An HTTP error on the initial request raises :class:`ApiError`; an ``ERROR`` event (e.g.
        410 Gone) is yielded like any other event, so the caller can relist.
        """
        query = dict(params or {})
        query.update(watch="true", timeoutSeconds=timeout_seconds)
        r = self._pool.urlopen(
            "GET",
            self._target(path, query),
            headers=self._headers,
            timeout=urllib3.Timeout(connect=self.timeout, read=timeout_seconds + 30),
            preload_content=False,
            redirect=False,
        )
        if r.status != 200:
            raw = r.read()
            r.release_conn()
            try:
                body: Any = _json_decode(raw) if raw else None
            except msgspec.DecodeError:
                body = raw.decode("utf-8", "replace")
            raise ApiError("WATCH", path, Response(r.status, body))
        return WatchStream(r)


class WatchStream:
    """An open watch; iterate for events, :meth:`close` to end it early from any thread."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._r = response
        self._closed = False
        self._complete = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        r = self._r
        buf = b""
        try:
            for chunk in r.stream(65536, decode_content=True):
                buf += chunk
                while True:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    line, buf = buf[:nl], buf[nl + 1 :]
                    if line.strip():
                        yield _json_decode(line)
            if buf.strip():
                yield _json_decode(buf)
            self._complete = True
        except (OSError, urllib3.exceptions.HTTPError):
            if not self._closed:
                raise
        finally:
            self._release()

    def _release(self) -> None:
        if not self._complete:
            # A half-read stream must not go back into the pool as a reusable connection.
            r = self._r
            with contextlib.suppress(Exception):
                r.close()
        with contextlib.suppress(Exception):
            self._r.release_conn()

    def close(self) -> None:
        """End the watch; a thread blocked iterating it returns promptly."""
        self._closed = True
        conn = getattr(self._r, "connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        else:
            with contextlib.suppress(Exception):
                self._r.close()

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
