from __future__ import annotations

import json
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

from allocator.durable import WriteErrors
from proxy.reporting.usage_log import STORE, UsageLog
from quotas.config import QuotaEntity, QuotaMode, QuotaType, parse_quota_document
from quotas.usage_record import QUOTAS_FIELD, quota_snapshot, snapshot_config, usage_file_name

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


def test_the_quotas_in_force_head_every_file_and_follow_each_change(tmp_path: Path) -> None:
    file_config = parse_quota_document({"quota": [{"user": "alice", "producer_byte_rate": 1_000_000},
                                                  {"topic": "<default>", "consumer_byte_rate": 5_000_000,
                                                   "mode": "observe"}]}, "quotas.toml")
    usage = UsageLog(tmp_path / "usage")
    usage.start()
    usage.quotas_in_force(file_config)
    usage.end_second(START)  # no traffic: the change is written all the same
    usage.produce("alice", "app", 1000, 0, 0, False)
    usage.end_second(START + 1)  # the file has them already
    usage.produce("alice", "app", 1000, 0, 0, False)
    usage.end_second(START + HOUR)  # a new file: they head it
    changed = parse_quota_document({"quota": [{"user": "alice", "producer_byte_rate": 2_000_000}]}, "quotas.toml")
    usage.quotas_in_force(changed)
    usage.stop(START + HOUR + 5)
    files = read_lines(tmp_path / "usage")
    first, second = files[usage_file_name(START)], files[usage_file_name(START + HOUR)]
    assert [(line["time"], QUOTAS_FIELD in line) for line in first] == [(START, True), (START + 1, False)]
    assert [(line["time"], QUOTAS_FIELD in line) for line in second] == [(START + HOUR, True), (START + HOUR, False),
                                                                          (START + HOUR + 5, True)]
    assert first[0][QUOTAS_FIELD] == second[0][QUOTAS_FIELD] == [
        {"user": "alice", "client_id": None, "ip": None, "topic": None, "tenant": None,
         "quota_type": "producer_byte_rate",
         "limit": 1_000_000, "mode": "enforce", "source": "quotas.toml [[quota]] #1"},
        {"user": None, "client_id": None, "ip": None, "topic": "<default>", "tenant": None,
         "quota_type": "consumer_byte_rate",
         "limit": 5_000_000, "mode": "observe", "source": "quotas.toml [[quota]] #2"}]
    assert second[-1][QUOTAS_FIELD][0]["limit"] == 2_000_000


def test_a_snapshot_of_the_quotas_reads_back_as_the_same_quotas() -> None:
    config = parse_quota_document({"settings": {"quota.mode": "observe"}, "quota": [
        {"user": "<default>", "client-id": "app", "producer_byte_rate": 1024, "mode": "enforce"},
        {"ip": "10.0.0.1", "connection_creation_rate": 5},
        {"user": "bob", "topic": "orders", "consumer_byte_rate": 7_000}]}, "quotas.toml")
    again = snapshot_config(json.loads(json.dumps(quota_snapshot(config))))
    assert again.entries == config.entries and again.origins == config.origins
    assert {entity: again.mode_of(entity) for entity in again.entries} == {
        QuotaEntity("<default>", "app"): QuotaMode.ENFORCE, QuotaEntity(ip="10.0.0.1"): QuotaMode.OBSERVE,
        QuotaEntity("bob", topic="orders"): QuotaMode.OBSERVE}
    assert again.resolve(QuotaType.PRODUCER_BYTE_RATE, "carol", "app") == config.resolve(
        QuotaType.PRODUCER_BYTE_RATE, "carol", "app")


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


def wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_client_line_names_the_tenant_its_user_belonged_to_in_that_second(tmp_path: Path) -> None:
    text = '[[tenant]]\nname = "payments"\nuser-prefix = "pay-"\n[[quota]]\ntenant = "payments"\nrequest_rate = 5\n'
    usage = UsageLog(tmp_path / "usage")
    usage.start()
    usage.quotas_in_force(parse_quota_document(tomllib.loads(text), "quotas.toml"))
    usage.produce("pay-api", "app", 10, 0, 0, False)
    usage.produce("alice", "app", 10, 0, 0, False)
    usage.end_second(START)
    moved = text.replace('user-prefix = "pay-"', 'users = ["alice"]')
    usage.quotas_in_force(parse_quota_document(tomllib.loads(moved), "quotas.toml"))
    usage.produce("pay-api", "app", 10, 0, 0, False)
    usage.produce("alice", "app", 10, 0, 0, False)
    usage.stop(START + 1)
    lines = read_lines(tmp_path / "usage")[usage_file_name(START)]
    assert [(line["time"], line["user"], line.get("tenant")) for line in lines if "user" in line] == [
        (START, "pay-api", "payments"), (START, "alice", None), (START + 1, "pay-api", None),
        (START + 1, "alice", "payments")]
    budgets = [quota for line in lines if QUOTAS_FIELD in line for quota in line[QUOTAS_FIELD]]  # type: ignore[union-attr]
    assert budgets[0]["tenant"] == "payments" and budgets[0]["quota_type"] == "request_rate"
    assert snapshot_config(budgets[:1]).entries == {QuotaEntity(tenant="payments"): {QuotaType.REQUEST_RATE: 5.0}}
