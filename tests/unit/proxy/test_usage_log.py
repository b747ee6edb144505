from __future__ import annotations

import json
from pathlib import Path

from proxy.usage_log import UsageLog
from quotas.usage_record import usage_file_name

HOUR = 3600
START = 1_790_000_000 - 1_790_000_000 % HOUR  # the start of an hour


def read_lines(directory: Path) -> dict[str, list[dict[str, object]]]:
    return {path.name: [json.loads(line) for line in path.read_text().splitlines()]
            for path in sorted(directory.glob("usage-*.jsonl"))}


def test_one_line_per_principal_and_second_in_hourly_files(tmp_path: Path) -> None:
    usage = UsageLog(tmp_path / "usage")
    usage.start()
    usage.produce("alice", "app", 1000, 2, 0, False)
    usage.produce("alice", "app", 500, 0, 30, True)
    usage.mutations("bob", "", 12, 4000, 1)
    usage.fetch("bob", "", 70_000, 250)
    usage.end_second(START + HOUR - 1)
    usage.end_second(START + HOUR - 1)  # nothing recorded since: no line
    usage.producer_ids("alice", "app", 3, 10)
    usage.stop(START + HOUR)
    files = read_lines(tmp_path / "usage")
    first, second = usage_file_name(START), usage_file_name(START + HOUR)
    assert list(files) == [first, second]
    assert files[first] == [
        {"time": START + HOUR - 1, "user": "alice", "client_id": "app", "bytes": 1500, "produce_requests": 2,
         "new_pids": 2, "mutations": 0, "throttle_ms": 30, "rejections": 1, "fetch_bytes": 0},
        {"time": START + HOUR - 1, "user": "bob", "client_id": "", "bytes": 0, "produce_requests": 0,
         "new_pids": 0, "mutations": 12, "throttle_ms": 4250, "rejections": 1, "fetch_bytes": 70_000},
    ]
    assert files[second] == [{"time": START + HOUR, "user": "alice", "client_id": "app", "bytes": 0,
                              "produce_requests": 0, "new_pids": 3, "mutations": 0, "throttle_ms": 10,
                              "rejections": 0, "fetch_bytes": 0}]
    assert usage.lines_written == 3


def test_an_unwritable_directory_is_counted_not_fatal(tmp_path: Path) -> None:
    usage = UsageLog(tmp_path / "usage")
    usage.start()
    (tmp_path / "usage").rmdir()
    (tmp_path / "usage").write_text("not a directory")
    usage.produce("alice", "app", 1, 0, 0, False)
    usage.stop(START)
    assert usage.write_errors == 1 and usage.lines_written == 0
