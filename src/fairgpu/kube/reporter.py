"""Tell people why a pod is not scheduled: a ``FailedScheduling`` Event and a
``PodScheduled=False`` condition, rate-limited; and warn about Nodes whose GPU details could
not be read (a Warning Event on the Node, once per problem).

A big backlog of unschedulable pods must not flood the API server: reports are coalesced per
pod (only the latest reason is sent), a pod is re-reported only when its reason changes or
after ``repeat_after`` seconds, and a token bucket caps the request rate. Workers drop reports
for pods that were bound or deleted meanwhile.

A pod's predicted start (:mod:`fairgpu.kube.forecaster`) is appended to its condition message
(``...; predicted start 2026-01-02T03:04:05Z``); when only the prediction moves, the condition
is rewritten without a new Event.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import CycleResult
from fairgpu.engine.framework import is_attempt_error
from fairgpu.kube.client import CONNECTION_ERRORS, STRATEGIC_MERGE_PATCH, RateLimiter, RestClient
from fairgpu.kube.metrics import Metrics
from fairgpu.model.pod import PodInfo

__all__ = ["PREDICTED_START", "Report", "Reporter", "report_unschedulable"]

log = logging.getLogger("fairgpu.kube.reporter")


@dataclass(slots=True)
class Report:
    """One pod's unschedulable reason, (``kind`` ``Node``) a warning about a node, or
    (``kind`` ``Preempted``) the eviction of a pod to make room for another. ``labels``: the
    Event's own labels."""

    uid: str
    namespace: str
    name: str
    message: str
    reason: str = "Unschedulable"
    kind: str = "Pod"
    event: bool = True
    labels: dict[str, str] | None = None


#: Label of a ``Preempted`` Event: the queue the evicted pod belonged to (``fairgpu queues``
#: counts a queue's preemptions of the last hour from these Events).
LABEL_PREEMPTED_QUEUE = "fairgpu.io/preempted-queue"
#: Reason of the Event on a pod evicted to make room for another (kube-scheduler's).
PREEMPTED_REASON = "Preempted"


#: What precedes the predicted start in a PodScheduled condition message.
PREDICTED_START = "; predicted start "


