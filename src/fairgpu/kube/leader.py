"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

The leader renews the Lease every ``retry_period``; a candidate takes it over only when the
record it observed has not changed for ``lease_duration`` seconds of *its own* clock (never
comparing timestamps written by another machine's clock). Updates use the Lease's
resourceVersion, so two candidates can never both win. A leader that cannot renew within
``renew_deadline`` steps down. On graceful shutdown the leader releases the Lease (empty
holder, duration 1 s) so a standby takes over at once.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from fairgpu.kube.client import CONNECTION_ERRORS, RestClient

__all__ = ["LeaderElector"]

log = logging.getLogger("fairgpu.kube.leader")


def _micro(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaign for a Lease in a background thread.

    Args:
        client: API client.
        namespace, name: the Lease.
        identity: this candidate's unique id (pod name + random suffix).
        lease_duration: seconds a standby waits after the last observed renewal.
        renew_deadline: seconds the leader keeps trying to renew before stepping down.
        retry_period: seconds between attempts.
        on_started: called (from the elector thread) when this candidate becomes leader.
        on_stopped: called when leadership is lost.
    """

    def __init__(
        self,
        client: RestClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started: Callable[[], None] | None = None,
        on_stopped: Callable[[], None] | None = None,
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                "leader election: need 0 < retry_period < renew_deadline < lease_duration "
                f"(got {retry_period}, {renew_deadline}, {lease_duration})"
            )
        self.client = client
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.is_leader = threading.Event()
        self.transitions = 0
        self._observed: tuple[str, str] | None = None
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LeaderElector:
        """Start campaigning."""
        self._thread = threading.Thread(target=self._run, name="leader-elector", daemon=True)
        self._thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        """Stop; release the Lease first if we hold it and ``release``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.retry_period + 5)
        if release and self.is_leader.is_set():
            self._release()
        self.is_leader.clear()

    # ---- internals -----------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            if self._try():
                break
            self._stop.wait(self.retry_period)
        if self._stop.is_set():
            return
        log.info("became leader", extra={"lease": f"{self.namespace}/{self.name}"})
        self.is_leader.set()
        if self.on_started is not None:
            self.on_started()
        last_renew = time.monotonic()
        while not self._stop.wait(self.retry_period):
            if self._try():
                last_renew = time.monotonic()
                continue
            if time.monotonic() - last_renew > self.renew_deadline:
                break
        if self._stop.is_set():
            return
        log.error("lost leadership", extra={"lease": f"{self.namespace}/{self.name}"})
        self.is_leader.clear()
        if self.on_stopped is not None:
            self.on_stopped()

    def _spec(self, now: float, acquire: float, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": _micro(acquire),
            "renewTime": _micro(now),
            "leaseTransitions": transitions,
        }

    def _try(self) -> bool:
        """One acquire-or-renew attempt; True if we hold the Lease afterwards."""
        now = time.time()
        try:
            r = self.client.request("GET", self.path, limited=False, timeout=self.retry_period * 2)
            if r.status == 404:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(now, now, 0),
                }
                c = self.client.request("POST", self.collection, body, limited=False)
                return c.ok
            if not r.ok or not isinstance(r.body, dict):
                return False
            lease = r.body
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            record = (holder, str(spec.get("renewTime") or ""))
            mono = time.monotonic()
            if record != self._observed:
                self._observed = record
                self._observed_at = mono
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            if holder and holder != self.identity and mono - self._observed_at < duration:
                return False  # someone else holds a lease that has not expired
            transitions = int(spec.get("leaseTransitions") or 0)
            acquire = now
            if holder == self.identity:
                acquired = spec.get("acquireTime")
                new_spec = self._spec(now, now, transitions)
                if acquired:
                    new_spec["acquireTime"] = acquired
            else:
                transitions += 1
                new_spec = self._spec(now, acquire, transitions)
            lease["spec"] = new_spec
            u = self.client.request("PUT", self.path, lease, limited=False)
            if u.ok:
                self._observed = (self.identity, new_spec["renewTime"])
                self._observed_at = time.monotonic()
                if holder != self.identity:
                    self.transitions += 1
                return True
            return False
        except CONNECTION_ERRORS as error:
            log.warning("lease request failed", extra={"error": str(error)})
            return False

    def _release(self) -> None:
        try:
            r = self.client.request("GET", self.path, limited=False, timeout=5)
            if not r.ok or not isinstance(r.body, dict):
                return
            lease = r.body
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            spec["holderIdentity"] = ""
            spec["leaseDurationSeconds"] = 1
            spec["renewTime"] = _micro(time.time())
            lease["spec"] = spec
            self.client.request("PUT", self.path, lease, limited=False, timeout=5)
            log.info("released the lease", extra={"lease": f"{self.namespace}/{self.name}"})
        except CONNECTION_ERRORS:
            pass
