"""One scheduling cycle's session: the state every action reads and the statements that
change it.

A :class:`Session` is opened by :meth:`fairgpu.engine.engine.Engine.cycle` over the cluster
snapshot it is given. It owns, for that cycle, the cluster state, the queue book (synced to
the cluster when the session opens), the tenant resolver, the scheduler, the memo tables and
the decisions made so far; actions (``fairgpu.engine.actions``) read it and change cluster
and book only through :meth:`Session.statement` (see :mod:`fairgpu.engine.statement`).

What must outlive a cycle (reservations, starvation and gang timers) is the engine's
:class:`EngineState`, which the session carries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.backlog import Backlog
from fairgpu.engine.decisions import CycleResult, ReclaimNote
from fairgpu.engine.gang import Reservation
from fairgpu.engine.memo import CycleMemo
from fairgpu.engine.scheduler import Scheduler
from fairgpu.engine.statement import Statement
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.book import QueueBook
from fairgpu.tenancy.config import TenancyConfig
from fairgpu.tenancy.history import UsageHistory
from fairgpu.tenancy.pool_share import PoolDemandIndex
from fairgpu.tenancy.resolve import TenantResolver
from fairgpu.tenancy.runtimes import ObservedRuntimes


@dataclass(slots=True)
class EngineState:
    """What the engine keeps between cycles (never a clock: times are cycles' ``now``).

    ``reservations``: nodes held per starving job key; ``blocked_since``: when a large job
    first failed at the head of fair order; ``partial_since``: when a running pod group fell
    below its minMember; ``history``: decayed usage per queue; ``tenant_changed``: when the
    GPU (node name, device) last changed tenant through a reclaim (the reclaim cooldown);
    ``runtimes``: observed run times (drain estimates for pods that declare none);
    ``protected``: until when a pod started from a reservation is no preemption victim;
    ``torn_down``: pod groups a preemption tore down since they last started (protected when
    they start again);
    ``pool_demand``: GPU demand per queue and pool set (pool-aware fair shares);
    ``backfill``: backfill masks of GPU pods for the current reservations and drain times;
    ``reclaimed``: when queue A last reclaimed from queue B on a node, by (node, A, B);
    ``learned``: what the scheduler's plugins learned from the workload (typical pod shapes,
    the packing plan; :meth:`~fairgpu.engine.scheduler.Scheduler.learned`), references to
    the plugins' own objects, so that a copy of the state (a forecast's, pickled for the
    forecasting process) carries it and an engine given that copy adopts it
    (:attr:`~fairgpu.engine.engine.Engine.state`).
    """

    history: UsageHistory
    reservations: dict[str, Reservation] = field(default_factory=dict)
    blocked_since: dict[str, float] = field(default_factory=dict)
    partial_since: dict[str, float] = field(default_factory=dict)
    tenant_changed: dict[tuple[str, int], float] = field(default_factory=dict)
    preemptions: int = 0
    runtimes: ObservedRuntimes = field(default_factory=ObservedRuntimes)
    protected: dict[str, float] = field(default_factory=dict)
    torn_down: set[str] = field(default_factory=set)
    pool_demand: PoolDemandIndex = field(default_factory=PoolDemandIndex)
    # (own reservation, declared run time, workload type) -> mask (reserve.allowed_nodes)
    backfill: dict[tuple[str | None, float | None, str], np.ndarray] = field(default_factory=dict)
    reclaimed: dict[tuple[str, str, str], float] = field(default_factory=dict)
    learned: list[tuple[str, object | None]] = field(default_factory=list)


@dataclass(slots=True)
class Session:
    """The state of one cycle at time ``now``; ``out`` collects its decisions.

    ``placed_now`` holds the uids placed in this cycle (never victims in the same cycle);
    ``drain`` the expected drain time of reserved nodes (for backfill); ``no_preemption``
    the pods that may be placed but not preempt in this cycle; ``deserved`` the queues' fair
    shares as the fair cycle computed them (None in other cycles); ``backlog`` the engine's
    pending pods as kept between cycles, synced to this cycle's (None: the cycle groups the
    pending pods it is given itself); ``report_unchanged`` False: reports that repeat a pod's
    last one may be left out (:mod:`~fairgpu.engine.report_changes`); ``pending_pods`` the
    pods of the cycle's jobs by uid, when the backlog keeps them (None: read the lanes);
    ``displaceable`` the placed but unbound pods that may nonetheless be victims: preemptors
    the adapter holds while their own victims go, whose place a pod allowed to preempt them
    may take without an eviction (:class:`~fairgpu.engine.decisions.Displace`);
    ``displaced_nodes`` the node slots where one was displaced in this cycle (no second one
    is there: the adapter hands a displaced pod's victims to the one pod that took its place);
    ``victims_linger`` True where an evicted pod keeps what its preemptor does not take until
    it is gone (:mod:`~fairgpu.engine.lingering`; the live adapter); ``fragile_jobs`` the uids
    of the Jobs one more evicted pod fails (:mod:`~fairgpu.engine.fragile_jobs`);
    ``loose_leader_worker_sets`` the LeaderWorkerSets whose pods restart alone
    (:mod:`~fairgpu.engine.leader_worker_groups`);
    ``recorded`` the spans (start, end) of ``out.unschedulable`` whose reports are already
    known to differ from their pods' last ones and recorded on their jobs (settled
    followers, :mod:`~fairgpu.engine.actions.settle`), which
    :func:`~fairgpu.engine.report_changes.changed_reports` keeps as they are.
    """

    cluster: ClusterState
    now: float
    book: QueueBook
    resolver: TenantResolver
    scheduler: Scheduler
    tenancy: TenancyConfig
    state: EngineState
    time_label: Callable[[float], str]
    out: CycleResult = field(default_factory=CycleResult)
    memo: CycleMemo = field(default_factory=CycleMemo)
    placed_now: set[str] = field(default_factory=set)
    drain: dict[int, float] = field(default_factory=dict)
    no_preemption: frozenset[str] = frozenset()
    deserved: Mapping[str, float] | None = None
    backlog: Backlog | None = None
    report_unchanged: bool = True
    pending_pods: Mapping[str, PodInfo] | None = None
    displaceable: frozenset[str] = frozenset()
    displaced_nodes: set[int] = field(default_factory=set)
    victims_linger: bool = False
    fragile_jobs: frozenset[str] = frozenset()
    loose_leader_worker_sets: frozenset[str] = frozenset()
    recorded: list[tuple[int, int]] = field(default_factory=list)
    # What each placement of this cycle reclaimed, and until when a pod started from its
    # job's reservation is protected, by pod uid, until its Bind is made.
    reclaim_notes: dict[str, ReclaimNote] = field(default_factory=dict)
    protected_now: dict[str, float] = field(default_factory=dict)
    tore_down_now: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def statement(self) -> Statement:
        """A new transaction over this session's cluster and book."""
        return Statement(self)

    def released(self) -> None:
        """Capacity was released (evictions): earlier failures may now succeed."""
        self.memo.forget()
