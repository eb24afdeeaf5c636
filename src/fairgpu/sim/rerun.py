"""A simulated run, rebuilt from what it recorded: the same workload, engine and options.

``fairgpu simulate --out DIR`` records in ``DIR/summary.json`` (``parameters``) how it built
its workload and engine (:meth:`RunSpec.parameters`). A question asked later about that run --
``fairgpu explain --run DIR POD --at T``, ``fairgpu queues --run DIR --at T`` -- reads them
back (:func:`load_run`) and replays the same run up to the instant asked about
(:func:`replay`). Replays are deterministic (seeded, and the order of simultaneous events and
of nodes is a function of the objects themselves), so the state at ``T`` is the state the
recorded run had at ``T``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from fairgpu.engine.engine import ORDERINGS, Engine, Ordering
from fairgpu.engine.policies import DEFAULT_POLICY
from fairgpu.engine.policies import policy as named_policy
from fairgpu.sim.rendezvous import DEFAULT_TIMEOUT
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import Workload

__all__ = ["RunSpec", "build_engine", "load_run", "load_workload", "replay"]

SYNTHETIC = "synthetic"


@dataclass(frozen=True, slots=True)
class RunSpec:
    """How ``fairgpu simulate`` built a run: its options, with file paths made absolute.

    ``workload``: ``synthetic`` or comma-separated YAML/CSV paths; ``nodes``: the node list;
    ``jobs``: the synthetic workload's job count (None: its default); ``until``: where the
    simulated clock stopped (None: the end of the workload); ``rendezvous_timeout``: seconds
    a pod group's members wait for their peers (None: for ever)."""

    workload: str = SYNTHETIC
    nodes: Path | None = None
    policy: str = DEFAULT_POLICY
    ordering: str = "fair"
    config: Path | None = None
    seed: int = 0
    jobs: int | None = None
    until: float | None = None
    rendezvous_timeout: float | None = DEFAULT_TIMEOUT

    def absolute(self) -> RunSpec:
        """The same run with every path absolute (so it can be replayed from elsewhere)."""
        workload = self.workload
        if workload != SYNTHETIC:
            workload = ",".join(str(Path(p).resolve()) for p in workload.split(","))
        return RunSpec(
            workload,
            self.nodes.resolve() if self.nodes is not None else None,
            self.policy,
            self.ordering,
            self.config.resolve() if self.config is not None else None,
            self.seed,
            self.jobs,
            self.until,
            self.rendezvous_timeout,
        )

    def parameters(self) -> dict[str, Any]:
        """The fields :func:`load_run` reads back, as ``summary.json`` records them."""
        return {
            "workload_source": self.workload,
            "nodes_source": None if self.nodes is None else str(self.nodes),
            "policy": self.policy,
            "ordering": self.ordering,
            "config": None if self.config is None else str(self.config),
            "seed": self.seed,
            "jobs": self.jobs,
            "until": self.until,
            "rendezvous_timeout_s": self.rendezvous_timeout,
        }


def load_run(directory: Path) -> RunSpec:
    """The :class:`RunSpec` a ``fairgpu simulate --out`` run recorded in
    ``directory/summary.json``. Raises ``ValueError`` naming the file and field when it is
    missing or was written by a protocol run or an older version that did not record it."""
    path = directory / "summary.json"
    if not path.is_file():
        raise ValueError(f"{path}: no such file (run `fairgpu simulate --out {directory}` first)")
    try:
        params = json.loads(path.read_text())["parameters"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: no run parameters ({error})") from None
    if not isinstance(params, dict) or "workload_source" not in params:
        raise ValueError(
            f"{path}: parameters.workload_source is missing: the run was not recorded by "
            "`fairgpu simulate --out` of this version; simulate it again"
        )

    def path_of(field: str) -> Path | None:
        value = params.get(field)
        return None if value is None else Path(str(value))

    try:
        return RunSpec(
            workload=str(params["workload_source"]),
            nodes=path_of("nodes_source"),
            policy=str(params.get("policy") or DEFAULT_POLICY),
            ordering=str(params.get("ordering") or "fair"),
            config=path_of("config"),
            seed=int(params.get("seed") or 0),
            jobs=None if params.get("jobs") is None else int(params["jobs"]),
            until=None if params.get("until") is None else float(params["until"]),
            rendezvous_timeout=(
                None
                if params.get("rendezvous_timeout_s") is None
                else float(params["rendezvous_timeout_s"])
            ),
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: parameters: {error}") from None


def load_workload(spec: RunSpec) -> Workload:
    """The run's workload: the built-in synthetic one, Kubernetes YAML, or an openb CSV
    trace with its node list (``ValueError`` naming a missing file)."""
    from fairgpu.sim.workloads.kube_yaml import load_kube_yaml
    from fairgpu.sim.workloads.synthetic import SyntheticSpec, generate

    if spec.workload == SYNTHETIC:
        synthetic = SyntheticSpec() if spec.jobs is None else SyntheticSpec(jobs=spec.jobs)
        return generate(synthetic, seed=spec.seed)
    paths = [Path(p) for p in spec.workload.split(",")]
    for path in paths:
        if not path.exists():
            raise ValueError(f"{path}: no such file or directory")
    if all(p.suffix == ".csv" for p in paths):
        from fairgpu.sim.workloads import openb

        if spec.nodes is None:
            raise ValueError("a CSV pod trace needs --nodes NODE_LIST.csv")
        return openb.openb_workload(paths[0], spec.nodes)
    extra = [spec.nodes] if spec.nodes is not None else []
    return load_kube_yaml(paths + extra)


def build_engine(spec: RunSpec, workload: Workload) -> Engine:
    """A fresh engine as the run had it: policy, ordering, tenancy config, seed, and the
    workload's PodGroups (``ValueError`` for an unknown ordering or a bad config)."""
    from fairgpu.tenancy import load_config

    if spec.ordering not in ORDERINGS:
        known = " or ".join(repr(o) for o in ORDERINGS)
        raise ValueError(f"--ordering must be {known}, not {spec.ordering!r}")
    tenancy = load_config(spec.config) if spec.config is not None else None
    engine = Engine(
        named_policy(spec.policy),
        seed=spec.seed,
        ordering=cast(Ordering, spec.ordering),
        tenancy=tenancy,
    )
    if workload.pod_groups:
        engine.register_pod_groups(workload.pod_groups)
    return engine


def replay(spec: RunSpec, at: float, workload: Workload | None = None) -> Simulation:
    """The run replayed up to and including every event at ``at`` (simulated seconds): the
    returned simulation holds the cluster, the pending pods, their records and the engine
    as they were right after the scheduling cycle of that instant."""
    workload = workload if workload is not None else load_workload(spec)
    until = at if spec.until is None else min(at, spec.until)
    sim = Simulation(
        workload,
        build_engine(spec, workload),
        seed=spec.seed,
        until=until,
        track_fragmentation=False,
        rendezvous_timeout=spec.rendezvous_timeout,
    )
    sim.run()
    return sim
