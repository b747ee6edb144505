"""``report.html`` with one PNG chart per principal: its rates over time against its quotas."""

from __future__ import annotations

import datetime
import html
import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no screen
import matplotlib.pyplot as plt  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from quotas.config import QuotaConfig, QuotaType, load_quota_file  # noqa: E402

CHARTED_PRINCIPALS = 20
_PANELS = (("byte_rate", "produced bytes/s", QuotaType.PRODUCER_BYTE_RATE),
           ("fetch_byte_rate", "fetched bytes/s", QuotaType.CONSUMER_BYTE_RATE),
           ("new_pid_rate", "new producer IDs/s", QuotaType.PRODUCER_IDS_RATE),
           ("mutation_rate", "partition mutations/s", QuotaType.CONTROLLER_MUTATION_RATE))


def _minute_series(usage: DataFrame, principals: list[tuple[str, str]]) -> dict[tuple[str, str], list[Any]]:
    """Per principal and minute: the busiest second of each rate (what a quota must allow)."""
    wanted = usage.join(usage.sparkSession.createDataFrame(principals, "user string, client_id string"),
                        ["user", "client_id"])
    rows = (wanted.groupBy("user", "client_id", (F.col("time") - F.col("time") % 60).alias("minute"))
            .agg(F.max("bytes").alias("byte_rate"), F.max("fetch_bytes").alias("fetch_byte_rate"),
                 F.max("new_pids").alias("new_pid_rate"),
                 F.max("mutations").alias("mutation_rate"), F.max("throttle_ms").alias("throttle_ms"))
            .orderBy("minute").collect())
    series: dict[tuple[str, str], list[Any]] = {principal: [] for principal in principals}
    for row in rows:
        series[(row["user"], row["client_id"])].append(row)
    return series


def _chart(path: Path, user: str, client_id: str, rows: list[Any], quotas: QuotaConfig | None) -> None:
    times = [datetime.datetime.fromtimestamp(row["minute"], datetime.UTC) for row in rows]
    figure, axes = plt.subplots(len(_PANELS), 1, figsize=(9, 9), sharex=True)
    for axis, (column, unit, quota_type) in zip(axes, _PANELS, strict=True):
        axis.plot(times, [row[column] for row in rows], drawstyle="steps-post", label="busiest second of the minute")
        quota = None if quotas is None else quotas.resolve(quota_type, user, client_id)
        if quota is not None:
            axis.axhline(quota.limit, color="tab:red", linestyle="--", label=f"quota {quota.limit:g}")
        axis.set_ylabel(unit)
        axis.set_ylim(bottom=0)
        axis.legend(loc="upper left", fontsize="small")
        axis.grid(alpha=0.3)
    axes[0].set_title(f"user {user!r}, client id {client_id!r}")
    axes[-1].set_xlabel("time (UTC)")
    figure.autofmt_xdate()
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def _file_name(index: int, user: str, client_id: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{user}-{client_id}")[:60]
    return f"chart-{index:02d}-{slug}.png"


def write_report(out_dir: Path, usage: DataFrame, summary: list[dict[str, Any]], churners: list[dict[str, Any]],
                 malformed: int, lines: int, quota_file: Path | None, block_hours: list[dict[str, Any]],
                 broker_block_hours: list[dict[str, Any]]) -> Path:
    quotas = load_quota_file(quota_file) if quota_file is not None else None
    busiest = sorted(summary, key=lambda row: -(row["total_bytes"] + row["total_fetch_bytes"]))[:CHARTED_PRINCIPALS]
    principals = [(row["user"], row["client_id"]) for row in busiest]
    series = _minute_series(usage, principals) if principals else {}
    sections = []
    for index, (user, client_id) in enumerate(principals):
        name = _file_name(index, user, client_id)
        _chart(out_dir / name, user, client_id, series[(user, client_id)], quotas)
        sections.append(f"<h3>{html.escape(user)} / {html.escape(client_id)}</h3>\n"
                        f'<img src="{html.escape(name)}" alt="rates of {html.escape(user)} / '
                        f'{html.escape(client_id)} over time">')
    columns = ["user", "client_id", "seconds", "byte_rate_p50", "byte_rate_p95", "byte_rate_p99", "byte_rate_max",
               "fetch_byte_rate_p99", "fetch_byte_rate_max", "new_pid_rate_p99", "new_pid_rate_max",
               "mutation_rate_p99", "mutation_rate_max", "throttled_share", "rejections",
               "byte_rate_quota_over_1pct", "byte_rate_quota_over_10pct", "fetch_byte_rate_quota_over_10pct"]
    table = _table(columns, summary)
    churn_table = _table(["user", "max_new_pids_per_hour", "total_new_pids", "max_ledger_new_pids_per_hour"],
                         churners)
    changes = [row for row in block_hours if row["change"] is not None]
    jump = max(changes, key=lambda row: row["change"], default=None)
    jump_text = ("" if jump is None else
                 f"<p>Largest jump: {html.escape(jump['hour_utc'])}, {jump['change']:.3g} times the hour before.</p>")
    blocks_section = (f"""{jump_text}
{_table(["hour_utc", "blocks", "block_ids", "brokers", "change"], block_hours)}
<h3>Per broker</h3>
{_table(["hour_utc", "broker_id", "blocks", "block_ids"], broker_block_hours)}""" if block_hours
                      else "<p>No producer-ID blocks were handed out (AllocateProducerIds) in this log.</p>")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kafka-quota-proxy usage report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}td:first-child,td:nth-child(2){{text-align:left}}</style>
</head><body>
<h1>Usage report</h1>
<p>{lines} usage lines read, {malformed} malformed (skipped). Rates are per second with traffic;
percentiles are exact. <a href="recommended-quotas.toml">Recommended quotas</a>.</p>
<h2>Per principal</h2>
{table}
<h2>Top producer-ID churners</h2>
{churn_table}
<h2>Producer-ID blocks per hour</h2>
<p>Blocks handed out to brokers (AllocateProducerIds; 1,000 IDs each in Kafka): a jump is a producer-ID
explosion somewhere in the cluster.</p>
{blocks_section}
<h2>Usage against quota over time</h2>
<p>The {len(principals)} principals with the most bytes produced and fetched; each point is the busiest
second of a minute.</p>
{chr(10).join(sections)}
</body></html>
"""
    path = out_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def _table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    body = "\n".join("<tr>" + "".join(f"<td>{html.escape(_format(row.get(column)))}</td>" for column in columns)
                     + "</tr>" for row in rows)
    return f"<table>\n<tr>{head}</tr>\n{body}\n</table>"


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return "" if value is None else str(value)
