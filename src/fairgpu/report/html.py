"""A self-contained HTML page for one simulation: headline figures, tenant table and plots.

Plots are rendered with matplotlib to PNG and inlined as base64, so the page is one file that
opens anywhere without a network connection.
"""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from fairgpu.sim.accounting import GANG_WAIT
from fairgpu.sim.forecast import PredictionSample
from fairgpu.sim.results import kinds_text
from fairgpu.sim.simulator import SimulationResult


class ReportUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - depends on the install
        raise ReportUnavailable(
            "the HTML report needs matplotlib: pip install 'fairgpu[report]'"
        ) from None
    return plt


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _hours(times: list[float]) -> tuple[np.ndarray, str]:
    t = np.asarray(times, dtype=float)
    span = t.max() - t.min() if t.size else 0.0
    if span > 3 * 3600:
        return t / 3600.0, "simulated time (hours)"
    if span > 300:
        return t / 60.0, "simulated time (minutes)"
    return t, "simulated time (s)"


def _plots(result: SimulationResult, fair: Any | None) -> list[tuple[str, str]]:
    plt = _pyplot()
    tl = result.timeline
    cap = max(result.gpu_capacity_milli, 1)
    x, xlabel = _hours(tl.time)
    out: list[tuple[str, str]] = []

    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.step(x, 100.0 * np.asarray(tl.gpu_allocated_milli) / cap, where="post", color="#2b6cb0")
    ax.set_ylabel("GPU allocated (%)")
    ax.set_xlabel(xlabel)
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    out.append(("GPU allocation over time", _png(fig)))

    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.step(x, tl.pending, where="post", color="#c05621", label="pending")
    ax.step(x, tl.running, where="post", color="#2f855a", label="running")
    ax.set_ylabel("pods")
    ax.set_xlabel(xlabel)
    ax.legend()
    ax.grid(alpha=0.3)
    out.append(("Pending and running pods over time", _png(fig)))

    waits = np.asarray([r.wait for r in result.records if r.wait is not None], dtype=float)
    fig, ax = plt.subplots(figsize=(9, 3.2))
    if waits.size:
        srt = np.sort(waits)
        ax.plot(srt / 60.0, np.arange(1, srt.size + 1) / srt.size * 100.0, color="#6b46c1")
        ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("wait from arrival to start (minutes)")
    ax.set_ylabel("pods started (%)")
    ax.grid(alpha=0.3)
    out.append(("Wait-time distribution (CDF)", _png(fig)))

    tenants = sorted(tl.tenant_gpu_milli)
    if tenants:
        fig, ax = plt.subplots(figsize=(9, 3.6))
        ys = [100.0 * np.asarray(tl.tenant_gpu_milli[t], dtype=float) / cap for t in tenants]
        ax.stackplot(x, *ys, labels=tenants, step="post", alpha=0.85)
        ax.set_ylabel("GPU allocated (% of cluster)")
        ax.set_xlabel(xlabel)
        ax.set_ylim(0, 105)
        ax.legend(loc="upper left", fontsize=8, ncol=min(len(tenants), 6))
        ax.grid(alpha=0.3)
        out.append(("GPU allocation per tenant over time", _png(fig)))

    if tl.fragmentation_milli:
        fig, ax = plt.subplots(figsize=(9, 3.2))
        ax.step(x, 100.0 * np.asarray(tl.fragmentation_milli) / cap, where="post", color="#b83280")
        ax.set_ylabel("fragmented GPU (% of cluster)")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        out.append(("GPU fragmentation: idle GPU compute no pending pod shape can use", _png(fig)))
    if fair is not None:
        out.append(
            ("Each tenant: useful GPUs against its pool-aware fair share", _share_plot(fair))
        )
    if result.runs:
        out.append(
            (
                "Lost work: GPU-hours of stopped runs and of gang members waiting for their group",
                _lost_plot(result),
            )
        )
    return out


