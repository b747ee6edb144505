"""``report.html``: the principals' figures in tables a reader can sort, and a PNG chart for each of the busiest: its
rates over time against the quota in force (from ``QuotasInForce``, its source in the legend), its throttled time
beside them. ``charts.json`` says what each chart drew (its time axis, each line's points), from the figure itself.

A chart's step follows its span, so that any run shows its traffic: a short test run second by second, a day in
minutes, a week in quarter hours (``bin_seconds``); each point is the busiest second of its step (what a quota must
allow), a step without traffic is 0.
"""

from __future__ import annotations

import datetime
import html
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")  # files only, no screen
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from pipeline.quotas_in_force import QuotasInForce, QuotaStep  # noqa: E402
from quotas.config import QuotaType  # noqa: E402

CHARTED_PRINCIPALS = 20
TOP_PRINCIPALS = 10
"""Rows of the tables that come first: the principals moving the most bytes, the most throttled."""
MAX_POINTS = 720
"""A chart's steps at most."""
BIN_SECONDS = (1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400)


class Panel(NamedTuple):
    column: str
    """The usage log's counter, a rate per second."""
    title: str
    quota_type: QuotaType
    unit: str
    """What is counted: "B" (bytes, shown in kB/s, MB/s, ...) or a noun."""


PANELS = (Panel("bytes", "produced", QuotaType.PRODUCER_BYTE_RATE, "B"),
          Panel("fetch_bytes", "fetched", QuotaType.CONSUMER_BYTE_RATE, "B"),
          Panel("new_pids", "new producer IDs", QuotaType.PRODUCER_IDS_RATE, "IDs"),
          Panel("mutations", "partition mutations", QuotaType.CONTROLLER_MUTATION_RATE, "mutations"))
THROTTLE_COLOR, QUOTA_COLOR, OBSERVED_COLOR = "tab:orange", "tab:red", "tab:purple"


def bin_seconds(span_s: int) -> int:
    """The chart's step for data spanning ``span_s`` seconds: the shortest that keeps it within ``MAX_POINTS``."""
    return next((size for size in BIN_SECONDS if span_s <= size * MAX_POINTS), BIN_SECONDS[-1])


def counted(count: int, noun: str) -> str:
    """``1 principal``, ``2 principals``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def duration(seconds: float) -> str:
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds >= size:
            count = seconds / size
            return f"{count:.3g} {unit}{'' if count == 1 else 's'}"
    return f"{seconds:.3g} second{'' if seconds == 1 else 's'}"


def per_second(value: float, unit: str) -> str:
    """A rate as a person reads it: 1.05 MB/s, 950 B/s, 12.5 IDs/s."""
    prefixes = ((1e9, "G"), (1e6, "M"), (1e3, "k"))
    for scale, prefix in prefixes:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}/s" if unit == "B" else f"{value / scale:.3g}{prefix} {unit}/s"
    return f"{value:.3g} {unit}/s"


# ---- the series ---------------------------------------------------------------------------------------------

class Series(NamedTuple):
    bin_s: int
    first: int
    last: int
    """Epoch seconds of the principal's first and last second with traffic."""
    bins: list[dict[str, Any]]
    """Every step from the first to the last, in order: ``start`` and each panel's busiest second, the throttle and
    the observed throttle given in it (ms)."""


def principal_series(usage: DataFrame, spans: dict[tuple[str, str], tuple[int, int]]) -> dict[tuple[str, str], Series]:
    """Per principal (and its first and last second with traffic): its steps, empty ones included."""
    steps = {principal: bin_seconds(last - first + 1) for principal, (first, last) in spans.items()}
    chosen = usage.sparkSession.createDataFrame([(*principal, size) for principal, size in steps.items()],
                                                "user string, client_id string, bin long")
    rows = (usage.join(chosen, ["user", "client_id"])
            .groupBy("user", "client_id", (F.col("time") - F.col("time") % F.col("bin")).alias("start"))
            .agg(*(F.max(panel.column).alias(panel.column) for panel in PANELS),
                 F.sum("throttle_ms").alias("throttle_ms"), F.sum("observed_throttle_ms").alias("observed_throttle_ms"))
            .collect())
    found: dict[tuple[str, str], dict[int, dict[str, Any]]] = {principal: {} for principal in spans}
    for row in rows:
        found[(row["user"], row["client_id"])][row["start"]] = row.asDict()
    series = {}
    empty = {**{panel.column: 0 for panel in PANELS}, "throttle_ms": 0, "observed_throttle_ms": 0}
    for principal, (first, last) in spans.items():
        size = steps[principal]
        starts = range(first - first % size, last - last % size + 1, size)
        series[principal] = Series(size, first, last, [found[principal].get(start, {**empty, "start": start})
                                                       for start in starts])
    return series


