"""The Spark job on a generated usage log, checked against a plain-Python computation."""

from __future__ import annotations

import bisect
import csv
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from allocator.ledger import PidLedger, PidRecord
from pipeline.job import (
    PERCENTILES,
    RATES,
    THROTTLED_SHARES,
    recommended_quotas,
    run,
    spark_session,
    throttling_quota_column,
)
from pipeline.sources import Sources
from pipeline.synthetic import (
    ALTERED,
    FILE_QUOTA,
    MISBEHAVING,
    RAISED_AT,
    START,
    WEEK_PRINCIPALS,
    week_rows,
    write_lines,
    write_usage_log,
)
from proxy.state.pid_ledger import LedgerFilters
from quotas.config import QuotaType, load_quota_file
from quotas.overrides import ALTERED_ORIGIN, OVERRIDES_FILE
from quotas.usage_record import usage_file_name

ROWS = 100_000
MALFORMED = 37


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def report(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[dict[str, Any]], Path]:
    base = tmp_path_factory.mktemp("report")
    rows = write_usage_log(base / "usage", ROWS, malformed=MALFORMED)
    quota_file = base / "quotas.toml"
    quota_file.write_text('[[quota]]\nuser = "mallory"\nproducer_byte_rate = 10000000\nproducer_ids_rate = 5\n')
    return run(spark, str(base / "usage"), base / "out", headroom=1.5, quota_file=quota_file), rows, base / "out"


