"""Predicted start times in the live cluster, computed beside the scheduler, never in its way.

Every ``forecast_seconds`` the leader asks a *separate process* (so the forecast's CPU time
never holds the scheduling loop's GIL; it also runs at a lower CPU priority) for a forecast.
That process reads the cluster as ``fairgpu explain`` does (:mod:`fairgpu.kube.snapshot`),
runs the engine forward with :func:`fairgpu.sim.forecast.forecast` within ``forecast_budget``
wall seconds, writes each pending pod's predicted start to its annotation
``fairgpu.io/predicted-start`` (RFC 3339, rate-limited, only when it moved), and sends the
predictions back. No round starts while the scheduler is busy (see :meth:`Forecaster._due`).
The scheduler's side (:class:`Forecaster`)

* puts the predicted start in the pod's ``PodScheduled`` condition message (via the
  :class:`~fairgpu.kube.reporter.Reporter`);
* learns run times per queue from the pods it sees end (for pods that declare none), and
  ships the new samples with each request;
* observes ``fairgpu_prediction_error_ratio`` = ``|predicted - actual| / actual wait`` when a
  predicted pod starts (pods that waited at least ``min_wait`` seconds).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import pickle
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.engine.session import EngineState
from fairgpu.kube.cache import SchedulerCache
from fairgpu.kube.client import (
    MERGE_PATCH,
    Connection,
    RateLimiter,
    RestClient,
    load_connection,
)
from fairgpu.kube.config import RunConfig
from fairgpu.kube.decode import PodRecord, parse_time, time_label
from fairgpu.kube.metrics import Metrics
from fairgpu.kube.reporter import Reporter
from fairgpu.kube.snapshot import ReadSettings, Snapshot, read_cluster
from fairgpu.model.pod import DOMAIN, PodInfo
from fairgpu.sim.arrivals import ArrivalHistory, ArrivalModel
from fairgpu.sim.forecast import Forecast, carry_state, forecast, forecast_ensemble
from fairgpu.sim.learner import RuntimeLearner, Runtimes

__all__ = [
    "ANN_PREDICTED_START",
    "Forecaster",
    "forecast_snapshot",
    "parse_time",
    "time_label",
]

log = logging.getLogger("fairgpu.kube.forecaster")

#: The annotation holding a pending pod's predicted start (RFC 3339, UTC).
ANN_PREDICTED_START = f"{DOMAIN}/predicted-start"

#: A prediction is rewritten only when it moved by this many seconds, or by this share of the
#: wait still ahead -- so a steady forecast costs no API writes.
MOVE_SECONDS, MOVE_SHARE = 15.0, 0.05

#: While the scheduler keeps binding, a forecast waits at most this many periods.
STALE_PERIODS = 5

#: Sampled futures of the arrival model a live forecast takes the median of (0: assume
#: nothing arrives after the snapshot).
ARRIVAL_SAMPLES = 0

#: Seconds without a placement before the scheduler counts as idle enough to forecast.
QUIET_SECONDS = 2.0


def forecast_snapshot(
    snapshot: Snapshot,
    learner: RuntimeLearner | None,
    budget_s: float,
    state: EngineState | None = None,
    history: ArrivalHistory | None = None,
    job_ends: bool = False,
    set_drains: bool = False,
) -> tuple[Forecast, list[PodInfo], Engine]:
    """Forecast the pending pods of ``snapshot`` (a fresh copy of its state), the engine
    continuing from the scheduler's ``state`` if given; returns the forecast, the pending
    pods and the engine that decided (its tenancy names their queues). The pods Jobs are
    still to create compete too (:meth:`~fairgpu.kube.snapshot.Snapshot.jobs_ahead`); with
    ``job_ends`` the forecast also predicts when each such Job ends. So do the pods
    StatefulSets are still to create (:meth:`~fairgpu.kube.snapshot.Snapshot.sets_ahead`);
    with ``set_drains``, when the last of them starts.

    With ``history`` (kept by the caller across rounds) the pods of the snapshot are recorded
    there by creation time, and the forecast adds future arrivals learned from it
    (:class:`~fairgpu.sim.arrivals.ArrivalModel`, :data:`ARRIVAL_SAMPLES` sampled futures).
    """
    cache, engine = snapshot.build()
    if state is not None:
        engine.state = carry_state(state, cache.cluster)
    pending = [p for p in cache.schedulable() if not p.scheduling_gates]
    runtimes = Runtimes(lambda p: engine.tenant(p).queue, learner)
    model = None
    if history is not None and ARRIVAL_SAMPLES > 0:
        model = _arrival_model(history, cache, engine, snapshot.now)
    if model is None or not model.jobs:
        result = forecast(
            cache.cluster,
            engine,
            pending,
            snapshot.now,
            runtimes,
            budget_s=budget_s,
            jobs=snapshot.jobs_ahead(cache, runtimes.replayed),
            job_ends=job_ends,
            sets=snapshot.sets_ahead(cache, runtimes.replayed),
            set_drains=set_drains,
        )
        return result, pending, engine
    first = [(cache.cluster, engine)]

    def make() -> tuple[ClusterState, Engine]:
        if first:  # the state built above, then fresh copies
            return first.pop()
        again, fresh = snapshot.build()
        if state is not None:
            fresh.state = carry_state(state, again.cluster)
        return again.cluster, fresh

    result = forecast_ensemble(
        make,
        pending,
        snapshot.now,
        runtimes,
        model,
        samples=ARRIVAL_SAMPLES,
        seed=int(snapshot.now),
        budget_s=budget_s,
    )
    return result, pending, engine


def _arrival_model(
    history: ArrivalHistory, cache: SchedulerCache, engine: Engine, now: float
) -> ArrivalModel:
    """Record the snapshot's pods (running and pending) by creation time; learn from them."""
    for pod in [*cache.cluster.pods.values(), *cache.pending.values()]:
        history.observe(pod, pod.created)
    history.prune(now)

    def group_of(pod: PodInfo) -> str | None:
        ref = engine.pod_group(pod)
        return None if ref is None else ref.key

    return ArrivalModel.learn(history.pairs(), now, group_of, history.window)


