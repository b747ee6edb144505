from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from allocator.durable import WriteErrors
from proxy.reporting.usage_log import STORE, UsageLog
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
    usage.observed("bob", "", 1200)
    usage.observed("bob", "", 0, refused=True)
    usage.observed("bob", "", 0)  # enforcement would have let it through: not counted
    usage.end_second(START + HOUR - 1)
    usage.end_second(START + HOUR - 1)  # nothing recorded since: no line
    usage.producer_ids("alice", "app", 3, 10)
    usage.stop(START + HOUR)
    files = read_lines(tmp_path / "usage")
    first, second = usage_file_name(START), usage_file_name(START + HOUR)
    assert list(files) == [first, second]
    assert files[first] == [
        {"time": START + HOUR - 1, "user": "alice", "client_id": "app", "bytes": 1500, "produce_requests": 2,
         "new_pids": 2, "mutations": 0, "throttle_ms": 30, "rejections": 1, "fetch_bytes": 0,
         "observed_throttled": 0, "observed_throttle_ms": 0},
        {"time": START + HOUR - 1, "user": "bob", "client_id": "", "bytes": 0, "produce_requests": 0,
         "new_pids": 0, "mutations": 12, "throttle_ms": 4250, "rejections": 1, "fetch_bytes": 70_000,
         "observed_throttled": 2, "observed_throttle_ms": 1200},
    ]
    assert files[second] == [{"time": START + HOUR, "user": "alice", "client_id": "app", "bytes": 0,
                              "produce_requests": 0, "new_pids": 3, "mutations": 0, "throttle_ms": 10,
                              "rejections": 0, "fetch_bytes": 0, "observed_throttled": 0,
                              "observed_throttle_ms": 0}]
    assert usage.lines_written == 3


def test_a_topics_bytes_have_lines_of_their_own_per_user(tmp_path: Path) -> None:
    usage = UsageLog(tmp_path / "usage")
    usage.start()
    usage.topic_bytes("alice", {"orders": 1000, "clicks": 10}, fetched=False)
    usage.topic_bytes("alice", {"orders": 500}, fetched=True)
    usage.topic_bytes("bob", {"orders": 7}, fetched=False)
    usage.stop(START)
    assert read_lines(tmp_path / "usage")[usage_file_name(START)] == [
        {"time": START, "user": "alice", "topic": "orders", "topic_bytes": 1000, "topic_fetch_bytes": 500},
        {"time": START, "user": "alice", "topic": "clicks", "topic_bytes": 10, "topic_fetch_bytes": 0},
        {"time": START, "user": "bob", "topic": "orders", "topic_bytes": 7, "topic_fetch_bytes": 0},
    ]


def test_producer_id_blocks_have_lines_of_their_own_per_broker(tmp_path: Path) -> None:
    usage = UsageLog(tmp_path / "usage")
    usage.start()
    usage.blocks("broker", "raft-client-1", 1, 1000)
    usage.blocks("broker", "raft-client-1", 1, 1000)
    usage.blocks("broker", "raft-client-2", 2, 500)
    usage.stop(START)
    assert read_lines(tmp_path / "usage")[usage_file_name(START)] == [
        {"time": START, "user": "broker", "client_id": "raft-client-1", "broker_id": 1, "blocks": 2, "block_ids": 2000},
        {"time": START, "user": "broker", "client_id": "raft-client-2", "broker_id": 2, "blocks": 1, "block_ids": 500},
    ]


def test_seconds_that_cannot_be_written_wait_and_are_written_once_the_disk_is_back(tmp_path: Path) -> None:
    errors = WriteErrors((STORE,))
    usage = UsageLog(tmp_path / "usage", write_errors=errors)
    usage.start()
    (tmp_path / "usage").rmdir()
    (tmp_path / "usage").write_text("not a directory")  # every write fails, as on a full disk
    usage.produce("alice", "app", 1, 0, 0, False)
    usage.end_second(START)
    usage.produce("alice", "app", 2, 0, 0, False)
    usage.end_second(START + 1)
    wait_for(lambda: errors.counts[STORE] >= 2)
    assert usage.lines_written == 0 and errors.failing(STORE)
    (tmp_path / "usage").unlink()
    (tmp_path / "usage").mkdir()
    usage.produce("alice", "app", 3, 0, 0, False)
    usage.stop(START + 2)
    lines = read_lines(tmp_path / "usage")[usage_file_name(START)]
    assert [(line["time"], line["bytes"]) for line in lines] == [(START, 1), (START + 1, 2), (START + 2, 3)]
    assert not errors.failing(STORE)


def test_hourly_files_older_than_the_retention_are_deleted_as_a_new_hour_begins(tmp_path: Path) -> None:
    directory = tmp_path / "usage"
    directory.mkdir()
    day = 86400
    old, kept = usage_file_name(START - 8 * day), usage_file_name(START - 6 * day)
    for name in (old, kept, "notes.txt"):
        (directory / name).write_text("{}\n")
    usage = UsageLog(directory, retention_days=7)
    usage.start()
    usage.produce("alice", "app", 1, 0, 0, False)
    usage.stop(START)
    assert sorted(path.name for path in directory.iterdir()) == sorted([kept, usage_file_name(START), "notes.txt"])


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
