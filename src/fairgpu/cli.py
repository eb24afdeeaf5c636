"""The ``fairgpu`` command line: ``simulate`` (the default main job), ``run``, ``dev-cluster``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fairgpu import __version__
from fairgpu.commands import register as register_user_commands
from fairgpu.sim.results import preemptions_text

app = typer.Typer(
    help="fairgpu: fair, fragmentation-aware GPU scheduling for shared Kubernetes clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


class UserError(Exception):
    """A problem with the user's input; printed as one line, exit code 2."""


def _fail(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


@app.command()
def version() -> None:
    """Print the fairgpu version."""
    console.print(__version__)


@app.command()
def simulate(
    workload: Annotated[
        str,
        typer.Option(
            help="'synthetic' (built-in cluster and tenants), Kubernetes YAML files/directories "
            "(comma-separated), or an openb pod-list CSV (with --nodes).",
        ),
    ] = "synthetic",
    nodes: Annotated[
        Path | None, typer.Option(help="Node list: openb node CSV, or YAML with Node objects.")
    ] = None,
    policy: Annotated[
        str | None, typer.Option(help="Placement policy (see --list-policies).")
    ] = None,
    ordering: Annotated[
        str, typer.Option(help="Queue ordering: 'fair' (weighted fair share) or 'kube-default'.")
    ] = "fair",
    config: Annotated[
        Path | None, typer.Option(help="Tenancy config YAML (queues, weights, quotas).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for every random choice.")] = 0,
    out: Annotated[
        Path | None, typer.Option(help="Write summary.json and pods.csv into this directory.")
    ] = None,
    report: Annotated[
        Path | None, typer.Option(help="Write a self-contained HTML report with plots.")
    ] = None,
    protocol: Annotated[
        str | None,
        typer.Option(help="'fgd': replay an openb trace with the published FGD protocol."),
    ] = None,
    trace: Annotated[
        Path | None, typer.Option(help="openb pod-list CSV for --protocol fgd.")
    ] = None,
    until: Annotated[
        float | None, typer.Option(help="Stop the simulated clock at this many seconds.")
    ] = None,
    jobs: Annotated[
        int | None, typer.Option(min=1, help="Number of jobs in the synthetic workload.")
    ] = None,
    rendezvous_timeout: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds a pod group's members wait for minMember of them to run before "
            "they fail and queue again (0: for ever).",
        ),
    ] = 600.0,
    list_policies: Annotated[
        bool, typer.Option("--list-policies", help="List placement policies and exit.")
    ] = False,
) -> None:
    """Replay a workload on a simulated cluster; report GPU allocation, fairness and waits."""
    from fairgpu.engine.policies import DEFAULT_POLICY, POLICIES

    if list_policies:
        for name in sorted(POLICIES):
            profile = POLICIES[name]()
            mark = " (default)" if name == DEFAULT_POLICY else ""
            console.print(
                f"{name}{mark}: tie-break {profile.tie_break}, devices {profile.device_policy}"
            )
        return
    try:
        if protocol is not None:
            _simulate_protocol(protocol, trace, nodes, policy, seed, out, report)
            return
        from fairgpu.sim.rerun import RunSpec

        spec = RunSpec(
            workload,
            nodes,
            policy or DEFAULT_POLICY,
            ordering,
            config,
            seed,
            jobs,
            until,
            rendezvous_timeout or None,
        )
        _simulate(spec.absolute(), out, report)
    except UserError as error:
        _fail(str(error))
    except (ValueError, OSError) as error:
        # Workload, config and object errors carry the file/object/field in their message.
        _fail(str(error))


