"""A synthetic usage log in the proxy's format, for tests, benchmarks and demos.

Several principals with steady traffic and one misbehaving principal (bursts of bytes, churning
producer IDs, topic mutations, throttled and rejected), spread over hourly files as the proxy
writes them; ``malformed`` broken lines are mixed in.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from quotas.usage_record import usage_file_name

START = 1_790_000_000 - 1_790_000_000 % 3600
PRINCIPALS = [("alice", "billing"), ("alice", "search"), ("bob", "etl"), ("ANONYMOUS", "legacy"), ("carol", "app")]
MISBEHAVING = ("mallory", "churner")
BROKEN_LINES = ['{"time": 1, "user": "x"', "not json at all", '{"time": "soon", "user": "x", "client_id": "y"}',
                '{"user": "no-time", "client_id": "y", "bytes": 5}', '{"time": 7, "client_id": "no user"}']


def rows(count: int, seed: int = 7) -> Iterator[dict[str, Any]]:
    generator = random.Random(seed)
    principals = [*PRINCIPALS, MISBEHAVING]
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
                     observe: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Write ``count`` rows into hourly files, one open file at a time (10M rows fit in no memory)."""
    directory.mkdir(parents=True, exist_ok=True)
    current_name = None
    file = None
    try:
        for row in rows(count, seed):
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