# ---- the forecasting process ------------------------------------------------------------------
@dataclass(slots=True)
class WorkerSpec:
    """What the forecasting process needs (picklable: it is started with ``spawn``)."""

    settings: ReadSettings
    budget_s: float
    write_qps: float
    connection: Connection | None = None
    kubeconfig: str | None = None
    context: str | None = None


def _moved(old: float | None, new: float | None, now: float) -> bool:
    if old is None or new is None:
        return old != new
    return abs(new - old) >= max(MOVE_SECONDS, MOVE_SHARE * max(0.0, new - now))


def write_predictions(
    client: RestClient, pods: list[PodInfo], result: Forecast, limiter: RateLimiter
) -> int:
    """Set (or clear) the predicted-start annotation of each pod whose prediction moved;
    returns the writes that succeeded."""
    written = 0
    for pod in pods:
        old = parse_time(pod.annotations.get(ANN_PREDICTED_START))
        new = result.start(pod.uid)
        if not _moved(old, new, result.now):
            continue
        limiter.acquire()
        value = None if new is None else time_label(new)
        patch = {"metadata": {"annotations": {ANN_PREDICTED_START: value}}}
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        r = client.request("PATCH", path, patch, content_type=MERGE_PATCH, limited=False)
        if r.ok:
            written += 1
        elif r.status != 404:
            log.warning(
                "predicted start not written",
                extra={"pod": pod.key, "status": r.status, "error": r.message},
            )
    return written


def _forecast_once(
    client: RestClient,
    spec: WorkerSpec,
    learner: RuntimeLearner,
    limiter: RateLimiter,
    state: EngineState | None,
    history: ArrivalHistory | None = None,
) -> dict[str, Any]:
    snapshot = read_cluster(client, spec.settings)
    result, pending, _ = forecast_snapshot(snapshot, learner, spec.budget_s, state, history)
    written = write_predictions(client, pending, result, limiter)
    return {
        "now": result.now,
        "starts": {uid: t for uid, t in result.starts.items()},
        "pending": len(pending),
        "complete": result.complete,
        "out_of_budget": result.out_of_budget,
        "wall_seconds": result.wall_seconds,
        "written": written,
        "engine_state": state is not None,
    }


