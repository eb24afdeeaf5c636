"""Which queue, user and pod group a pod belongs to.

Queue: the ``fairgpu.io/queue`` label (configurable) if set, else the queue its namespace is
mapped to, else ``defaultQueue``, else (``namespaceQueues``) a queue named after the namespace.
User: the configurable user label (default ``fairgpu.io/user``), else the namespace.
Pod group: ``fairgpu.io/pod-group`` (with a ``fairgpu.io/min-member`` annotation), the
scheduler-plugins coscheduling label ``scheduling.x-k8s.io/pod-group`` or Volcano's
``scheduling.k8s.io/group-name``; minMember comes from the pod's annotation or from the
PodGroup object registered with :meth:`TenantResolver.set_pod_group`. Like a PodGroup's
``spec.minMember`` (scheduler-plugins coscheduling, Volcano), the annotation must be an
integer >= 1: a pod of a group whose annotation is anything else is no member of any group
and its tenant carries an error naming the pod and the annotation, so it is reported
unschedulable (unresolvable) rather than silently run alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.config import TenancyConfig

LABEL_POD_GROUP = "fairgpu.io/pod-group"
LABEL_COSCHEDULING = "scheduling.x-k8s.io/pod-group"
LABEL_VOLCANO = "scheduling.k8s.io/group-name"
GROUP_KEYS = (LABEL_POD_GROUP, LABEL_COSCHEDULING, LABEL_VOLCANO)


def group_label(pod: PodInfo) -> tuple[str, str] | None:
    """(label, group name) of the first pod group label or annotation (:data:`GROUP_KEYS`)
    ``pod`` sets; None when it names no pod group."""
    for label in GROUP_KEYS:
        name = pod.labels.get(label) or pod.annotations.get(label)
        if name:
            return label, name
    return None


@dataclass(frozen=True, slots=True)
class Tenant:
    """Where a pod belongs: leaf ``queue``, its ``parent`` department ('' if none), ``user``.

    ``error`` is set when the pod cannot be placed in any queue (unknown queue, unmapped
    namespace); such a pod is reported unschedulable with that reason.
    """

    queue: str
    user: str
    parent: str = ""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class PodGroupRef:
    """A pod's gang: ``key`` is ``namespace/name``; ``min_member`` None while unknown."""

    key: str
    min_member: int | None
    label: str


