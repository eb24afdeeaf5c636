"""Reservations over simulated time: a large gang's reservation holds until its nodes drain,
so the gang starts once, and a job started from its reservation -- or again after a preemption
tore it down -- is not reclaimed at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy import parse_config
from tests.builders import k8s_node, k8s_pod


def _pod(name: str, ns: str, gpus: int, runtime: float | None, **kw: Any) -> Any:
    return k8s_pod(name, ns, gpus=gpus, cpu="1", duration=runtime, **kw)


def _after_each_cycle(engine: Engine, see: Callable[[CycleResult], None]) -> None:
    """Wrap ``engine.cycle`` so that ``see`` gets every cycle's result."""
    inner = engine.cycle

    def cycle(cluster: Any, pending: Any, now: float, changes: Any = None) -> CycleResult:
        out = inner(cluster, pending, now, changes)
        see(out)
        return out

    engine.cycle = cycle  # type: ignore[method-assign]


def _held(engine: Engine) -> set[tuple[str, float]]:
    """Collect every (job, since) reservation ``engine`` makes."""
    seen: set[tuple[str, float]] = set()
    _after_each_cycle(
        engine, lambda _: seen.update((k, r.since) for k, r in engine.reservations.items())
    )
    return seen


def test_a_large_gang_holds_its_nodes_until_they_drain_and_starts_once() -> None:
    # Two 8-GPU nodes run queue busy's pods until t=1000..1500 (declared); busy keeps
    # submitting 1000 s pods every 50 s. A 2 x 8-GPU gang arrives at t=10 and waits 300 s for
    # its reservation, which must outlast the gang timeout (600 s): the held nodes drain at
    # 1500. Before, the reservation expired at 910 and the stream took the GPUs freed from
    # t=1000 on; reserved again and again, the gang never started before the end.
    config = parse_config({"preemption": {"enabled": False}})
    engine = Engine(tenancy=config)
    made = _held(engine)
    nodes = [k8s_node(f"n{i}", gpus=8) for i in range(2)]
    arrivals = [
        PodArrival(_pod(f"first{i}", "busy", 1, 1000 + 32 * i), 0.0, 1000 + 32 * i)
        for i in range(16)
    ]
    arrivals += [
        PodArrival(_pod(f"s{j}", "busy", 1, 1000, created=50.0 * j), 50.0 * j, 1000.0)
        for j in range(1, 60)
    ]
    gang = [_pod(f"g{m}", "train", 8, 600, group="big", min_member=2) for m in range(2)]
    arrivals += [PodArrival(p, 10.0, 600.0) for p in gang]
    workload = Workload("gang-drain", nodes, arrivals, pod_groups={"train/big": 2})
    result = Simulation(workload, engine, until=4000).run()
    recs = {r.pod.name: r for r in result.records}
    # The last of the first pods ends at 1000 + 32 * 15 = 1480: the gang starts then, once.
    assert recs["g0"].start == recs["g1"].start == 1480.0
    assert recs["g0"].preempted == recs["g1"].preempted == 0
    # One reservation, made when it fell due at 310 s: a cycle is asked for then, as the live
    # scheduler's periodic cycles would run one (arrivals alone come every 50 s: at 350 s).
    assert made == {("train/big", 310.0)}


def _protected_run(
    reserved_min_runtime: float, declared: float | None = None, binds: list[Any] | None = None
) -> dict[str, Any]:
    # Queue a's gang (8 x 1 GPU) waits behind queue b's pods (until t=500) and starts from
    # its reservation at 500. At 600 a pod of queue a with a higher priority arrives: priority
    # preemption inside the queue would take a gang member (and so the whole gang) at once.
    # (Reclaim between queues would not: evicting the whole gang to start one pod of b is
    # refused by the reclaim rule judged with the gang gone.)
    config = parse_config(
        {
            "preemption": {"reclaimCooldownSeconds": 0},
            "starvation": {
                "reserveAfterSeconds": 0,
                "minGangPods": 8,
                "reservedMinRuntimeSeconds": reserved_min_runtime,
            },
        }
    )
    engine = Engine(tenancy=config)
    arrivals = [PodArrival(_pod(f"b{i}", "b", 1, 500), 0.0, 500.0) for i in range(8)]
    arrivals += [
        PodArrival(_pod(f"big{m}", "a", 1, declared, group="big", min_member=8), 1.0, 3000.0)
        for m in range(8)
    ]
    urgent = _pod("urgent", "a", 1, None, created=600.0, priority=100)
    arrivals.append(PodArrival(urgent, 600.0, 100.0))
    workload = Workload("protect", [k8s_node("n0", gpus=8)], arrivals, pod_groups={"a/big": 8})
    if binds is not None:  # every Bind the engine makes
        _after_each_cycle(engine, lambda out: binds.extend(out.binds))
    result = Simulation(workload, engine).run()
    return {r.pod.name: r for r in result.records}