# ---- the charts ---------------------------------------------------------------------------------------------

def _when(epoch_s: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch_s, datetime.UTC)


def _runs(starts: Sequence[int], flags: Sequence[bool], size: int) -> list[tuple[int, int]]:
    """(from, to) of each run of consecutive steps whose flag is set."""
    runs: list[tuple[int, int]] = []
    for start, flag in zip(starts, flags, strict=True):
        if not flag:
            continue
        if runs and runs[-1][1] == start:
            runs[-1] = (runs[-1][0], start + size)
        else:
            runs.append((start, start + size))
    return runs


def _quota_label(steps: list[QuotaStep], unit: str) -> str:
    described = []
    for step in steps:
        if step.limit is None:
            described.append("none")
        else:
            mode = ", observed" if step.observed else ""
            described.append(f"{per_second(step.limit, unit)} ({step.source or 'source unknown'}{mode})")
    unique = list(dict.fromkeys(described))
    return "quota in force: " + ("; then ".join(unique[:3]) + (" ..." if len(unique) > 3 else ""))


def _draw_quota(axis: Axes, steps: list[QuotaStep], end: int, unit: str) -> float:
    """The quota's steps until ``end``; the highest limit drawn (0 without one)."""
    limited = [step for step in steps if step.limit is not None]
    if not limited:
        return 0.0
    times = mdates.date2num([_when(step.start) for step in steps] + [_when(end)])
    limits = [step.limit if step.limit is not None else float("nan") for step in steps]
    axis.plot(times, [*limits, limits[-1]], drawstyle="steps-post", color=QUOTA_COLOR, linestyle="--",
              label=_quota_label(steps, unit))
    return max(step.limit for step in limited if step.limit is not None)


def _rate_axis(axis: Axes, unit: str) -> None:
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: per_second(value, unit)))
    axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3)


def draw_chart(path: Path, user: str, client_id: str, series: Series,
               quota_steps: Callable[[QuotaType], list[QuotaStep]]) -> dict[str, Any]:
    """The principal's chart, written to ``path``; what it drew, read back from the figure."""
    size, bins = series.bin_s, series.bins
    starts = [row["start"] for row in bins]
    end = starts[-1] + size
    steps = {panel: quota_steps(panel.quota_type) for panel in PANELS}
    panels = [panel for panel in PANELS
              if any(row[panel.column] for row in bins) or any(step.limit is not None for step in steps[panel])]
    panels = panels or [PANELS[0]]
    figure, axes = plt.subplots(len(panels) + 1, 1, figsize=(10, 2.3 * (len(panels) + 1) + 0.6), sharex=True,
                                squeeze=False)
    times = [_when(start) for start in starts] + [_when(end)]
    throttled = _runs(starts, [row["throttle_ms"] > 0 for row in bins], size)
    observed = _runs(starts, [row["observed_throttle_ms"] > 0 for row in bins], size)
    step_name = "second" if size == 1 else duration(size)
    for axis, panel in zip(axes[:, 0], panels, strict=False):
        values = [row[panel.column] for row in bins]
        axis.plot(times, [*values, values[-1]], drawstyle="steps-post", color="tab:blue",
                  label=f"{panel.title}, the busiest second of each {step_name}" if size > 1 else panel.title)
        for number, (begin, until) in enumerate(throttled):
            axis.axvspan(_when(begin), _when(until), color=THROTTLE_COLOR, alpha=0.18, linewidth=0,
                         label=None if number else "throttled")
        top = max(max(values), _draw_quota(axis, steps[panel], end, panel.unit))
        _rate_axis(axis, panel.unit)
        axis.set_ylim(top=top * 1.15 or 1)
        axis.set_ylabel(f"{panel.title}\n({panel.unit}/s)", fontsize="small")
        axis.legend(loc="upper left", fontsize="x-small", framealpha=0.85)
    axis = axes[-1, 0]
    enforced = [row["throttle_ms"] / size for row in bins]
    axis.plot(times, [*enforced, enforced[-1]], drawstyle="steps-post", color=THROTTLE_COLOR,
              label="throttle given (enforced)")
    shadow = [row["observed_throttle_ms"] / size for row in bins]
    if observed:
        axis.plot(times, [*shadow, shadow[-1]], drawstyle="steps-post", color=OBSERVED_COLOR, linestyle=":",
                  label="throttle observe mode would have given")
    axis.set_ylabel("throttle\n(ms per second)", fontsize="small")
    axis.set_ylim(bottom=0, top=max(1.0, *enforced, *shadow) * 1.15)
    axis.grid(alpha=0.3)
    axis.legend(loc="upper left", fontsize="x-small", framealpha=0.85)
    axis.set_xlim(_when(starts[0]), _when(end))
    locator = mdates.AutoDateLocator(tz=datetime.UTC)
    axis.xaxis.set_major_locator(locator)
    axis.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=datetime.UTC))
    axis.set_xlabel("time (UTC)")
    span = series.last - series.first + 1
    axes[0, 0].set_title(f"user {user!r}, client id {client_id!r}: {duration(span)} of traffic, "
                         f"{'second by second' if size == 1 else f'in steps of {duration(size)}'}", fontsize="medium")
    figure.tight_layout()
    drawn = _drawn(figure, path.name, user, client_id, series)
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return drawn