def worker_main(spec: WorkerSpec, pipe: Any) -> None:
    """The forecasting process: one forecast per request until told to stop (``None``) or
    the scheduler is gone (the pipe closes). A failed forecast (a bad object, the API server
    away, a bug) is logged and reported, never fatal."""
    with contextlib.suppress(OSError):
        os.nice(10)  # scheduling comes first when both want the CPU
    conn = spec.connection or load_connection(spec.kubeconfig, spec.context)
    client = RestClient(conn, maxsize=4)
    limiter = RateLimiter(spec.write_qps, max(1, int(spec.write_qps * 2)))
    learner = RuntimeLearner()
    history = ArrivalHistory()  # pods seen in the snapshots, by creation time
    while True:
        try:
            request = pipe.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        completed, state = request
        for queue_name, runtime in completed:
            learner.observe(queue_name, runtime)
        try:
            engine_state = None if state is None else pickle.loads(state)
            reply = _forecast_once(client, spec, learner, limiter, engine_state, history)
        except Exception as error:  # a failed forecast must not end the next ones
            log.exception("forecast failed")
            reply = {"error": str(error) or type(error).__name__}
        pipe.send(reply)


# ---- the scheduler's side -----------------------------------------------------------------------
class Forecaster:
    """Runs :func:`worker_main` in a child process and applies its answers (see the module).

    ``tenant_of`` maps a pod to its queue (called on the loop thread only); ``is_leader`` says
    whether to forecast at all (only the leader writes). ``min_wait``: pods that waited less
    are left out of the error histogram (a ratio over a tiny wait says nothing).
    """

    def __init__(
        self,
        config: RunConfig,
        metrics: Metrics,
        reporter: Reporter,
        tenant_of: Callable[[PodInfo], str],
        is_leader: Callable[[], bool],
        busy: Callable[[], bool] = lambda: False,
    ) -> None:
        self.period = config.forecast_seconds
        self.metrics = metrics
        self.reporter = reporter
        self.tenant_of = tenant_of
        self.is_leader = is_leader
        self.busy = busy
        self._last_round = float("-inf")
        self._last_start = float("-inf")  # when the scheduler last placed a pod
        self.min_wait = 60.0
        self.predictions: dict[str, float] = {}
        self.last: dict[str, Any] = {}
        self._completed: list[tuple[str, float]] = []
        self._learned: OrderedDict[str, None] = OrderedDict()
        # The engine's state, pickled on the loop thread when a round asks for it.
        self._want_state = threading.Event()
        self._state: queue.Queue[bytes] = queue.Queue(maxsize=1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._spec = self._worker_spec(config)
        self._process: Any = None
        self._pipe: Any = None
        self._thread = threading.Thread(target=self._run, name="forecaster", daemon=True)

    @staticmethod
    def _worker_spec(config: RunConfig) -> WorkerSpec:
        settings = ReadSettings(
            None if config.tenancy is None else Path(config.tenancy),
            config.policy,
            config.ordering,
            config.scheduler_name,
            config.node_pool_label,
            config.seed,
        )
        conn = config.connection
        if conn is not None:  # a token source is a function: the child reloads it instead
            conn = replace(conn, token_source=None)
        return WorkerSpec(
            settings,
            config.forecast_budget,
            config.events_qps,
            conn,
            config.kubeconfig,
            config.context,
        )

    @property
    def enabled(self) -> bool:
        """False when ``forecast_seconds`` <= 0 (no process is started)."""
        return self.period > 0

    def start(self) -> None:
        """Start the forecasting process and the thread that drives it (if enabled)."""
        if not self.enabled:
            return
        ctx = mp.get_context("spawn")  # never fork a threaded process
        self._pipe, child = ctx.Pipe()
        self._process = ctx.Process(
            target=worker_main, args=(self._spec, child), name="fairgpu-forecast", daemon=True
        )
        try:
            self._process.start()
        except (OSError, RuntimeError) as error:  # scheduling goes on without forecasts
            log.error("forecasting process not started", extra={"error": str(error)})
            self._process = None
            return
        finally:
            child.close()
        # The first round after one period: a scheduler that starts (or takes over) has a
        # backlog to work through first.
        self._last_round = time.monotonic()
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and the process (terminated if it does not leave in time)."""
        self._stop.set()
        if self._process is None:
            return
        self._thread.join(timeout)
        with contextlib.suppress(OSError, ValueError):
            self._pipe.send(None)
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout)

    def _due(self) -> bool:
        """A round is due once a period has passed -- but not while the scheduler is busy
        (``busy()``, or a pod placed within ``QUIET_SECONDS``: a backlog that moves needs no
        forecast, and the scheduler needs the CPU), unless the last round is
        ``STALE_PERIODS`` periods old."""
        now = time.monotonic()
        age = now - self._last_round
        if age < self.period or not self.is_leader():
            return False
        quiet = now - self._last_start >= QUIET_SECONDS and not self.busy()
        return quiet or age >= STALE_PERIODS * self.period

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._due():
                self._last_round = time.monotonic()
                try:
                    self._round()
                except (EOFError, OSError) as error:
                    log.warning("forecasting process gone", extra={"error": str(error)})
                    return
            self._stop.wait(min(self.period, 0.5))

    def _round(self) -> None:
        """One request and its answer (waits for the answer, or for stop)."""
        with self._lock:
            completed, self._completed = self._completed, []
        with contextlib.suppress(queue.Empty):
            self._state.get_nowait()  # one delivered after an earlier round gave up
        self._want_state.set()
        try:
            state: bytes | None = self._state.get(timeout=2.0)
        except queue.Empty:  # the loop is busy: forecast from a fresh engine this time
            self._want_state.clear()
            state = None
        self._pipe.send((completed, state))
        while not self._pipe.poll(0.2):
            if self._stop.is_set():
                return
        self._apply(self._pipe.recv())

    def _apply(self, reply: dict[str, Any]) -> None:
        self.last = reply
        if "error" in reply:
            log.warning("forecast failed", extra={"error": reply["error"]})
            return
        starts: dict[str, float] = reply["starts"]
        old, self.predictions = self.predictions, starts
        m = self.metrics
        m.forecast_seconds.set(reply["wall_seconds"])
        m.forecast_pods.set(len(starts))
        for uid, t in starts.items():
            if _moved(old.get(uid), t, reply["now"]):
                self.reporter.predicted(uid, time_label(t))
        for uid in old.keys() - starts.keys():
            self.reporter.predicted(uid, None)

    # ---- called on the loop thread ------------------------------------------------------------
    def offer(self, engine: Engine) -> None:
        """Hand a round the engine's between-cycle state if it asked (cheap otherwise)."""
        if self._want_state.is_set():
            self._want_state.clear()
            with contextlib.suppress(queue.Full):
                self._state.put_nowait(pickle.dumps(engine.state))

    def pod_event(self, etype: str, rec: PodRecord, now: float) -> None:
        """A pod watch event: a bound pod that ended teaches its queue's run time.

        The watch hides finished pods (``status.phase!=Succeeded``), so a pod that succeeds
        or fails arrives as ``DELETED`` in its last matching state (still ``Running``); one
        deleted by someone carries a deletion timestamp. A pod is learned once.
        """
        if not self.enabled or rec.info is None or not rec.node_name or rec.started is None:
            return
        ended = rec.phase in ("Succeeded", "Failed") or (etype == "DELETED" and not rec.deleting)
        if not ended or rec.uid in self._learned:
            return
        self._learned[rec.uid] = None
        if len(self._learned) > 10000:
            self._learned.popitem(last=False)
        with self._lock:
            self._completed.append((self.tenant_of(rec.info), max(0.0, now - rec.started)))

    def started(self, pod: PodInfo, now: float) -> None:
        """``pod`` was placed at ``now``: observe how far its predicted start was off."""
        self._last_start = time.monotonic()
        predicted = self.predictions.get(pod.uid)
        if predicted is None:
            predicted = parse_time(pod.annotations.get(ANN_PREDICTED_START))
        wait = now - pod.created
        if predicted is None or not pod.created or wait < max(self.min_wait, 1e-3):
            return
        self.metrics.prediction_error.observe(abs(predicted - now) / wait)
