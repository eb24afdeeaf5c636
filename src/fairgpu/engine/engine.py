"""The engine entry point both adapters call: one scheduling cycle over the pending pods.

A cycle orders the pending pods, tries each against the cluster, *assumes* every placement in
the :class:`ClusterState` it was given (so later pods in the same cycle see it) and returns the
decisions. The simulator applies them at simulated time; the live adapter posts the bindings
and releases an assumed pod whose bind fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import Code
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.engine.profile import Profile
from fairgpu.engine.scheduler import Scheduler, ScheduleResult
from fairgpu.model.pod import PodInfo


@dataclass(slots=True)
class Bind:
    """Bind ``pod`` to ``node_name`` using GPU ``devices``."""

    pod: PodInfo
    node_name: str
    devices: tuple[int, ...] = ()


@dataclass(slots=True)
class Evict:
    """Evict ``pod`` (a preemption victim) to make room for ``preemptor``."""

    pod: PodInfo
    preemptor: PodInfo | None = None
    reason: str = ""


@dataclass(slots=True)
class Unschedulable:
    """``pod`` stays pending for ``reason``; ``resolvable`` is False if no change can help."""

    pod: PodInfo
    reason: str
    resolvable: bool = True


@dataclass(slots=True)
class CycleResult:
    """All decisions of one cycle, in the order they were made."""

    binds: list[Bind] = field(default_factory=list)
    evictions: list[Evict] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)


def kube_default_order(pods: Iterable[PodInfo]) -> list[PodInfo]:
    """kube-scheduler's active queue order: priority (high first), then creation time."""
    return sorted(pods, key=lambda p: (-p.priority, p.created))


class Engine:
    """Pure scheduling engine: state and pending pods in, decisions out."""

    def __init__(self, profile: Profile | None = None, seed: int = 0) -> None:
        self.profile = profile or policy(DEFAULT_POLICY)
        self.scheduler = Scheduler(self.profile, seed)

    def try_place(self, pod: PodInfo, cluster: ClusterState, now: float) -> ScheduleResult:
        """One attempt for one pod; on success the placement is assumed in ``cluster``."""
        result = self.scheduler.schedule(pod, cluster)
        if result.ok and result.node is not None:
            cluster.assign(pod, result.node, result.devices, started=now)
        return result

    def cycle(self, cluster: ClusterState, pending: Sequence[PodInfo], now: float) -> CycleResult:
        """Try every pending pod once in queue order.

        Pods whose exact shape already failed in this cycle are not retried: placements only
        consume capacity, so they would fail again (pods with inter-pod affinity excepted).
        """
        out = CycleResult()
        failed: dict[tuple[object, ...], str] = {}
        for pod in kube_default_order(pending):
            shape = _shape(pod)
            if shape is not None and shape in failed:
                out.unschedulable.append(Unschedulable(pod, failed[shape]))
                continue
            result = self.try_place(pod, cluster, now)
            if result.ok:
                out.binds.append(Bind(pod, result.node_name, result.devices))
                continue
            reason = result.reason()
            out.unschedulable.append(Unschedulable(pod, reason, result.code != Code.UNRESOLVABLE))
            if shape is not None:
                failed[shape] = reason
        return out


def _shape(pod: PodInfo) -> tuple[object, ...] | None:
    if pod.has_pod_affinity or pod.error:
        return None
    return (pod.static_key(), tuple(sorted(pod.requests.items())), pod.gpu, pod.namespace)
