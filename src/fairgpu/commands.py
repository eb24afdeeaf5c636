"""The commands users run against a live cluster: ``explain``, ``queues``, ``jobs`` and
``what-if``.

They read the cluster once through the kubeconfig (:mod:`fairgpu.kube.snapshot`), build the
engine with the settings the running scheduler published
(:mod:`fairgpu.kube.published_settings`; each overridden by its option), let it answer
(:mod:`fairgpu.kube.explain`) and print plain text, or JSON with ``-o json``. Nothing is
written to the cluster. Registered on ``fairgpu`` by :mod:`fairgpu.cli` and served alone by
:data:`kubectl_app`, the ``kubectl-fairgpu`` plugin (``kubectl fairgpu explain ...``).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

T = TypeVar("T")

__all__ = ["explain", "jobs", "kubectl_app", "queues", "register", "what_if"]

Kubeconfig = Annotated[
    str | None,
    typer.Option(help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)."),
]
Context = Annotated[str | None, typer.Option(help="Kubeconfig context.")]
Config = Annotated[
    Path | None,
    typer.Option(
        help="Tenancy config YAML, the same file as `fairgpu run --config` (default: the one "
        "the running scheduler published)."
    ),
]
Policy = Annotated[str | None, typer.Option(help="Placement policy, as `fairgpu run --policy`.")]
Ordering = Annotated[
    str | None, typer.Option(help="Queue ordering: 'fair' or 'kube-default' (default: fair).")
]
SchedulerName = Annotated[str, typer.Option(help="The scheduler's spec.schedulerName.")]
PoolLabel = Annotated[
    str | None,
    typer.Option(help="Node-pool label key, as `fairgpu run` (default: example.com/node.usage)."),
]
SettingsFrom = Annotated[
    str,
    typer.Option(
        "--settings-namespace",
        help="Where the running scheduler publishes its settings (its --lease-namespace): "
        "options not given here are taken from them.",
    ),
]
Output = Annotated[str, typer.Option("--output", "-o", help="'text' or 'json'.")]
Run = Annotated[
    Path | None,
    typer.Option(
        "--run",
        help="A `fairgpu simulate --out` directory: answer for that simulated run, replayed "
        "to --at, instead of a live cluster.",
    ),
]
At = Annotated[
    float | None,
    typer.Option(
        "--at",
        help="With --run: the simulated second to look at (default: explain, midway through "
        "the pod's first wait; queues and jobs, when the most pods waited).",
    ),
]

Budget = Annotated[
    float,
    typer.Option(
        "--forecast-budget",
        help="Wall seconds the start-time forecast may run; pods it has not reached by then "
        "get no prediction.",
    ),
]


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def _check_budget(seconds: float) -> None:
    if not seconds > 0:
        _fail(f"--forecast-budget must be > 0 seconds, not {seconds:g}")


def _check_output(output: str) -> None:
    if output not in ("text", "json"):
        _fail(f"--output must be 'text' or 'json', not {output!r}")


def _echo(output: str, report: Any, lines: list[str]) -> None:
    """``report`` as JSON, or ``lines`` as text."""
    typer.echo(json.dumps(report, indent=2) if output == "json" else "\n".join(lines))


def _in_run(question: Callable[[], T]) -> T:
    """The answer about a simulated run (exits with the message of a bad file, pod or
    instant)."""
    try:
        return question()
    except (ValueError, OSError) as error:
        _fail(str(error))
        raise  # unreachable: _fail exits


def run_explain_lines(r: dict[str, Any]) -> list[str]:
    """The text form of :func:`fairgpu.kube.replay.explain_in_run`'s report."""
    lines = [f"Simulated run {r['simulated_run']} at {r['at_label']}:"]
    if r["phase"] == "Succeeded":
        return [*lines, f"Pod {r['pod']} had finished by then."]
    lines.extend(explain_lines(r))
    if r["state"] == "pending":
        started = r["started_in_run"]
        lines.append(
            "In the run: never started after this instant"
            if started is None
            else f"In the run: started at {started} "
            f"({_in(r['started_in_run_after_seconds'])} later)"
        )
    return lines


@dataclass(frozen=True, slots=True)
class Given:
    """The settings a command was given (None: not given, so taken from what the running
    scheduler published, else the defaults of ``fairgpu run``)."""

    config: Path | None
    policy: str | None
    ordering: str | None
    node_pool_label: str | None
    scheduler_name: str = "fairgpu"
    settings_namespace: str = "fairgpu-system"