def exact_percentile(values: list[int], fraction: float) -> float:
    """Spark's ``percentile``: linear interpolation between the closest ranks."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def lowest_quota(values: list[int], allowed_over: int) -> int | None:
    """The lowest quota (0 or a rate seen) with at most ``allowed_over`` of ``values`` over it; None for 0."""
    ascending = sorted(values)
    candidates = sorted({0, *values})

    def few_enough_over(index: int) -> bool:
        return len(ascending) - bisect.bisect_right(ascending, candidates[index]) <= allowed_over

    # seconds over a quota fall as it rises: the first candidate with few enough is the lowest
    first = bisect.bisect_left(range(len(candidates)), True, key=few_enough_over)
    return candidates[first] or None


def reference(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, float]]:
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault((row["user"], row["client_id"]), []).append(row)
    expected = {}
    for key, seconds in grouped.items():
        figures: dict[str, float | None] = {"seconds": len(seconds)}
        times = [second["time"] for second in seconds]
        span = max(times) - min(times) + 1
        for column, rate in RATES.items():
            values = [second[column] for second in seconds]
            for fraction in PERCENTILES:
                figures[f"{rate}_p{round(fraction * 100)}"] = exact_percentile(values, fraction)
            figures[f"{rate}_max"] = max(values)
            for share in THROTTLED_SHARES:
                figures[throttling_quota_column(rate, share)] = lowest_quota(values, math.floor(span * share))
        figures["throttled_share"] = sum(1 for s in seconds if s["throttle_ms"] > 0) / len(seconds)
        figures["rejections"] = sum(s["rejections"] for s in seconds)
        expected[key] = figures
    return expected


def test_aggregates_equal_the_plain_python_reference(report: tuple[Any, list[dict[str, Any]], Path]) -> None:
    result, rows, _ = report
    expected = reference(rows)
    assert {(row["user"], row["client_id"]) for row in result.summary} == set(expected)
    for row in result.summary:
        for name, value in expected[(row["user"], row["client_id"])].items():
            assert row[name] == (None if value is None else pytest.approx(value, rel=1e-12)), \
                (row["user"], row["client_id"], name)
    assert (result.lines, result.malformed_lines) == (ROWS + MALFORMED, MALFORMED)
    quotas = [row[throttling_quota_column(rate, share)] for row in result.summary for rate in RATES.values()
              for share in THROTTLED_SHARES]
    assert any(quota is None for quota in quotas) and any(quota for quota in quotas)  # both cases are exercised


def test_the_misbehaving_principal_tops_the_churners(report: tuple[Any, list[dict[str, Any]], Path]) -> None:
    result, rows, _ = report
    hourly: dict[tuple[str, int], int] = {}
    for row in rows:
        key = (row["user"], row["time"] - row["time"] % 3600)
        hourly[key] = hourly.get(key, 0) + row["new_pids"]
    top = result.churners[0]
    assert top["user"] == MISBEHAVING[0]
    assert top["max_new_pids_per_hour"] == max(v for (user, _), v in hourly.items() if user == MISBEHAVING[0])


def test_recommended_quotas_load_in_the_proxy(report: tuple[Any, list[dict[str, Any]], Path]) -> None:
    result, _, out = report
    config = load_quota_file(out / "recommended-quotas.toml")
    mallory = next(row for row in result.summary if (row["user"], row["client_id"]) == MISBEHAVING)
    resolved = config.resolve(QuotaType.PRODUCER_BYTE_RATE, *MISBEHAVING)
    assert resolved is not None and resolved.limit == math.ceil(mallory["byte_rate_p99"] * 1.5)
    fetched = config.resolve(QuotaType.CONSUMER_BYTE_RATE, *MISBEHAVING)
    assert fetched is not None and fetched.limit == math.ceil(mallory["fetch_byte_rate_p99"] * 1.5)
    pids = config.resolve(QuotaType.PRODUCER_IDS_RATE, "mallory", "any-client")
    assert pids is not None and pids.limit == math.ceil(mallory["new_pid_rate_p99"] * 1.5)
    assert config.resolve(QuotaType.CONTROLLER_MUTATION_RATE, "bob", "etl") is None  # p99 of 0: no quota


def test_the_html_report_references_charts_that_exist(report: tuple[Any, list[dict[str, Any]], Path]) -> None:
    _, _, out = report
    page = (out / "report.html").read_text()
    charts = re.findall(r'<img src="([^"]+)"', page)
    assert len(charts) == 6
    for chart in charts:
        assert (out / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "37 malformed" in page and "mallory" in page


def test_recommendations_skip_zero_rates_and_round_up() -> None:
    summary = [{"user": "u", "client_id": "c", "byte_rate_p99": 100.2, "fetch_byte_rate_p99": 0.0,
                "mutation_rate_p99": 0.0, "new_pid_rate_p99": 0.4},
               {"user": "v", "client_id": "c", "byte_rate_p99": 0.0, "fetch_byte_rate_p99": 50.6,
                "mutation_rate_p99": 0.0, "new_pid_rate_p99": 0.0}]
    text = recommended_quotas(summary, 2.0)
    assert "producer_byte_rate = 201" in text and "controller_mutation_rate" not in text
    assert text.count("consumer_byte_rate") == 1 and "consumer_byte_rate = 102" in text
    assert "producer_ids_rate = 1" in text


def test_the_ledger_adds_first_seen_pids_per_hour(spark: SparkSession, tmp_path: Path) -> None:
    write_usage_log(tmp_path / "usage", 600)
    ledger = PidLedger(tmp_path / "ledger", LedgerFilters(100), 100, 10)
    hour_ms = 3_600_000
    for pid in range(250):  # 150 in the first hour, 100 in the next; the second half sealed into snapshots
        first_seen = 1_790_002_800_000 + (0 if pid < 150 else hour_ms)
        ledger.update(PidRecord(pid, "mallory", "churner", 0, first_seen, first_seen))
    ledger.update(PidRecord(3, "mallory", "churner", 0, 1_790_002_800_000, 1_790_009_000_000))  # newer version
    ledger.close()
    result = run(spark, str(tmp_path / "usage"), tmp_path / "out", ledger_dir=str(tmp_path / "ledger"))
    mallory = next(row for row in result.churners if row["user"] == "mallory")
    assert mallory["max_ledger_new_pids_per_hour"] == 150


def test_producer_id_blocks_per_broker_and_hour_and_where_the_rate_jumped(spark: SparkSession,
                                                                         tmp_path: Path) -> None:
    usage = tmp_path / "usage"
    usage.mkdir()
    hour = 1_790_000_000 - 1_790_000_000 % 3600
    lines = [{"time": hour + 5, "user": "broker", "client_id": "c1", "broker_id": 1, "blocks": 2, "block_ids": 2000},
             {"time": hour + 9, "user": "broker", "client_id": "c2", "broker_id": 2, "blocks": 1, "block_ids": 1000},
             {"time": hour + 3600, "user": "broker", "client_id": "c1", "broker_id": 1, "blocks": 20,
              "block_ids": 20_000},
             {"time": hour + 3601, "user": "broker", "client_id": "c1", "broker_id": 1, "blocks": 10,
              "block_ids": 10_000},
             {"time": hour + 3 * 3600, "user": "broker", "client_id": "c2", "broker_id": 2, "blocks": 1,
              "block_ids": 1000},
             {"time": hour + 5, "user": "broker", "client_id": "c1", "bytes": 100, "produce_requests": 1}]
    for line in lines:
        with (usage / usage_file_name(line["time"])).open("a") as file:  # type: ignore[arg-type]
            file.write(json.dumps(line) + "\n")
    report = run(spark, str(usage), tmp_path / "out")
    assert [(row["hour"] - hour, row["blocks"], row["block_ids"], row["brokers"], row["change"])
            for row in report.block_hours] == [(0, 3, 3000, 2, None), (3600, 30, 30_000, 1, 10.0),
                                               (3 * 3600, 1, 1000, 1, None)]
    assert [(row["hour"] - hour, row["broker_id"], row["blocks"]) for row in report.broker_block_hours] == [
        (0, 1, 2), (0, 2, 1), (3600, 1, 30), (3 * 3600, 2, 1)]
    # block lines are not a client's seconds
    assert [(row["user"], row["client_id"], row["seconds"]) for row in report.summary] == [("broker", "c1", 1)]
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Largest jump: " + report.block_hours[1]["hour_utc"] + ", 10 times the hour before" in page
    with (tmp_path / "out" / "producer-id-blocks.csv").open() as file:
        assert len(list(csv.DictReader(file))) == 4


def test_the_summary_csv_has_a_row_per_principal(report: tuple[Any, list[dict[str, Any]], Path]) -> None:
    result, _, out = report
    with (out / "summary.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert [(row["user"], row["client_id"]) for row in rows] == [(r["user"], r["client_id"]) for r in result.summary]
    assert float(rows[0]["byte_rate_p99"]) == result.summary[0]["byte_rate_p99"]


def test_topics_get_their_percentiles_over_every_user_and_a_recommended_topic_quota(spark: SparkSession,
                                                                                    tmp_path: Path) -> None:
    """A topic's lines (written while a topic quota measured it) summed over its users per second: its p99 is what
    one topic budget, shared by every user, would have to carry."""
    usage = tmp_path / "usage"
    usage.mkdir()
    start = 1_790_000_000
    lines = [{"time": start, "user": "alice", "client_id": "app", "bytes": 10}]  # a client's line beside them
    written: dict[int, int] = {}
    for second in range(100):
        for user, size in (("alice", 1000 * (second + 1)), ("bob", 500)):
            lines.append({"time": start + second, "user": user, "topic": "orders", "topic_bytes": size,
                          "topic_fetch_bytes": 2 * size})
            written[second] = written.get(second, 0) + size
    lines.append({"time": start, "user": "carol", "topic": "quiet", "topic_bytes": 0, "topic_fetch_bytes": 7})
    lines.append({"time": start, "user": "dave", "topic_bytes": 5})  # neither client id nor topic: malformed
    (usage / usage_file_name(start)).write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = run(spark, str(usage), tmp_path / "out", headroom=2.0, min_seconds=1)
    assert result.malformed_lines == 1 and [row["user"] for row in result.summary] == ["alice"]
    orders, quiet = result.topics
    per_second = list(written.values())
    assert (orders["topic"], orders["seconds"], orders["total_topic_bytes"]) == ("orders", 100, sum(per_second))
    assert orders["byte_rate_p99"] == exact_percentile(per_second, 0.99)
    assert orders["fetch_byte_rate_max"] == 2 * max(per_second)
    config = load_quota_file(tmp_path / "out" / "recommended-quotas.toml")
    produce = config.resolve_topic(QuotaType.PRODUCER_BYTE_RATE, "anyone", "orders")
    assert produce is not None and produce.limit == math.ceil(exact_percentile(per_second, 0.99) * 2)
    assert config.resolve_topic(QuotaType.PRODUCER_BYTE_RATE, "anyone", "quiet") is None  # nothing written
    fetched = config.resolve_topic(QuotaType.CONSUMER_BYTE_RATE, "anyone", "quiet")
    assert fetched is not None and fetched.limit == 14 and quiet["seconds"] == 1
    with (tmp_path / "out" / "topics.csv").open() as file:
        assert [row["topic"] for row in csv.DictReader(file)] == ["orders", "quiet"]


# ---- what a person looks at -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def week(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    base = tmp_path_factory.mktemp("week")
    write_lines(base / "usage", week_rows())
    return run(spark, str(base / "usage"), base / "out"), base / "out"


def charts(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {(chart["user"], chart["client_id"]): chart for chart in json.loads((out / "charts.json").read_text())}


def line(panel: dict[str, Any], label_start: str) -> dict[str, Any]:
    return next(drawn for drawn in panel["lines"] if drawn["label"].startswith(label_start))


def test_every_chart_covers_its_principals_traffic_and_each_line_has_its_points(week: tuple[Any, Path]) -> None:
    """A week in quarter hours (at most 720 steps), the batch job's two hours a night among them; each chart's time
    axis from its first step to the end of its last, every line drawn across it."""
    result, out = week
    drawn = charts(out)
    assert set(drawn) == set(WEEK_PRINCIPALS.values())
    for row in result.summary:
        chart = drawn[(row["user"], row["client_id"])]
        size = chart["bin_seconds"]
        low, high = chart["x_range"]
        assert low == row["first_time"] - row["first_time"] % size
        assert high == row["last_time"] - row["last_time"] % size + size
        assert (high - low) / size <= 720
        for panel in chart["panels"]:
            for drawn_line in panel["lines"]:
                assert drawn_line["points"] >= 2 and (drawn_line["first"], drawn_line["last"]) == (low, high), (
                    row["user"], panel["ylabel"], drawn_line)
    assert drawn[WEEK_PRINCIPALS["steady"]]["bin_seconds"] == 900
    nightly = drawn[WEEK_PRINCIPALS["nightly"]]
    assert nightly["panels"][0]["lines"][0]["points"] == (nightly["x_range"][1] - nightly["x_range"][0]) // 900 + 1
    assert [panel["ylabel"].split("\n")[0] for panel in nightly["panels"]] == ["produced", "throttle"]


def test_the_quota_in_force_is_drawn_with_where_it_was_set_and_when_it_changed(week: tuple[Any, Path]) -> None:
    result, out = week
    steady = charts(out)[WEEK_PRINCIPALS["steady"]]
    quota = line(steady["panels"][0], "quota in force")
    assert quota["label"] == f"quota in force: 2.5 MB/s ({FILE_QUOTA}); then 4 MB/s ({ALTERED})"
    assert (quota["points"], quota["max"]) == (3, 4_000_000)  # a step at RAISED_AT, and the end
    throttle = line(steady["panels"][-1], "throttle given")
    assert throttle["max"] > 0  # held at the quota at its peaks before the raise
    row = next(row for row in result.summary if (row["user"], row["client_id"]) == WEEK_PRINCIPALS["steady"])
    assert (row["producer_quota"], row["producer_quota_source"]) == (4_000_000, ALTERED)
    assert row["first_time"] < RAISED_AT < row["last_time"]
    observed = charts(out)[WEEK_PRINCIPALS["observed"]]
    fetched = next(panel for panel in observed["panels"] if panel["ylabel"].startswith("fetched"))
    assert line(fetched, "quota in force")["label"] == "quota in force: 1 MB/s (quotas.toml line 7, observed)"
    assert line(observed["panels"][-1], "throttle observe mode would have given")["max"] > 0


def test_too_little_traffic_gets_its_figures_and_the_reason_instead_of_a_recommendation(
        week: tuple[Any, Path]) -> None:
    result, out = week
    user, client_id = WEEK_PRINCIPALS["brief"]
    row = next(row for row in result.summary if (row["user"], row["client_id"]) == (user, client_id))
    reason = "20 seconds with traffic, fewer than the 3,600 a recommendation needs (--min-seconds)"
    assert row["seconds"] == 20 and row["byte_rate_p99"] > 0 and row["recommendation"] == reason
    text = (out / "recommended-quotas.toml").read_text()
    assert f'# user = "{user}" client-id = "{client_id}": no recommendation: {reason}' in text
    config = load_quota_file(out / "recommended-quotas.toml")
    assert config.resolve(QuotaType.PRODUCER_BYTE_RATE, user, client_id) is None
    assert config.resolve(QuotaType.PRODUCER_BYTE_RATE, *WEEK_PRINCIPALS["steady"]) is not None
    assert reason in (out / "report.html").read_text()


def test_a_short_run_is_charted_second_by_second_against_the_quota_set_through_the_api(
        spark: SparkSession, tmp_path: Path) -> None:
    """A log without lines of the quotas in force (an older proxy's): the quota file and the overrides given."""
    usage = tmp_path / "state" / "usage"
    write_lines(usage, [{"time": START + second, "user": "ANONYMOUS", "client_id": "perf", "bytes": 1_000_000,
                         "produce_requests": 3, "throttle_ms": 40 * (second > 3)} for second in range(13)])
    overrides = tmp_path / "state" / OVERRIDES_FILE
    overrides.write_text(json.dumps({"entries": [{"user": "ANONYMOUS", "quotas": {"producer_byte_rate": 1048576}}]}))
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nuser = "<default>"\nproducer_byte_rate = 10485760\n')
    result = run(spark, str(usage), tmp_path / "out", quota_file=quota_file, client_quotas=overrides)
    chart = charts(tmp_path / "out")[("ANONYMOUS", "perf")]
    assert (chart["bin_seconds"], chart["x_range"]) == (1, [START, START + 13])
    produced = chart["panels"][0]
    assert line(produced, "produced")["points"] == 14 and line(produced, "produced")["max"] == 1_000_000
    assert line(produced, "quota in force")["label"] == f"quota in force: 1.05 MB/s ({ALTERED_ORIGIN} ({overrides}))"
    assert line(chart["panels"][-1], "throttle given")["max"] == 40
    [row] = result.summary
    assert (row["producer_quota"], row["producer_quota_source"]) == (1048576, f"{ALTERED_ORIGIN} ({overrides})")
    assert row["recommendation"].startswith("13 seconds with traffic")


def test_the_tables_name_their_units_once_and_sort_by_the_numbers_behind_them(week: tuple[Any, Path]) -> None:
    _, out = week
    page = (out / "report.html").read_text()
    principals = page[page.index('<table class="sortable" id="principals">'):]
    principals = principals[:principals.index("</table>")]
    headers = re.findall(r"<th[^>]*>(.*?)</th>", principals)
    assert "produce p99<br><small>(MB/s)</small>" in headers and "produced<br><small>(GB)</small>" in headers
    assert "throttled seconds<br><small>(%)</small>" in headers
    rows = re.findall(r"<tr>(.*?)</tr>", principals[principals.index("<tbody>"):], re.S)
    assert len(rows) == len(WEEK_PRINCIPALS)
    column = headers.index("produce p99<br><small>(MB/s)</small>")
    for row in rows:
        cell = re.findall(r"<td[^>]*>.*?</td>", row)[column]
        value, shown = re.fullmatch(r'<td data-v="([^"]+)">([^<]+)</td>', cell).groups()  # type: ignore[union-attr]
        assert shown == f"{float(value) / 1e6:,.2f}"
    assert page.index("<h2>Moving the most bytes</h2>") < page.index("<h2>Every principal</h2>")
    assert "table.sortable th" in page  # the sorting script


def test_a_fleets_lines_of_one_second_are_one_second_of_their_sum(spark: SparkSession, tmp_path: Path) -> None:
    """Two proxies of a fleet each write their own line of a second: the report of both directories is the report
    of one log with their sums, and --since/--until keep the seconds between them."""
    split = [[], []]  # type: ignore[var-annotated]
    summed = []
    for offset in range(20):
        second = START + offset
        halves = [{"time": second, "user": "alice", "client_id": "app", "bytes": 1000 + offset * 10 + member,
                   "throttle_ms": 5 if (offset, member) == (3, 1) else 0} for member in (0, 1)]
        for member, line in enumerate(halves):
            split[member].append(line)
        summed.append({**halves[0], "bytes": sum(line["bytes"] for line in halves), "throttle_ms": 5 if offset == 3
                       else 0})
    for name, lines in (("member-0", split[0]), ("member-1", split[1]), ("one", summed)):
        write_lines(tmp_path / name, lines)
    fleet = run(spark, Sources((str(tmp_path / "member-0"), str(tmp_path / "member-1")), ()), tmp_path / "fleet")
    one = run(spark, str(tmp_path / "one"), tmp_path / "one-out")
    assert fleet.summary == one.summary and fleet.lines == 40 and one.lines == 20
    (alice,) = fleet.summary
    assert (alice["seconds"], alice["throttled_share"], alice["total_bytes"]) == (20, 1 / 20, sum(
        line["bytes"] for line in summed))
    window = run(spark, Sources((str(tmp_path / "member-0"), str(tmp_path / "member-1")), ()), tmp_path / "window",
                 since_s=START + 5, until_s=START + 15)
    (alice,) = window.summary
    assert (alice["first_time"], alice["last_time"], alice["seconds"], window.lines) == (START + 5, START + 14, 10, 20)


def test_tenants_get_their_principals_bytes_summed_per_second_and_a_recommended_budget(spark: SparkSession,
                                                                                      tmp_path: Path) -> None:
    """A tenant's p99 is that of the bytes all its principals wrote per second: what its one budget would carry. Its
    budget in force is read from the usage log's lines of the quotas in force."""
    usage = tmp_path / "usage"
    usage.mkdir()
    start = 1_790_000_000
    budget = {"user": None, "client_id": None, "ip": None, "topic": None, "tenant": "payments",
              "quota_type": "producer_byte_rate", "limit": 5000.0, "mode": "enforce", "source": "quotas.toml line 9"}
    lines: list[dict[str, Any]] = [{"time": start, "quotas": [budget]}]
    written: dict[int, int] = {}
    for second in range(100):
        for user, client_id, size in (("pay-api", "a", 1000 * (second + 1)), ("pay-batch", "b", 300),
                                      ("pay-batch", "c", 200)):
            lines.append({"time": start + second, "user": user, "client_id": client_id, "tenant": "payments",
                          "bytes": size, "fetch_bytes": 0, "throttle_ms": 1})
            written[second] = written.get(second, 0) + size
    lines.append({"time": start, "user": "idx", "client_id": "x", "tenant": "search", "bytes": 0, "fetch_bytes": 9})
    lines.append({"time": start, "user": "alice", "client_id": "x", "bytes": 7})  # of no tenant
    (usage / usage_file_name(start)).write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = run(spark, str(usage), tmp_path / "out", headroom=2.0, min_seconds=50)
    payments, search = result.tenants
    per_second = list(written.values())
    assert (payments["tenant"], payments["principals"], payments["seconds"]) == ("payments", 2, 100)
    assert payments["total_bytes"] == sum(per_second) and payments["byte_rate_max"] == max(per_second)
    assert payments["byte_rate_p99"] == exact_percentile(per_second, 0.99)
    assert payments["throttle_ms"] == 300 and payments["producer_budget"] == 5000.0
    assert payments["consumer_budget"] is None and payments["recommendation"] == "recommended"
    assert (search["principals"], search["fetch_byte_rate_max"]) == (1, 9)
    assert search["recommendation"].startswith("1 seconds with traffic")
    recommended = (tmp_path / "out" / "recommended-tenant-budgets.toml").read_text()
    assert '# tenant = "search": no recommendation' in recommended
    quota_file = tmp_path / "quotas.toml"  # added to the quota file that defines the tenants, it loads
    quota_file.write_text('[[tenant]]\nname = "payments"\nuser-prefix = "pay-"\n'
                          '[[tenant]]\nname = "search"\nusers = ["idx"]\n' + recommended)
    produce = load_quota_file(quota_file).resolve_tenant(QuotaType.PRODUCER_BYTE_RATE, "pay-anyone")
    assert produce is not None and produce.limit == math.ceil(exact_percentile(per_second, 0.99) * 2)
    with (tmp_path / "out" / "tenants.csv").open() as file:
        assert [row["tenant"] for row in csv.DictReader(file)] == ["payments", "search"]
    assert 'id="tenants"' in (tmp_path / "out" / "report.html").read_text()
