"""A pod's priority and preemption policy, as the API server's Priority admission sets them.

A pod the API server created already carries both (``spec.priority``,
``spec.preemptionPolicy``). A pod read from a file -- a simulated workload, ``fairgpu
what-if`` -- was admitted by no one, so :class:`PriorityClasses` does what the admission
plugin (``plugin/pkg/admission/priority``) does at creation: a pod naming a PriorityClass
gets its value and preemption policy (``preemptionPolicy: Never`` on a class makes every pod
of it non-preempting); a pod naming none gets the global default class's (the lowest value if
several claim it), else priority 0 and ``PreemptLowerPriority``; a class nobody defined is an
error, as the API server refuses the pod. The two system classes always exist. Unlike the API
server, a file's explicit ``spec.priority`` without a class is kept (a convenience for
hand-written workloads); one that contradicts its class is an error naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fairgpu.api import objects as k8s
from fairgpu.api.errors import InvalidObjectError

PREEMPT_LOWER = "PreemptLowerPriority"


@dataclass(frozen=True, slots=True)
class PriorityClassInfo:
    """What admission reads of a PriorityClass."""

    value: int
    preemption_policy: str = PREEMPT_LOWER  # the API server's default for a class
    global_default: bool = False


SYSTEM_CLASSES = {
    "system-cluster-critical": PriorityClassInfo(2_000_000_000),
    "system-node-critical": PriorityClassInfo(2_000_001_000),
}


class PriorityClasses:
    """A cluster's PriorityClasses by name (the system ones included)."""

    def __init__(self, classes: Iterable[k8s.PriorityClass] = ()) -> None:
        self.by_name: dict[str, PriorityClassInfo] = dict(SYSTEM_CLASSES)
        for pc in classes:
            self.add(pc)

    def add(self, pc: k8s.PriorityClass) -> None:
        """Add (or replace) ``pc``."""
        self.by_name[pc.metadata.name] = PriorityClassInfo(
            pc.value, pc.preemption_policy or PREEMPT_LOWER, pc.global_default
        )

    def copy(self) -> PriorityClasses:
        """An independent copy (classes added to it do not change these)."""
        out = PriorityClasses()
        out.by_name = dict(self.by_name)
        return out

    def values(self) -> dict[str, int]:
        """Each class's value by name."""
        return {name: c.value for name, c in self.by_name.items()}

    def admit(self, spec: k8s.PodSpec, obj: str) -> tuple[int, str]:
        """(priority, preemption policy) for a new pod of ``spec``; raises
        :class:`InvalidObjectError` naming ``obj`` and the field, as the API server refuses
        such a pod."""
        name = spec.priority_class_name
        if name:
            cls = self.by_name.get(name)
            if cls is None:
                raise InvalidObjectError(
                    obj, "spec.priorityClassName", f"no PriorityClass named {name!r}"
                )
        else:
            defaults = [c for c in self.by_name.values() if c.global_default]
            cls = min(defaults, key=lambda c: c.value) if defaults else None
            if cls is None or spec.priority is not None:
                # No class at all: priority 0, or the file's own value.
                return spec.priority or 0, spec.preemption_policy or PREEMPT_LOWER
        if spec.priority is not None and spec.priority != cls.value:
            raise InvalidObjectError(
                obj,
                "spec.priority",
                f"{spec.priority} contradicts the value {cls.value} of its PriorityClass",
            )
        if spec.preemption_policy and spec.preemption_policy != cls.preemption_policy:
            raise InvalidObjectError(
                obj,
                "spec.preemptionPolicy",
                f"{spec.preemption_policy} contradicts {cls.preemption_policy}, the policy "
                "of its PriorityClass",
            )
        return cls.value, cls.preemption_policy
