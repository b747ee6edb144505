"""A synthetic usage log in the proxy's format, for tests, benchmarks and demos.

Several principals with steady traffic and one misbehaving principal (bursts of bytes, churning
producer IDs, topic mutations, throttled and rejected), spread over hourly files as the proxy
writes them; ``malformed`` broken lines are mixed in.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from quotas.usage_record import usage_file_name

START = 1_790_000_000 - 1_790_000_000 % 3600
PRINCIPALS = [("alice", "billing"), ("alice", "search"), ("bob", "etl"), ("ANONYMOUS", "legacy"), ("carol", "app")]
MISBEHAVING = ("mallory", "churner")
BROKEN_LINES = ['{"time": 1, "user": "x"', "not json at all", '{"time": "soon", "user": "x", "client_id": "y"}',
                '{"user": "no-time", "client_id": "y", "bytes": 5}', '{"time": 7, "client_id": "no user"}']


def many_principals(count: int) -> list[tuple[str, str]]:
    """``count`` principals: ``count - 1`` steady ones and the misbehaving one."""
    return [*((f"user-{index:04}", "app") for index in range(count - 1)), MISBEHAVING]


def rows(count: int, seed: int = 7, principals: list[tuple[str, str]] | None = None) -> Iterator[dict[str, Any]]:
    """``count`` lines, one per principal and second (the principals' lines of a second together)."""
    generator = random.Random(seed)
    principals = principals or [*PRINCIPALS, MISBEHAVING]
    for index in range(count):
        user, client_id = principals[index % len(principals)]
        second = START + index // len(principals)
        row = {"time": second, "user": user, "client_id": client_id,
               "bytes": generator.randrange(1_000, 2_000_000), "produce_requests": generator.randrange(1, 50),
               "new_pids": 0, "mutations": 0, "throttle_ms": 0, "rejections": 0,
               "fetch_bytes": generator.randrange(0, 4_000_000)}
        if (user, client_id) == MISBEHAVING:
            row["bytes"] = generator.randrange(5_000_000, 50_000_000)
            row["new_pids"] = generator.randrange(0, 40)
            row["mutations"] = generator.choice((0, 0, 0, 10, 100))
            row["throttle_ms"] = generator.choice((0, 0, 500, 2_000))
            row["rejections"] = generator.choice((0, 0, 0, 1))
        elif generator.random() < 0.01:
            row["new_pids"] = 1
        yield row


def write_usage_log(directory: Path, count: int, malformed: int = 0, seed: int = 7) -> list[dict[str, Any]]:
    """Write ``count`` rows plus ``malformed`` broken lines (at the ends of the files); return the rows."""
    written: list[dict[str, Any]] = []
    stream_usage_log(directory, count, seed, written.append)
    names = sorted(path.name for path in directory.glob("usage-*.jsonl"))
    for index in range(malformed):
        with (directory / names[index % len(names)]).open("a") as file:
            file.write(BROKEN_LINES[index % len(BROKEN_LINES)] + "\n")
    return written


def stream_usage_log(directory: Path, count: int, seed: int = 7,
                     observe: Callable[[dict[str, Any]], None] | None = None,
                     principals: list[tuple[str, str]] | None = None) -> None:
    """Write ``count`` rows into hourly files, one open file at a time (10M rows fit in no memory)."""
    directory.mkdir(parents=True, exist_ok=True)
    current_name = None
    file = None
    try:
        for row in rows(count, seed, principals):
            if observe is not None:
                observe(row)
            name = usage_file_name(row["time"])
            if name != current_name:
                if file is not None:
                    file.close()
                file = (directory / name).open("a")
                current_name = name
            assert file is not None
            file.write(json.dumps(row, separators=(",", ":")) + "\n")
    finally:
        if file is not None:
            file.close()


WEEK_S = 7 * 86400
WEEK_PRINCIPALS = {"steady": ("alice", "billing"), "nightly": ("bob", "etl"), "observed": ("carol", "app"),
                   "brief": ("dave", "probe")}
"""A week's principals: a daily cycle held to its quota at its peaks (raised through AlterClientQuotas on the third
day), a batch job writing two hours a night and nothing else, a consumer under an observed quota, and one with 20
seconds of traffic in the whole week (too few for a recommendation)."""
FILE_QUOTA = "quotas.toml line 3"
ALTERED = "AlterClientQuotas (state/client-quotas.json)"
RAISED_AT = START + 2 * 86400 + 12 * 3600
"""When alice's quota was raised."""


def week_quotas(time_s: int) -> list[dict[str, Any]]:
    """The quotas in force at ``time_s`` of the week, as the proxy lists them (``QUOTAS_FIELD``)."""
    raised = time_s >= RAISED_AT
    return [{"user": "alice", "client_id": None, "ip": None, "topic": None, "quota_type": "producer_byte_rate",
             "limit": 4_000_000.0 if raised else 2_500_000.0, "mode": "enforce",
             "source": ALTERED if raised else FILE_QUOTA},
            {"user": "carol", "client_id": None, "ip": None, "topic": None, "quota_type": "consumer_byte_rate",
             "limit": 1_000_000.0, "mode": "observe", "source": "quotas.toml line 7"}]


def week_rows(step_s: int = 60, seed: int = 7) -> Iterator[dict[str, Any]]:
    """A week of usage from ``START``, a line every ``step_s`` seconds for each principal with traffic then, and the
    quotas in force atop each hour and when they change, in the proxy's format."""
    generator = random.Random(seed)
    for time_s in range(START, START + WEEK_S, step_s):
        if time_s % 3600 == 0 or time_s - step_s < RAISED_AT <= time_s:
            yield {"time": time_s, "quotas": week_quotas(time_s)}
        hour = (time_s % 86400) / 3600
        daily = 0.55 + 0.45 * math.sin((hour - 8) / 24 * 2 * math.pi)  # lowest at 02:00, highest at 14:00
        limit = week_quotas(time_s)[0]["limit"]
        wanted = 3_600_000 * daily * generator.uniform(0.9, 1.1)
        yield _line(time_s, WEEK_PRINCIPALS["steady"], bytes=int(min(wanted, limit)), fetch_bytes=int(2 * wanted),
                    throttle_ms=int(1000 * (wanted - limit) / limit) if wanted > limit else 0)
        if 2 <= hour < 4:
            yield _line(time_s, WEEK_PRINCIPALS["nightly"], bytes=generator.randrange(15_000_000, 25_000_000))
        consumed = int(1_300_000 * daily * generator.uniform(0.8, 1.2))
        yield _line(time_s, WEEK_PRINCIPALS["observed"], fetch_bytes=consumed,
                    observed_throttled=int(consumed > 1_000_000),
                    observed_throttle_ms=int(1000 * (consumed - 1_000_000) / 1_000_000) if consumed > 1_000_000 else 0)
        if time_s - START < 20 * step_s:
            yield _line(time_s, WEEK_PRINCIPALS["brief"], bytes=generator.randrange(1_000, 5_000))


def _line(time_s: int, principal: tuple[str, str], **counters: int) -> dict[str, Any]:
    user, client_id = principal
    return {"time": time_s, "user": user, "client_id": client_id, "bytes": 0, "produce_requests": 1, "new_pids": 0,
            "mutations": 0, "throttle_ms": 0, "rejections": 0, "fetch_bytes": 0, "observed_throttled": 0,
            "observed_throttle_ms": 0, **counters}


def write_lines(directory: Path, lines: Iterable[dict[str, Any]]) -> None:
    """``lines`` into the hourly files the proxy would have written them to."""
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[str]] = {}
    for line in lines:
        files.setdefault(usage_file_name(line["time"]), []).append(json.dumps(line, separators=(",", ":")))
    for name, texts in files.items():
        (directory / name).write_text("\n".join(texts) + "\n")