def _read(
    kubeconfig: str | None, context: str | None, output: str, given: Given
) -> tuple[Any, Any]:
    """The API client and a snapshot of the cluster (exits with a message on bad input)."""
    from fairgpu.kube.client import CONNECTION_ERRORS, RestClient, load_connection
    from fairgpu.kube.snapshot import read_cluster

    _check_output(output)
    if given.ordering not in (None, "fair", "kube-default"):
        _fail(f"--ordering must be 'fair' or 'kube-default', not {given.ordering!r}")
    if given.config is not None and not given.config.exists():
        _fail(f"{given.config}: no such file or directory")
    errors: tuple[type[BaseException], ...] = (ValueError, RuntimeError, *CONNECTION_ERRORS)
    try:
        client = RestClient(load_connection(kubeconfig, context))
        snapshot = read_cluster(client, _settings(client, given))
        snapshot.build()  # a bad tenancy file or policy fails here, once
    except errors as error:
        _fail(str(error) or type(error).__name__)
    return client, snapshot


def _settings(client: Any, given: Given) -> Any:
    """The settings to build the engine with: each one given, else the one the running
    scheduler published (:mod:`~fairgpu.kube.published_settings`), else ``fairgpu run``'s
    default. Says on stderr where they came from, and when a given config is not the one
    the scheduler runs with."""
    from fairgpu.engine.policies import DEFAULT_POLICY
    from fairgpu.kube.published_settings import read_published
    from fairgpu.kube.snapshot import ReadSettings

    defaults = ReadSettings()
    published, where = read_published(client, given.settings_namespace, given.scheduler_name)
    if published is None:
        if given.config is None:
            typer.echo(
                f"note: {where}; without --config every namespace is a queue of weight 1",
                err=True,
            )
        return ReadSettings(
            given.config,
            given.policy or DEFAULT_POLICY,
            given.ordering or defaults.ordering,
            given.scheduler_name,
            given.node_pool_label or defaults.node_pool_label,
        )
    taken: list[str] = []
    tenancy: Path | str | None = given.config
    if given.config is None:
        tenancy = published.tenancy
        taken.append("its tenancy config" if tenancy is not None else "no tenancy config")
    elif given.config.read_text() != (published.tenancy or ""):
        typer.echo(
            f"note: --config {given.config} is not the tenancy config the scheduler runs with "
            f"({where}); these answers follow --config",
            err=True,
        )

    def pick(mine: str | None, theirs: str, default: str, what: str) -> str:
        if mine is not None:
            return mine
        taken.append(f"{what} {theirs or default}")
        return theirs or default

    settings = ReadSettings(
        tenancy + "\n" if isinstance(tenancy, str) and "\n" not in tenancy else tenancy,
        pick(given.policy, published.policy, DEFAULT_POLICY, "policy"),
        pick(given.ordering, published.ordering, defaults.ordering, "ordering"),
        given.scheduler_name,
        pick(
            given.node_pool_label,
            published.node_pool_label,
            defaults.node_pool_label,
            "node-pool label",
        ),
        published.seed,
    )
    if taken:
        when = f", published {published.at}" if published.at else ""
        typer.echo(f"using the scheduler's settings ({where}{when}): " + ", ".join(taken), err=True)
    return settings


# ---- explain ------------------------------------------------------------------------------------
def explain(
    target: Annotated[str, typer.Argument(help="NAMESPACE/POD, or POD with -n.")],
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace.")] = "default",
    output: Output = "text",
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    config: Config = None,
    policy: Policy = None,
    ordering: Ordering = None,
    scheduler_name: SchedulerName = "fairgpu",
    node_pool_label: PoolLabel = None,
    settings_namespace: SettingsFrom = "fairgpu-system",
    run: Run = None,
    at: At = None,
    forecast_budget: Budget = 3.0,
) -> None:
    """Why is this pod pending, and when will it start?

    Its queue, fair order, quota, node reasons and what would help. Live through the
    kubeconfig, or in a simulated run with --run.
    """
    from fairgpu.kube.explain import explain_pod

    ns, _, name = target.rpartition("/")
    ns = ns or namespace
    _check_budget(forecast_budget)
    if run is not None:
        from fairgpu.kube.replay import explain_in_run

        _check_output(output)
        report = _in_run(lambda: explain_in_run(run, f"{ns}/{name}", at, forecast_budget))
        _echo(output, report, run_explain_lines(report))
        return
    client, snapshot = _read(
        kubeconfig,
        context,
        output,
        Given(config, policy, ordering, node_pool_label, scheduler_name, settings_namespace),
    )
    resp = client.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}", limited=False)
    if resp.status == 404:
        _fail(f"pod {ns}/{name} not found")
    if not resp.ok:
        _fail(f"get pod {ns}/{name}: HTTP {resp.status}: {resp.message}")
    snapshot.forecast_budget = forecast_budget
    report = explain_pod(snapshot, ns, name, resp.body)
    if output == "json":
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo("\n".join(explain_lines(report)))


