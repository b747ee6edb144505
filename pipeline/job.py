"""Usage log (and PID ledger) -> per-principal reports and recommended quotas, on Spark.

Run as ``kafka-quota-proxy report --usage DIR [--ledger DIR] --out DIR`` (a local Spark session
by default, ``--master`` to choose) or ``spark-submit pipeline/job.py --usage DIR --out DIR``. ``--usage`` may be
given again, and may name the usage log's topic of a cluster, ``kafka://HOST:PORT/TOPIC``, where a fleet's members
append their lines (``pipeline.sources``): the report of a fleet is the report of all its members' lines.

Every usage line is one second with traffic of one (user, client id) (``proxy.reporting.usage_log``) as one proxy
saw it; the lines of the same second from several proxies of a fleet are added up first, so a second's counters are
that second's rates. Per principal the job computes Spark's exact
``percentile`` (p50/p95/p99) and the max of the byte rate, new-PID rate and mutation rate over
its seconds with traffic, the share of those seconds that were throttled, and the rejections; the
headroom view of ``kafka_quota_proxy_usage_ratio``: for each rate, the quota that would have throttled the
principal N% of the time (``THROTTLED_SHARES``);
per user the new PIDs per hour (top churners, from the usage log and, when given, the PID
ledger's first-seen times); per topic (from its lines, written while a topic quota measured it) the same
percentiles of the bytes all users wrote to it and read from it per second; per tenant (the ``tenant`` its
principals' lines name) the same of the bytes all its principals wrote and read per second; and a quota file
recommending p99 x headroom, rounded up, per principal and per topic, for those with at least ``--min-seconds``
seconds with traffic (fewer say nothing about a p99: they get the reason instead of a quota), and the tenants' budgets
likewise (``recommended-tenant-budgets.toml``, to add to the quota file that defines the tenants).

The quota each principal had, drawn on its chart and listed in the table, is read from the usage log's lines of the
quotas in force (``QUOTAS_FIELD``, written by the proxy as they change); before the log's first such line (a log of
an older proxy), from the quota file and the AlterClientQuotas overrides given (``--quota-file``,
``--client-quotas``).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (spark-submit pipeline/job.py): import the packages beside it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import DataFrame, SparkSession, Window  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from allocator.ledger import read_ledger_file  # noqa: E402
from pipeline.html_report import write_report  # noqa: E402
from pipeline.quotas_in_force import QuotasInForce, given_quotas  # noqa: E402
from pipeline.sources import (  # noqa: E402
    KAFKA_CONNECTOR,
    SourceError,
    Sources,
    explained,
    read_kafka_config,
    topic_lines,
    with_kafka_connector,
)
from quotas.config import QuotaType  # noqa: E402
from quotas.overrides import OVERRIDES_FILE  # noqa: E402
from quotas.usage_record import (  # noqa: E402
    BLOCK_FIELDS,
    QUOTA_ENTRY_FIELDS,
    QUOTAS_FIELD,
    TENANT_FIELD,
    TOPIC_FIELDS,
    USAGE_FIELDS,
)

COUNTERS = USAGE_FIELDS
USAGE_SCHEMA = StructType([
    StructField("time", LongType()),
    StructField("user", StringType()),
    StructField("client_id", StringType()),
    StructField(TENANT_FIELD, StringType()),
    *(StructField(counter, LongType()) for counter in COUNTERS),
    StructField("broker_id", LongType()),
    *(StructField(counter, LongType()) for counter in BLOCK_FIELDS),
    StructField("topic", StringType()),
    *(StructField(counter, LongType()) for counter in TOPIC_FIELDS),
    StructField(QUOTAS_FIELD, ArrayType(StructType([
        StructField(field, DoubleType() if field == "limit" else StringType()) for field in QUOTA_ENTRY_FIELDS]))),
    StructField("_corrupt", StringType()),
])
"""The usage log's columns, read without schema inference (a counter a line lacks reads as 0)."""
RATES = {"bytes": "byte_rate", "fetch_bytes": "fetch_byte_rate", "new_pids": "new_pid_rate",
         "mutations": "mutation_rate"}
