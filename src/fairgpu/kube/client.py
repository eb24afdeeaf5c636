"""A raw, thread-safe JSON client for the Kubernetes API, configured from a kubeconfig or the
in-cluster service account.

The official client's typed models are too slow for a watch of thousands of pods and raise on
a Binding's ``Status`` reply, so the live scheduler talks HTTP directly (urllib3) and checks
status codes itself. The ``kubernetes`` package is used only to *load configuration* (it
handles every kubeconfig flavour: tokens, client certificates, exec plugins, in-cluster
token rotation).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import msgspec
import urllib3

__all__ = [
    "JSON",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "ApiResponse",
    "Connection",
    "RateLimiter",
    "RestClient",
    "WatchLines",
    "load_connection",
]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode

# Errors that mean "the API server is unreachable right now": callers back off and retry.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (OSError, urllib3.exceptions.HTTPError)


@dataclass(slots=True)
class Connection:
    """How to reach one API server.

    ``token_source`` (if set) is called to refresh the bearer token (in-cluster projected
    tokens rotate; exec plugins expire); ``token`` is the current value.
    """

    url: str
    token: str = ""
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    token_source: Any = None


def load_connection(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """Load a :class:`Connection` from ``kubeconfig`` (or ``$KUBECONFIG``/``~/.kube/config``),
    or from the in-cluster service account when no kubeconfig exists and the pod environment
    is present.

    Raises:
        ValueError: no usable configuration was found (the message says where it looked).
    """
    from kubernetes import client as kclient
    from kubernetes import config as kconfig

    cfg = kclient.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    default_path = os.path.expanduser("~/.kube/config")
    in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ
    if path or (os.path.exists(default_path) and not in_cluster):
        file = path or default_path
        if not os.path.exists(file.split(os.pathsep)[0]):
            raise ValueError(f"kubeconfig {file}: no such file")
        try:
            kconfig.load_kube_config(config_file=file, context=context, client_configuration=cfg)
        except Exception as error:  # the loader raises many types; report them uniformly
            raise ValueError(f"kubeconfig {file}: {error}") from None
    elif in_cluster:
        try:
            kconfig.load_incluster_config(client_configuration=cfg)
        except Exception as error:
            raise ValueError(f"in-cluster configuration: {error}") from None
    else:
        raise ValueError(
            "no Kubernetes configuration: pass --kubeconfig, set $KUBECONFIG, create "
            f"{default_path}, or run inside a cluster"
        )

    def token_source() -> str:
        auth = cfg.get_api_key_with_prefix("authorization") or cfg.get_api_key_with_prefix(
            "BearerToken"
        )
        return (auth or "").removeprefix("Bearer ").strip()

    return Connection(
        url=cfg.host,
        token=token_source(),
        ca_file=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        verify=bool(cfg.verify_ssl),
        token_source=token_source,
    )


class RateLimiter:
    """Token bucket: ``qps`` tokens per second, at most ``burst`` saved. ``qps <= 0``: no limit.

    Thread-safe; :meth:`acquire` blocks until a token is available (like client-go's
    ``flowcontrol`` limiter behind ``clientConnection.qps``/``burst``).
    """

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        """Take one token, sleeping as long as needed."""
        if self.qps <= 0:
            return
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            time.sleep(wait)


@dataclass(slots=True)
class ApiResponse:
    """HTTP status and decoded JSON body (``None`` if empty, ``str`` if not JSON)."""

    status: int
    body: Any

    @property
    def ok(self) -> bool:
        """True for 2xx."""
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        """The ``message`` of a ``Status`` body, or the raw body text."""
        if isinstance(self.body, dict):
            return str(self.body.get("message", ""))
        return str(self.body or "")

    @property
    def reason(self) -> str:
        """The ``reason`` of a ``Status`` body (e.g. ``AlreadyExists``), or ``""``."""
        if isinstance(self.body, dict):
            return str(self.body.get("reason", ""))
        return ""


class RestClient:
    """Pooled HTTPS client for one API server; every method is thread-safe.

    Args:
        conn: where and how to connect.
        maxsize: pooled connections (at least the number of threads using the client).
        timeout: per-request timeout, seconds.
        limiter: applied to every non-watch request (``None``: unlimited).
    """

    def __init__(
        self,
        conn: Connection,
        *,
        maxsize: int = 32,
        timeout: float = 30.0,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.conn = conn
        self.timeout = timeout
        self.limiter = limiter
        parts = urlsplit(conn.url.rstrip("/"))
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"API server URL {conn.url!r}: expected https://host[:port]")
        self._prefix = parts.path.rstrip("/")
        kwargs: dict[str, Any] = {}
        if parts.scheme == "https":
            if conn.verify:
                kwargs.update(cert_reqs="CERT_REQUIRED", ca_certs=conn.ca_file)
            else:
                kwargs.update(cert_reqs="CERT_NONE", assert_hostname=False)
                urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
            if conn.cert_file:
                kwargs.update(cert_file=conn.cert_file, key_file=conn.key_file)
            pool_cls: Any = urllib3.HTTPSConnectionPool
        else:
            pool_cls = urllib3.HTTPConnectionPool
        self._pool = pool_cls(
            parts.hostname,
            parts.port or (443 if parts.scheme == "https" else 80),
            maxsize=maxsize,
            block=True,
            retries=False,
            **kwargs,
        )
        self._token = conn.token
        self._token_at = time.monotonic()
        self._token_lock = threading.Lock()

    def close(self) -> None:
        """Close pooled connections."""
        self._pool.close()

    def _headers(self) -> dict[str, str]:
        src = self.conn.token_source
        if src is not None and time.monotonic() - self._token_at > 60:
            with self._token_lock:
                with contextlib.suppress(Exception):
                    self._token = src() or self._token
                self._token_at = time.monotonic()
        headers = {"Accept": JSON}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    def _target(self, path: str, params: Mapping[str, Any] | None) -> str:
        path = self._prefix + path
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
        limited: bool = True,
        raw: bool = False,
    ) -> ApiResponse:
        """One request; returns the reply and never raises on an HTTP error status.

        Connection failures raise (``OSError``/``urllib3`` errors, see ``CONNECTION_ERRORS``).
        ``raw=True`` returns the body as bytes (for decoding straight into structs).
        """
        if limited and self.limiter is not None:
            self.limiter.acquire()
        headers = self._headers()
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else _encode(body)
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
        payload = r.data
        if raw and 200 <= r.status < 300:
            return ApiResponse(r.status, payload)
        decoded: Any = None
        if payload:
            try:
                decoded = _decode(payload)
            except msgspec.DecodeError:
                decoded = payload.decode("utf-8", "replace")
        return ApiResponse(r.status, decoded)

    def watch(
        self, path: str, params: Mapping[str, Any] | None = None, *, timeout_seconds: int = 300
    ) -> WatchLines:
        """Open a watch; returns an iterator of raw event lines (bytes).

        A non-200 reply returns the :class:`ApiResponse` via ``WatchLines.error``.
        """
        query = dict(params or {})
        query.update(watch="true", timeoutSeconds=timeout_seconds)
        r = self._pool.urlopen(
            "GET",
            self._target(path, query),
            headers=self._headers(),
            timeout=urllib3.Timeout(connect=self.timeout, read=timeout_seconds + 30),
            preload_content=False,
            redirect=False,
        )
        return WatchLines(r)


class WatchLines:
    """An open watch response; iterate for raw JSON lines, :meth:`close` from any thread."""

    def __init__(self, response: Any) -> None:
        self._r = response
        self._closed = False
        self.error: ApiResponse | None = None
        if response.status != 200:
            payload = response.read()
            with contextlib.suppress(Exception):
                response.release_conn()
            try:
                body: Any = _decode(payload) if payload else None
            except msgspec.DecodeError:
                body = payload.decode("utf-8", "replace")
            self.error = ApiResponse(response.status, body)

    def __iter__(self) -> Iterator[bytes]:
        if self.error is not None:
            return
        r = self._r
        buf = b""
        complete = False
        try:
            for chunk in r.stream(1 << 16, decode_content=True):
                buf += chunk
                start = 0
                while True:
                    nl = buf.find(b"\n", start)
                    if nl < 0:
                        break
                    line = buf[start:nl]
                    start = nl + 1
                    if line.strip():
                        yield line
                buf = buf[start:]
            if buf.strip():
                yield buf
            complete = True
        except CONNECTION_ERRORS:
            if not self._closed:
                raise
        finally:
            if not complete:
                with contextlib.suppress(Exception):
                    r.close()
            with contextlib.suppress(Exception):
                r.release_conn()

    def close(self) -> None:
        """End the watch; a thread iterating it returns promptly."""
        self._closed = True
        conn = getattr(self._r, "connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        else:
            with contextlib.suppress(Exception):
                self._r.close()