def _gpus(value: float | None) -> str:
    return "unlimited" if value is None else f"{value:g}"


def _queue_line(q: dict[str, Any]) -> str:
    quota = "no quota" if q["nominal_gpus"] is None else f"nominal quota {q['nominal_gpus']:g} GPUs"
    if q["nominal_gpus"] is not None or q["max_gpus"] is not None:
        quota += f", may hold {_gpus(q['max_gpus'])}"
    if q.get("department_max_gpus") is not None:
        quota += (
            f"; department {q['parent']} may hold {q['department_max_gpus']:g} GPUs "
            f"together (holds {q['department_allocated_gpus']:g})"
        )
    n = q["pending_pods"]
    # Departments share first: name the queue's, whose weight its own is weighed within.
    dept = f" (department {q['parent']})" if q.get("parent") else ""
    return (
        f"Queue {q['queue']}{dept}: weight {q['weight']:g}, holds {q['allocated_gpus']:g} GPUs, "
        f"fair share {q['fair_share_gpus']:g} GPUs ({_state(q)}); {quota}; "
        f"borrowing {q['borrowed_gpus']:g} GPUs; {n} pod{'' if n == 1 else 's'} pending "
        f"({q['pending_gpus']:g} GPUs)"
    )


def _state(q: dict[str, Any]) -> str:
    held, fair = q["allocated_gpus"], q["fair_share_gpus"]
    if held < fair:
        return "below its fair share"
    return "at its fair share" if held == fair else "above its fair share"


def explain_lines(r: dict[str, Any]) -> list[str]:
    """The text form of :func:`fairgpu.kube.explain.explain_pod`'s report."""
    who = f"queue {r.get('queue', '?')}, user {r.get('user', '?')}"
    if r["state"] == "bound":
        bound = f"Pod {r['pod']} ({who}) is bound to node {r['node']}; phase {r['phase']}."
        if r.get("deadline"):
            bound += (
                f" The kubelet fails it at {r['deadline']} if it still runs then "
                "(activeDeadlineSeconds)."
            )
        unread = []
        if r.get("error"):
            unread = [
                f"The scheduler cannot read it ({r['error']}); it counts the pod with the "
                "resources it asks on its node (its GPUs as whole devices if that ask is "
                "what it cannot read)."
            ]
        return [bound, *unread, *_group_line(r), *_to_create_line(r), *_job_line(r)]
    if r["state"] == "not ours":
        return [
            f"Pod {r['pod']} is not pending for this scheduler "
            f"(spec.schedulerName {r['scheduler']!r}, phase {r['phase'] or 'unknown'})."
        ]
    if r["state"] == "invalid":
        return [
            f"Pod {r['pod']} ({who}) is pending and will stay so: {r['error']}",
            "No node, queue or wait changes that; the object must be fixed (a spec field: "
            "the pod created again).",
        ]
    if r["state"] == "no queue":
        return [
            f"Pod {r['pod']} is pending and not tried: it has no queue: {r['tenant_error']}",
            "It is tried once its queue exists (the tenancy config names it; the scheduler "
            "reads the config at start) or its labels name one that does.",
        ]
    lines = [f"Pod {r['pod']} ({who}) is {r['state']}."]
    if r["scheduling_gates"]:
        lines.append(
            f"Scheduling gates: {', '.join(r['scheduling_gates'])} (not tried until removed)"
        )
    if r.get("queue_state"):
        lines.append(_queue_line(r["queue_state"]))
    lines.append(
        f"Quota: {'the queue admits it' if r['queue_admits'] == 'yes' else r['queue_admits']}"
    )
    order = r["fair_order"]
    if order["position"] is None and r["state"] == "pending":
        lines.append(f"Order ({r['ordering']}): not tried until its pod group can start")
    if order["position"] is not None:
        ahead = order["queues_ahead"]
        group = f" (a pod group of {order['job_pods']})" if order["job_pods"] > 1 else ""
        lines.append(
            f"Order ({r['ordering']}): job {order['position']} of {order['of']} pending{group}"
            + (f"; queues tried first (lower share): {', '.join(ahead)}" if ahead else "")
        )
    nodes = r["nodes"]
    if r["fits_now"] and r["fair_order"]["job_pods"] > 1:
        nodes += f" (this pod alone; its group needs {_group_places(r)})"
    lines.append(f"Nodes: {nodes}")
    lines.extend(_freed_lines(r))
    lines.append(_next_line(r["next_cycle"]))
    if r.get("reservation"):
        lines.append(f"Reservation: {r['reservation']}")
    if r.get("nominated_node"):
        lines.append(f"Nominated to {r['nominated_node']}: waiting for its victims to leave")
    if r.get("scheduler_said"):
        lines.append(f"Scheduler said at {r['scheduler_said_at']}: {r['scheduler_said']}")
    lines.append(_predicted_line(r))
    lines.extend(_group_line(r))
    lines.extend(_to_create_line(r))
    lines.extend(_job_line(r))
    return lines