def _drawn(figure: Any, name: str, user: str, client_id: str, series: Series) -> dict[str, Any]:
    """What the figure holds: its time axis and every line's points, in epoch seconds."""

    def epoch(value: Any) -> float:
        return mdates.num2date(value).timestamp() if not isinstance(value, datetime.datetime) else value.timestamp()

    panels = []
    for axis in figure.axes:
        lines = []
        for line in axis.get_lines():
            ys = [float(y) for y in line.get_ydata()]
            xs = [epoch(x) for x in line.get_xdata()]
            lines.append({"label": line.get_label(), "points": len(xs), "first": min(xs), "last": max(xs),
                          "max": max((y for y in ys if y == y), default=None)})  # NaN: no quota there
        panels.append({"ylabel": axis.get_ylabel(), "lines": lines})
    low, high = figure.axes[-1].get_xlim()
    return {"file": name, "user": user, "client_id": client_id, "bin_seconds": series.bin_s,
            "first_time": series.first, "last_time": series.last, "x_range": [epoch(low), epoch(high)],
            "panels": panels}


def _file_name(index: int, user: str, client_id: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{user}-{client_id}")[:60]
    return f"chart-{index:02d}-{slug}.png"


# ---- the tables ---------------------------------------------------------------------------------------------

class Column(NamedTuple):
    key: str
    header: str
    kind: str
    """text, count, bytes (a total), byte_rate, rate (per second, of what the header says), share."""


PRINCIPAL_COLUMNS = (
    Column("user", "user", "text"), Column("client_id", "client id", "text"),
    Column("seconds", "seconds with traffic", "count"), Column("total_bytes", "produced", "bytes"),
    Column("total_fetch_bytes", "fetched", "bytes"), Column("throttled_share", "throttled seconds", "share"),
    Column("byte_rate_p50", "produce p50", "byte_rate"), Column("byte_rate_p99", "produce p99", "byte_rate"),
    Column("byte_rate_max", "produce max", "byte_rate"), Column("producer_quota", "produce quota", "byte_rate"),
    Column("producer_quota_source", "produce quota set in", "text"),
    Column("fetch_byte_rate_p99", "fetch p99", "byte_rate"), Column("fetch_byte_rate_max", "fetch max", "byte_rate"),
    Column("consumer_quota", "fetch quota", "byte_rate"), Column("consumer_quota_source", "fetch quota set in", "text"),
    Column("byte_rate_quota_over_1pct", "produce quota over 1% of the time", "byte_rate"),
    Column("byte_rate_quota_over_10pct", "produce quota over 10% of the time", "byte_rate"),
    Column("fetch_byte_rate_quota_over_10pct", "fetch quota over 10% of the time", "byte_rate"),
    Column("new_pid_rate_p99", "new producer IDs p99", "rate"), Column("new_pid_rate_max", "new producer IDs max",
                                                                        "rate"),
    Column("mutation_rate_p99", "mutations p99", "rate"), Column("mutation_rate_max", "mutations max", "rate"),
    Column("rejections", "rejections", "count"), Column("recommendation", "recommendation", "text"))
TOP_COLUMNS = (PRINCIPAL_COLUMNS[0], PRINCIPAL_COLUMNS[1], PRINCIPAL_COLUMNS[3], PRINCIPAL_COLUMNS[4],
               PRINCIPAL_COLUMNS[5], PRINCIPAL_COLUMNS[7], PRINCIPAL_COLUMNS[9], PRINCIPAL_COLUMNS[10])
_BY_KEY = {column.key: column for column in PRINCIPAL_COLUMNS}
TENANT_COLUMNS = (
    Column("tenant", "tenant", "text"), Column("principals", "principals", "count"),
    *(_BY_KEY[key] for key in ("seconds", "total_bytes", "total_fetch_bytes", "byte_rate_p99", "byte_rate_max")),
    Column("producer_budget", "produce budget", "byte_rate"),
    *(_BY_KEY[key] for key in ("fetch_byte_rate_p99", "fetch_byte_rate_max")),
    Column("consumer_budget", "fetch budget", "byte_rate"), Column("throttle_ms", "throttle given (ms)", "count"),
    _BY_KEY["recommendation"])
_SCALES = ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def _unit(column: Column, rows: list[dict[str, Any]]) -> tuple[float, str]:
    """The column's one scale and the unit its header names."""
    if column.kind in ("text", "count"):
        return 1.0, ""
    if column.kind == "share":
        return 0.01, "%"
    if column.kind == "rate":
        return 1.0, "per s"
    largest = max((abs(row[column.key]) for row in rows if isinstance(row.get(column.key), int | float)), default=0)
    scale, prefix = next(((scale, prefix) for scale, prefix in _SCALES if largest >= scale), (1.0, ""))
    return scale, f"{prefix}B/s" if column.kind == "byte_rate" else f"{prefix}B"


def _cell(value: Any, column: Column, scale: float) -> str:
    if value is None or value == "":
        return "<td></td>"
    if column.kind == "text":
        return f"<td>{html.escape(str(value))}</td>"
    number = float(value)
    shown = f"{number:,.0f}" if column.kind == "count" else f"{number / scale:,.2f}"
    return f'<td data-v="{number!r}">{shown}</td>'


def table(columns: Sequence[Column], rows: list[dict[str, Any]], name: str) -> str:
    """A table sortable by any column (click its header), each column in one unit, named in the header."""
    units = [_unit(column, rows) for column in columns]
    head = "".join(f'<th class="{column.kind}">{html.escape(column.header)}'
                   f'{f"<br><small>({unit})</small>" if unit else ""}</th>'
                   for column, (_, unit) in zip(columns, units, strict=True))
    body = "\n".join("<tr>" + "".join(_cell(row.get(column.key), column, scale)
                                      for column, (scale, _) in zip(columns, units, strict=True)) + "</tr>"
                     for row in rows)
    return f'<table class="sortable" id="{name}">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>'


_SORTING = """<script>
document.querySelectorAll("table.sortable th").forEach((th, column) => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0], descending = th.dataset.order !== "desc";
  th.closest("tr").querySelectorAll("th").forEach(other => delete other.dataset.order);
  th.dataset.order = descending ? "desc" : "asc";
  const key = row => { const cell = row.cells[column]; return cell.dataset.v !== undefined ? +cell.dataset.v
                                                                                           : cell.textContent; };
  [...body.rows].sort((a, b) => { const x = key(a), y = key(b), order = x < y ? -1 : x > y ? 1 : 0;
                                  return descending ? -order : order; })
                .forEach(row => body.appendChild(row));
}));
</script>"""
_STYLE = """body{font-family:sans-serif;margin:2em;max-width:110em}table{border-collapse:collapse;margin-bottom:1em}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f4f4f4;cursor:pointer;vertical-align:bottom}
th.text,td:not([data-v]){text-align:left}th[data-order=desc]::after{content:" \\25BC"}
th[data-order=asc]::after{content:" \\25B2"}img{max-width:100%}.note{color:#555}"""


# ---- the page -----------------------------------------------------------------------------------------------

def write_report(out_dir: Path, usage: DataFrame, summary: list[dict[str, Any]], churners: list[dict[str, Any]],
                 malformed: int, lines: int, quotas: QuotasInForce, block_hours: list[dict[str, Any]],
                 broker_block_hours: list[dict[str, Any]], tenants: list[dict[str, Any]]) -> Path:
    busiest = sorted(summary, key=lambda row: -(row["total_bytes"] + row["total_fetch_bytes"]))
    charted = busiest[:CHARTED_PRINCIPALS]
    spans = {(row["user"], row["client_id"]): (row["first_time"], row["last_time"]) for row in charted}
    series = principal_series(usage, spans) if spans else {}
    sections, drawn = [], []
    for index, row in enumerate(charted):
        user, client_id = row["user"], row["client_id"]
        name = _file_name(index, user, client_id)
        principal = series[(user, client_id)]
        end = principal.bins[-1]["start"] + principal.bin_s

        def steps(quota_type: QuotaType, user: str = user, client_id: str = client_id,
                  first: int = principal.bins[0]["start"], last: int = end) -> list[QuotaStep]:
            return quotas.steps(quota_type, user, client_id, first, last)

        drawn.append(draw_chart(out_dir / name, user, client_id, principal, steps))
        sections.append(f"<h3>{html.escape(user)} / {html.escape(client_id)}</h3>\n"
                        f'<img src="{html.escape(name)}" alt="rates of {html.escape(user)} / '
                        f'{html.escape(client_id)} over time against the quota in force">')
    (out_dir / "charts.json").write_text(json.dumps(drawn, indent=1))
    throttled = sorted((row for row in summary if row["throttled_share"]), key=lambda row: -row["throttled_share"])
    changes = [row for row in block_hours if row["change"] is not None]
    jump = max(changes, key=lambda row: row["change"], default=None)
    jump_text = ("" if jump is None else
                 f"<p>Largest jump: {html.escape(jump['hour_utc'])}, {jump['change']:.3g} times the hour before.</p>")
    block_columns = (Column("hour_utc", "hour (UTC)", "text"), Column("blocks", "blocks", "count"),
                     Column("block_ids", "producer IDs", "count"), Column("brokers", "brokers", "count"),
                     Column("change", "times the hour before", "rate"))
    blocks_section = (f"""{jump_text}
{table(block_columns, block_hours, "blocks")}
<h3>Per broker</h3>
{table((block_columns[0], Column("broker_id", "broker", "count"), *block_columns[1:3]), broker_block_hours,
       "broker-blocks")}""" if block_hours
                      else "<p>No producer-ID blocks were handed out (AllocateProducerIds) in this log.</p>")
    churn_columns = (Column("user", "user", "text"),
                     Column("max_new_pids_per_hour", "most new IDs in an hour", "count"),
                     Column("total_new_pids", "new IDs", "count"),
                     Column("max_ledger_new_pids_per_hour", "most first seen in an hour (ledger)", "count"))
    unrecommended = [row for row in summary if row["recommendation"] != "recommended"]
    unrecommended_text = (f" (none for {counted(len(unrecommended), 'principal')} with too little traffic: see the "
                          "last column)" if unrecommended else "")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kafka-quota-proxy usage report</title>
<style>{_STYLE}</style>
</head><body>
<h1>Usage report</h1>
<p>{counted(lines, "usage line")} read, {malformed:,} malformed (skipped); {counted(len(summary), "principal")} (user
and client id). Rates are per second with traffic; percentiles are exact. Click a column's header to sort by it.
<a href="recommended-quotas.toml">Recommended quotas</a>{unrecommended_text}.</p>
<h2>Moving the most bytes</h2>
{table(TOP_COLUMNS, busiest[:TOP_PRINCIPALS], "top-bytes")}
<h2>Throttled the most</h2>
{table(TOP_COLUMNS, throttled[:TOP_PRINCIPALS], "top-throttled") if throttled
 else "<p>No principal was throttled.</p>"}
<h2>Every principal</h2>
<p class="note">The quota in force is the one at the principal's last second, from the usage log (or, before its
first line of them, the quota file and overrides given to the report); its chart shows every change.</p>
{table(PRINCIPAL_COLUMNS, summary, "principals")}
<h2>Tenants</h2>
{table(TENANT_COLUMNS, tenants, "tenants") if tenants else "<p>No line names a tenant.</p>"}
<p class="note">All a tenant's principals together, per second with traffic; the budget in force at its last second.
<a href="recommended-tenant-budgets.toml">Recommended budgets</a>, for the quota file that defines the tenants.</p>
<h2>Usage against the quota in force over time</h2>
<p>The {counted(len(charted), "principal")} with the most bytes produced and fetched. Each point is the busiest
second of its step; shading marks steps in which the principal was throttled; the dashed line is the quota in force,
with where it was set.</p>
{chr(10).join(sections)}
<h2>Top producer-ID churners</h2>
{table(churn_columns, churners, "churners")}
<h2>Producer-ID blocks per hour</h2>
<p>Blocks handed out to brokers (AllocateProducerIds; 1,000 IDs each in Kafka): a jump is a producer-ID
explosion somewhere in the cluster.</p>
{blocks_section}
{_SORTING}
</body></html>
"""
    path = out_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
