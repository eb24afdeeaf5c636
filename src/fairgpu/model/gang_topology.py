"""Gang topology: the domain -- rack, network block, node -- a pod group's members must or
should share, named on its pods by annotation.

``fairgpu.io/topology-required: <node label key>``: every member in one domain of that label
(nodes without the label are never used); ``fairgpu.io/topology-preferred: <key>``: in one
domain when one holds the gang, else wherever it fits. The same can be said the Kubernetes way,
with a pod-affinity term that selects the group's own pods (see
:mod:`~fairgpu.engine.actions.gang_domains`); the annotation also works for groups named by
annotation (Volcano's), which no label selector can select, and needs no selector.
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
    """The node label whose domains confine a gang; ``required``: strictly (else preferred)."""

    key: str
    required: bool


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
    ("<field>: <problem>") for a value that is not a label key or when both are set."""
    required = annotations.get(ANN_TOPOLOGY_REQUIRED)
    preferred = annotations.get(ANN_TOPOLOGY_PREFERRED)
    if required is not None and preferred is not None:
        raise ValueError(
            f"metadata.annotations[{ANN_TOPOLOGY_PREFERRED}]: set it or "
            f"{ANN_TOPOLOGY_REQUIRED}, not both"
        )
    for name, value in ((ANN_TOPOLOGY_REQUIRED, required), (ANN_TOPOLOGY_PREFERRED, preferred)):
        if value is None:
            continue
        problem = label_key_problem(value)
        if problem:
            raise ValueError(f"metadata.annotations[{name}]: {problem}")
        return GangTopology(value, name == ANN_TOPOLOGY_REQUIRED)
    return None