def _group_line(r: dict[str, Any]) -> list[str]:
    """The LeaderWorkerSet group of the pod, as its pods stand (none for other pods)."""
    g = r.get("leader_worker_group")
    if not g:
        return []
    size = f" of {g['size']}" if g["size"] is not None else ""
    return [
        f"LeaderWorkerSet {g['set']} group {g['group']}: {g['running']}{size} pod(s) running, "
        f"{g['pending']} pending; one evicted pod restarts the whole group (its pods are "
        "placed one by one unless a pod group holds them together)"
    ]


def _to_create_line(r: dict[str, Any]) -> list[str]:
    """The pods the pod's StatefulSet (or, a leader's, its workers' set) is still to create
    and when the last is predicted to start (none for other pods)."""
    c = r.get("to_create")
    if not c:
        return []
    gate = f"once {c['after']} starts" if c["after"] else "at once"
    if c["at_once"]:
        how = f"all {gate}"
    elif c["pods_to_create"] == 1:
        how = gate
    else:
        how = f"the first {gate}, each other once the one before starts"
    head = (
        f"{c['controller']}: {c['pods_in_cluster']} pod(s) in the cluster, "
        f"{c['pods_to_create']} still to be created ({how})"
    )
    if c["last_start"] is None:
        why = _unknown(r, c["forecast_out_of_budget"], "it waits on pods whose run time is unknown")
        return [f"{head}; the last one's start: unknown: {why}"]
    return [
        f"{head}; the last one predicted to start {c['last_start']} "
        f"(in {_in(c['last_start_in_seconds'])})"
    ]


def _job_line(r: dict[str, Any]) -> list[str]:
    """How far the pod's Job is and when it is predicted to end (none for other pods)."""
    job = r.get("job")
    if not job:
        return []
    progress = (
        f"Job {job['job']}: {job['succeeded']} of {job['completions']} completions succeeded, "
        f"{job['pods_in_cluster']} pod(s) in the cluster, {job['pods_to_create']} still to be "
        "created"
    )
    deadline = f" (deadline {job['deadline']})" if job.get("deadline") else ""
    failure = job.get("predicted_failure")
    if failure:
        return [
            f"{progress}; predicted to FAIL {failure['at']} (in {_in(failure['in_seconds'])}), "
            f"{failure['succeeded_by_then']} of {job['completions']} completions succeeded by "
            f"then: {failure['why']}"
        ]
    if job["predicted_end"] is None:
        why = _unknown(
            r, job["forecast_out_of_budget"], "some of its pods wait on run times nobody declared"
        )
        return [f"{progress}; its end: unknown: {why}"]
    return [
        f"{progress}; predicted to end {job['predicted_end']} "
        f"(in {_in(job['predicted_end_in_seconds'])}){deadline}, if pods run as declared"
    ]


def _in(seconds: float) -> str:
    """A duration for people: ``45s``, ``12m``, ``3h05m``, ``2d4h``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def _predicted_line(r: dict[str, Any]) -> str:
    """When the pod is predicted to start, and what the scheduler's own forecast said."""
    theirs = r.get("scheduler_predicted_start")
    said = f" (the scheduler's forecast: {theirs})" if theirs else ""
    if r.get("predicted_deleted"):
        return (
            f"Predicted start: none: it is predicted to be deleted first: {r['predicted_deleted']}"
        )
    if r.get("predicted_start") is None:
        why = _unknown(
            r,
            r.get("forecast_out_of_budget"),
            "it waits on pods whose run time is unknown (no fairgpu.io/duration-seconds)",
        )
        return f"Predicted start: unknown: {why}{said}"
    return (
        f"Predicted start: {r['predicted_start']} (in {_in(r['predicted_in_seconds'])}), "
        f"if nothing else arrives and pods run as declared{said}"
    )