def _simulate(spec: Any, out: Path | None, report: Path | None) -> None:
    """Run ``spec`` (a :class:`~fairgpu.sim.rerun.RunSpec`), print the summary, write the
    outputs asked for; ``summary.json`` records ``spec`` so the run can be replayed."""
    from fairgpu.sim.rerun import build_engine, load_workload
    from fairgpu.sim.results import (
        add_accounting,
        job_table,
        summarize,
        write_pods_csv,
        write_runs_csv,
        write_summary,
    )
    from fairgpu.sim.simulator import Simulation
    from fairgpu.sim.workloads.kube_yaml import skipped_objects

    started = time.perf_counter()
    workload = load_workload(spec)
    if not workload.nodes:
        raise UserError(f"workload {workload.name!r} has no nodes (pass --nodes)")
    engine = build_engine(spec, workload)
    ordering, seed = spec.ordering, spec.seed
    console.print(f"[bold]fairgpu simulate[/] {workload.description}")
    for note in skipped_objects(workload):
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    console.print(
        f"policy [cyan]{engine.profile.name}[/] (tie-break {engine.profile.tie_break}),"
        f" ordering [cyan]{ordering}[/], seed {seed}"
    )
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("pods arrived", total=len(workload.arrivals))
        last = [0.0]

        def on_progress(done: int, total: int) -> None:
            now = time.perf_counter()
            if now - last[0] > 0.1 or done == total:
                last[0] = now
                progress.update(task, completed=done)

        sim = Simulation(
            workload,
            engine,
            seed=seed,
            until=spec.until,
            on_progress=on_progress,
            rendezvous_timeout=spec.rendezvous_timeout,
        )
        result = sim.run()
    wall = time.perf_counter() - started
    params = {
        "workload": workload.name,
        "workload_description": workload.description,
        "policy": engine.profile.name,
        "tie_break": engine.profile.tie_break,
        "device_policy": engine.profile.device_policy,
        "nodes": len(workload.nodes),
        **spec.parameters(),
        "wall_seconds": round(wall, 2),
    }
    summary = summarize(result, params)
    if workload.jobs:
        summary["jobs"] = job_table(result.jobs, result)
        summary["jobset_restarts"] = [
            {"at_s": round(t, 1), "jobset": key, "why": why}
            for t, key, why in result.jobset_restarts
        ]
    shares = add_accounting(summary, result, engine, sim.cluster)  # pool-aware fair shares
    _print_summary(summary)
    if result.stalled_at is not None:
        summary["stalled_at_s"] = round(result.stalled_at, 1)
        waiting = sum(1 for r in result.records if r.start is None and r.failed_at is None)
        console.print(
            f"[yellow]note:[/] the replay ends at t={result.stalled_at:g} s, where it last "
            f"changed: {waiting} pod(s) still wait, and nothing is left to happen (no "
            "arrival, no deadline, no pod with a run time to end)",
            highlight=False,
        )
    # Pods that run for ever keep the clock only as far as the last event: say so.
    endless = sum(
        r.start is not None and r.end is None and r.duration is None for r in result.records
    )
    if spec.until is None and result.stalled_at is None and endless > 0:
        console.print(
            f"[yellow]note:[/] {endless} pod(s) declare no run time "
            f"(fairgpu.io/duration-seconds) and run until the replay ends, at "
            f"t={result.end_time:g} s (its last event); time averages cover that span -- "
            "pass --until SECONDS to run the clock longer",
            highlight=False,
            soft_wrap=True,
        )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_summary(summary, out / "summary.json")
        write_pods_csv(result, out / "pods.csv")
        write_runs_csv(result, out / "runs.csv")
        console.print(f"wrote {out / 'summary.json'}, {out / 'pods.csv'} and {out / 'runs.csv'}")
        console.print(
            f"why did a pod wait? fairgpu explain NAMESPACE/POD --run {out} [--at SECONDS]",
            highlight=False,
            soft_wrap=True,
        )
    if report is not None:
        from fairgpu.report.html import write_report
        from fairgpu.sim.forecast import predicted_against_actual

        report.parent.mkdir(parents=True, exist_ok=True)
        fresh = lambda: build_engine(spec, workload)  # noqa: E731
        write_report(
            result, summary, report, shares, predicted_against_actual(workload, fresh, result)
        )
        console.print(f"wrote {report}")


