"""A fake kubelet: runs bound pods without running anything.

:class:`FakeKubelet` lists and watches pods that have ``spec.nodeName`` set and, like a kubelet
would, reports them through the pod status subresource:

- a bound ``Pending`` pod becomes ``Running`` (``startTime``, ``PodScheduled``,
  ``Initialized``, ``ContainersReady`` and ``Ready`` conditions, running container statuses);
- a pod annotated ``fairgpu.io/duration-seconds: "<seconds>"`` becomes ``Succeeded`` that many
  wall-clock seconds after its ``startTime`` (``Failed`` if ``fairgpu.io/exit-code`` is set
  and non-zero) -- or, annotated ``fairgpu.io/actual-run-seconds``, after that many instead (a
  pod that runs longer or shorter than it declares); without either it runs until deleted --
  or until its
  ``spec.activeDeadlineSeconds`` pass, when it is ``Failed`` with reason ``DeadlineExceeded``
  (its containers killed), as a kubelet fails it;
- a bound pod being deleted gracefully (``deletionTimestamp`` set, e.g. evicted or
  preempted) is reported ``Failed`` (its containers killed, exit code 137) and removed with
  grace period 0, as a kubelet does once its containers stop (``grace_seconds`` after it is
  seen terminating, if set: how long its containers take);
- a running pod resized in place (``pods/resize``) is resized, deferred or refused as
  :mod:`~fairgpu.devcluster.kubelet_resize` says -- at once, or when a test lets resizes
  through again (:attr:`FakeKubelet.actuate_resizes`, :meth:`FakeKubelet.resume_resizes`).

The watch relists on 410 Gone, on ``ERROR`` events and on connection errors (for example while
kube-apiserver restarts).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fairgpu.devcluster import kubelet_resize
from fairgpu.devcluster.client import (
    STRATEGIC_MERGE_PATCH,
    ApiError,
    KubeClient,
    WatchStream,
)
from fairgpu.model.pod import ANN_ACTUAL_RUN, ANN_DURATION

__all__ = [
    "DURATION_ANNOTATION",
    "EXIT_CODE_ANNOTATION",
    "RUN_ANNOTATION",
    "FakeKubelet",
    "KubeletStats",
]

#: Seconds a pod runs before it completes.
DURATION_ANNOTATION = ANN_DURATION
#: Seconds the fake kubelet runs a pod, when that differs from what it declares.
RUN_ANNOTATION = ANN_ACTUAL_RUN
#: Exit code reported on completion; non-zero makes the pod ``Failed``.
EXIT_CODE_ANNOTATION = "fairgpu.io/exit-code"
#: The exit code of a container killed when its pod is deleted (128 + SIGKILL).
KILLED = 137
TERMINAL = ("Succeeded", "Failed")

log = logging.getLogger(__name__)


def _now_ts() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_ts(ts: str | None) -> float | None:
    if not ts:
        return None
    try:
        return _dt.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC).timestamp()
    except ValueError:
        return None


@dataclass(slots=True)
class KubeletStats:
    """Counters of what the fake kubelet did."""

    started: int = 0
    succeeded: int = 0
    failed: int = 0
    deleted: int = 0
    relists: int = 0
    errors: int = 0
    resized: int = 0  # in-place resizes applied
    deferred: int = 0  # ... left waiting for room on the node (each time it was decided)
    infeasible: int = 0  # ... refused: more than the node has


class FakeKubelet:
    """Drive bound pods through Running to Succeeded, for every node or a given set.

    Args:
        client: API client (its own pool is best; the watch holds one connection).
        nodes: only handle pods bound to these node names; ``None`` handles all nodes.
        namespace: only watch this namespace; ``None`` watches all.
        workers: concurrent status updates.
        watch_timeout: server-side watch timeout in seconds before a quiet re-watch.
        grace_seconds: how long a pod being deleted stays terminating before it is removed.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        nodes: Iterable[str] | None = None,
        namespace: str | None = None,
        workers: int = 4,
        watch_timeout: int = 60,
        grace_seconds: float = 0.0,
    ) -> None:
        self.client = client
        self.nodes = frozenset(nodes) if nodes is not None else None
        self.namespace = namespace
        self.watch_timeout = watch_timeout
        self.grace_seconds = grace_seconds
        self.stats = KubeletStats()
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, str, str, str]] = []
        self._seq = itertools.count()
        self._scheduled: set[str] = set()  # UIDs with a pending completion
        self._exceeding: set[str] = set()  # ... of which their deadline ends them
        self._in_flight: set[str] = set()  # UIDs being started or deleted
        # Deletions seen while the pod was still being started: carried out once the start
        # ends (a real kubelet stops a pod whose deletion began while it was starting it).
        self._delete_after_start: dict[str, tuple[str, str]] = {}
        self._starting: set[str] = set()  # UIDs whose start is in flight
        self._started: set[str] = set()  # UIDs this kubelet set Running
        self._watch: WatchStream | None = None
        self._synced = threading.Event()
        #: False: resizes wait (their status keeps the old amounts) until resume_resizes().
        self.actuate_resizes = True
        self._deferred: dict[str, tuple[str, str]] = {}  # resizes to try again, by UID

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> FakeKubelet:
        """Start the watch and timer threads; return ``self``."""
        if self._threads:
            return self
        self._stop.clear()
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="fake-kubelet")
        for target, name in ((self._watch_loop, "watch"), (self._timer_loop, "timer")):
            t = threading.Thread(target=target, name=f"fake-kubelet-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def wait_synced(self, timeout: float = 30.0) -> bool:
        """Block until the first list has been processed; return whether it was."""
        return self._synced.wait(timeout)

    def stop(self) -> None:
        """Stop all threads; pending completions are dropped."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        w = self._watch
        if w is not None:
            w.close()
        for t in self._threads:
            t.join(10)
        self._threads.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- watch ----------------------------------------------------------------------------------

    def _pods_path(self) -> str:
        if self.namespace:
            return f"/api/v1/namespaces/{self.namespace}/pods"
        return "/api/v1/pods"

    def _watch_loop(self) -> None:
        backoff = 0.2
        params: dict[str, Any] = {"fieldSelector": "spec.nodeName!="}
        while not self._stop.is_set():
            try:
                listing = self.client.get(self._pods_path(), params=params)
                for pod in listing.get("items", []):
                    self._handle(pod)
                self._synced.set()
                rv = listing["metadata"].get("resourceVersion")
                backoff = 0.2
                while not self._stop.is_set():
                    w = self.client.watch(
                        self._pods_path(),
                        {**params, "resourceVersion": rv, "allowWatchBookmarks": "true"},
                        timeout_seconds=self.watch_timeout,
                    )
                    self._watch = w
                    gone = False
                    for ev in w:
                        kind, obj = ev.get("type"), ev.get("object") or {}
                        if kind == "ERROR":
                            log.info("watch error event: %s", obj.get("message"))
                            gone = True
                            break
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if kind in ("ADDED", "MODIFIED"):
                            self._handle(obj)
                        elif kind == "DELETED":
                            self._forget(obj)
                    self._watch = None
                    if gone:
                        break
                with self._lock:
                    self.stats.relists += 1
            except Exception as e:  # connection refused while restarting, 410, ...
                if self._stop.is_set():
                    break
                with self._lock:
                    self.stats.errors += 1
                    self.stats.relists += 1
                log.debug("fake kubelet watch failed (%s); relisting in %.1fs", e, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    # -- pod handling ---------------------------------------------------------------------------

    def _mine(self, pod: dict[str, Any]) -> bool:
        node = pod.get("spec", {}).get("nodeName")
        return bool(node) and (self.nodes is None or node in self.nodes)

    def _forget(self, pod: dict[str, Any]) -> None:
        uid = pod.get("metadata", {}).get("uid", "")
        with self._lock:
            self._scheduled.discard(uid)
            self._exceeding.discard(uid)
            self._started.discard(uid)

    def _submit(self, fn: Any, *args: Any) -> None:
        pool = self._pool
        if pool is None or self._stop.is_set():
            return
        with contextlib.suppress(RuntimeError):  # shut down concurrently
            pool.submit(fn, *args)

    def _handle(self, pod: dict[str, Any]) -> None:
        if not self._mine(pod):
            return
        meta = pod["metadata"]
        uid = meta["uid"]
        phase = pod.get("status", {}).get("phase", "Pending")
        if meta.get("deletionTimestamp"):
            with self._lock:
                self._scheduled.discard(uid)
                if uid in self._in_flight:
                    if uid in self._starting:
                        # Still starting: without this the deletion would be lost, and the
                        # pod would stay terminating for ever.
                        self._delete_after_start[uid] = (meta["namespace"], meta["name"])
                    return
                self._in_flight.add(uid)
            self._begin_deletion(meta["namespace"], meta["name"], uid)
            return
        if phase == "Pending":
            with self._lock:
                if uid in self._in_flight or uid in self._started:
                    return
                self._in_flight.add(uid)
                self._starting.add(uid)
            self._submit(self._run, pod)
        elif phase == "Running":
            started = _parse_ts(pod.get("status", {}).get("startTime"))
            self._schedule_completion(pod, started if started is not None else time.time())
            if self.actuate_resizes and kubelet_resize.resize_pending(pod):
                self._submit(self._resize, meta["namespace"], meta["name"], uid)

    def _duration(self, pod: dict[str, Any]) -> float | None:
        """How long ``pod`` runs: its fake run time, else its declared one (None: until
        deleted)."""
        notes = pod["metadata"].get("annotations") or {}
        name = RUN_ANNOTATION if RUN_ANNOTATION in notes else DURATION_ANNOTATION
        raw = notes.get(name)
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            log.warning("pod %s: bad %s=%r", pod["metadata"]["name"], name, raw)
            return None
        return max(0.0, value)

    def _schedule_completion(self, pod: dict[str, Any], started: float) -> None:
        duration = self._duration(pod)
        deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        if isinstance(deadline, int) and (duration is None or deadline < duration):
            duration, exceeding = float(deadline), True
        else:
            exceeding = False
        if duration is None:
            return
        meta = pod["metadata"]
        with self._cond:
            if meta["uid"] in self._scheduled:
                return
            self._scheduled.add(meta["uid"])
            if exceeding:
                self._exceeding.add(meta["uid"])
            heapq.heappush(
                self._heap,
                (started + duration, next(self._seq), meta["namespace"], meta["name"], meta["uid"]),
            )
            self._cond.notify()

    def _timer_loop(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                while not self._stop.is_set():
                    if self._heap:
                        delay = self._heap[0][0] - time.time()
                        if delay <= 0:
                            break
                        self._cond.wait(min(delay, 1.0))
                    else:
                        self._cond.wait(1.0)
                if self._stop.is_set():
                    return
                _, _, ns, name, uid = heapq.heappop(self._heap)
                if uid not in self._scheduled:
                    continue
            self._submit(self._complete, ns, name, uid)

    # -- API writes -----------------------------------------------------------------------------

    def _patch_status(self, ns: str, name: str, uid: str, status: dict[str, Any]) -> bool:
        """Patch pod status, retrying through API outages; False if the pod is gone/changed."""
        path = f"/api/v1/namespaces/{ns}/pods/{name}/status"
        body = {"metadata": {"uid": uid}, "status": status}
        delay = 0.2
        for _ in range(60):
            if self._stop.is_set():
                return False
            try:
                resp = self.client.request("PATCH", path, body, content_type=STRATEGIC_MERGE_PATCH)
            except Exception as e:  # connection errors during an API server restart
                log.debug("patch %s/%s failed: %s", ns, name, e)
            else:
                if resp.ok:
                    return True
                if resp.status in (404, 409, 422):
                    log.debug("pod %s/%s changed or gone: %s", ns, name, resp.body)
                    return False
                if resp.status < 500 and resp.status != 429:
                    log.warning("patch %s/%s: HTTP %s %s", ns, name, resp.status, resp.body)
                    with self._lock:
                        self.stats.errors += 1
                    return False
            self._stop.wait(delay)
            delay = min(delay * 2, 2.0)
        with self._lock:
            self.stats.errors += 1
        return False

    def _run(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        try:
            ts = _now_ts()
            containers = pod.get("spec", {}).get("containers", [])
            status = {
                "phase": "Running",
                "startTime": ts,
                "conditions": [
                    _cond("PodReadyToStartContainers", "True", ts),
                    _cond("Initialized", "True", ts),
                    _cond("ContainersReady", "True", ts),
                    _cond("Ready", "True", ts),
                    _cond("PodScheduled", "True", ts),
                ],
                "containerStatuses": [
                    {
                        "name": c["name"],
                        "image": c.get("image", ""),
                        "imageID": "",
                        "containerID": f"fake://{uid}/{c['name']}",
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": ts}, "waiting": None},
                        **kubelet_resize.container_status_resources(c),
                    }
                    for c in containers
                ],
            }
            if self._patch_status(ns, name, uid, status):
                with self._lock:
                    self.stats.started += 1
                    self._started.add(uid)
                self._schedule_completion(pod, _parse_ts(ts) or time.time())
        finally:
            with self._lock:
                self._starting.discard(uid)
                deletion = self._delete_after_start.pop(uid, None)
                if deletion is None:
                    self._in_flight.discard(uid)
            if deletion is not None:  # stays in flight: now as a deletion
                self._begin_deletion(*deletion, uid)

    # -- in-place resize ----------------------------------------------------------------------

    def resume_resizes(self) -> None:
        """Let resizes through again, and carry out those that waited."""
        self.actuate_resizes = True
        path = self._pods_path() + "?fieldSelector=status.phase%3DRunning"
        for pod in self.client.get(path)["items"]:
            if self._mine(pod) and kubelet_resize.resize_pending(pod):
                meta = pod["metadata"]
                self._submit(self._resize, meta["namespace"], meta["name"], meta["uid"])

    def _resize(self, ns: str, name: str, uid: str) -> None:
        """Resize, defer or refuse the running pod's resize, as a kubelet decides it."""
        try:
            pod = self.client.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            if pod["metadata"]["uid"] != uid or not kubelet_resize.resize_pending(pod):
                return
            node = pod["spec"]["nodeName"]
            allocatable = self.client.get(f"/api/v1/nodes/{node}")["status"]["allocatable"]
            selector = f"spec.nodeName%3D{node}"
            others = self.client.get(f"/api/v1/pods?fieldSelector={selector}")["items"]
        except Exception as e:  # gone, or the API server restarting: the next event retries
            log.debug("resize of %s/%s not examined: %s", ns, name, e)
            return
        decision = kubelet_resize.decide(pod, allocatable, others)
        with self._lock:
            if decision == "Deferred":
                self._deferred[uid] = (ns, name)
            else:
                self._deferred.pop(uid, None)
        shown = {c.get("type"): c.get("reason") for c in pod["status"].get("conditions") or []}
        if decision != "actuate" and shown.get(kubelet_resize.PENDING) == decision:
            return  # already says so
        if self._patch_status(ns, name, uid, kubelet_resize.status_patch(pod, decision)):
            with self._lock:
                if decision == "actuate":
                    self.stats.resized += 1
                elif decision == "Deferred":
                    self.stats.deferred += 1
                else:
                    self.stats.infeasible += 1

    def _retry_deferred(self) -> None:
        """A pod left a node: resizes deferred for want of room may fit now."""
        with self._lock:
            waiting = list(self._deferred.items())
        if self.actuate_resizes:
            for uid, (ns, name) in waiting:
                self._submit(self._resize, ns, name, uid)

    def _end_containers(self, path: str, ns: str, name: str, uid: str) -> None:
        """Its containers stopped, a kubelet reports a deleted pod terminal -- ``Failed``
        (exit code 137: killed) unless it had completed -- before it removes the pod, and
        keeps the conditions others set (the eviction's ``DisruptionTarget``): a
        controller that holds its pods with a finalizer, as the Job controller does, learns
        the outcome from that phase (with a ``podFailurePolicy`` it waits for it)."""
        try:
            pod = self.client.get(path)
        except Exception:  # gone, or the API server unreachable: the delete that follows retries
            return
        if pod["metadata"]["uid"] != uid or pod.get("status", {}).get("phase") in TERMINAL:
            return
        self._patch_status(ns, name, uid, _terminated(pod, KILLED))

    def _begin_deletion(self, ns: str, name: str, uid: str) -> None:
        """Remove a terminating pod once its grace (``grace_seconds``) has passed."""
        args = (self._finish_deletion, ns, name, uid)
        if self.grace_seconds > 0:  # a timer, so no worker sleeps through the grace
            timer = threading.Timer(self.grace_seconds, self._submit, args)
            timer.daemon = True
            timer.start()
        else:
            self._submit(*args)

    def _complete(self, ns: str, name: str, uid: str) -> None:
        with self._lock:
            if uid not in self._scheduled:
                return
        try:
            pod = self.client.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        except ApiError:
            self._forget({"metadata": {"uid": uid}})
            return
        except Exception:
            # API server unreachable: try again shortly.
            with self._cond:
                heapq.heappush(self._heap, (time.time() + 1.0, next(self._seq), ns, name, uid))
                self._cond.notify()
            return
        if pod["metadata"]["uid"] != uid or pod.get("status", {}).get("phase") != "Running":
            self._forget(pod)
            return
        annotations = pod["metadata"].get("annotations") or {}
        try:
            code = int(annotations.get(EXIT_CODE_ANNOTATION, "0"))
        except ValueError:
            code = 1
        with self._lock:
            exceeded = uid in self._exceeding
        if exceeded:  # activeDeadlineSeconds: the kubelet kills its containers
            code = 137
        status = _terminated(pod, code)
        if exceeded:
            status["reason"] = "DeadlineExceeded"
            status["message"] = "Pod was active on the node longer than the specified deadline"
        ok = self._patch_status(ns, name, uid, status)
        with self._lock:
            self._exceeding.discard(uid)
            self._scheduled.discard(uid)
            self._started.discard(uid)
            self._deferred.pop(uid, None)
            if ok:
                if code == 0:
                    self.stats.succeeded += 1
                else:
                    self.stats.failed += 1
        if ok:
            self._retry_deferred()

    def _finish_deletion(self, ns: str, name: str, uid: str) -> None:
        path = f"/api/v1/namespaces/{ns}/pods/{name}"
        self._end_containers(path, ns, name, uid)
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        try:
            for _ in range(30):
                try:
                    resp = self.client.request("DELETE", path, body)
                except Exception:
                    if self._stop.wait(0.5):
                        return
                    continue
                if resp.ok:
                    with self._lock:
                        self.stats.deleted += 1
                        self._deferred.pop(uid, None)
                    self._retry_deferred()
                    return
                if resp.status in (404, 409):
                    return
                if resp.status < 500 and resp.status != 429:
                    log.warning("delete %s/%s: HTTP %s %s", ns, name, resp.status, resp.body)
                    return
                if self._stop.wait(0.5):
                    return
        finally:
            with self._lock:
                self._in_flight.discard(uid)


def _terminated(pod: dict[str, Any], code: int) -> dict[str, Any]:
    """The status of ``pod`` once its containers exited with ``code``: ``Succeeded`` for 0,
    else ``Failed`` -- whatever its restart policy, as a kubelet reports a pod it will not
    start again (it completed, or it is being deleted)."""
    ts = _now_ts()
    uid = pod["metadata"]["uid"]
    started = pod.get("status", {}).get("startTime", ts)
    reason = "Completed" if code == 0 else "Error"
    return {
        "phase": "Succeeded" if code == 0 else "Failed",
        "conditions": [
            _cond("PodReadyToStartContainers", "False", ts),
            _cond("ContainersReady", "False", ts, "PodCompleted"),
            _cond("Ready", "False", ts, "PodCompleted"),
        ],
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": f"fake://{uid}/{c['name']}",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {
                    "running": None,
                    "waiting": None,
                    "terminated": {
                        "exitCode": code,
                        "reason": reason,
                        "startedAt": started,
                        "finishedAt": ts,
                        "containerID": f"fake://{uid}/{c['name']}",
                    },
                },
            }
            for c in pod.get("spec", {}).get("containers", [])
        ],
    }


def _cond(kind: str, status: str, ts: str, reason: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"type": kind, "status": status, "lastTransitionTime": ts}
    if reason:
        c["reason"] = reason
    return c