def _share_plot(tl: Any) -> str:
    """One panel per tenant: useful allocation and pool-aware fair share (GPUs) over time,
    with the intervals it was backlogged shaded."""
    plt = _pyplot()
    tenants = sorted(tl.fair)
    x, xlabel = _hours(list(tl.times))
    fig, axes = plt.subplots(len(tenants), 1, figsize=(9, 1.8 * len(tenants) + 0.6), sharex=True)
    for ax, t in zip(np.atleast_1d(axes), tenants, strict=True):
        ax.plot(x, tl.useful[t] / 1000.0, color="#2f855a", lw=1, label="useful allocation")
        ax.plot(x, tl.fair[t] / 1000.0, color="#c05621", lw=1, ls="--", label="fair share")
        top = max(float(tl.fair[t].max()), float(tl.useful[t].max()), 1.0) / 1000.0
        ax.fill_between(x, 0, top, where=tl.backlogged[t], color="#edf2f7", step="mid")
        ax.set_ylabel(f"{t}\nGPUs", fontsize=8)
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].legend(loc="upper right", fontsize=8, ncol=2)
    np.atleast_1d(axes)[-1].set_xlabel(xlabel + "; shaded: backlogged")
    return _png(fig)


def _lost_plot(result: SimulationResult) -> str:
    """Cumulative GPU-hours of run attempts that were stopped before their work counted, and
    of the time gang members held GPUs waiting for their group (``gang-wait``)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    lost = sorted(
        (a.end or 0.0, a.outcome, a.gpu_seconds())
        if not a.useful
        # counted when the wait ends: at the rendezvous, or at the clock's stop
        else (
            min(a.work_start or math.inf, a.end or 0.0),
            GANG_WAIT,
            a.waited_gpu_seconds(),
        )
        for a in result.runs
        if not a.useful or a.work_start != a.start
    )
    ends = [e for e, _, _ in lost]
    x, xlabel = _hours([*ends, result.end_time])
    for outcome in sorted({o for _, o, _ in lost}):
        y = np.cumsum([g / 3600.0 if o == outcome else 0.0 for _, o, g in lost])
        ax.step(x[:-1], y, where="post", label=outcome)
    ax.set_ylabel("lost GPU-hours (cumulative)")
    ax.set_xlabel(xlabel)
    if lost:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def _cards(summary: dict[str, Any]) -> str:
    acc = summary.get("accounting", {})
    items = [
        ("GPU allocation (time avg)", f"{summary.get('gpu_allocation_avg_pct')} %"),
        ("GPU allocation (peak)", f"{summary.get('gpu_allocation_peak_pct')} %"),
        ("pods started", f"{summary.get('pods_started')} / {summary.get('pods')}"),
        ("wait p50 / p99", f"{summary.get('wait_p50_s')} s / {summary.get('wait_p99_s')} s"),
        ("preemptions", str(summary.get("preemptions"))),
        ("lost GPU time (% of capacity)", f"{acc.get('lost_pct_of_capacity')} %"),
        ("useful GPU allocation", f"{acc.get('useful_allocation_pct')} %"),
        ("reversals within 10 min", str(acc.get("reversals", {}).get("10min"))),
        ("most starts of one gang", str(acc.get("max_gang_starts"))),
        ("policy", str(summary.get("policy"))),
    ]
    notes = {"preemptions": kinds_text(summary, " · ")}  # under the count, small
    return "".join(
        f'<div class="card"><div class="k">{html.escape(k)}</div>'
        f'<div class="v">{html.escape(v)}</div>'
        + (f'<div class="n">{html.escape(notes[k])}</div>' if notes.get(k) else "")
        + "</div>"
        for k, v in items
    )


def _blank(value: object) -> object:
    """``value``, or an empty cell for None."""
    return "" if value is None else value


def _jobs_section(summary: dict[str, Any]) -> str:
    """A table of the run's batch/v1 Jobs (``summary["jobs"]``) and a list of its JobSet
    restarts, "" when it had no Job."""
    jobs = summary.get("jobs") or {}
    if not jobs:
        return ""
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (
                name,
                f"{j['succeeded']} / {j['completions']}",
                _blank(j.get("arrival_s")),
                _blank(j.get("first_start_s")),
                _blank(j.get("finished_s")),
                _blank(j.get("failed_reason")),
            )
        )
        + "</tr>"
        for name, j in jobs.items()
    )
    restarts = "".join(
        f"<li>JobSet {html.escape(r['jobset'])} restarted at {r['at_s']} s: "
        f"{html.escape(r['why'])}</li>"
        for r in summary.get("jobset_restarts") or []
    )
    return (
        "<h2>Jobs</h2><table><thead><tr><th>job</th><th>succeeded / completions</th>"
        "<th>created (s)</th><th>first start (s)</th><th>finished (s)</th><th>failed</th>"
        "</tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        + (
            f"<p>JobSet restarts (every Job created again, all pods starting over):</p>"
            f"<ul>{restarts}</ul>"
            if restarts
            else ""
        )
    )


def _never_started_section(summary: dict[str, Any]) -> str:
    """Why the pods that never started did not (``summary["never_started"]``): each last
    reason, how many pods it held back and one of them; "" when every pod started."""
    rows = summary.get("never_started") or []
    if not rows:
        return ""
    count = summary.get("pods_never_started", 0)
    body = "".join(
        f"<tr><td>{html.escape(r['reason'])}</td><td>{r['pods']}</td>"
        f"<td>{html.escape(r['example'])}</td></tr>"
        for r in rows
    )
    return (
        f"<h2>Never started ({count} pod{'s' * (count != 1)})</h2>"
        '<table class="reasons"><thead><tr><th>last reason</th><th>pods</th><th>for example</th>'
        f"</tr></thead><tbody>{body}</tbody></table>"
    )


def _departments(summary: dict[str, Any]) -> bool:
    """Is some tenant in a department (then the tenant table shows a department column)?"""
    return any("department" in t for t in summary.get("tenants", {}).values())


def _tenant_rows(summary: dict[str, Any], departments: bool) -> str:
    """The tenant table's rows; ``departments``: with each tenant's department."""
    rows = []
    for tenant, t in summary.get("tenants", {}).items():
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(v))}</td>"
                for v in (
                    tenant,
                    *([t.get("department", "-")] if departments else []),
                    t.get("pods"),
                    t.get("started"),
                    t.get("gpu_share_of_capacity_pct"),
                    _blank(t.get("fair_share_pct")),
                    _blank(t.get("useful_share_pct")),
                    _blank(t.get("useful_over_fair")),
                    _blank(t.get("deficit_locked_pct")),
                    t.get("wait_p50_s"),
                    t.get("wait_p99_s"),
                )
            )
            + "</tr>"
        )
    return "".join(rows)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
max-width:1000px;color:#1a202c;padding:0 1rem}
h1{margin-bottom:.2rem} .sub{color:#4a5568;margin-top:0}
.cards{display:grid;grid-template-columns:repeat(3,1fr);gap:.8rem;margin:1.2rem 0}
.card{border:1px solid #e2e8f0;border-radius:8px;padding:.7rem 1rem;background:#f7fafc}
.k{font-size:.8rem;color:#4a5568;text-transform:uppercase;letter-spacing:.04em}
.v{font-size:1.4rem;font-weight:600;margin-top:.2rem}
.n{font-size:.8rem;color:#4a5568;margin-top:.1rem}
table{border-collapse:collapse;width:100%;margin:1rem 0} th,td{border-bottom:1px solid #e2e8f0;
padding:.35rem .6rem;text-align:right} th:first-child,td:first-child{text-align:left}
.dept th:nth-child(2),.dept td:nth-child(2){text-align:left}
.reasons th:nth-child(3),.reasons td:nth-child(3){text-align:left}
th{background:#edf2f7} figure{margin:1.5rem 0} figcaption{font-weight:600;margin-bottom:.4rem}
img{max-width:100%} code{background:#edf2f7;padding:0 .25rem;border-radius:3px}
"""