def _print_summary(summary: dict[str, Any]) -> None:
    table = Table(title="Simulation summary", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for label, key, unit in (
        ("GPU allocation, time average", "gpu_allocation_avg_pct", " %"),
        ("GPU allocation, peak", "gpu_allocation_peak_pct", " %"),
        ("pods started / total", None, ""),
        ("pods never started", "pods_never_started", ""),
        ("wait p50", "wait_p50_s", " s"),
        ("wait p99", "wait_p99_s", " s"),
        ("preemptions", "preemptions", ""),
        ("simulated time", "simulated_seconds", " s"),
    ):
        if key is None:
            table.add_row(label, f"{summary['pods_started']} / {summary['pods']}")
            if summary["pods_failed"]:
                table.add_row("pods failed", str(summary["pods_failed"]))
        elif key == "preemptions":
            table.add_row(label, preemptions_text(summary))
        else:
            table.add_row(label, f"{summary[key]}{unit}")
    console.print(table)
    for line in never_started_lines(summary):  # reasons name fields as a[b]: not markup
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    tenants = Table(title="Tenants", title_justify="left")
    for col in (
        "tenant",
        "pods",
        "started",
        "GPU share %",
        "fair share %",
        "wait p50 s",
        "wait p99 s",
    ):
        tenants.add_column(col, justify="left" if col == "tenant" else "right")
    for name, row in summary["tenants"].items():
        fair = row.get("fair_share_pct")
        tenants.add_row(
            name,
            str(row["pods"]),
            str(row["started"]),
            str(row["gpu_share_of_capacity_pct"]),
            "-" if fair is None else str(fair),
            str(row["wait_p50_s"]),
            str(row["wait_p99_s"]),
        )
    console.print(tenants)
    departments = department_line(summary["tenants"])
    if departments:
        console.print(departments, highlight=False, soft_wrap=True)
    if summary.get("jobs"):
        _print_jobs(summary["jobs"], summary.get("jobset_restarts") or [])


def never_started_lines(summary: dict[str, Any]) -> list[str]:
    """Under the summary, why the pods that never started did not: each reason with how many
    pods it held back and one of them (none when every pod started)."""
    rows = summary.get("never_started") or []
    if not rows:
        return []
    count = summary["pods_never_started"]
    lines = [f"Never started ({count} pod{'s' * (count != 1)}), by last reason:"]
    for row in rows:
        more = f" and {row['pods'] - 1} more" if row["pods"] > 1 else ""
        lines.append(f"  {row['example']}{more}: {row['reason']}")
    shown = sum(row["pods"] for row in rows)
    if shown < count:
        lines.append(f"  ... {count - shown} more, for other reasons")
    return lines


def department_line(tenants: dict[str, dict[str, Any]]) -> str:
    """Under the tenant table, which tenants each department holds ("" without
    departments): the fair shares are the departments' first, then their queues'."""
    members: dict[str, list[str]] = {}
    for name, row in tenants.items():
        if row.get("department"):
            members.setdefault(row["department"], []).append(name)
    if not members:
        return ""
    groups = "; ".join(f"{d}: {', '.join(sorted(m))}" for d, m in sorted(members.items()))
    return f"Departments (share first, then their queues) -- {groups}"


#: Jobs the summary table shows at most (failed ones first); summary.json has them all.
MAX_JOB_ROWS = 20


def _print_jobs(jobs: dict[str, dict[str, Any]], restarts: list[dict[str, Any]]) -> None:
    """One row per batch/v1 Job -- how far it got, when it started and finished -- the failed
    ones first, at most :data:`MAX_JOB_ROWS`; then why each failed Job failed, and each
    JobSet restart."""
    table = Table(title="Jobs (times in simulated seconds)", title_justify="left")
    # A Job is found by its whole name: short number headers leave the name room, and a
    # name too long for it folds onto the next line instead of being cut short.
    table.add_column("job", overflow="fold")
    for col in ("succeeded", "created", "first start", "finished", "failed"):
        table.add_column(col, justify="right")
    ordered = sorted(jobs.items(), key=lambda kv: kv[1]["failed_reason"] is None)
    for name, row in ordered[:MAX_JOB_ROWS]:
        cells = (row["arrival_s"], row["first_start_s"], row["finished_s"], row["failed_s"])
        table.add_row(
            name,
            f"{row['succeeded']} / {row['completions']}",
            *("-" if v is None else str(v) for v in cells),
        )
    console.print(table)
    if len(ordered) > MAX_JOB_ROWS:
        more = len(ordered) - MAX_JOB_ROWS
        console.print(f"  ... and {more} more Jobs (all of them in summary.json)", highlight=False)
    failed = [row for row in jobs.values() if row["failed_reason"]]
    for row in failed[:MAX_JOB_ROWS]:
        text = f"[yellow]{row['failed_reason']}[/] (at {row['failed_s']} s)"
        console.print(text, highlight=False, soft_wrap=True)
    if failed:
        console.print(
            "  A preemption counts against backoffLimit unless the Job's podFailurePolicy "
            "ignores pods with the DisruptionTarget condition (docs/running-on-a-cluster.md).",
            highlight=False,
            soft_wrap=True,
        )
    for item in restarts[:MAX_JOB_ROWS]:
        text = f"[yellow]JobSet {item['jobset']} restarted[/] at {item['at_s']} s: {item['why']}"
        console.print(text, highlight=False, soft_wrap=True)


def _simulate_protocol(
    protocol: str,
    trace: Path | None,
    nodes: Path | None,
    policy: str | None,
    seed: int,
    out: Path | None,
    report: Path | None = None,
) -> None:
    """The published FGD experiment on an openb trace, ours beside the reference figures."""
    if protocol != "fgd":
        raise UserError(f"--protocol must be 'fgd', not {protocol!r}")
    if trace is None or nodes is None:
        raise UserError("--protocol fgd needs --trace POD_LIST.csv and --nodes NODE_LIST.csv")
    for path in (trace, nodes):
        if not path.exists():
            raise UserError(f"{path}: no such file or directory")
    from fairgpu.engine.policies import DEFAULT_POLICY
    from fairgpu.sim.protocols.fgd import (
        reference_figures,
        reference_for_policy,
        run_fgd_protocol,
    )

    name = policy or DEFAULT_POLICY
    console.print(
        f"[bold]fairgpu simulate --protocol fgd[/] {trace.name} on {nodes.name}, policy "
        f"[cyan]{name}[/], seed {seed}"
    )
    with console.status("replaying arrivals one pod at a time"):
        result = run_fgd_protocol(trace, nodes, name, seed, fragmentation_every=250)
    _print_protocol_table(result, reference_figures(result.workload) or {})
    console.print(f"{result.seconds:.1f} s, {result.arrivals} arrivals, {result.failed} dropped")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        summary = result.summary()
        summary["gpu_allocation_at"] = {
            int(k): round(v, 4) for k, v in result.gpu_allocation_at.items()
        }
        summary["reference"] = reference_for_policy(result.workload, "fgd")
        summary["fragmentation_pct"] = [
            {"arrival": a, "expected_fragmentation_pct": f, "idle_pct": i}
            for a, f, i in result.fragmentation_pct
        ]
        summary["curve"] = result.curve(step=25)
        from fairgpu.sim.results import write_summary

        write_summary(summary, out / "summary.json")
        console.print(f"wrote {out / 'summary.json'}")
    if report is not None:
        from fairgpu.report.html import write_protocol_report

        report.parent.mkdir(parents=True, exist_ok=True)
        write_protocol_report(result, reference_figures(result.workload) or {}, report)
        console.print(f"wrote {report}")


def _print_protocol_table(result: Any, figures: dict[str, dict[int, tuple[float, float]]]) -> None:
    """GPU allocation at 100..130% arrival: ours beside each published policy's mean."""
    table = Table(
        title=f"GPU allocation (% of cluster) on {result.workload}, seed {result.seed}",
        title_justify="left",
    )
    table.add_column("arrived")
    table.add_column(f"ours: {result.policy}", justify="right", style="bold cyan")
    names = sorted(figures)
    for name in names:
        table.add_column(f"{name} (published)", justify="right")
    for pct in (100, 110, 120, 130):
        cells = [f"{result.gpu_allocation_at.get(pct, float('nan')):.2f}"]
        cells += [f"{figures[n][pct][0]:.2f}" if pct in figures[n] else "-" for n in names]
        table.add_row(f"{pct}%", *cells)
    console.print(table)
    if not figures:
        console.print("(no published figures found for this list: ../shared/reference absent)")


@app.command()
def run(
    kubeconfig: Annotated[
        str | None,
        typer.Option(help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)."),
    ] = None,
    context: Annotated[str | None, typer.Option(help="Kubeconfig context.")] = None,
    config: Annotated[
        Path | None, typer.Option(help="Tenancy config YAML (queues, weights, quotas).")
    ] = None,
    policy: Annotated[str | None, typer.Option(help="Placement policy (see simulate).")] = None,
    ordering: Annotated[
        str, typer.Option(help="Queue ordering: 'fair' (weighted fair share) or 'kube-default'.")
    ] = "fair",
    scheduler_name: Annotated[
        str, typer.Option(help="Schedule pods whose spec.schedulerName is this.")
    ] = "fairgpu",
    leader_elect: Annotated[
        bool, typer.Option(help="Campaign for a Lease; only the leader schedules.")
    ] = True,
    lease_namespace: Annotated[str, typer.Option(help="Namespace of the Lease.")] = (
        "fairgpu-system"
    ),
    lease_name: Annotated[str, typer.Option(help="Name of the Lease.")] = "fairgpu-scheduler",
    lease_duration: Annotated[
        float, typer.Option(help="Seconds a standby waits after the last renewal.")
    ] = 15.0,
    renew_deadline: Annotated[
        float, typer.Option(help="Seconds the leader retries renewing before stepping down.")
    ] = 10.0,
    retry_period: Annotated[float, typer.Option(help="Seconds between Lease attempts.")] = 2.0,
    metrics_port: Annotated[
        int, typer.Option(help="Port of /metrics, /healthz and /readyz (0: any free port).")
    ] = 10259,
    metrics_host: Annotated[str, typer.Option(help="Address the HTTP server binds.")] = "0.0.0.0",
    qps: Annotated[
        float, typer.Option(help="Client rate limit for binds and evictions (<= 0: none).")
    ] = 200.0,
    burst: Annotated[int, typer.Option(help="Client rate-limit burst.")] = 400,
    bind_workers: Annotated[int, typer.Option(help="Concurrent bind calls.")] = 32,
    max_batch: Annotated[
        int, typer.Option(help="Most pending pods per engine cycle (0: all at once).")
    ] = 500,
    events_qps: Annotated[
        float, typer.Option(help="Rate cap for FailedScheduling events and conditions.")
    ] = 20.0,
    node_pool_label: Annotated[
        str,
        typer.Option(help="Node-pool label/taint key for placement derived from workload type."),
    ] = "example.com/node.usage",
    max_devices: Annotated[
        int | None,
        typer.Option(hidden=True, help="Deprecated and ignored: nodes may have any GPU count."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for random tie-breaking.")] = 0,
    identity: Annotated[
        str | None, typer.Option(help="Leader-election identity (default: host + random).")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    forecast_seconds: Annotated[
        float, typer.Option(help="Predict pending pods' start times this often (<= 0: never).")
    ] = 30.0,
    forecast_budget: Annotated[
        float, typer.Option(help="Wall seconds one start-time forecast may run (> 0).")
    ] = 5.0,
) -> None:
    """Run fairgpu as a Kubernetes scheduler (JSON logs on stderr; SIGTERM stops gracefully)."""
    from fairgpu.engine.policies import DEFAULT_POLICY
    from fairgpu.kube import RunConfig
    from fairgpu.kube import run as run_live

    if ordering not in ("fair", "kube-default"):
        _fail(f"--ordering must be 'fair' or 'kube-default', not {ordering!r}")
    if config is not None and not config.exists():
        _fail(f"{config}: no such file or directory")
    if not forecast_budget > 0:
        _fail(f"--forecast-budget must be > 0 seconds, not {forecast_budget}")
    if max_devices is not None:
        typer.echo("warning: --max-devices is deprecated and ignored", err=True)
    settings = RunConfig(
        kubeconfig=kubeconfig,
        context=context,
        tenancy=config,
        policy=policy or DEFAULT_POLICY,
        ordering=ordering,
        scheduler_name=scheduler_name,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace,
        lease_name=lease_name,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        identity=identity,
        metrics_host=metrics_host,
        metrics_port=metrics_port,
        qps=qps,
        burst=burst,
        bind_workers=bind_workers,
        max_batch=max_batch,
        events_qps=events_qps,
        node_pool_label=node_pool_label,
        seed=seed,
        log_level=log_level,
        forecast_seconds=forecast_seconds,
        forecast_budget=forecast_budget,
    )
    try:
        code = run_live(settings)
    except (ValueError, OSError) as error:
        _fail(str(error))
    raise typer.Exit(code=code)


dev_cluster_app = typer.Typer(
    help="A local control plane with fake GPU nodes (for trying fairgpu)."
)
app.add_typer(dev_cluster_app, name="dev-cluster")


@dev_cluster_app.command("up")
def dev_cluster_up(
    nodes: Annotated[int, typer.Option(help="Number of fake GPU nodes.")] = 8,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node.")] = 8,
    gpu_model: Annotated[
        list[str] | None, typer.Option(help="GPU model(s), cycled over the nodes.")
    ] = None,
    namespace: Annotated[
        list[str] | None, typer.Option(help="Namespaces to create (repeatable).")
    ] = None,
    domain: Annotated[str, typer.Option(help="Node-pool label/taint domain.")] = "example.com",
    kubelet: Annotated[bool, typer.Option(help="Run the fake kubelet.")] = True,
    kube_scheduler: Annotated[bool, typer.Option(help="Also run kube-scheduler.")] = False,
    controllers: Annotated[
        bool,
        typer.Option(
            help="Run kube-controller-manager's Job, Deployment, ReplicaSet, disruption and "
            "garbage-collector controllers (what you apply makes pods)."
        ),
    ] = True,
    kubeconfig_out: Annotated[
        Path | None, typer.Option(help="Copy the kubeconfig here (removed on exit).")
    ] = None,
    bin_dir: Annotated[
        Path | None, typer.Option(help="Directory with kube-apiserver, kube-scheduler, etcd.")
    ] = None,
    workdir: Annotated[
        Path | None, typer.Option(help="Keep certificates, data and logs here.")
    ] = None,
) -> None:
    """Start etcd + kube-apiserver with fake GPU nodes and block until Ctrl-C.

    Then, in another shell: 'fairgpu run --kubeconfig <printed path> --no-leader-elect'.
    """
    from fairgpu.devcluster import ControlPlaneError, up

    try:
        up(
            nodes,
            bin_dir=bin_dir,
            domain=domain,
            gpu_models=tuple(gpu_model or ("NVIDIA-A100-SXM4-80GB",)),
            gpus_per_node=gpus_per_node,
            namespaces=tuple(namespace or ("default",)),
            kubelet=kubelet,
            kube_scheduler=kube_scheduler,
            controllers=controllers,
            kubeconfig_out=kubeconfig_out,
            workdir=workdir,
            echo=console.print,
        )
    except (ControlPlaneError, ValueError, OSError) as error:
        _fail(str(error))


register_user_commands(app)


def main() -> None:
    """Entry point for ``python -m fairgpu``."""
    app()


if __name__ == "__main__":
    main()
