"""API calls made on a small thread pool whose outcomes go back to the loop's queue: the
common part of the binder and the evictor."""

from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor

from fairgpu.kube.cache import SchedulerCache
from fairgpu.kube.client import RestClient
from fairgpu.kube.events import LoopEvent
from fairgpu.kube.metrics import Metrics

__all__ = ["LoopCalls"]


class LoopCalls:
    """A thread pool of API calls; each call puts its outcome on the loop's queue, so that the
    loop thread alone applies it to the cache (never concurrently with a cycle).

    Args:
        client: the API client (rate-limited).
        events: the loop's queue, where each call's result goes.
        cache: the loop's cache.
        metrics: the scheduler's counters.
        workers: concurrent calls.
        name: the pool threads' name prefix.
    """

    def __init__(
        self,
        client: RestClient,
        events: queue.Queue[LoopEvent],
        cache: SchedulerCache,
        metrics: Metrics,
        workers: int,
        name: str,
    ) -> None:
        self.client = client
        self.events = events
        self.cache = cache
        self.metrics = metrics
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix=name)

    def shutdown(self, cancel: bool = True) -> None:
        """Wait for the calls in flight; ``cancel`` drops those not started yet."""
        self.pool.shutdown(wait=True, cancel_futures=cancel)