class TenantResolver:
    """Resolves pods to tenants and pod groups, caching by pod uid."""

    def __init__(self, config: TenancyConfig) -> None:
        self.config = config
        self._ns_queue: dict[str, str] = {}
        self._parent: dict[str, str] = {}
        parents = {q.parent for q in config.queues if q.parent}
        self._parents = parents
        self._leaves = {q.name for q in config.queues if q.name not in parents}
        # A queue that lists namespaces admits pods of those only, labelled or not.
        self._admits = {q.name: frozenset(q.namespaces) for q in config.queues if q.namespaces}
        for q in config.queues:
            for ns in q.namespaces:
                self._ns_queue[ns] = q.name
            if q.parent:
                self._parent[q.name] = q.parent
        self._cache: dict[str, Tenant] = {}
        self._group_cache: dict[str, PodGroupRef | None] = {}
        self.pod_groups: dict[str, int] = {}
        # PodGroup objects whose minMember is invalid: namespace/name -> what is wrong.
        self.pod_group_errors: dict[str, str] = {}

    # ---- queues -----------------------------------------------------------------------
    def resolve(self, pod: PodInfo) -> Tenant:
        """The pod's tenant (cached by uid; the queue label is read once)."""
        key = pod.uid or pod.key
        tenant = self._cache.get(key)
        if tenant is None:
            tenant = self._resolve(pod)
            if len(self._cache) > 1_000_000:
                self._cache.clear()
            self._cache[key] = tenant
        return tenant

    def forget(self, uid: str) -> None:
        """Drop a pod from the caches (it was deleted)."""
        self._cache.pop(uid, None)
        self._group_cache.pop(uid, None)

    def _resolve(self, pod: PodInfo) -> Tenant:
        tenant = self._resolve_queue(pod)
        if tenant.error is None and group_label(pod) is not None:
            error = self._min_member_annotation(pod)[1]
            if error is not None:
                return replace(tenant, error=error)
        return tenant

    def _resolve_queue(self, pod: PodInfo) -> Tenant:
        cfg = self.config
        user = pod.labels.get(cfg.user_label) or pod.namespace
        label = pod.labels.get(cfg.queue_label)
        if label:
            if label in self._parents:
                return Tenant(
                    label,
                    user,
                    error=f"queue {label!r} (label {cfg.queue_label}) is a parent queue; "
                    "pods must name a leaf queue",
                )
            if label in self._leaves or not cfg.queues:
                admits = self._admits.get(label)
                if admits and pod.namespace not in admits:
                    # A queue that lists its namespaces is theirs: a label naming it from
                    # elsewhere would spend another team's share.
                    return Tenant(
                        label,
                        user,
                        error=f"queue {label!r} (label {cfg.queue_label}) admits pods of "
                        f"namespaces {', '.join(sorted(admits))} only, not {pod.namespace!r}",
                    )
                return Tenant(label, user, self._parent.get(label, ""))
            if cfg.namespace_queues and label == pod.namespace:
                return Tenant(label, user)
            known = ", ".join(sorted(self._leaves)) or "none"
            return Tenant(
                label,
                user,
                error=f"queue {label!r} (label {cfg.queue_label}) does not exist; "
                f"known queues: {known}",
            )
        queue = self._ns_queue.get(pod.namespace)
        if queue is None and cfg.default_queue:
            queue = cfg.default_queue
        if queue is None:
            if pod.namespace in self._parents:
                return Tenant(
                    pod.namespace,
                    user,
                    error=f"namespace {pod.namespace!r} is not mapped to a queue and its "
                    "name is a parent queue",
                )
            if cfg.namespace_queues or pod.namespace in self._leaves:
                queue = pod.namespace
            else:
                return Tenant(
                    pod.namespace,
                    user,
                    error=f"namespace {pod.namespace!r} is not mapped to any queue "
                    "and no defaultQueue is configured",
                )
        return Tenant(queue, user, self._parent.get(queue, ""))

    def parent_of(self, queue: str) -> str:
        """The department of ``queue`` ('' if none)."""
        return self._parent.get(queue, "")

    # ---- pod groups -----------------------------------------------------------------------
    def set_pod_group(self, namespace: str, name: str, min_member: int) -> None:
        """Register a PodGroup object's ``minMember`` (coscheduling or Volcano PodGroup)."""
        if min_member < 1:
            raise ValueError(f"PodGroup {namespace}/{name}: minMember must be >= 1")
        self.pod_groups[f"{namespace}/{name}"] = min_member
        self.pod_group_errors.pop(f"{namespace}/{name}", None)
        self._group_cache.clear()

    def remove_pod_group(self, namespace: str, name: str) -> None:
        """Forget a PodGroup object (deleted, or replaced by an invalid one)."""
        key = f"{namespace}/{name}"
        self.pod_groups.pop(key, None)
        self.pod_group_errors.pop(key, None)
        self._group_cache.clear()

    def set_pod_group_error(self, namespace: str, name: str, error: str) -> None:
        """A PodGroup object exists but is invalid: its pods are unschedulable with ``error``."""
        self.remove_pod_group(namespace, name)
        self.pod_group_errors[f"{namespace}/{name}"] = error

    def pod_group(self, pod: PodInfo) -> PodGroupRef | None:
        """The pod's gang, or None for a pod scheduled alone."""
        key = pod.uid or pod.key
        if key in self._group_cache:
            return self._group_cache[key]
        ref = self._pod_group(pod)
        self._group_cache[key] = ref
        return ref

    def _min_member_annotation(self, pod: PodInfo) -> tuple[int | None, str | None]:
        """(minMember, None) from the pod's annotation, (None, None) if it has none, or
        (None, what is wrong) naming the pod and the annotation."""
        name = self.config.gang.min_member_annotation
        text = pod.annotations.get(name)
        if text is None:
            return None, None
        where = f"Pod {pod.key}: annotation {name}"
        try:
            value = int(text.strip(), 10)
        except ValueError:
            return None, f"{where}: {text!r} is not an integer (the pod group's minMember)"
        if value < 1:
            return None, f"{where}: must be >= 1, as a PodGroup's minMember (got {value})"
        return value, None

    def _pod_group(self, pod: PodInfo) -> PodGroupRef | None:
        found = group_label(pod)
        if found is None:
            return None
        label, name = found
        key = f"{pod.namespace}/{name}"
        min_member, error = self._min_member_annotation(pod)
        if error is not None:
            return None  # not a member: its tenant carries the error (see _resolve)
        if min_member is None:
            min_member = self.pod_groups.get(key)
        return PodGroupRef(key, min_member, label)