def test_a_job_started_from_its_reservation_is_not_preempted_for_its_minimum_runtime() -> None:
    # The gang declares no run time: protected for reservedMinRuntimeSeconds (1800 s), the
    # urgent pod may preempt only when that ends at 500 + 1800 (the engine asks the simulator
    # for a cycle then); the gang then restarts once it is done.
    binds: list[Any] = []
    recs = _protected_run(1800.0, binds=binds)
    assert recs["urgent"].start == 2300.0
    # Each member's Bind says so, for an adapter that writes it down (the live scheduler).
    first = [b for b in binds if b.pod.name.startswith("big")][:8]
    assert [b.protected_until for b in first] == [2300.0] * 8
    assert all(b.protected_until is None for b in binds if not b.pod.name.startswith("big"))
    assert {recs[f"big{m}"].start for m in range(8)} == {2400.0}
    # Unprotected, it preempts at once (600), 100 s into the gang's run.
    unprotected = _protected_run(0.0)
    assert unprotected["urgent"].start == 600.0
    assert {unprotected[f"big{m}"].start for m in range(8)} == {700.0}


def test_a_job_started_from_its_reservation_runs_its_declared_time() -> None:
    # Declaring 3000 s, the gang is protected to its end (3500): it runs once, urgent waits.
    recs = _protected_run(1800.0, declared=3000.0)
    assert all(recs[f"big{m}"].start == 500.0 and recs[f"big{m}"].preempted == 0 for m in range(8))
    assert recs["urgent"].start == 3500.0


def _restarted_gang(see: Callable[[Engine, CycleResult], None] | None = None) -> dict[str, Any]:
    """Queue a runs ``fill`` (8 GPUs from 0 s) and a gang of 2 x 4 GPUs (from 50 s) on two
    8-GPU nodes. Queue b's 8-GPU pod (150 s) reclaims the gang -- the cheaper victim, 100 s
    run -- and ends at 250 s; the gang starts again. Queue c's 8-GPU pod arrives at 400 s:
    the gang (150 s into its second run) is again cheaper than ``fill`` (400 s). Returns the
    records and the run attempts' outcomes per pod name; ``see`` gets the engine and every
    cycle's result."""
    # No reclaim cooldown: the gang's GPUs changed tenant at 150 s and would otherwise be
    # held back at 400 s for that alone.
    engine = Engine(tenancy=parse_config({"preemption": {"reclaimCooldownSeconds": 0}}))
    if see is not None:
        _after_each_cycle(engine, lambda out: see(engine, out))
    arrivals = [PodArrival(_pod("fill", "a", 8, 5000.0), 0.0, 5000.0)]
    arrivals += [
        PodArrival(_pod(f"g{m}", "a", 4, 3000.0, group="g", min_member=2), 50.0, 3000.0)
        for m in range(2)
    ]
    arrivals.append(PodArrival(_pod("b1", "b", 8, 100.0), 150.0, 100.0))
    arrivals.append(PodArrival(_pod("c1", "c", 8, 100.0), 400.0, 100.0))
    nodes = [k8s_node(f"n{i}", gpus=8) for i in range(2)]
    workload = Workload("restart", nodes, arrivals, pod_groups={"a/g": 2})
    result = Simulation(workload, engine).run()
    outcomes: dict[str, list[str]] = {}
    for a in result.runs:
        outcomes.setdefault(a.name, []).append(a.outcome)
    return {"records": {r.pod.name: r for r in result.records}, "outcomes": outcomes}


def test_a_gang_torn_down_by_a_preemption_is_protected_when_it_starts_again() -> None:
    run = _restarted_gang()
    recs, outcomes = run["records"], run["outcomes"]
    # Torn down once by b's reclaim, started again at 250 s and protected for its declared
    # 3000 s: c takes fill instead (unprotected, the gang went again and started a third time).
    assert outcomes["g0"] == outcomes["g1"] == ["preempted", "completed"]
    assert recs["g0"].start == recs["g1"].start == 250.0
    assert recs["c1"].start == 400.0
    assert outcomes["fill"] == ["preempted", "completed"]


def test_a_gang_torn_down_is_still_protected_by_an_engine_that_took_back_the_note() -> None:
    """The Bind of the pod whose preemption tore the gang down names it: an engine that
    forgot the teardown (a scheduler started afresh before the gang started again) and was
    handed that note protects the gang as the first would; without it, c's pod tears the gang
    down a second time."""
    tore: list[tuple[str, tuple[str, ...]]] = []

    def restart(restore: bool) -> Callable[[Engine, CycleResult], None]:
        def see(engine: Engine, out: CycleResult) -> None:
            notes = [k for b in out.binds for k in b.tore_down]
            tore.extend((b.pod.name, b.tore_down) for b in out.binds if b.tore_down)
            if notes:  # the engine restarts: what it remembered is gone but for the notes
                engine.state.torn_down.clear()
                for key in notes if restore else ():
                    engine.restore_torn_down(key)

        return see

    restored = _restarted_gang(restart(True))
    assert tore == [("b1", ("a/g",))]
    assert restored["outcomes"] == _restarted_gang()["outcomes"]
    forgot = _restarted_gang(restart(False))["outcomes"]
    assert forgot["g0"] == forgot["g1"] == ["preempted", "preempted", "completed"]
