"""Pod placement constraints beyond node selection: topology spread, host ports, gates.

Decoded once from a v1 PodSpec into frozen structs the plugins evaluate; validation follows the
API server's, so a malformed constraint is refused naming the field instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fairgpu.api import objects as k8s
from fairgpu.model.selectors import LabelSelector, Requirement, compile_label_selector

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
_PROTOCOLS = ("TCP", "UDP", "SCTP")


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One ``topologySpreadConstraints`` entry with ``matchLabelKeys`` already merged into
    ``selector`` (as the API server and kube-scheduler do). A ``None`` selector matches no pod.
    """

    topology_key: str
    max_skew: int
    hard: bool  # whenUnsatisfiable: DoNotSchedule
    selector: LabelSelector | None
    min_domains: int = 1
    honor_affinity: bool = True  # nodeAffinityPolicy (default Honor)
    honor_taints: bool = False  # nodeTaintsPolicy (default Ignore)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a pod with ``labels`` counts for this constraint (namespace aside)."""
        return self.selector is not None and self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class HostPort:
    """A host port a container binds: protocol, host IP (``0.0.0.0`` is every address), port."""

    protocol: str
    host_ip: str
    port: int

    def conflicts(self, other: HostPort) -> bool:
        """kube-scheduler's HostPortInfo.CheckConflict: same protocol and port, and the same
        IP or either side on the wildcard ``0.0.0.0``."""
        if self.port != other.port or self.protocol != other.protocol:
            return False
        return self.host_ip == other.host_ip or "0.0.0.0" in (self.host_ip, other.host_ip)


def merge_label_keys(
    selector: LabelSelector | None,
    labels: Mapping[str, str],
    match_keys: list[str],
    mismatch_keys: list[str] = (),  # type: ignore[assignment]
) -> LabelSelector | None:
    """``selector`` AND ``key In (pod's value)`` per match key (``NotIn`` per mismatch key);
    keys the pod does not carry are skipped, as in Kubernetes. A ``None`` selector stays None."""
    if selector is None:
        return None
    extra = [Requirement(k, "In", (labels[k],)) for k in match_keys if k in labels]
    extra += [Requirement(k, "NotIn", (labels[k],)) for k in mismatch_keys if k in labels]
    if not extra:
        return selector
    return LabelSelector(selector.match_labels, (*selector.expressions, *extra))


def _policy(value: str | None, where: str, default: str) -> bool:
    value = value or default
    if value not in (HONOR, IGNORE):
        raise ValueError(f"{where}: must be Honor or Ignore, got {value!r}")
    return value == HONOR


def compile_spread(
    constraints: list[k8s.TopologySpreadConstraint], labels: Mapping[str, str]
) -> tuple[SpreadConstraint, ...]:
    """Compile a pod's spread constraints; raises ``ValueError`` naming the field."""
    out = []
    for i, c in enumerate(constraints):
        at = f"spec.topologySpreadConstraints[{i}]"
        if not c.topology_key:
            raise ValueError(f"{at}.topologyKey: must be set")
        if c.max_skew < 1:
            raise ValueError(f"{at}.maxSkew: must be greater than zero, got {c.max_skew}")
        if c.when_unsatisfiable not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
            raise ValueError(
                f"{at}.whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway, "
                f"got {c.when_unsatisfiable!r}"
            )
        hard = c.when_unsatisfiable == DO_NOT_SCHEDULE
        if c.min_domains is not None and (c.min_domains < 1 or not hard):
            raise ValueError(
                f"{at}.minDomains: must be greater than zero and only with DoNotSchedule"
            )
        selector = compile_label_selector(c.label_selector, f"{at}.labelSelector")
        out.append(
            SpreadConstraint(
                c.topology_key,
                c.max_skew,
                hard,
                merge_label_keys(selector, labels, c.match_label_keys),
                c.min_domains or 1,
                _policy(c.node_affinity_policy, f"{at}.nodeAffinityPolicy", HONOR),
                _policy(c.node_taints_policy, f"{at}.nodeTaintsPolicy", IGNORE),
            )
        )
    return tuple(out)


def host_ports(spec: k8s.PodSpec) -> tuple[HostPort, ...]:
    """Host ports the pod binds: ``hostPort`` > 0 on app containers and on sidecars (init
    containers with ``restartPolicy: Always``, which run as long as the pod), as kube-scheduler
    counts them; plain init containers end before the app starts and hold none. A
    ``hostNetwork`` pod's ports are host ports (a ``hostPort`` left 0 is its
    ``containerPort``, as the API server defaults it: a pod read from a file gets the same).
    Raises ``ValueError`` naming the field for an unknown protocol or a port out of range."""
    out: list[HostPort] = []
    for section, containers in (
        ("spec.initContainers", spec.init_containers),
        ("spec.containers", spec.containers),
    ):
        for i, container in enumerate(containers):
            if section == "spec.initContainers" and container.restart_policy != "Always":
                continue
            for j, port in enumerate(container.ports):
                host_port = port.host_port or (port.container_port if spec.host_network else 0)
                if host_port <= 0:
                    continue
                at = f"{section}[{i}].ports[{j}]"
                if host_port > 65535:
                    raise ValueError(f"{at}.hostPort: must be in 1..65535")
                protocol = port.protocol or "TCP"
                if protocol not in _PROTOCOLS:
                    raise ValueError(f"{at}.protocol: must be TCP, UDP or SCTP")
                out.append(HostPort(protocol, port.host_ip or "0.0.0.0", host_port))
    return tuple(out)


def gate_names(spec: k8s.PodSpec) -> tuple[str, ...]:
    """Names of the pod's scheduling gates (empty: the pod may be scheduled)."""
    return tuple(g.name for g in spec.scheduling_gates)