def _taken_down(victim: dict[str, Any]) -> str:
    """What else goes when a fragile Job's pod does: its Job's other pods, or its JobSet's."""
    if victim.get("jobset"):
        return f"JobSet {victim['jobset']} restarts or fails, and all its pods go too"
    return "and its other pods go too"


def _unknown(r: dict[str, Any], out_of_budget: bool | None, otherwise: str) -> str:
    """Why a forecast has no time for the pod of report ``r``: it fits on no node even when
    they are empty (nothing ending helps), the forecast's budget ran out, or ``otherwise``."""
    pending = r.get("state", r.get("outcome")) == "pending"  # explain's state, what-if's outcome
    if pending and not r.get("fits_now") and not r.get("fits_on_empty_nodes"):
        # what-if prints no 'Even on empty nodes' line when it would repeat the pod's reason
        shown = r.get("empty_nodes_reason") != r.get("reason")
        return "it fits on no node, even an empty one" + (
            " (see 'Even on empty nodes')" if shown else ""
        )
    return "the forecast ran out of time" if out_of_budget else otherwise


def _group_places(r: dict[str, Any]) -> str:
    """What the pending pod's group needs: its places together, in one topology domain when
    its members must (or should) share one."""
    places = f"{r['fair_order']['job_pods']} places together"
    topology = r.get("gang_topology")
    if not topology:
        return places
    required, preferred = topology["required"], topology["preferred"]
    if required is None:
        return f"{places} in one {preferred} domain, if one holds them"
    finer = f", in one {preferred} domain if one holds them" if preferred else ""
    return f"{places} in one {required} domain{finer}"


def _freed_lines(r: dict[str, Any]) -> list[str]:
    if r["fits_now"] or r["state"] == "gated":
        return []
    empty = r["fits_on_empty_nodes"]
    if not empty:
        return [f"Even on empty nodes: {r['empty_nodes_reason']}"]
    group = r["fair_order"]["job_pods"]
    needs = f" (this pod; its group needs {_group_places(r)})" if group > 1 else ""
    lines = [f"Fits on {len(empty)} of {r['nodes_total']} nodes when they are empty{needs}."]
    for item in r["if_freed"]:
        gone = ", ".join(
            f"{v['pod']} (queue {v['queue']}, priority {v['priority']}"
            + (
                ("; it may run elsewhere now: relocation" if v.get("runs_elsewhere") else "")
                if v["preemptible_by_rules"]
                else f"; no preemption: {v['not_preemptible_because']}"
            )
            + (
                f"; its Job fails with it, {_taken_down(v)}: {', '.join(v['job_fails_with_it'])}"
                if v.get("job_fails_with_it")
                else ""
            )
            + (
                "; its LeaderWorkerSet group restarts with it: "
                + ", ".join(v["group_restarts_with_it"])
                if v.get("group_restarts_with_it")
                else ""
            )
            + ")"
            for v in item["would_have_to_go"]
        )
        lines.append(f"  {item['node']}: fits if these left: {gone}")
    return lines


def _next_line(d: dict[str, Any]) -> str:
    if d["outcome"] == "bind":
        victims = ", ".join(f"{v['pod']} ({v['kind']})" for v in d["preempts"])
        return f"Next cycle: would bind to {d['node']}" + (
            f", preempting {victims}" if victims else ""
        )
    return f"Next cycle: stays pending: {d['reason']}"


# ---- queues ---------------------------------------------------------------------------------
def queues(
    output: Output = "text",
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    config: Config = None,
    policy: Policy = None,
    ordering: Ordering = None,
    scheduler_name: SchedulerName = "fairgpu",
    node_pool_label: PoolLabel = None,
    settings_namespace: SettingsFrom = "fairgpu-system",
    run: Run = None,
    at: At = None,
    forecast_budget: Budget = 3.0,
) -> None:
    """One row per queue: its share, what it holds and waits for, when its backlog drains.

    Weight, fair share, allocated, pending pods and GPUs, borrowed, its pods preempted in the
    last hour, and when its backlog is predicted to drain. Live, or in a simulated run with
    --run.
    """
    from fairgpu.kube.explain import queue_rows
    from fairgpu.kube.snapshot import read_preemptions

    _check_budget(forecast_budget)
    if run is not None:
        from fairgpu.kube.replay import queues_in_run

        _check_output(output)
        answer = _in_run(lambda: queues_in_run(run, at, forecast_budget))
        head = f"Simulated run {answer['simulated_run']} at {answer['at_label']}:"
        _echo(output, answer, [head, *queue_table(answer["queues"])])
        return
    client, snapshot = _read(
        kubeconfig,
        context,
        output,
        Given(config, policy, ordering, node_pool_label, scheduler_name, settings_namespace),
    )
    snapshot.forecast_budget = forecast_budget
    snapshot.preemptions = read_preemptions(client)
    rows = queue_rows(snapshot)
    if output == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    typer.echo("\n".join(queue_table(rows)))


