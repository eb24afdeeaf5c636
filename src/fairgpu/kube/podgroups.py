"""PodGroup objects of the gang schedulers users come from: their ``minMember`` for the engine.

Pods name their group with the coscheduling label ``scheduling.x-k8s.io/pod-group`` or
Volcano's ``scheduling.k8s.io/group-name``; the group's size lives in a PodGroup custom
resource (``scheduling.x-k8s.io/v1alpha1`` or ``scheduling.volcano.sh/v1beta1``,
``spec.minMember``). Each of those APIs the cluster serves (its CRD installed; the live
scheduler looks at start and then periodically) gets a
:class:`~fairgpu.kube.reflector.Reflector`; the loop thread applies what it sees with
:class:`PodGroupBook`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import msgspec

from fairgpu.kube.client import RestClient

log = logging.getLogger("fairgpu.kube.podgroups")

#: (API group, version) of the PodGroup kinds we read.
POD_GROUP_APIS = (("scheduling.x-k8s.io", "v1alpha1"), ("scheduling.volcano.sh", "v1beta1"))


class _Meta(msgspec.Struct):
    name: str = ""
    namespace: str = ""


class _Spec(msgspec.Struct):
    minMember: object = None


class _PodGroup(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec = msgspec.field(default_factory=_Spec)


class _Resource(msgspec.Struct):
    name: str


class _ResourceList(msgspec.Struct):
    resources: list[_Resource] = []


_decoder = msgspec.json.Decoder(_PodGroup)
_discovery = msgspec.json.Decoder(_ResourceList)


@dataclass(frozen=True, slots=True)
class PodGroupObject:
    """One PodGroup: ``namespace/name`` and its ``minMember``, or ``error`` naming the field
    at fault (then ``min_member`` is 0)."""

    key: str
    min_member: int
    error: str | None = None


def decode_pod_group(raw: bytes) -> PodGroupObject:
    """Decode one PodGroup (either API); a bad ``spec.minMember`` gives ``error``."""
    obj = _decoder.decode(raw)
    key = f"{obj.metadata.namespace}/{obj.metadata.name}"
    value = obj.spec.minMember
    if isinstance(value, bool) or not isinstance(value, int):
        return PodGroupObject(key, 0, f"PodGroup {key}: spec.minMember must be an integer")
    if value < 1:
        return PodGroupObject(key, 0, f"PodGroup {key}: spec.minMember must be >= 1 (got {value})")
    return PodGroupObject(key, value)


def served_pod_group_paths(client: RestClient) -> list[str]:
    """Collection paths of the PodGroup APIs this cluster serves and we may list (the others
    are skipped, with a warning when listing is refused)."""
    paths = []
    for group, version in POD_GROUP_APIS:
        resp = client.request("GET", f"/apis/{group}/{version}", limited=False, raw=True)
        if not resp.ok:
            continue
        try:
            names = {r.name for r in _discovery.decode(resp.body).resources}
        except msgspec.DecodeError:
            continue
        if "podgroups" not in names:
            continue
        path = f"/apis/{group}/{version}/podgroups"
        probe = client.request("GET", path, params={"limit": "1"}, limited=False, raw=True)
        if not probe.ok:
            # Without the right to list them, a watch would only fail forever.
            log.warning(
                "cannot list PodGroups; their pods need the min-member annotation",
                extra={"path": path, "status": probe.status, "error": probe.message},
            )
            continue
        paths.append(path)
    return paths


class PodGroupBook:
    """The PodGroups seen per API, merged by ``namespace/name``.

    ``apply`` takes one reflector event (``SYNC`` replaces that API's set) and returns what
    changed -- key -> the new object, or None when it is gone -- so the caller can tell the
    engine and retry the group's pods.
    """

    def __init__(self) -> None:
        self._by_path: dict[str, dict[str, PodGroupObject]] = {}
        self.merged: dict[str, PodGroupObject] = {}

    def apply(self, path: str, etype: str, payload: object) -> dict[str, PodGroupObject | None]:
        """Apply one event from the reflector of ``path``."""
        groups = self._by_path.setdefault(path, {})
        if etype == "SYNC":
            assert isinstance(payload, list)
            groups.clear()
            groups.update((obj.key, obj) for obj in payload)
        elif etype == "DELETED":
            assert isinstance(payload, PodGroupObject)
            groups.pop(payload.key, None)
        else:
            assert isinstance(payload, PodGroupObject)
            groups[payload.key] = payload
        merged: dict[str, PodGroupObject] = {}
        for table in self._by_path.values():
            merged.update(table)
        changes: dict[str, PodGroupObject | None] = {
            k: v for k, v in merged.items() if self.merged.get(k) != v
        }
        changes.update({k: None for k in self.merged if k not in merged})
        self.merged = merged
        for obj in changes.values():
            if obj is not None and obj.error is not None:
                log.warning("invalid PodGroup", extra={"podgroup": obj.key, "error": obj.error})
        return changes
