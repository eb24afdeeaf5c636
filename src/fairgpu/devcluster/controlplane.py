"""Run a real etcd + kube-apiserver (and optionally kube-scheduler) on loopback.

The binaries come from ``tools/kube/build-control-plane.sh``. Everything a bare API server
needs is generated in a private work directory: a CA and serving certificate, a
service-account key pair, a static token whose user is in ``system:masters`` and a kubeconfig
that uses it. Child processes log to files in that directory and are stopped on
:meth:`ControlPlane.stop`, on interpreter exit, and (on Linux, when started from the main
thread) when this process dies.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from base64 import b64encode
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml

from fairgpu.devcluster.client import KubeClient
from fairgpu.devcluster.controller_manager import (
    BINARY,
    RESOURCECLAIM_CONTROLLER,
    controller_manager_argv,
)

if TYPE_CHECKING:
    from fairgpu.devcluster.certs import ControlPlaneCerts

__all__ = [
    "BINARIES",
    "K8S_VERSION",
    "ControlPlane",
    "ControlPlaneError",
    "default_cache_dir",
    "find_binaries",
    "free_port",
]

#: Kubernetes release built by tools/kube/build-control-plane.sh (keep the two in step).
K8S_VERSION = "1.34.10"
#: Binaries the build script produces.
BINARIES = ("kube-apiserver", "kube-scheduler", "etcd")

_LIVE: weakref.WeakSet[ControlPlane] = weakref.WeakSet()


class ControlPlaneError(RuntimeError):
    """A control-plane process failed to start or become ready."""


def default_cache_dir() -> Path:
    """Root of the binary cache: ``$FAIRGPU_KUBE_CACHE`` or ``~/.cache/fairgpu/kube``."""
    env = os.environ.get("FAIRGPU_KUBE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "fairgpu" / "kube"


def _complete(d: Path) -> bool:
    return all(os.access(d / b, os.X_OK) for b in BINARIES)


def find_binaries(bin_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """Locate a directory holding ``kube-apiserver``, ``kube-scheduler`` and ``etcd``.

    Order: the ``bin_dir`` argument, ``$FAIRGPU_KUBE_BIN``, the cache directory for
    :data:`K8S_VERSION`, then the newest complete ``v*`` directory in the cache. Returns
    ``None`` when nothing complete is found.
    """
    explicit = bin_dir or os.environ.get("FAIRGPU_KUBE_BIN")
    if explicit:
        d = Path(explicit)
        return d if _complete(d) else None
    root = default_cache_dir()
    pinned = root / f"v{K8S_VERSION}"
    if _complete(pinned):
        return pinned
    if not root.is_dir():
        return None

    def key(p: Path) -> tuple[int, ...]:
        try:
            return tuple(int(x) for x in p.name.lstrip("v").split("."))
        except ValueError:
            return (-1,)

    for d in sorted(root.glob("v*"), key=key, reverse=True):
        if _complete(d):
            return d
    return None


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no log>"


class _Child:
    """One supervised child process writing to a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, cwd: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        argv = list(self.argv)
        # Die with us: PR_SET_PDEATHSIG fires when the *thread* that forked exits, so only
        # use it from the main thread, whose end is the process's end.
        setpriv = shutil.which("setpriv")
        if setpriv and threading.current_thread() is threading.main_thread():
            argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log.write(f"\n==== {time.strftime('%H:%M:%S')} start {self.name}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            argv,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C reaches us, and we stop in order
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds (at once if ``timeout`` is 0)."""
        p = self.proc
        if p is not None and p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM if timeout > 0 else signal.SIGKILL)
            try:
                p.wait(timeout if timeout > 0 else 5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with code {self.proc.returncode}; "
                f"log {self.log_path}:\n{_tail(self.log_path)}"
            )


class ControlPlane:
    """etcd + kube-apiserver on free loopback ports, with generated certificates and token.

    Use as a context manager or call :meth:`start` / :meth:`stop`. After start, :attr:`url`,
    :attr:`token`, :attr:`ca_file` and :attr:`kubeconfig_path` describe how to connect, and
    :meth:`client` returns a ready :class:`~fairgpu.devcluster.client.KubeClient`.

    Args:
        bin_dir: directory with ``etcd`` and ``kube-apiserver`` (``kube-scheduler`` is only
            needed for :meth:`start_scheduler`); ``None`` uses :func:`find_binaries`.
        workdir: where certificates, etcd data, logs and the kubeconfig go; a fresh temporary
            directory by default (removed on :meth:`stop` unless ``keep_workdir``).
        keep_workdir: keep the work directory after :meth:`stop` (for debugging).
        service_cluster_ip_range: ``--service-cluster-ip-range``.
        authorization_mode: ``--authorization-mode`` (``RBAC`` or ``AlwaysAllow``).
        extra_apiserver_args: appended to the kube-apiserver command line.
        startup_timeout: seconds to wait for etcd health and ``/readyz``.
        verbosity: kube-apiserver ``-v`` level.
    """

    def __init__(
        self,
        bin_dir: str | os.PathLike[str] | None = None,
        *,
        workdir: str | os.PathLike[str] | None = None,
        keep_workdir: bool = False,
        service_cluster_ip_range: str = "10.0.0.0/24",
        authorization_mode: str = "RBAC",
        extra_apiserver_args: Sequence[str] = (),
        startup_timeout: float = 90.0,
        verbosity: int = 1,
    ) -> None:
        found = find_binaries(bin_dir)
        if found is None:
            where = bin_dir or os.environ.get("FAIRGPU_KUBE_BIN") or default_cache_dir()
            raise ControlPlaneError(
                f"control-plane binaries not found in {where}; "
                "build them with tools/kube/build-control-plane.sh"
            )
        self.bin_dir = found
        self._workdir_arg = Path(workdir) if workdir is not None else None
        self.keep_workdir = keep_workdir
        self.service_cluster_ip_range = service_cluster_ip_range
        self.authorization_mode = authorization_mode
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.startup_timeout = startup_timeout
        self.verbosity = verbosity

        self.workdir: Path | None = None
        self.token = secrets.token_hex(24)
        self.etcd_port = 0
        self.apiserver_port = 0
        self.certs: ControlPlaneCerts | None = None
        self._etcd: _Child | None = None
        self._apiserver: _Child | None = None
        self._scheduler: _Child | None = None
        self._controller_manager: _Child | None = None
        self._kubeconfig: Path | None = None
        self._lock = threading.RLock()

    # -- connection facts -----------------------------------------------------------------

    @property
    def url(self) -> str:
        """``https://127.0.0.1:<port>`` of the API server."""
        if not self.apiserver_port:
            raise ControlPlaneError("control plane not started")
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def etcd_url(self) -> str:
        """Client URL of etcd."""
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def ca_file(self) -> str:
        """PEM file of the CA that signed the API server's serving certificate."""
        if self.certs is None:
            raise ControlPlaneError("control plane not started")
        return str(self.certs.ca_cert)

    @property
    def kubeconfig_path(self) -> Path:
        """Kubeconfig with the admin token and CA (context ``fairgpu-dev``)."""
        if self._kubeconfig is None:
            raise ControlPlaneError("control plane not started")
        return self._kubeconfig

    @property
    def log_dir(self) -> Path:
        """Directory holding ``etcd.log``, ``kube-apiserver.log`` and ``kube-scheduler.log``."""
        if self.workdir is None:
            raise ControlPlaneError("control plane not started")
        return self.workdir / "logs"

    def client(self, *, maxsize: int = 32, timeout: float = 30.0) -> KubeClient:
        """A new raw client authenticated as the admin token user (``system:masters``)."""
        return KubeClient(self.url, self.token, self.ca_file, maxsize=maxsize, timeout=timeout)

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start etcd and kube-apiserver and wait until ``/readyz`` answers ``ok``."""
        with self._lock:
            if self._apiserver is not None:
                return
            if self._workdir_arg is not None:
                self.workdir = self._workdir_arg
                self.workdir.mkdir(parents=True, exist_ok=True)
            else:
                self.workdir = Path(tempfile.mkdtemp(prefix="fairgpu-cp-"))
            wd = self.workdir
            (wd / "logs").mkdir(exist_ok=True)
            _LIVE.add(self)
            try:
                # Imported here so that importing the package does not need `cryptography`.
                from fairgpu.devcluster.certs import write_control_plane_certs

                self.certs = write_control_plane_certs(
                    wd / "pki", service_ip=self._first_service_ip()
                )
                (wd / "tokens.csv").write_text(
                    f'{self.token},fairgpu-admin,fairgpu-admin,"system:masters"\n'
                )
                (wd / "tokens.csv").chmod(0o600)
                self._start_etcd()
                self.apiserver_port = free_port()
                self._apiserver = _Child(
                    "kube-apiserver",
                    self._apiserver_argv(),
                    wd / "logs" / "kube-apiserver.log",
                    wd,
                )
                self._apiserver.start()
                self._wait_ready(self._apiserver)
                self._kubeconfig = self._write_kubeconfig(wd / "kubeconfig")
            except BaseException:
                self.stop()
                raise

    def restart_apiserver(
        self, *, downtime: float = 0.0, crash: bool = False, grace_period: float = 5.0
    ) -> None:
        """Stop kube-apiserver and start it again on the same port, keeping etcd's data.

        Args:
            downtime: seconds to stay down between stop and start.
            crash: SIGKILL at once instead of a graceful SIGTERM.
            grace_period: seconds a graceful stop may take before SIGKILL (kube-apiserver
                waits for open watches, so this bounds the restart time).
        """
        with self._lock:
            if self._apiserver is None:
                raise ControlPlaneError("control plane not started")
            self._apiserver.stop(timeout=0.0 if crash else grace_period)
            if downtime > 0:
                time.sleep(downtime)
            deadline = time.monotonic() + 10
            while not self._port_free(self.apiserver_port):
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"port {self.apiserver_port} still in use")
                time.sleep(0.1)
            self._apiserver.start()
            self._wait_ready(self._apiserver)

    def stop(self) -> None:
        """Stop the scheduler, kube-apiserver and etcd; remove the work directory."""
        with self._lock:
            # kube-apiserver waits for open watches on SIGTERM; don't let clients stall us.
            for child, grace in (
                (self._controller_manager, 5.0),
                (self._scheduler, 5.0),
                (self._apiserver, 5.0),
                (self._etcd, 10.0),
            ):
                if child is not None:
                    child.stop(grace)
            self._scheduler = self._apiserver = self._etcd = None
            self._controller_manager = None
            _LIVE.discard(self)
            if self.workdir is not None and not self.keep_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def running(self) -> bool:
        """True while both etcd and kube-apiserver processes are alive."""
        return bool(
            self._etcd and self._etcd.alive() and self._apiserver and self._apiserver.alive()
        )

    # -- optional kube-scheduler ------------------------------------------------------------

    def start_scheduler(
        self,
        config_path: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        """Start the real kube-scheduler against this API server and wait for ``/healthz``.

        Args:
            config_path: a ``KubeSchedulerConfiguration`` file; without one, leader election
                is off and the client keeps kube-scheduler's defaults (50 QPS / burst 100).
                A given config must point ``clientConnection.kubeconfig`` at
                :attr:`kubeconfig_path` itself.
            extra_args: appended to the command line.
        """
        with self._lock:
            if self._apiserver is None or self.workdir is None:
                raise ControlPlaneError("control plane not started")
            if self._scheduler is not None:
                raise ControlPlaneError("kube-scheduler already running")
            port = free_port()
            kc = str(self.kubeconfig_path)
            argv = [
                str(self.bin_dir / "kube-scheduler"),
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'scheduler-certs'}",
                f"-v={self.verbosity}",
            ]
            if config_path is not None:
                argv.append(f"--config={config_path}")
            else:
                argv += [f"--kubeconfig={kc}", "--leader-elect=false"]
            argv += list(extra_args)
            self._scheduler = self._start_healthy("kube-scheduler", argv, port)

    def stop_scheduler(self) -> None:
        """Stop kube-scheduler if :meth:`start_scheduler` started it."""
        with self._lock:
            if self._scheduler is not None:
                self._scheduler.stop()
                self._scheduler = None

    # -- optional kube-controller-manager ---------------------------------------------------

    def start_controller_manager(
        self,
        controllers: Sequence[str] = (RESOURCECLAIM_CONTROLLER,),
        *,
        feature_gates: str = "",
        extra_args: Sequence[str] = (),
    ) -> None:
        """Start the real kube-controller-manager with only ``controllers`` enabled and wait
        for ``/healthz`` (see :mod:`fairgpu.devcluster.controller_manager`).

        Raises :class:`ControlPlaneError` when its binary is missing from :attr:`bin_dir`
        (``tools/kube/build-control-plane.sh`` builds just that one into an older cache).
        """
        with self._lock:
            if self._apiserver is None or self.workdir is None:
                raise ControlPlaneError("control plane not started")
            if self._controller_manager is not None:
                raise ControlPlaneError("kube-controller-manager already running")
            binary = self.bin_dir / BINARY
            if not os.access(binary, os.X_OK):
                raise ControlPlaneError(
                    f"{binary} not found; build it with tools/kube/build-control-plane.sh"
                )
            port = free_port()
            argv = controller_manager_argv(
                binary,
                self.kubeconfig_path,
                port,
                self.workdir / "controller-manager-certs",
                controllers,
                feature_gates=feature_gates,
                verbosity=self.verbosity,
            )
            self._controller_manager = self._start_healthy(BINARY, [*argv, *extra_args], port)

    def stop_controller_manager(self) -> None:
        """Stop kube-controller-manager if :meth:`start_controller_manager` started it."""
        with self._lock:
            if self._controller_manager is not None:
                self._controller_manager.stop()
                self._controller_manager = None

    # -- internals ----------------------------------------------------------------------------

    def _first_service_ip(self) -> str:
        import ipaddress

        net = ipaddress.ip_network(self.service_cluster_ip_range, strict=False)
        return str(net.network_address + 1)

    @staticmethod
    def _port_free(port: int) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
            return True

    def _start_etcd(self) -> None:
        assert self.workdir is not None
        for _ in range(3):
            self.etcd_port, peer = free_port(), free_port()
            client_url = f"http://127.0.0.1:{self.etcd_port}"
            peer_url = f"http://127.0.0.1:{peer}"
            argv = [
                str(self.bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={self.workdir / 'etcd-data'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",  # test data only: trade durability for speed
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ]
            self._etcd = _Child("etcd", argv, self.workdir / "logs" / "etcd.log", self.workdir)
            self._etcd.start()
            try:
                self._wait_etcd(self._etcd)
                return
            except ControlPlaneError:
                # Most likely a port race with another process; try fresh ports.
                self._etcd.stop()
                shutil.rmtree(self.workdir / "etcd-data", ignore_errors=True)
        raise ControlPlaneError(f"etcd failed to start:\n{_tail(self.log_dir / 'etcd.log')}")

    def _wait_etcd(self, child: _Child) -> None:
        deadline = time.monotonic() + self.startup_timeout
        url = f"{self.etcd_url}/health"
        while time.monotonic() < deadline:
            child.check()
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if b'"health":"true"' in r.read():
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise ControlPlaneError(f"etcd not healthy after {self.startup_timeout}s")

    def _apiserver_argv(self) -> list[str]:
        assert self.workdir is not None and self.certs is not None
        c = self.certs
        return [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={c.serving_cert}",
            f"--tls-private-key-file={c.serving_key}",
            f"--client-ca-file={c.ca_cert}",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={c.sa_public_key}",
            f"--service-account-signing-key-file={c.sa_private_key}",
            f"--service-cluster-ip-range={self.service_cluster_ip_range}",
            f"--authorization-mode={self.authorization_mode}",
            # No controller-manager or kubelets: nothing would reconcile these endpoints.
            "--endpoint-reconciler-type=none",
            # Close open watches within 2s of SIGTERM instead of waiting for them to end.
            "--shutdown-watch-termination-grace-period=2s",
            "--allow-privileged=true",
            "--profiling=false",
            f"-v={self.verbosity}",
            *self.extra_apiserver_args,
        ]

    def _wait_ready(self, child: _Child) -> None:
        self._wait_https(child, f"{self.url}/readyz", token=self.token)

    def _start_healthy(self, name: str, argv: list[str], port: int) -> _Child:
        """Start ``name`` (logging to ``<log dir>/<name>.log``) and wait for its ``/healthz``
        on ``port``; stopped again if it never becomes healthy."""
        assert self.workdir is not None
        child = _Child(name, argv, self.log_dir / f"{name}.log", self.workdir)
        child.start()
        try:
            self._wait_https(child, f"https://127.0.0.1:{port}/healthz", token=None)
        except BaseException:
            child.stop()
            raise
        return child

    def _wait_https(self, child: _Child, url: str, token: str | None) -> None:
        import ssl

        ctx = ssl.create_default_context(cafile=self.ca_file)
        if token is None:  # kube-scheduler serves a self-signed certificate
            ctx = ssl._create_unverified_context()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        deadline = time.monotonic() + self.startup_timeout
        last = ""
        while time.monotonic() < deadline:
            child.check()
            req = urllib.request.Request(url, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                    body = r.read()
                    if r.status == 200 and body.strip() == b"ok":
                        return
                    last = body.decode(errors="replace")
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}: {e.read()[:2000].decode(errors='replace')}"
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.2)
        raise ControlPlaneError(
            f"{child.name} not ready after {self.startup_timeout}s ({url}): {last}\n"
            f"log {child.log_path}:\n{_tail(child.log_path)}"
        )

    def _write_kubeconfig(self, path: Path) -> Path:
        assert self.certs is not None
        ca = b64encode(self.certs.ca_cert.read_bytes()).decode()
        doc: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "fairgpu-dev",
                    "cluster": {"server": self.url, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": "fairgpu-admin", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "fairgpu-dev",
                    "context": {"cluster": "fairgpu-dev", "user": "fairgpu-admin"},
                }
            ],
            "current-context": "fairgpu-dev",
        }
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        path.chmod(0o600)
        return path


@atexit.register
def _stop_all() -> None:
    for cp in list(_LIVE):
        with contextlib.suppress(Exception):
            cp.stop()