QUEUE_COLUMNS = (
    ("QUEUE", "queue"),
    ("WEIGHT", "weight"),
    ("FAIR-SHARE", "fair_share_gpus"),
    ("ALLOCATED", "allocated_gpus"),
    ("PENDING-PODS", "pending_pods"),
    ("PENDING-GPUS", "pending_gpus"),
    ("TO-CREATE", "pods_to_create"),
    ("NOMINAL", "nominal_gpus"),
    ("BORROWED", "borrowed_gpus"),
    ("PREEMPTED-1H", "preemptions_last_hour"),
    ("DRAINS", "drains_at"),
)


def aligned(cells: list[list[str]]) -> list[str]:
    """Rows of cells as kubectl prints them: each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def queue_table(rows: list[dict[str, Any]]) -> list[str]:
    """kubectl-style columns (GPU amounts in GPUs; TO-CREATE: pods its Jobs are still to
    create; NOMINAL '-' for no quota; PREEMPTED-1H: its pods preempted in the last hour;
    DRAINS: when the last pending pod -- or pod still to be created -- is predicted to start,
    '-' with nothing pending). When some queue is in a department, a DEPARTMENT column
    follows QUEUE ('-' for a queue without one): a queue's weight counts only within its
    department, as departments share first. MAX (the most a queue may hold: its quota and
    borrowing limit, or its limit) shows when some queue's differs from its nominal quota,
    DEPT-MAX (its department's limit, over its queues together) when some department sets
    one."""
    columns = list(QUEUE_COLUMNS)
    if any(row.get("max_gpus") not in (None, row.get("nominal_gpus")) for row in rows):
        columns.insert(columns.index(("NOMINAL", "nominal_gpus")) + 1, ("MAX", "max_gpus"))
    if any(row.get("parent") for row in rows):
        columns.insert(1, ("DEPARTMENT", "parent"))
        if any(row.get("department_max_gpus") is not None for row in rows):
            columns.insert(2, ("DEPT-MAX", "department_max_gpus"))
    cells = [[h for h, _ in columns]]
    for row in rows:
        cells.append([_queue_cell(row, k) for _, k in columns])
    return aligned(cells)


def _queue_cell(row: dict[str, Any], key: str) -> str:
    """One cell of :func:`queue_table`."""
    value = row.get(key)
    if (key == "drains_at" and not row["drain_known"]) or (
        key == "preemptions_last_hour" and value is None
    ):
        return "unknown"
    if value is None or (key == "parent" and not value):
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


# ---- jobs -------------------------------------------------------------------------------------
def jobs(
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only this namespace's Jobs.")
    ] = None,
    output: Output = "text",
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    config: Config = None,
    policy: Policy = None,
    ordering: Ordering = None,
    scheduler_name: SchedulerName = "fairgpu",
    node_pool_label: PoolLabel = None,
    settings_namespace: SettingsFrom = "fairgpu-system",
    run: Run = None,
    at: At = None,
    forecast_budget: Budget = 3.0,
) -> None:
    """One row per batch/v1 Job still running or to run, and when it is predicted to end.

    Its queue, completions succeeded, pods running, pending and still to be created, and when
    it is predicted to end. Live, or in a simulated run with --run.
    """
    from fairgpu.kube.explain import job_rows

    _check_budget(forecast_budget)
    if run is not None:
        from fairgpu.kube.replay import jobs_in_run

        _check_output(output)
        answer = _in_run(lambda: jobs_in_run(run, at, namespace, forecast_budget))
        head = f"Simulated run {answer['simulated_run']} at {answer['at_label']}:"
        _echo(output, answer, [head, *job_table(answer["jobs"])])
        return
    _, snapshot = _read(
        kubeconfig,
        context,
        output,
        Given(config, policy, ordering, node_pool_label, scheduler_name, settings_namespace),
    )
    snapshot.forecast_budget = forecast_budget
    rows = job_rows(snapshot, namespace)
    _echo(output, rows, job_table(rows))


JOB_COLUMNS = (
    ("JOB", "job"),
    ("QUEUE", "queue"),
    ("SUCCEEDED", "succeeded"),
    ("RUNNING", "running"),
    ("PENDING", "pending"),
    ("TO-CREATE", "pods_to_create"),
    ("ENDS", "predicted_end"),
)


def job_table(rows: list[dict[str, Any]]) -> list[str]:
    """kubectl-style columns (SUCCEEDED: of its completions; ENDS: when its last pod is
    predicted to end, 'FAILS <when> (<reason>)' when it is predicted to fail first,
    'unknown' when the forecast could not tell), or a line saying there is no such Job."""
    if not rows:
        return ["No Job is running or waiting to run."]
    cells = [[h for h, _ in JOB_COLUMNS]]
    for row in rows:
        cells.append(
            [
                f"{row['succeeded']}/{row['completions']}"
                if k == "succeeded"
                else _fails(row["predicted_failure"])
                if k == "predicted_end" and row["predicted_failure"]
                else "unknown"
                if k == "predicted_end" and not row["end_known"]
                else "-"
                if row[k] is None
                else str(row[k])
                for _, k in JOB_COLUMNS
            ]
        )
    return aligned(cells)


def _fails(failure: dict[str, Any]) -> str:
    """A Job's predicted failure in the ENDS column."""
    return f"FAILS {failure['at']} ({failure['reason']})"


# ---- what-if ----------------------------------------------------------------------------------
def what_if(
    file: Annotated[
        list[Path], typer.Option("--filename", "-f", help="YAML with Pods/Deployments/PodGroups.")
    ],
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="Namespace of objects that name none."),
    ] = None,
    output: Output = "text",
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    config: Config = None,
    policy: Policy = None,
    ordering: Ordering = None,
    scheduler_name: SchedulerName = "fairgpu",
    node_pool_label: PoolLabel = None,
    settings_namespace: SettingsFrom = "fairgpu-system",
    run: Run = None,
    at: At = None,
    forecast_budget: Budget = 3.0,
) -> None:
    """Where would these pods go now, or which rule stops them? Creates nothing.

    Where and when they would start. Live, or in a simulated run with --run (default --at:
    when the most pods waited).
    """
    from fairgpu.kube.explain import what_if as answer

    _check_budget(forecast_budget)
    if run is not None:
        from fairgpu.kube.replay import busiest_instant, replay_snapshot

        _check_output(output)
        snapshot = _in_run(lambda: replay_snapshot(run, busiest_instant(run) if at is None else at))
        client = None
    else:
        client, snapshot = _read(
            kubeconfig,
            context,
            output,
            Given(config, policy, ordering, node_pool_label, scheduler_name, settings_namespace),
        )
    snapshot.forecast_budget = forecast_budget
    pool_label = snapshot.settings.node_pool_label
    pods, groups, later = _load_pods(file, client, snapshot, pool_label, namespace)
    rows = answer(snapshot, pods, groups)
    for row, pod in zip(rows, pods, strict=True):
        if pod.scheduler_name != scheduler_name:
            row["note"] = (
                f"spec.schedulerName is {pod.scheduler_name!r}: {scheduler_name} would not "
                "schedule it; shown as if it were set"
            )
    if output == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        head = f"{row['pod']} (queue {row['queue']}, user {row['user']}): "
        if row["outcome"] == "bind":
            victims = ", ".join(f"{v['pod']} ({v['kind']})" for v in row["preempts"])
            typer.echo(
                head
                + f"would start on {row['node']}"
                + (f" after preempting {victims}" if victims else " now")
            )
        elif row["outcome"] == "refused":
            typer.echo(head + f"the API server would refuse it: {row['reason']}")
        else:
            typer.echo(head + f"would stay pending: {row['reason']}")
            if row.get("fits_on_empty_nodes") == [] and row["empty_nodes_reason"] != row["reason"]:
                typer.echo(f"  Even on empty nodes: {row['empty_nodes_reason']}")
            if "predicted_start" in row:
                typer.echo(f"  {_predicted_line(row)}")
        if row.get("note"):
            typer.echo(f"  note: {row['note']}")
    for line in later:
        typer.echo(line)