def _page(title: str, subtitle: str, body: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_CSS}</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="sub">{html.escape(subtitle)}</p>
{body}
</body></html>
"""


def _figure(title: str, data: str) -> str:
    return (
        f"<figure><figcaption>{html.escape(title)}</figcaption>"
        f'<img alt="{html.escape(title)}" src="data:image/png;base64,{data}"></figure>'
    )


def _minutes(seconds: float | None) -> str:
    """Whole minutes; a pod that arrived seconds before the instant shows 0, not -0."""
    return "-" if seconds is None else str(round(seconds / 60))


def _prediction_plot(sample: PredictionSample) -> str:
    """One line per pod: arrived .. predicted (hollow) and actual (filled) start, in minutes
    after the instant of the prediction."""
    plt = _pyplot()
    rows = sample.rows
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.2))
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        ends = [t for t in (r.predicted, r.actual) if t is not None]
        ax.plot(
            [(r.arrival - sample.at) / 60, (max(ends, default=sample.at) - sample.at) / 60],
            [y, y],
            color="#cbd5e0",
            lw=1,
        )
        if r.predicted is not None:
            ax.plot((r.predicted - sample.at) / 60, y, "o", mfc="none", mec="#2b6cb0", ms=8)
        if r.actual is not None:
            ax.plot((r.actual - sample.at) / 60, y, "o", color="#c05621", ms=5)
    ax.axvline(0, color="#718096", lw=0.8, ls="--")
    ax.set_yticks(range(len(rows)), [r.pod for r in reversed(rows)], fontsize=8)
    ax.set_xlabel("minutes after the prediction (dashed line); grey: waiting since arrival")
    ax.plot([], [], "o", mfc="none", mec="#2b6cb0", label="predicted start")
    ax.plot([], [], "o", color="#c05621", label="actual start")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(alpha=0.3, axis="x")
    return _png(fig)


def _prediction_section(sample: PredictionSample | None) -> str:
    """Predicted against actual start of a few pods pending at one instant of the run."""
    if sample is None or not sample.rows:
        return ""
    rows = []
    for r in sample.rows:
        wait = None if r.actual is None else r.actual - r.arrival
        off = None if r.actual is None or r.predicted is None else abs(r.predicted - r.actual)
        rel = "-" if off is None or not wait else f"{100 * off / wait:.0f} %"
        cells = (
            r.pod,
            r.queue,
            _minutes(r.arrival - sample.at),
            _minutes(None if r.predicted is None else r.predicted - sample.at),
            _minutes(None if r.actual is None else r.actual - sample.at),
            _minutes(off),
            rel,
        )
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    intro = (
        f"At t = {sample.at / 3600:.2f} h of the run, {sample.pending} pods were pending. The "
        "forecast the live scheduler runs (the same engine run forward from a snapshot, with "
        "declared run times and no knowledge of later arrivals; "
        f"{sample.wall_seconds:.1f} s of wall time) predicted when each would start; a few of "
        "them, taken in turn from each queue, against when they really started. Times in "
        "minutes after that instant."
    )
    return (
        "<h2>Predicted against actual start</h2>"
        f"<p>{html.escape(intro)}</p>"
        "<table><thead><tr><th>pod</th><th>queue</th><th>arrived</th><th>predicted start</th>"
        "<th>actual start</th><th>off by</th><th>off ÷ wait</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        + _figure("Predicted and actual start of pods pending then", _prediction_plot(sample))
    )


def write_protocol_report(
    result: Any, figures: dict[str, dict[int, tuple[float, float]]], path: Path
) -> None:
    """Report for one FGD-protocol run: allocation vs arrival beside the published means, and
    fragmentation as arrivals accumulate."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.plot(
        result.arrived_pct, result.allocated_pct, color="#2b6cb0", label=f"ours: {result.policy}"
    )
    for name, points in sorted(figures.items()):
        xs = sorted(points)
        ax.plot(xs, [points[x][0] for x in xs], "o--", ms=3, lw=0.8, label=f"{name} (published)")
    ax.plot([0, 100], [0, 100], color="#a0aec0", lw=0.6)
    ax.set_xlim(70, 132)
    ax.set_ylim(70, 100)
    ax.set_xlabel("GPU requested by arrived pods (% of cluster)")
    ax.set_ylabel("GPU allocated (% of cluster)")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    parts = [_figure("GPU allocation as pods arrive", _png(fig))]
    if result.fragmentation_pct:
        arrivals = [a for a, _, _ in result.fragmentation_pct]
        x = np.interp(arrivals, np.arange(1, len(result.arrived_pct) + 1), result.arrived_pct)
        fig, ax = plt.subplots(figsize=(9, 3.2))
        ax.plot(
            x,
            [f for _, f, _ in result.fragmentation_pct],
            color="#b83280",
            label="expected fragmentation (typical pods)",
        )
        ax.plot(x, [i for _, _, i in result.fragmentation_pct], color="#718096", label="idle GPU")
        ax.set_xlabel("GPU requested by arrived pods (% of cluster)")
        ax.set_ylabel("% of cluster GPU")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        parts.append(_figure("GPU fragmentation as pods arrive", _png(fig)))
    rows = "".join(
        f"<tr><td>{pct}%</td><td>{result.gpu_allocation_at.get(pct, float('nan')):.2f}</td>"
        + "".join(
            f"<td>{figures[n][pct][0]:.2f}</td>" if pct in figures[n] else "<td>-</td>"
            for n in sorted(figures)
        )
        + "</tr>"
        for pct in (100, 110, 120, 130)
    )
    head = "".join(f"<th>{html.escape(n)} (published)</th>" for n in sorted(figures))
    table = (
        f"<table><thead><tr><th>arrived</th><th>ours</th>{head}</tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )
    subtitle = (
        f"{result.workload}: {result.nodes} nodes, {result.gpus} GPUs, {result.arrivals} "
        f"arrivals, seed {result.seed}; policy {result.policy} (tie-break {result.tie_break})"
    )
    path.write_text(_page("fairgpu FGD-protocol report", subtitle, table + "".join(parts)))


def write_report(
    result: SimulationResult,
    summary: dict[str, Any],
    path: Path,
    fair_shares: Any | None = None,
    predictions: PredictionSample | None = None,
) -> None:
    """Write the report for ``result`` to ``path`` (a single self-contained HTML file).

    ``fair_shares``: the :class:`fairgpu.sim.results.ShareTimeline` of the run, plotted per
    tenant beside its useful allocation. ``predictions``: predicted against actual starts of
    a few pods pending at one instant (:func:`fairgpu.sim.forecast.predicted_against_actual`)."""
    plots = _plots(result, fair_shares)
    params = summary.get("parameters", {})
    figures = "".join(
        f"<figure><figcaption>{html.escape(title)}</figcaption>"
        f'<img alt="{html.escape(title)}" src="data:image/png;base64,{data}"></figure>'
        for title, data in plots
    )
    param_rows = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>"
        for k, v in params.items()
    )
    # A department column (left-aligned, as names are) when some tenant is in one.
    dept = _departments(summary)
    table_open = '<table class="dept">' if dept else "<table>"
    dept_head = "<th>department</th>" if dept else ""
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>fairgpu simulation report</title>
<style>{_CSS}</style></head><body>
<h1>fairgpu simulation report</h1>
<p class="sub">{html.escape(str(params.get("workload_description", result.workload)))}</p>
<div class="cards">{_cards(summary)}</div>
<h2>Tenants</h2>
{table_open}<thead><tr><th>tenant</th>{dept_head}<th>pods</th><th>started</th>
<th>GPU share (% of cluster, time avg)</th><th>pool-aware fair share (%)</th>
<th>useful share (%)</th>
<th>useful ÷ fair, backlogged</th><th title="the part of its shortfall that fell while
every job it had waiting was larger than the shortfall: reclaim may not take a tenant above
its share, so only others' work ending could start those jobs">shortfall locked by job size
(%)</th><th>wait p50 (s)</th><th>wait p99 (s)</th></tr></thead>
<tbody>{_tenant_rows(summary, dept)}</tbody></table>
{_never_started_section(summary)}
{_jobs_section(summary)}
<h2>Over time</h2>
{figures}
{_prediction_section(predictions)}
<h2>Run parameters</h2>
<table><tbody>{param_rows}</tbody></table>
</body></html>
"""
    path.write_text(page)