TOPIC_RATES = {"topic_bytes": "byte_rate", "topic_fetch_bytes": "fetch_byte_rate"}
"""A topic's columns in the usage log and its rates in the report."""
TENANT_RATES = {"bytes": "byte_rate", "fetch_bytes": "fetch_byte_rate"}
"""A tenant's columns (its principals' summed each second) and its rates in the report."""
PERCENTILES = (0.5, 0.95, 0.99)
THROTTLED_SHARES = (0.01, 0.05, 0.1)
"""For each, per principal and rate (``{rate}_quota_over_{N}pct``): the lowest quota its rate was over in no more
than this share of its time (its seconds from first to last, idle ones at rate 0): any lower quota would have
throttled it longer. Empty when no positive quota throttles it that long. A second over the quota stands for a
throttled second (Kafka's rate spans eleven: close for a steady principal, generous for a bursty one)."""
LEDGER_SCHEMA = StructType([
    StructField("pid", LongType()),
    StructField("user", StringType()),
    StructField("client_id", StringType()),
    StructField("first_seen_ms", LongType()),
    StructField("last_seen_ms", LongType()),
])
TOP_CHURNERS = 20
MIN_SECONDS = 3600
"""Seconds with traffic a principal (or topic) needs before its p99 is recommended as a quota: fewer, and the p99 is
that of a start-up burst or a test run, not of its traffic."""


@dataclass(frozen=True)
class Report:
    summary: list[dict[str, Any]]
    churners: list[dict[str, Any]]
    malformed_lines: int
    lines: int
    block_hours: list[dict[str, Any]]
    """Producer-ID blocks per hour, all brokers together, with the change from the hour before."""
    broker_block_hours: list[dict[str, Any]]
    topics: list[dict[str, Any]]
    """Per topic under a topic quota: its rates' percentiles and max, all users together."""
    tenants: list[dict[str, Any]]
    """Per tenant: its rates' percentiles and max, all its principals together, and its budgets in force."""