def _with_namespace(paths: list[Path], namespace: str | None, tmp: Path) -> list[Path]:
    """``paths``, or one file of their documents with ``namespace`` set where none is."""
    if namespace is None:
        return paths
    import yaml

    from fairgpu.sim.workloads.kube_yaml import read_documents

    docs = [doc for _, doc in read_documents(paths)]
    for doc in docs:
        meta = doc.setdefault("metadata", {})
        if isinstance(meta, dict) and not meta.get("namespace"):
            meta["namespace"] = namespace
    out = tmp / "objects.yaml"
    out.write_text(yaml.safe_dump_all(docs))
    return [out]


def _load_pods(
    paths: list[Path], client: Any, snapshot: Any, pool_label: str, namespace: str | None
) -> tuple[list[Any], dict[str, int], list[str]]:
    """The pods of ``paths`` as the API server would admit them: priority and preemption
    policy from the cluster's PriorityClasses (and the files' own), created now; a missing
    namespace or class is the pod's error. Without a ``client`` (a simulated run): the run's
    PriorityClasses, and every namespace exists. Also their pod groups, and a line for each
    Job or StatefulSet that creates only some of its pods at first (the others are not asked
    about)."""
    import tempfile

    from fairgpu.api import objects as k8s
    from fairgpu.kube.snapshot import list_objects
    from fairgpu.model.node_pools import NodePoolConfig
    from fairgpu.model.priority import PriorityClasses
    from fairgpu.sim.job_controller import JobController
    from fairgpu.sim.statefulset_controller import OrderedCreation
    from fairgpu.sim.workloads.kube_yaml import load_kube_yaml

    try:
        if client is None:
            classes = snapshot.sim.workload.extra.get("priority_classes") or PriorityClasses()
        else:
            classes = PriorityClasses(
                list_objects(
                    client,
                    "/apis/scheduling.k8s.io/v1/priorityclasses",
                    lambda raw: k8s.decode_json(raw, k8s.PriorityClass),
                )
            )
        with tempfile.TemporaryDirectory(prefix="fairgpu-what-if-") as tmp:
            files = _with_namespace(list(paths), namespace, Path(tmp))
            workload = load_kube_yaml(files, NodePoolConfig(usage_key=pool_label), classes)
    except (ValueError, OSError, RuntimeError) as error:
        _fail(str(error))
    # A Job's first pods: the others are created only as those succeed; an OrderedReady
    # StatefulSet's first pod: the others only once the one before runs.
    arrivals = JobController(workload.jobs, workload.arrivals).initial(workload.arrivals)
    ordered = OrderedCreation(workload.ordered, workload.arrivals, workload.fanned)
    arrivals = ordered.initial(arrivals)
    if not arrivals:
        suspended = workload.extra.get("suspended") or []
        why = f" (suspended: {', '.join(suspended)})" if suspended else ""
        _fail(
            f"{', '.join(map(str, paths))}: no Pods, Deployments, StatefulSets, "
            f"LeaderWorkerSets, Jobs or JobSets{why}"
        )
    namespaces = {name for name, _ in snapshot.namespaces}
    pods = []
    for arrival in arrivals:
        pod = arrival.pod
        pod.created = pod.created or snapshot.now
        if pod.error is None and client is not None and pod.namespace not in namespaces:
            pod.error = f"Pod {pod.key}: namespace {pod.namespace!r} not found"
        pods.append(pod)
    later = [
        f"Job {job.key}: {job.first} of its {len(job.pods)} pods are created at first; its "
        "controller creates each other one when one of them succeeds"
        for job in workload.jobs
        if len(job.pods) > job.first
    ]
    by_uid = {a.pod.uid: a.pod for a in workload.arrivals}
    later.extend(
        f"StatefulSet {by_uid[chain[0]].namespace}/{by_uid[chain[0]].name.rpartition('-')[0]}: "
        f"its pod {by_uid[chain[0]].name} is created first; each other one of its "
        f"{len(chain)} once the one before it runs (podManagementPolicy OrderedReady)"
        for chain in workload.ordered
    )
    later.extend(
        f"LeaderWorkerSet group of {by_uid[fan[0]].key}: its leader is created first; its "
        f"{len(fan) - 1} worker(s) once it runs (startupPolicy LeaderReady)"
        for fan in workload.fanned
    )
    return pods, dict(workload.pod_groups), later


def command_help(command: Callable[..., object]) -> str:
    """``command``'s docstring as ``--help`` shows it: each paragraph on one line, so the
    terminal wraps it (the help formatter keeps a docstring's own line breaks)."""
    text = inspect.cleandoc(command.__doc__ or "")
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))


def register(app: typer.Typer) -> None:
    """Add ``explain``, ``queues``, ``jobs`` and ``what-if`` to ``app``."""
    for name, command in (
        ("explain", explain),
        ("queues", queues),
        ("jobs", jobs),
        ("what-if", what_if),
    ):
        app.command(name, help=command_help(command))(command)


kubectl_app = typer.Typer(
    help="fairgpu for kubectl: why is my pod pending, the queues, when will my Job end, what "
    "if I submit this.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
register(kubectl_app)