#: Reason of the Warning Event about a Node field read only for GPU detail that fell back.
NODE_PROBLEM_REASON = "GPUDetailIgnored"


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Reporter:
    """Background sender of Events and PodScheduled conditions.

    Args:
        client: API client.
        component: ``reportingController``/``source.component`` of Events.
        still_pending: called before sending; a report for a pod that is no longer pending is
            dropped.
        qps, burst: request rate cap (each report costs two requests).
        repeat_after: seconds before an unchanged reason is reported again.
        workers: sender threads.
    """

    def __init__(
        self,
        client: RestClient,
        component: str,
        still_pending: Callable[[str], bool],
        *,
        qps: float = 20.0,
        burst: int = 40,
        repeat_after: float = 300.0,
        workers: int = 2,
        instance: str = "",
    ) -> None:
        self.client = client
        self.component = component
        self.instance = instance
        self.still_pending = still_pending
        self.limiter = RateLimiter(qps, burst)
        self.repeat_after = repeat_after
        self._queue: OrderedDict[str, Report] = OrderedDict()
        self._last: dict[str, tuple[str, float]] = {}
        self._reported: dict[str, Report] = {}  # the last report of each pod
        self._predicted: dict[str, str] = {}  # uid -> predicted start (RFC 3339)
        self._cond = threading.Condition()
        self._stop = False
        self._threads = [
            threading.Thread(target=self._work, name=f"reporter-{i}", daemon=True)
            for i in range(workers)
        ]
        self.sent = 0
        self.failed = 0

    def start(self) -> Reporter:
        """Start the workers."""
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the workers (queued reports are dropped)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)

    def report(self, rep: Report, now: float) -> bool:
        """Queue ``rep`` unless the same reason was sent recently; True if queued."""
        last = self._last.get(rep.uid)
        if last is not None and last[0] == rep.message and now - last[1] < self.repeat_after:
            return False
        self._last[rep.uid] = (rep.message, now)
        with self._cond:
            self._reported[rep.uid] = rep
            self._queue[rep.uid] = rep
            self._queue.move_to_end(rep.uid)
            self._cond.notify()
        return True

    def predicted(self, uid: str, label: str | None) -> None:
        """Record the pod's predicted start (None: none); a pod already reported gets its
        condition rewritten with it (no new Event). Thread-safe."""
        with self._cond:
            if label is None:
                if self._predicted.pop(uid, None) is None:
                    return
            elif self._predicted.get(uid) == label:
                return
            else:
                self._predicted[uid] = label
            last = self._reported.get(uid)
            if last is not None and uid not in self._queue:
                self._queue[uid] = Report(
                    last.uid, last.namespace, last.name, last.message, last.reason, event=False
                )
                self._cond.notify()

    def message(self, rep: Report) -> str:
        """The condition message of ``rep``: its reason, then the predicted start if any."""
        label = self._predicted.get(rep.uid)
        return rep.message if label is None else f"{rep.message}{PREDICTED_START}{label}"

    def node_problems(self, problems: Sequence[tuple[str, str, object]]) -> None:
        """Queue a Warning Event on each Node for ``(name, uid, problem)`` (``str(problem)`` is
        the note); the caller passes each problem once."""
        for name, uid, problem in problems:
            key = f"node/{name}/{getattr(problem, 'field', '')}"
            rep = Report(uid, "default", name, str(problem), NODE_PROBLEM_REASON, "Node")
            with self._cond:
                self._queue[key] = rep
                self._queue.move_to_end(key)
                self._cond.notify()

    def preempted(self, victim: PodInfo, queue: str, note: str) -> None:
        """Queue a Normal ``Preempted`` Event on ``victim`` (evicted to make room for another
        pod, ``note`` says which), labelled with its queue (:data:`LABEL_PREEMPTED_QUEUE`)."""
        rep = Report(
            victim.uid,
            victim.namespace,
            victim.name,
            note,
            PREEMPTED_REASON,
            "Preempted",
            labels={LABEL_PREEMPTED_QUEUE: queue},
        )
        with self._cond:
            self._queue[f"preempted/{victim.uid}"] = rep
            self._cond.notify()

    def forget(self, uid: str) -> None:
        """The pod was bound or deleted: drop its history and any queued report."""
        self._last.pop(uid, None)
        with self._cond:
            self._queue.pop(uid, None)
            self._reported.pop(uid, None)
            self._predicted.pop(uid, None)

    @property
    def backlog(self) -> int:
        """Reports waiting to be sent."""
        return len(self._queue)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                _, rep = self._queue.popitem(last=False)
            if rep.kind == "Pod" and not self.still_pending(rep.uid):
                continue
            try:
                self._send(rep)
                self.sent += 1
            except CONNECTION_ERRORS as error:
                self.failed += 1
                log.warning("could not report unschedulable pod", extra={"error": str(error)})
                # Allow a retry on the next cycle.
                self._last.pop(rep.uid, None)
                time.sleep(0.5)

    def _send(self, rep: Report) -> None:
        if rep.kind == "Node":
            self._post_event(rep, "Warning", rep.reason, "Decoding")
            return
        if rep.kind == "Preempted":
            self._post_event(rep, "Normal", rep.reason, "Preempting")
            return
        ns, name = rep.namespace, rep.name
        self.limiter.acquire()
        status = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": rep.reason,
                        "message": self.message(rep),
                        "lastTransitionTime": _now(),
                    }
                ]
            }
        }
        r = self.client.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/{name}/status",
            status,
            content_type=STRATEGIC_MERGE_PATCH,
            limited=False,
        )
        if not r.ok and r.status != 404:
            self.failed += 1
            log.warning(
                "PodScheduled condition not written",
                extra={"pod": f"{ns}/{name}", "status": r.status, "error": r.message},
            )
        if r.status == 404 or not rep.event:
            return
        self._post_event(rep, "Warning", "FailedScheduling", "Scheduling")

    def _post_event(self, rep: Report, etype: str, reason: str, action: str) -> None:
        """An events.k8s.io/v1 Event about ``rep``'s object (a Node's go to ``default``)."""
        ns, name = rep.namespace, rep.name
        self.limiter.acquire()
        kind = "Node" if rep.kind == "Node" else "Pod"
        regarding = {"apiVersion": "v1", "kind": kind, "name": name, "uid": rep.uid}
        if kind == "Pod":
            regarding["namespace"] = ns
        metadata: dict[str, Any] = {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": ns}
        if rep.labels:
            metadata["labels"] = dict(rep.labels)
        note = rep.message if rep.kind == "Preempted" else self.message(rep)
        event = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": metadata,
            "eventTime": _micro_now(),
            "reportingController": self.component,
            "reportingInstance": self.instance or self.component,
            "action": action,
            "reason": reason,
            "note": note[:1024],
            "type": etype,
            "regarding": regarding,
        }
        r = self.client.request(
            "POST", f"/apis/events.k8s.io/v1/namespaces/{ns}/events", event, limited=False
        )
        if not r.ok:
            self.failed += 1
            log.warning(
                "event not written",
                extra={rep.kind.lower(): f"{ns}/{name}", "status": r.status, "error": r.message},
            )


def report_unschedulable(
    reporter: Reporter, m: Metrics, cluster: ClusterState, result: CycleResult, now: float
) -> dict[str, Report]:
    """Report a cycle's pods left pending and count its attempts; returns the reports."""
    failed: dict[str, Report] = {}
    errors = 0
    for u in result.unschedulable:
        pod = u.pod
        if pod.uid in cluster.placements or pod.scheduling_gates:
            continue  # placed (a gang member) or gated: the API server's condition stands
        error = bool(pod.error) or is_attempt_error(u.reason)
        errors += error
        failed[pod.uid] = Report(
            pod.uid,
            pod.namespace,
            pod.name,
            u.reason,
            "SchedulerError" if error else "Unschedulable",
        )
    for rep in failed.values():
        if reporter.report(rep, now):
            m.unschedulable_reports.inc()
    m.attempts.labels("scheduled").inc(len(result.binds))
    m.attempts.labels("unschedulable").inc(len(failed) - errors)
    m.attempts.labels("error").inc(errors)
    return failed