def spark_session(master: str | None, driver_memory: str | None = None, kafka_connector: str | None = None
                  ) -> SparkSession:
    """``kafka_connector``: Spark's Kafka source, to read the usage log's topic (``pipeline.sources``)."""
    builder = SparkSession.builder.appName("kafka-quota-proxy-report")
    if master:
        builder = builder.master(master)
    if driver_memory:  # in local mode the driver does all the work
        builder = builder.config("spark.driver.memory", driver_memory)
    if kafka_connector:
        builder = with_kafka_connector(builder, kafka_connector)
    return (builder.config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false").getOrCreate())


def read_usage(spark: SparkSession, usage: Sources, kafka_options: Mapping[str, str] | None = None,
               since_s: int | None = None, until_s: int | None = None) -> tuple[DataFrame, int, int]:
    """Valid usage rows of every source, the number of malformed lines and of all lines; the lines of traffic from
    ``since_s`` (included) to ``until_s`` (excluded) when given, and the lines of the quotas in force before
    ``until_s``.

    A line is malformed when it is not JSON of the schema's types or lacks time, user, or client_id (or, on a
    topic's line, topic; on a line of the quotas in force, its quotas); it is counted and left out, never fatal.
    """
    parts = [topic_lines(spark, topic, USAGE_SCHEMA, kafka_options or {}, since_s) for topic in usage.topics]
    if usage.directories:
        parts.append(spark.read.schema(USAGE_SCHEMA).option("mode", "PERMISSIVE")
                     .option("columnNameOfCorruptRecord", "_corrupt")
                     .json([f"{directory.rstrip('/')}/usage-*.jsonl" for directory in usage.directories]))
    raw = functools.reduce(DataFrame.unionByName, parts)
    snapshots = F.col(QUOTAS_FIELD).isNotNull()
    if since_s is not None:
        raw = raw.where(F.col("time").isNull() | snapshots | (F.col("time") >= since_s))
    if until_s is not None:
        raw = raw.where(F.col("time").isNull() | (F.col("time") < until_s))
    raw = raw.cache()
    valid_condition = (F.col("_corrupt").isNull() & F.col("time").isNotNull()
                       & ((F.col("user").isNotNull() & (F.col("client_id").isNotNull() | F.col("topic").isNotNull()))
                          | snapshots))
    counts = raw.agg(F.count(F.lit(1)).alias("lines"),
                     F.sum(F.when(valid_condition, 0).otherwise(1)).alias("malformed")).first()
    assert counts is not None
    valid = raw.where(valid_condition).drop("_corrupt").fillna(0, [*COUNTERS, *BLOCK_FIELDS, *TOPIC_FIELDS])
    return valid, int(counts["malformed"] or 0), int(counts["lines"])


def one_line_per_second(usage: DataFrame) -> DataFrame:
    """The clients' lines with those of the same (user, client id, second) added up: several proxies of a fleet each
    write their own (a proxy stopping may write a second twice). Their tenant is the one any of them names (the
    members of a fleet read one quota file)."""
    return usage.groupBy("user", "client_id", "time").agg(*(F.sum(counter).alias(counter) for counter in COUNTERS),
                                                          F.max(TENANT_FIELD).alias(TENANT_FIELD))


def split_lines(usage: DataFrame) -> tuple[DataFrame, DataFrame, DataFrame, DataFrame]:
    """The clients' lines, the producer-ID block lines (those with a ``broker_id``), the topics' (those with a
    ``topic``) and the lines of the quotas in force (``QUOTAS_FIELD``)."""
    topics = F.col("topic").isNotNull()
    snapshots = F.col(QUOTAS_FIELD).isNotNull()
    traffic = usage.where(~snapshots).drop(QUOTAS_FIELD)
    return (traffic.where(F.col("broker_id").isNull() & ~topics), traffic.where(F.col("broker_id").isNotNull()),
            traffic.where(topics), usage.where(snapshots).select("time", QUOTAS_FIELD))


def _hour(column: str) -> Any:
    return (F.col(column) - F.col(column) % 3600).alias("hour")


def broker_block_hours(blocks: DataFrame) -> DataFrame:
    """Blocks handed out per requesting broker per hour."""
    return (blocks.groupBy(_hour("time"), "broker_id")
            .agg(F.sum("blocks").alias("blocks"), F.sum("block_ids").alias("block_ids"))
            .withColumn("hour_utc", F.from_unixtime("hour", "yyyy-MM-dd'T'HH:00'Z'"))
            .orderBy("hour", "broker_id"))


def cluster_block_hours(blocks: DataFrame) -> DataFrame:
    """Blocks per hour, all brokers together, and ``change``: this hour's blocks over the hour before's (empty
    when the hour before had none): where the cluster's producer-ID issue rate jumped."""
    hourly = (blocks.groupBy(_hour("time"))
              .agg(F.sum("blocks").alias("blocks"), F.sum("block_ids").alias("block_ids"),
                   F.countDistinct("broker_id").alias("brokers")))
    before = Window.orderBy("hour")
    return (hourly.withColumn("change", F.when(F.lag("hour").over(before) == F.col("hour") - 3600,
                                               F.col("blocks") / F.lag("blocks").over(before)))
            .withColumn("hour_utc", F.from_unixtime("hour", "yyyy-MM-dd'T'HH:00'Z'"))
            .orderBy("hour"))


def summarize(usage: DataFrame) -> DataFrame:
    """Per (user, client id): exact percentiles and max of each rate, throttled share, rejections."""
    aggregates = [F.count(F.lit(1)).alias("seconds"), F.min("time").alias("first_time"),
                  F.max("time").alias("last_time")]
    for column, rate in RATES.items():
        aggregates.append(F.percentile(F.col(column), list(PERCENTILES)).alias(f"{rate}_percentiles"))
        aggregates.append(F.max(column).alias(f"{rate}_max"))
        aggregates.append(F.sort_array(F.collect_list(column), asc=False).alias(f"{rate}_descending"))
    aggregates += [
        F.avg(F.when(F.col("throttle_ms") > 0, 1.0).otherwise(0.0)).alias("throttled_share"),
        F.sum("throttle_ms").alias("throttle_ms"),
        F.sum("rejections").alias("rejections"),
        F.sum("bytes").alias("total_bytes"),
        F.sum("fetch_bytes").alias("total_fetch_bytes"),
        F.sum("new_pids").alias("total_new_pids"),
        F.sum("mutations").alias("total_mutations"),
    ]
    summary = usage.groupBy("user", "client_id").agg(*aggregates)
    span = F.col("last_time") - F.col("first_time") + 1
    for rate in RATES.values():
        for index, fraction in enumerate(PERCENTILES):
            summary = summary.withColumn(f"{rate}_p{round(fraction * 100)}", F.col(f"{rate}_percentiles")[index])
        descending = F.col(f"{rate}_descending")
        for share in THROTTLED_SHARES:
            # the k-th highest second: a quota at it leaves k - 1 = floor(share x span) seconds over it, any lower
            # one at least k; none when that would be no positive quota
            rank = F.floor(span * share).cast("int") + 1
            quota = F.element_at(descending, rank)
            summary = summary.withColumn(throttling_quota_column(rate, share),
                                         F.when((rank <= F.size(descending)) & (quota > 0), quota))
        summary = summary.drop(f"{rate}_percentiles", f"{rate}_descending")
    return summary.orderBy("user", "client_id")


def summarize_topics(topic_lines: DataFrame) -> DataFrame:
    """Per topic: the bytes every user wrote to it and read from it, per second with traffic, as exact
    percentiles and max (what a topic quota, shared by every user, would have to carry)."""
    per_second = topic_lines.groupBy("topic", "time").agg(*(F.sum(column).alias(column) for column in TOPIC_RATES))
    return _per_second_percentiles(per_second, "topic", TOPIC_RATES)


def summarize_tenants(usage_lines: DataFrame) -> DataFrame:
    """Per tenant: the bytes all its principals wrote and read, per second with traffic, as exact percentiles and max
    (what the tenant's one budget would have to carry); its principals, the throttle they were given in all, and its
    last second."""
    members = usage_lines.where(F.col(TENANT_FIELD).isNotNull())
    per_second = members.groupBy(TENANT_FIELD, "time").agg(*(F.sum(column).alias(column) for column in TENANT_RATES),
                                                           F.sum("throttle_ms").alias("throttle_ms"))
    principals = members.groupBy(TENANT_FIELD).agg(F.countDistinct("user").alias("principals"))
    return _per_second_percentiles(per_second, TENANT_FIELD, TENANT_RATES, F.sum("throttle_ms").alias("throttle_ms"),
                                   F.max("time").alias("last_time")).join(principals, TENANT_FIELD).orderBy(
                                       TENANT_FIELD)


def _per_second_percentiles(per_second: DataFrame, key: str, rates: Mapping[str, str], *more: Any) -> DataFrame:
    """Per ``key``: its seconds, and each of ``rates``' columns' exact percentiles, max and total (and ``more``)."""
    aggregates = [F.count(F.lit(1)).alias("seconds"), *more]
    for column, rate in rates.items():
        aggregates.append(F.percentile(F.col(column), list(PERCENTILES)).alias(f"{rate}_percentiles"))
        aggregates.append(F.max(column).alias(f"{rate}_max"))
        aggregates.append(F.sum(column).alias(f"total_{column}"))
    summary = per_second.groupBy(key).agg(*aggregates)
    for rate in rates.values():
        for index, fraction in enumerate(PERCENTILES):
            summary = summary.withColumn(f"{rate}_p{round(fraction * 100)}", F.col(f"{rate}_percentiles")[index])
        summary = summary.drop(f"{rate}_percentiles")
    return summary.orderBy(key)


def throttling_quota_column(rate: str, share: float) -> str:
    return f"{rate}_quota_over_{round(share * 100)}pct"


def churners(usage: DataFrame, ledger: DataFrame | None) -> DataFrame:
    """Users by their busiest hour of new producer IDs (usage log; the ledger's first-seen if given)."""
    hourly = (usage.groupBy("user", (F.col("time") - F.col("time") % 3600).alias("hour"))
              .agg(F.sum("new_pids").alias("new_pids")))
    if ledger is not None:
        from_ledger = (ledger.groupBy("user", (F.floor(F.col("first_seen_ms") / 1000 / 3600) * 3600).alias("hour"))
                       .agg(F.count(F.lit(1)).alias("ledger_new_pids")))
        hourly = hourly.join(from_ledger, ["user", "hour"], "full_outer").fillna(0)
    else:
        hourly = hourly.withColumn("ledger_new_pids", F.lit(0).cast(LongType()))
    per_user = hourly.groupBy("user").agg(
        F.max("new_pids").alias("max_new_pids_per_hour"),
        F.sum("new_pids").alias("total_new_pids"),
        F.max("ledger_new_pids").alias("max_ledger_new_pids_per_hour"),
        F.count(F.lit(1)).alias("hours"))
    return per_user.orderBy(F.desc("max_new_pids_per_hour"), F.desc("max_ledger_new_pids_per_hour"),
                            "user").limit(TOP_CHURNERS)


def read_ledger(spark: SparkSession, ledger_dir: str) -> DataFrame:
    """The PID ledger's records (snapshots and the active segment), newest version of each PID."""
    files = [str(path) for path in sorted(Path(ledger_dir).iterdir())
             if path.suffix in (".pids", ".log") and path.is_file()]
    rdd = spark.sparkContext.parallelize(files, max(1, min(len(files), 64))).flatMap(
        lambda path: [(r.pid, r.user, r.client_id, r.first_seen_ms, r.last_seen_ms)
                      for r in read_ledger_file(Path(path))])
    records = spark.createDataFrame(rdd, LEDGER_SCHEMA)
    return records.groupBy("pid").agg(F.max_by(F.struct("user", "client_id", "first_seen_ms", "last_seen_ms"),
                                               "last_seen_ms").alias("r")).select("pid", "r.*")


# ---- recommended quotas -------------------------------------------------------------------------

def too_little_data(seconds: int, min_seconds: int) -> str | None:
    """Why there is no recommendation for a principal or topic with ``seconds`` seconds with traffic, or None."""
    if seconds >= min_seconds:
        return None
    return f"{seconds:,} seconds with traffic, fewer than the {min_seconds:,} a recommendation needs (--min-seconds)"


def recommended_quotas(summary: list[dict[str, Any]], headroom: float,
                       topics: Sequence[dict[str, Any]] = (), min_seconds: int = MIN_SECONDS) -> str:
    """The proxy's quota file: p99 x headroom rounded up, per (user, client id) for produced and
    fetched bytes and mutations, per user (its busiest client's p99) for new producer IDs and per topic (all its
    users together) for its bytes written and read. A rate whose p99 is 0 gets no quota (a rate must be
    positive); a principal, user or topic with fewer than ``min_seconds`` seconds with traffic gets none either,
    and a comment saying so."""
    lines = [f"# Recommended by `kafka-quota-proxy report`: p99 of each rate x {headroom:g}, rounded up.",
             "# Per (user, client id) for bytes and mutations; per user for new producer IDs; per topic (its one"
             " budget, every user's bytes) for the topics a topic quota measured.",
             f"# Only where there are at least {min_seconds:,} seconds with traffic: a p99 of fewer says little."]
    byte_rates = {"producer_byte_rate": "byte_rate_p99", "consumer_byte_rate": "fetch_byte_rate_p99",
                  "controller_mutation_rate": "mutation_rate_p99"}
    per_user_pids: dict[str, float] = {}
    per_user_seconds: dict[str, int] = {}
    for row in summary:
        user, seconds = row["user"], int(row.get("seconds", min_seconds))
        per_user_seconds[user] = per_user_seconds.get(user, 0) + seconds
        entity = [f"user = {json.dumps(user)}", f"client-id = {json.dumps(row['client_id'])}"]
        reason = too_little_data(seconds, min_seconds)
        if reason is not None:
            lines += ["", f"# {' '.join(entity)}: no recommendation: {reason}"]
            continue
        per_user_pids[user] = max(per_user_pids.get(user, 0.0), row["new_pid_rate_p99"] or 0.0)
        values = {key: row[column] for key, column in byte_rates.items()}
        body = [f"{key} = {math.ceil(value * headroom)}" for key, value in values.items() if value and value > 0]
        if body:
            lines += ["", "[[quota]]", *entity, *body]
    for user, p99 in sorted(per_user_pids.items()):
        if p99 > 0 and too_little_data(per_user_seconds[user], min_seconds) is None:
            lines += ["", "[[quota]]", f"user = {json.dumps(user)}", f"producer_ids_rate = {math.ceil(p99 * headroom)}"]
    lines += _byte_rate_entries("topic", topics, headroom, min_seconds)
    return "\n".join(lines) + "\n"


def recommended_tenant_budgets(tenants: Sequence[dict[str, Any]], headroom: float,
                               min_seconds: int = MIN_SECONDS) -> str:
    """The tenants' budgets as ``[[quota]] tenant = ...`` entries, p99 x headroom rounded up of the bytes all a
    tenant's principals wrote and read per second, for those with at least ``min_seconds`` seconds with traffic. They
    go into the quota file whose ``[[tenant]]`` entries define the tenants (alone, a budget of an undefined tenant is
    refused)."""
    lines = [f"# Recommended by `kafka-quota-proxy report`: p99 of each tenant's rates (all its principals together)"
             f" x {headroom:g}, rounded up,",
             f"# where there are at least {min_seconds:,} seconds with traffic. Add them to the quota file that"
             " defines these tenants ([[tenant]])."]
    return "\n".join(lines + _byte_rate_entries(TENANT_FIELD, tenants, headroom, min_seconds)) + "\n"


def _byte_rate_entries(entity: str, rows: Sequence[dict[str, Any]], headroom: float, min_seconds: int) -> list[str]:
    """A ``[[quota]]`` of ``entity = row[entity]`` per row with enough data, its byte rates p99 x headroom (a rate
    whose p99 is 0 gets none); a comment with the reason for a row without enough."""
    lines: list[str] = []
    for row in rows:
        named = f"{entity} = {json.dumps(row[entity])}"
        reason = too_little_data(int(row.get("seconds", min_seconds)), min_seconds)
        if reason is not None:
            lines += ["", f"# {named}: no recommendation: {reason}"]
            continue
        values = {"producer_byte_rate": row["byte_rate_p99"], "consumer_byte_rate": row["fetch_byte_rate_p99"]}
        body = [f"{key} = {math.ceil(value * headroom)}" for key, value in values.items() if value and value > 0]
        if body:
            lines += ["", "[[quota]]", named, *body]
    return lines


# ---- the job ------------------------------------------------------------------------------------

def run(spark: SparkSession, usage: Sources | str, out_dir: Path, ledger_dir: str | None = None,
        headroom: float = 1.5, quota_file: Path | None = None, client_quotas: Path | None = None,
        min_seconds: int = MIN_SECONDS, kafka_options: Mapping[str, str] | None = None, since_s: int | None = None,
        until_s: int | None = None) -> Report:
    """``usage``: the sources, or one usage-log directory. ``quota_file``, ``client_quotas``: the quotas in force
    where the usage log does not say (see the module). ``kafka_options``: Spark's Kafka source's (TLS, SASL)."""
    sources = Sources((usage,), ()) if isinstance(usage, str) else usage
    all_lines, malformed, lines = read_usage(spark, sources, kafka_options, since_s, until_s)
    clients, blocks, topic_lines, snapshot_lines = split_lines(all_lines)
    usage_lines = one_line_per_second(clients)
    quotas = QuotasInForce([(row["time"], [entry.asDict() for entry in row[QUOTAS_FIELD]])
                            for row in snapshot_lines.collect()], given_quotas(quota_file, client_quotas))
    ledger = read_ledger(spark, ledger_dir) if ledger_dir else None
    summary = [row.asDict() for row in summarize(usage_lines).collect()]
    for row in summary:
        for quota_type, column in ((QuotaType.PRODUCER_BYTE_RATE, "producer_quota"),
                                   (QuotaType.CONSUMER_BYTE_RATE, "consumer_quota")):
            step = quotas.steps(quota_type, row["user"], row["client_id"], row["first_time"], row["last_time"])[-1]
            row[column] = step.limit
            row[f"{column}_source"] = step.source + (" (observed)" if step.observed else "")
        row["recommendation"] = too_little_data(row["seconds"], min_seconds) or "recommended"
    top = [row.asDict() for row in churners(usage_lines, ledger).collect()]
    block_hours = [row.asDict() for row in cluster_block_hours(blocks).collect()]
    per_broker = [row.asDict() for row in broker_block_hours(blocks).collect()]
    topics = [row.asDict() for row in summarize_topics(topic_lines).collect()]
    tenants = [row.asDict() for row in summarize_tenants(usage_lines).collect()]
    for row in tenants:
        for quota_type, column in ((QuotaType.PRODUCER_BYTE_RATE, "producer_budget"),
                                   (QuotaType.CONSUMER_BYTE_RATE, "consumer_budget")):
            row[column] = quotas.tenant_budget(quota_type, row[TENANT_FIELD], row["last_time"])
        row["recommendation"] = too_little_data(row["seconds"], min_seconds) or "recommended"
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_csv(out_dir / "summary.csv", summary)  # from the rows collected: no second aggregation
    _write_csv(out_dir / "producer-id-blocks.csv", per_broker)
    _write_csv(out_dir / "topics.csv", topics, ["topic"])
    _write_csv(out_dir / "tenants.csv", tenants, [TENANT_FIELD])
    (out_dir / "summary.json").write_text(json.dumps(
        {"lines": lines, "malformed_lines": malformed, "principals": summary, "pid_churners": top,
         "producer_id_blocks_per_hour": block_hours, "producer_id_blocks_per_broker_hour": per_broker,
         "topics": topics, "tenants": tenants}, indent=1))
    (out_dir / "recommended-quotas.toml").write_text(recommended_quotas(summary, headroom, topics, min_seconds))
    (out_dir / "recommended-tenant-budgets.toml").write_text(recommended_tenant_budgets(tenants, headroom,
                                                                                         min_seconds))
    write_report(out_dir, usage_lines, summary, top, malformed, lines, quotas, block_hours, per_broker, tenants)
    return Report(summary, top, malformed, lines, block_hours, per_broker, topics, tenants)


def _write_csv(path: Path, rows: list[dict[str, Any]], header: list[str] | None = None) -> None:
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]) if rows else header or ["user", "client_id"])
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafka-quota-proxy report",
                                     description="Per-principal usage reports and recommended quotas")
    parser.add_argument("--usage", required=True, action="append", help="a proxy's usage log directory "
                        "(<state-dir>/usage), or the usage log's topic of a fleet, "
                        "kafka://HOST:PORT[,HOST:PORT]/TOPIC; again for more (a fleet's members' directories)")
    parser.add_argument("--ledger", help="the PID ledger directory (<state-dir>/pid-ledger)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--master", help="Spark master (default local[*]); e.g. spark://host:7077")
    parser.add_argument("--headroom", type=float, default=1.5, help="recommended quota = p99 x this (default 1.5)")
    parser.add_argument("--quota-file", type=Path, help="the proxy's quota file: the quotas in force where the "
                        "usage log does not say (a log of a proxy older than its lines of the quotas in force)")
    parser.add_argument("--client-quotas", type=Path, help="the quotas set through AlterClientQuotas, laid over "
                        f"--quota-file's as the proxy does (default: {OVERRIDES_FILE} of the state directory the usage "
                        "log is in, when there is one)")
    parser.add_argument("--min-seconds", type=int, default=MIN_SECONDS, help="seconds with traffic a principal or "
                        f"topic needs for a recommendation (default {MIN_SECONDS})")
    parser.add_argument("--since", type=_instant, help="only the seconds from this one on: UTC, as "
                        "2026-11-28T14:00 (or epoch seconds)")
    parser.add_argument("--until", type=_instant, help="only the seconds before this one (as --since)")
    parser.add_argument("--kafka-config", type=Path, help="the Kafka client's properties for a kafka:// usage "
                        "(security.protocol, sasl.*, ssl.*: as Kafka's tools' --command-config)")
    parser.add_argument("--kafka-connector", default=KAFKA_CONNECTOR, help="Spark's Kafka source, resolved from "
                        f"Maven Central on first use for a kafka:// usage (default: {KAFKA_CONNECTOR}, the installed "
                        "Spark's)")
    parser.add_argument("--driver-memory", help="Spark driver memory, e.g. 4g (local mode does all work there)")
    args = parser.parse_args(argv)
    if args.headroom <= 0:
        parser.error("--headroom must be positive")
    if args.min_seconds < 1:
        parser.error("--min-seconds must be at least 1")
    if args.since is not None and args.until is not None and args.since >= args.until:
        parser.error("--since must be before --until")
    for flag, path in (("--quota-file", args.quota_file), ("--client-quotas", args.client_quotas),
                       ("--kafka-config", args.kafka_config)):
        if path is not None and not path.is_file():
            parser.error(f"{flag} {path}: no such file")
    try:
        sources = Sources.parse(args.usage)
    except SourceError as error:
        parser.error(f"--usage {error}")
    try:
        kafka_options = read_kafka_config(args.kafka_config) if args.kafka_config else {}
    except SourceError as error:
        parser.error(f"--kafka-config {error}")
    client_quotas = args.client_quotas
    if client_quotas is None and len(sources.directories) == 1 and not sources.topics:
        beside_usage = Path(sources.directories[0]).parent / OVERRIDES_FILE
        client_quotas = beside_usage if beside_usage.is_file() else None
    connector = args.kafka_connector if sources.topics else None
    try:
        spark = spark_session(args.master or "local[*]", args.driver_memory, connector)
        try:
            report = run(spark, sources, args.out, args.ledger, args.headroom, args.quota_file, client_quotas,
                         args.min_seconds, kafka_options, args.since, args.until)
        finally:
            spark.stop()
    except Exception as error:
        reason = explained(error, sources.topics, args.kafka_connector) if sources.topics else None
        if reason is None:
            raise
        print(f"kafka-quota-proxy report: {reason}", file=sys.stderr)
        return 2
    print(f"{report.lines} usage lines ({report.malformed_lines} malformed), {len(report.summary)} principals, "
          f"{len(report.topics)} topics, {len(report.tenants)} tenants; report in {args.out / 'report.html'}")
    return 0


def _instant(text: str) -> int:
    """Epoch seconds of ``text``: epoch seconds, or an ISO 8601 time, UTC unless it says otherwise."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a UTC time as 2026-11-28T14:00, or epoch seconds"
                                         ) from None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp())


if __name__ == "__main__":
    sys.exit(main())
