"""The dev cluster's convenience layer over :mod:`fairgpu.kube.client`.

The low-level HTTP work (pooling, JSON encoding and decoding, watch-line streaming) lives in
:class:`~fairgpu.kube.client.RestClient`, shared with the live scheduler. This module adds
what the dev cluster's setup code wants on top: a constructor taking a URL, token and CA
file, ``get/post/patch/delete`` that raise :class:`ApiError` on a non-2xx reply, and watches
that yield decoded events.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec

from fairgpu.kube.client import (
    JSON,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ApiResponse,
    Connection,
    RestClient,
    WatchLines,
)

__all__ = [
    "JSON",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "ApiError",
    "KubeClient",
    "Response",
    "WatchStream",
]

_json_decode = msgspec.json.Decoder().decode

# One reply type for both layers: status, decoded body, ``ok``, ``message``, ``reason``.
Response = ApiResponse


class ApiError(RuntimeError):
    """An API call returned an unexpected HTTP status."""

    def __init__(self, method: str, path: str, response: Response) -> None:
        super().__init__(f"{method} {path}: HTTP {response.status}: {response.message}")
        self.response = response
        self.status = response.status


class KubeClient:
    """Thread-safe raw client for one API server, backed by a shared :class:`RestClient`.

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
        conn = Connection(self.url, token, ca_file, verify=ca_file is not None)
        # The underlying client; hand it to code that speaks the low-level API directly.
        self.rest = RestClient(conn, maxsize=maxsize, timeout=timeout)

    def close(self) -> None:
        """Close all pooled connections."""
        self.rest.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Response:
        """Send one request and return the reply; never raises on an HTTP error status.

        Keyword arguments (``params``, ``content_type``, ``timeout``, ...) are those of
        :meth:`RestClient.request <fairgpu.kube.client.RestClient.request>`; ``body`` is
        JSON-serialisable or ``bytes`` sent as is.
        """
        return self.rest.request(method, path, body, **kwargs)

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
        lines = self.rest.watch(path, params, timeout_seconds=timeout_seconds)
        if lines.error is not None:
            raise ApiError("WATCH", path, lines.error)
        return WatchStream(lines)


class WatchStream:
    """An open watch yielding decoded events; :meth:`close` ends it early from any thread."""

    def __init__(self, lines: WatchLines) -> None:
        self._lines = lines

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for line in self._lines:
            yield _json_decode(line)

    def close(self) -> None:
        """End the watch; a thread blocked iterating it returns promptly."""
        self._lines.close()

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
