"""The tenancy configuration: queues, weights, quotas, preemption, gangs and starvation.

One YAML document, validated strictly (unknown keys and bad values are rejected with the path
of the offending field, e.g. ``queues[1].quota.gpu``). Keys are camelCase as in Kubernetes.
Example::

    mode: dynamic                 # static: a queue gets only its nominal quota
    userLabel: fairgpu.io/user    # pod label naming the user inside a queue
    history: {halfLifeSeconds: 3600, weight: 0.5}   # 0 = instantaneous shares only
    preemption: {enabled: true, minRuntimeSeconds: 0, reclaimMinRuntimeSeconds: 60,
                 reclaimToleranceBand: 0.05, reclaimCooldownSeconds: 600,
                 poolPrecedence: [{nodes: {example.com/node.usage: hybrid},
                                   preemptor: inference, victims: training}]}
    gang: {timeoutSeconds: 600}
    starvation: {reserveAfterSeconds: 300, minGpus: 8, minGangPods: 16,
                 drainGraceSeconds: 120, reservedMinRuntimeSeconds: 1800,
                 reservedMaxRuntimeSeconds: 14400}
    namespaceQuotas:
      sandbox: {requests.nvidia.com/gpu: 2}
    queues:
      - {name: research, weight: 2, limit: {gpu: 24}}   # a department (parent): its
                                                        # queues together hold <= 24 GPUs
      - name: vision
        parent: research
        weight: 1
        namespaces: [vision, vision-dev]
        cohort: pool-a
        quota: {gpu: 8, cpu: "64", memory: 256Gi}
        borrowingLimit: {gpu: 4}
        lendingLimit: {gpu: 2}
        limit: {gpu: 10}            # a hard cap, whatever quota and borrowing allow
        preemption: {withinQueue: LowerPriority, reclaim: true, preemptible: true}
        users: {alice: 2}

With no configuration at all (:func:`default_config`) every namespace is a queue of weight 1
and every queue may borrow idle capacity (dynamic mode).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from fairgpu.api.errors import InvalidObjectError
from fairgpu.api.quantity import QuantityError, to_int, to_milli
from fairgpu.model.pod import LABEL_QUEUE, LABEL_USER

CONFIG_OBJECT = "tenancy config"

# Resource dimensions of every quota and share vector, in scheduler units.
DIM_GPU, DIM_GPU_MEMORY, DIM_CPU, DIM_MEMORY = range(4)
DIMENSIONS = ("gpu", "gpuMemory", "cpu", "memory")
DIM_UNITS = ("milli-GPU", "MiB", "milli-CPU", "bytes")

NAMESPACE_QUOTA_KEYS = {
    "requests.nvidia.com/gpu": "gpu devices",
    "requests.cpu": DIM_CPU,
    "requests.memory": DIM_MEMORY,
    "pods": "pods",
}


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class Resources(_Model):
    """An amount per resource; absent means "no limit" (``None``).

    ``gpu`` is in GPUs (fractions allowed), ``gpuCores`` in percent of one GPU (the two are the
    same dimension: set one of them), ``gpuMemory`` in MiB (a number) or a quantity ("80Gi"),
    ``cpu`` and ``memory`` are Kubernetes quantities.
    """

    gpu: float | None = Field(None, ge=0)
    gpu_cores: int | None = Field(None, ge=0)
    gpu_memory: int | str | None = None
    cpu: int | float | str | None = None
    memory: int | str | None = None

    @field_validator("gpu_memory", "cpu", "memory")
    @classmethod
    def _quantity(cls, value: Any) -> Any:
        if value is None:
            return value
        try:
            amount = to_milli(value)
        except QuantityError as error:
            raise ValueError(f"not a quantity: {error}") from None
        if amount < 0:
            raise ValueError("must not be negative")
        return value

    @field_validator("gpu")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    def vector(self) -> tuple[float, float, float, float]:
        """Amounts as a (gpu milli, GPU MiB, milli-CPU, bytes) tuple; ``inf`` where unset."""
        inf = math.inf
        gpu = inf
        if self.gpu is not None:
            gpu = self.gpu * 1000
        elif self.gpu_cores is not None:
            gpu = self.gpu_cores * 10.0
        gmem = inf
        if self.gpu_memory is not None:
            gmem = (
                float(self.gpu_memory)
                if isinstance(self.gpu_memory, int)
                else to_int(self.gpu_memory) / 2**20
            )
        cpu = inf if self.cpu is None else float(to_milli(self.cpu))
        mem = inf if self.memory is None else float(to_int(self.memory))
        return (gpu, gmem, cpu, mem)

    def is_empty(self) -> bool:
        """True when no resource is limited."""
        return all(math.isinf(v) for v in self.vector())


class QueuePreemption(_Model):
    """Preemption rules of one queue.

    ``withinQueue``: ``LowerPriority`` lets a pod preempt lower-priority pods of its own queue
    -- for node room, and for room in the queue's quota when the quota is used up --,
    ``Never`` forbids it. ``reclaim``: may this queue take back capacity from queues above their
    fair share or borrowing beyond their quota. ``preemptible``: may this queue's pods be
    preempted at all (False = non-preemptive queue).
    """

    within_queue: Literal["Never", "LowerPriority"] = "LowerPriority"
    reclaim: bool = True
    preemptible: bool = True


class QueueConfig(_Model):
    """One queue (a team) or, when other queues name it as ``parent``, a department.

    ``namespaces``: the namespaces whose pods go to this queue; a queue that lists any
    admits pods of those only, also when a pod names it with the queue label (the label
    cannot spend another team's share). A queue listing none takes labelled pods from
    anywhere."""

    name: str = Field(min_length=1, max_length=253)
    weight: float = Field(1.0, gt=0, le=1e6)
    parent: str | None = None
    namespaces: list[str] = Field(default_factory=list)
    cohort: str | None = None
    quota: Resources = Field(default_factory=Resources)
    borrowing_limit: Resources = Field(default_factory=Resources)
    lending_limit: Resources = Field(default_factory=Resources)
    limit: Resources = Field(default_factory=Resources)
    preemption: QueuePreemption = Field(default_factory=QueuePreemption)
    users: dict[str, float] = Field(default_factory=dict)

    @field_validator("users")
    @classmethod
    def _user_weights(cls, value: dict[str, float]) -> dict[str, float]:
        for user, weight in value.items():
            if not (weight > 0 and math.isfinite(weight)):
                raise ValueError(f"weight of user {user!r} must be a positive number")
        return value


class History(_Model):
    """Decayed usage history blended into the ordering share.

    ``halfLifeSeconds`` 0 turns history off (instantaneous shares). ``weight`` is the share of
    the blend given to history: ``(1 - weight) * now + weight * history``.
    """

    half_life_seconds: float = Field(0.0, ge=0, le=1e9)
    weight: float = Field(0.5, ge=0, le=1)


class PoolPrecedence(_Model):
    """On the nodes whose labels include ``nodes``, pending pods whose workload type
    (``fairgpu.io/workload-type``) is ``preemptor`` may evict running pods whose workload type
    is ``victims``, of any queue, whatever their priority and the queues' shares, and pods of
    ``victims``'s type never evict pods of ``preemptor``'s type there (see
    :mod:`fairgpu.engine.actions.pool_precedence`). For example, inference over training on
    the hybrid pool: ``{nodes: {example.com/node.usage: hybrid}, preemptor: inference,
    victims: training}``."""

    nodes: dict[str, str] = Field(min_length=1)
    preemptor: str = Field(min_length=1)
    victims: str = Field(min_length=1)

    @field_validator("victims")
    @classmethod
    def _not_itself(cls, v: str, info: Any) -> str:
        if v == info.data.get("preemptor"):
            raise ValueError("must differ from preemptor")
        return v


class Preemption(_Model):
    """Cluster-wide preemption switches, and what keeps reclaim from churning.

    ``enabled`` False is the non-preemptive mode.

    ``minRuntimeSeconds`` (default 0): a pod that started less than this long ago is never a
    victim of any preemption. 0 keeps priority preemption inside a queue as kube-scheduler
    does it (a higher-priority pod never waits for a lower-priority one to age).

    ``reclaimMinRuntimeSeconds`` (default 60): a pod is a victim of reclaim *between* queues
    only after it has run this long (a minimum guaranteed runtime, as KAI's). One minute: on
    the built-in demo 99 preemption victims had run less than that -- evicted before their
    containers had done much more than start --, while a queue below its share waits at most
    a minute for a victim, about what starting a container costs it anyway. 300 s was tried:
    it barely changed the demo's churn but held a tenant arriving 100 s after another one
    filled the cluster below its share for minutes (fairness benchmark, late arrival: Jain
    0.954). Raise it where runs are long and start-up is costly.

    ``reclaimToleranceBand`` (default 0.05): the fair-share reclaim takes only from a queue
    holding more than ``(1 + band) x`` its fair share, and only while the preemptor stays at or
    below its own share after the move; a queue within 5% of its share is left alone, except
    by a queue holding at most 5% of its own (a starved queue is never kept out by the band).
    (The nominal-quota guarantee ignores the band.) Measured again on
    ``benchmarks/fairness`` (realistic suite; demo seeds 0/1/2 lowest share ratio
    .704/.721/.740, pool mix .839, flood mix .871): band 0 gave .772/.477/.687, pool mix
    .738 (useful 50.5 -> 47.4%); 0.1 gave .774/.630/.749, flood .902, pool mix as before; a
    reclaim minimum run of 30 s instead of 60 gave .770/.674/.717, flood .911, pool mix
    .582. No setting raised every scenario's lowest ratio; the defaults stay. Again once a
    gang was judged as one preemptor (demo .768/.721/.755 with 0.05): band 0 gave
    .772/.477/.687, pool mix .738; 0.1 .692/.610/.729.

    ``reclaimCooldownSeconds`` (default 600): the GPUs (node, device) a reclaim freed or took
    do not change tenant through another reclaim within this long, so they never flip back
    and forth (see :mod:`fairgpu.engine.actions.reclaim`); on a GPU shared by fractions,
    only the pods placed on it since the change are held back -- a fraction that shared it
    before kept its part.

    ``poolPrecedence`` (default none): rules giving one kind of work precedence over another
    on some nodes (:class:`PoolPrecedence`), e.g. inference over training on the hybrid
    pool; its victims obey the time rules of reclaim (``reclaimMinRuntimeSeconds``, the
    cooldown, a reservation's protection) but no share rule.
    """

    enabled: bool = True
    min_runtime_seconds: float = Field(0.0, ge=0, le=1e9)
    reclaim_min_runtime_seconds: float = Field(60.0, ge=0, le=1e9)
    reclaim_tolerance_band: float = Field(0.05, ge=0, le=10)
    reclaim_cooldown_seconds: float = Field(600.0, ge=0, le=1e9)
    pool_precedence: tuple[PoolPrecedence, ...] = ()


class Gang(_Model):
    """Pod groups: ``timeoutSeconds`` after which a group that cannot reach ``minMember``
    releases what it holds (running members and reserved capacity)."""

    timeout_seconds: float = Field(600.0, gt=0, le=1e9)
    min_member_annotation: str = "fairgpu.io/min-member"


class Starvation(_Model):
    """Large jobs: after ``reserveAfterSeconds`` waiting at the head of fair order, a job asking
    at least ``minGpus`` whole GPUs, or a gang of at least ``minGangPods`` pods, gets capacity
    reserved; only work that cannot delay it is backfilled. ``enabled`` False turns it off.

    A reservation is made only while the job's queue holds less than its fair share (a queue
    at or above its share is not starving: what it would start there, reclaim would take
    back), and dropped once the queue no longer does while another queue is below its own. It
    holds until its nodes are expected to drain -- the declared run times
    (``fairgpu.io/duration-seconds``) of the pods on them, else the run time observed for
    their queue -- plus ``drainGraceSeconds`` (default 120: a
    pod's end is not to the second, and the held job needs one cycle to start); never less
    than ``gang.timeoutSeconds``, which is also how long it holds when no run time is known.

    ``reservedMinRuntimeSeconds`` (default 1800) and ``reservedMaxRuntimeSeconds`` (default
    14400): a job started from its reservation is no preemption victim -- neither of reclaim
    nor of priority inside its queue -- before it has run its declared run time, at least
    the minimum and at most the maximum (the minimum when it declares none); so is a pod group
    starting again after a preemption tore it down. Evicting it
    sooner throws away its run and the GPU time its nodes stood idle while draining for it.
    On the built-in demo (seed 0), half an hour of protection alone only postponed the loss:
    the reserved jobs were reclaimed at 1 800 s on the dot, and lost GPU time grew from 13%
    to 19% of capacity; protected to their declared end it fell to 5%. The maximum (4 h)
    bounds how long a queue that started a very long job above its share keeps it. Gang
    timeouts still apply. Shorter protection was measured again on ``benchmarks/fairness``
    (realistic suite; demo seeds 0/1/2 lowest share ratio .704/.721/.740, useful 68.84/
    76.10/76.14%, lost 1.31/2.17/1.46%): a maximum of 2 h changed nothing; 1 h took seed 1 to
    .712, 72.40% useful, 3.71% lost; half the declared run time (at least the minimum) gave
    .632/.646/.701, lost 5.3-7.1%. The other mixes did not move.

    ``evictBackfillOverruns`` (default true): a pod that started on a held node because it
    declared it would end before the held job starts, and still runs ``drainGraceSeconds``
    after its declared run time, is evicted while the reservation holds
    (:mod:`fairgpu.engine.actions.backfill_contract`): otherwise declaring a short run time
    would buy held GPUs.

    ``reserveAfterSeconds`` measured on ``benchmarks/fairness`` (demo seeds 0-7, the mixes on
    seeds 0 and 1): 300 s gives mean useful allocation 72.07%, lost 1.53%, mean lowest share
    ratio 0.725 over the demo seeds; 120 s 71.79% / 1.29% / 0.712; 60 s 72.30% / 1.43% /
    0.743, but the flood mix's highest ratio then goes above 1.1 (1.13 and 1.11) and the
    pool mix's lowest falls 0.839 -> 0.816; 0 s: demo seed 2 useful 76.1% -> 68.3%. The
    default stays. Measured again once a gang was judged as one preemptor (realistic suite;
    300 s: demo seeds 0/1/2 lowest ratio .768/.721/.755): 60 s gave .742/.710/.705, the flood
    mix's highest 1.13, the pool mix's lowest .816; 120 s .760/.590/.651.
    """

    enabled: bool = True
    reserve_after_seconds: float = Field(300.0, ge=0, le=1e9)
    min_gpus: int = Field(8, ge=1)
    min_gang_pods: int = Field(16, ge=1)
    drain_grace_seconds: float = Field(120.0, ge=0, le=1e9)
    reserved_min_runtime_seconds: float = Field(1800.0, ge=0, le=1e9)
    reserved_max_runtime_seconds: float = Field(14400.0, ge=0, le=1e9)
    evict_backfill_overruns: bool = True


class TenancyConfig(_Model):
    """The whole tenancy configuration (see the module docstring for an example)."""

    mode: Literal["dynamic", "static"] = "dynamic"
    queue_label: str = LABEL_QUEUE
    user_label: str = LABEL_USER
    default_queue: str | None = None
    namespace_queues: bool = True
    history: History = Field(default_factory=History)
    preemption: Preemption = Field(default_factory=Preemption)
    gang: Gang = Field(default_factory=Gang)
    starvation: Starvation = Field(default_factory=Starvation)
    namespace_quotas: dict[str, dict[str, int | float | str]] = Field(default_factory=dict)
    queues: list[QueueConfig] = Field(default_factory=list)

    def queue(self, name: str) -> QueueConfig | None:
        """The configured queue called ``name`` (None if not configured)."""
        for q in self.queues:
            if q.name == name:
                return q
        return None


def default_config() -> TenancyConfig:
    """No configuration: every namespace is a queue of weight 1, dynamic mode."""
    return TenancyConfig()


# Pydantic adds the union member tried to an error's location; they are not config keys.
_UNION_TAGS = frozenset({"int", "float", "str", "bool", "none", "list", "dict"})


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, str) and (part in _UNION_TAGS or "[" in part):
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "<root>"


def _check(cfg: TenancyConfig) -> None:
    """Cross-field rules pydantic cannot express per field; raise naming the field."""
    names = _queue_names(cfg)
    parents = {q.parent for q in cfg.queues if q.parent}
    owner: dict[str, str] = {}  # namespace -> the queue it is mapped to
    for i, q in enumerate(cfg.queues):
        _check_gpu_fields(i, q)
        _check_parent(cfg, i, q, names)
        _check_namespaces(i, q, parents, owner)
        _check_department(i, q, parents)
    _check_default_queue(cfg, names, parents)
    _check_namespace_quotas(cfg)


def _queue_names(cfg: TenancyConfig) -> dict[str, int]:
    """Each queue's index by name; a duplicate name is an error."""
    names: dict[str, int] = {}
    for i, q in enumerate(cfg.queues):
        if q.name in names:
            raise InvalidObjectError(
                CONFIG_OBJECT, f"queues[{i}].name", f"duplicate queue {q.name!r}"
            )
        names[q.name] = i
    return names


def _check_gpu_fields(i: int, q: QueueConfig) -> None:
    for field in ("quota", "borrowing_limit", "lending_limit", "limit"):
        res: Resources = getattr(q, field)
        if res.gpu is not None and res.gpu_cores is not None:
            raise InvalidObjectError(
                CONFIG_OBJECT,
                f"queues[{i}].{to_camel(field)}.gpuCores",
                "set either gpu or gpuCores, not both (same resource)",
            )


def _check_parent(cfg: TenancyConfig, i: int, q: QueueConfig, names: dict[str, int]) -> None:
    if q.parent is None:
        return
    if q.parent not in names:
        raise InvalidObjectError(
            CONFIG_OBJECT, f"queues[{i}].parent", f"unknown queue {q.parent!r}"
        )
    if q.parent == q.name:
        raise InvalidObjectError(CONFIG_OBJECT, f"queues[{i}].parent", "is itself")
    grand = cfg.queues[names[q.parent]].parent
    if grand is not None:
        raise InvalidObjectError(
            CONFIG_OBJECT,
            f"queues[{i}].parent",
            f"{q.parent!r} has a parent itself; only two levels are supported",
        )


def _check_namespaces(i: int, q: QueueConfig, parents: set[str], owner: dict[str, str]) -> None:
    """Only leaf queues hold namespaces, and a namespace maps to one queue (``owner``)."""
    if q.name in parents and q.namespaces:
        raise InvalidObjectError(
            CONFIG_OBJECT,
            f"queues[{i}].namespaces",
            f"{q.name!r} is a parent queue; only leaf queues hold pods",
        )
    for j, ns in enumerate(q.namespaces):
        if ns in owner:
            raise InvalidObjectError(
                CONFIG_OBJECT,
                f"queues[{i}].namespaces[{j}]",
                f"namespace {ns!r} is already mapped to queue {owner[ns]!r}",
            )
        owner[ns] = q.name


#: What a department may set (namespaces and a parent of its own are refused by their own
#: checks, with their own words): its queues share what its weight gets, and never hold
#: more than its limit together.
_DEPARTMENT_FIELDS = frozenset({"name", "weight", "namespaces", "parent", "limit"})


def _check_department(i: int, q: QueueConfig, parents: set[str]) -> None:
    """A department (a queue others name as ``parent``) carries a weight and a limit only:
    quotas, borrowing and lending limits, cohorts, preemption settings and users belong to
    the queues that hold pods, and set on a department they would be silently ignored."""
    if q.name not in parents:
        return
    extra = sorted(f for f in q.model_fields_set - _DEPARTMENT_FIELDS)
    if extra:
        raise InvalidObjectError(
            CONFIG_OBJECT,
            f"queues[{i}].{to_camel(extra[0])}",
            f"{q.name!r} is a department (other queues name it as parent): it carries only "
            "a weight and a limit; set quotas, borrowing and preemption on its queues",
        )


def _check_default_queue(cfg: TenancyConfig, names: dict[str, int], parents: set[str]) -> None:
    if cfg.default_queue is None:
        return
    if cfg.default_queue not in names:
        raise InvalidObjectError(
            CONFIG_OBJECT, "defaultQueue", f"unknown queue {cfg.default_queue!r}"
        )
    if cfg.default_queue in parents:
        raise InvalidObjectError(
            CONFIG_OBJECT, "defaultQueue", f"{cfg.default_queue!r} is a parent queue"
        )


def _check_namespace_quotas(cfg: TenancyConfig) -> None:
    for ns, limits in cfg.namespace_quotas.items():
        for key, value in limits.items():
            where = f"namespaceQuotas.{ns}.{key}"
            if key not in NAMESPACE_QUOTA_KEYS:
                raise InvalidObjectError(
                    CONFIG_OBJECT,
                    where,
                    f"unsupported; use one of {', '.join(sorted(NAMESPACE_QUOTA_KEYS))}",
                )
            try:
                amount = to_milli(value)
            except QuantityError as error:
                raise InvalidObjectError(CONFIG_OBJECT, where, str(error)) from None
            if amount < 0:
                raise InvalidObjectError(CONFIG_OBJECT, where, "must not be negative")


def parse_config(data: Any) -> TenancyConfig:
    """Validate a decoded YAML/JSON document; raises :class:`InvalidObjectError` naming the
    path of the first bad field."""
    if data is None:
        return default_config()
    if not isinstance(data, dict):
        raise InvalidObjectError(CONFIG_OBJECT, "<root>", "must be a mapping")
    try:
        cfg = TenancyConfig.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        # A validator's own message, without the "Value error, " pydantic puts before it.
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise InvalidObjectError(CONFIG_OBJECT, _loc(first["loc"]), msg) from None
    _check(cfg)
    return cfg


def load_config(source: str | Path) -> TenancyConfig:
    """Read and validate a tenancy config from a YAML file path (or YAML text if ``source`` is
    a string containing a newline)."""
    inline = isinstance(source, str) and "\n" in source
    text = str(source) if inline else Path(source).read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InvalidObjectError(CONFIG_OBJECT, "<root>", f"invalid YAML: {error}") from None
    return parse_config(data)
