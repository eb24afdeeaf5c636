"""Gang topology: the domains -- block, rack, node -- a pod group's members must or should
share, named on its pods by annotation.

``fairgpu.io/topology-required: <node label key>``: every member in one domain of that label
(nodes without the label are never used); ``fairgpu.io/topology-preferred: <key>``: in one
domain of that label when one holds the gang -- inside the required domain when both are set
(a rack inside a block), else wherever it fits. The same can be said the Kubernetes way, with
pod-affinity terms that select the group's own pods (see
:mod:`~fairgpu.engine.actions.gang_domains`); the annotations also work for groups named by
annotation (Volcano's), which no label selector can select, and need no selector.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

ANN_TOPOLOGY_REQUIRED = "fairgpu.io/topology-required"
ANN_TOPOLOGY_PREFERRED = "fairgpu.io/topology-preferred"

# A label key: an optional DNS-subdomain prefix and "/", then a name of at most 63
# characters, alphanumeric at both ends with '-', '_' and '.' inside.
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


@dataclass(frozen=True, slots=True)
class GangTopology:
    """The node labels whose domains confine a gang: all its members in one domain of
    ``required``, and in one domain of ``preferred`` when one holds them (None: no such
    label; not both)."""

    required: str | None = None
    preferred: str | None = None


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key, or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and _PREFIX.fullmatch(prefix)):
        return f"{key!r} is not a label key: its prefix must be a DNS subdomain"
    if not (0 < len(name) <= 63 and _NAME.fullmatch(name)):
        return (
            f"{key!r} is not a label key: its name must be 1-63 characters, alphanumeric at "
            "both ends, with '-', '_' or '.' inside"
        )
    return None


def gang_topology(annotations: Mapping[str, str]) -> GangTopology | None:
    """The topology a pod's annotations ask for its group, or None. Raises ValueError
    ("<field>: <problem>") for a value that is not a label key, or a preferred label that
    is the required one."""
    keys: dict[str, str] = {}
    for name in (ANN_TOPOLOGY_REQUIRED, ANN_TOPOLOGY_PREFERRED):
        value = annotations.get(name)
        if value is None:
            continue
        problem = label_key_problem(value)
        if problem:
            raise ValueError(f"metadata.annotations[{name}]: {problem}")
        keys[name] = value
    if not keys:
        return None
    required, preferred = keys.get(ANN_TOPOLOGY_REQUIRED), keys.get(ANN_TOPOLOGY_PREFERRED)
    if required == preferred:
        raise ValueError(
            f"metadata.annotations[{ANN_TOPOLOGY_PREFERRED}]: names the label "
            f"{ANN_TOPOLOGY_REQUIRED} already requires; name a finer one or leave it out"
        )
    return GangTopology(required, preferred)
