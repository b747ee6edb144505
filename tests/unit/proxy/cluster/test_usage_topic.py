"""The usage log's lines sent to a topic (``proxy.cluster.usage_topic``): read from the hourly files on from a durable
position, each line once and in order, a failed batch sent again as it was, nothing lost but what the retention
deleted first (counted)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kafka.record.memory_records import MemoryRecords
from prometheus_client import CollectorRegistry

from allocator.durable import WriteErrors
from proxy.cluster import usage_topic
from proxy.cluster.client import ClusterError, _record_batch
from proxy.cluster.usage_topic import UsageShipper, UsageTopicSettings
from proxy.settings.config import ConfigError
from proxy.settings.loading import build_parser, load_config
from quotas.usage_record import POSITION_HEADER

HOUR_1 = "usage-2026-11-28T21.jsonl"
HOUR_2 = "usage-2026-11-28T22.jsonl"


class Topic:
    """Stands in for the cluster's topic: fails while ``down``, keeps every batch it acknowledged."""

    topic = "usage-log"

    def __init__(self) -> None:
        self.down = False
        self.largest_batch = 1_000_000
        """Lines of the largest batch it takes: a larger one is refused as MESSAGE_TOO_LARGE."""
        self.batches: list[list[tuple[bytes, bytes, str]]] = []
        """(key, line, position) of each record of each acknowledged batch."""
        self.attempts: list[list[bytes]] = []
        self.log_ids: set[str] = set()

    async def produce(self, values: list[bytes], idempotent: bool = False, keys: list[bytes] | None = None,
                      headers: list[list[tuple[str, bytes]]] | None = None) -> int:
        assert idempotent and keys is not None and headers is not None
        self.attempts.append(list(values))
        if self.down:
            raise OSError("unreachable")
        if len(values) > self.largest_batch:
            raise ClusterError("produce: error 10", 10)
        positions = [dict(header)[POSITION_HEADER].decode().split("/", 1) for header in headers]
        self.log_ids |= {log_id for log_id, _ in positions}
        self.batches.append([(key, value, position)
                             for key, value, (_, position) in zip(keys, values, positions, strict=True)])
        return 0

    def lines(self) -> list[bytes]:
        return [line for batch in self.batches for _, line, _ in batch]

    def close(self) -> None:
        pass


def Any_(topic: Topic) -> Any:  # noqa: N802
    """The stand-in, typed as the cluster client it stands in for."""
    return topic


def shipper(directory: Path, topic: Topic) -> UsageShipper:
    return UsageShipper(directory, Any_(topic), "p1:9092", 7, CollectorRegistry())


def ship_all(shipper: UsageShipper) -> None:
    async def all_batches() -> None:
        while await shipper.ship():
            pass
    asyncio.run(all_batches())


def append(path: Path, *lines: str, end: str = "\n") -> None:
    with open(path, "ab") as file:
        file.write(end.join(lines).encode() + end.encode())


def test_lines_go_out_once_in_order_with_their_place_and_a_restart_goes_on_from_the_last_acknowledged(
        tmp_path: Path) -> None:
    append(tmp_path / HOUR_1, '{"a":1}', '{"a":2}')
    append(tmp_path / HOUR_2, '{"b":1}')
    topic = Topic()
    first = shipper(tmp_path, topic)
    ship_all(first)
    assert topic.lines() == [b'{"a":1}', b'{"a":2}', b'{"b":1}']
    records = [record for batch in topic.batches for record in batch]
    assert [position for _, _, position in records] == [f"{HOUR_1}:0", f"{HOUR_1}:8", f"{HOUR_2}:0"]
    assert {key for key, _, _ in records} == {b"p1:9092"}
    append(tmp_path / HOUR_2, '{"b":2}\n{"b":3', end="")  # the last line not whole yet: it waits
    ship_all(first)
    assert topic.lines()[3:] == [b'{"b":2}']
    append(tmp_path / HOUR_2, "}")
    restarted = shipper(tmp_path, topic)  # the position was written durably
    ship_all(restarted)
    assert topic.lines() == [b'{"a":1}', b'{"a":2}', b'{"b":1}', b'{"b":2}', b'{"b":3}']
    assert restarted.measure_unsent() == 0 and first.lines_sent + restarted.lines_sent == 5
    assert len(topic.log_ids) == 1  # the log's id outlives the restart: a line sent again is known by it


def test_a_batch_that_failed_is_sent_again_as_it_was_though_more_lines_were_written_since(tmp_path: Path) -> None:
    append(tmp_path / HOUR_1, '{"a":1}')
    topic = Topic()
    topic.down = True
    sender = shipper(tmp_path, topic)
    with pytest.raises(OSError):
        asyncio.run(sender.ship())
    append(tmp_path / HOUR_1, '{"a":2}')
    assert sender.measure_unsent() == 16
    topic.down = False
    ship_all(sender)
    assert topic.attempts == [[b'{"a":1}'], [b'{"a":1}'], [b'{"a":2}']]  # the idempotent retry is the same batch
    assert topic.lines() == [b'{"a":1}', b'{"a":2}']


def test_a_file_the_retention_deleted_before_it_went_out_is_counted_and_the_next_one_sent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    append(tmp_path / HOUR_1, '{"a":1}', '{"a":2}')
    topic = Topic()
    sender = shipper(tmp_path, topic)
    monkeypatch.setattr(usage_topic, "MAX_BATCH_LINES", 1)
    asyncio.run(sender.ship())  # one line of the first file out
    monkeypatch.undo()
    (tmp_path / HOUR_1).unlink()
    append(tmp_path / HOUR_2, '{"b":1}')
    ship_all(sender)
    assert topic.lines() == [b'{"a":1}', b'{"b":1}'] and sender.files_lost == 1


def test_a_line_longer_than_a_batch_is_passed_over_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.setattr(usage_topic, "MAX_BATCH_BYTES", 16)
    append(tmp_path / HOUR_1, '{"quotas":[' + "1," * 20 + "1]}", '{"a":1}')
    topic = Topic()
    sender = shipper(tmp_path, topic)
    ship_all(sender)
    assert topic.lines() == [b'{"a":1}'] and sender.lines_too_long == 1


def _settings(tmp_path: Path, body: str) -> UsageTopicSettings | None:
    path = tmp_path / "proxy.toml"
    path.write_text(f'upstream = "127.0.0.1:9"\n{body}')
    return UsageTopicSettings.from_config(load_config(build_parser().parse_args(["--config", str(path)])))


def test_a_fleet_sends_its_usage_log_to_a_topic_unless_told_not_to_and_needs_one_of_its_own(tmp_path: Path) -> None:
    assert _settings(tmp_path, "") is None
    assert _settings(tmp_path, '[usage]\ntopic = "usage"\n') == UsageTopicSettings("usage")
    assert _settings(tmp_path, "[fleet]\n") == UsageTopicSettings(usage_topic.DEFAULT_FLEET_TOPIC)
    assert _settings(tmp_path, '[fleet]\n[usage]\ntopic = ""\n') is None
    with pytest.raises(ConfigError, match="topic of the \\[fleet\\]"):
        _settings(tmp_path, '[fleet]\ntopic = "shared"\n[usage]\ntopic = "shared"\n')
    with pytest.raises(ConfigError, match="\\[usage\\] topic"):
        _settings(tmp_path, "[usage]\ntopic = 3\n")


def test_a_batch_of_many_short_lines_holds_every_one_with_its_key_and_header() -> None:
    """kafka-python's builder leaves out, without a word, a record past the batch size it was given: the size counts
    each record's key and header too."""
    lines = [f'{{"time":{index},"user":"u","topic":"t","topic_bytes":1}}'.encode() for index in range(2000)]
    keys = [b"proxy-a.example.com:9092/worker-1"] * len(lines)
    headers = [[(POSITION_HEADER, f"{'f' * 32}/usage-2026-11-28T21.jsonl:{index * 60}".encode())]
               for index in range(len(lines))]
    batch = MemoryRecords(_record_batch(lines, None, keys, headers)).next_batch()
    assert batch is not None
    records = list(batch)
    assert [bytes(record.value) for record in records] == lines
    assert [record.headers for record in records] == headers


def test_a_position_the_disk_does_not_take_sends_no_line_twice_and_is_written_once_it_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    append(tmp_path / HOUR_1, '{"a":1}')
    topic = Topic()
    errors = WriteErrors((usage_topic.POSITION_STORE,))
    sender = UsageShipper(tmp_path, Any_(topic), "p1:9092", 7, CollectorRegistry(), errors)
    writes = usage_topic.write_durably

    def full_disk(path: Path, data: bytes, mode: int = 0o644) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(usage_topic, "write_durably", full_disk)
    ship_all(sender)
    append(tmp_path / HOUR_1, '{"a":2}')
    ship_all(sender)
    assert topic.lines() == [b'{"a":1}', b'{"a":2}'] and errors.counts[usage_topic.POSITION_STORE] >= 1
    monkeypatch.setattr(usage_topic, "write_durably", writes)
    sender.measure_unsent()  # between batches the position is written again
    assert (tmp_path / usage_topic.POSITION_FILE).read_text() == f"{HOUR_1}:16"


def test_a_torn_line_at_the_end_of_an_hour_is_left_and_the_next_hour_sent(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(usage_topic, "MAX_BATCH_BYTES", 16)
    append(tmp_path / HOUR_1, '{"a":1}\n{"quotas":[' + "1," * 20, end="")  # a crash in the middle of a long line
    append(tmp_path / HOUR_2, '{"b":1}')
    topic = Topic()
    sender = shipper(tmp_path, topic)
    ship_all(sender)
    assert topic.lines() == [b'{"a":1}', b'{"b":1}']


def test_a_file_the_writer_cut_back_is_read_on_from_its_new_end(tmp_path: Path) -> None:
    append(tmp_path / HOUR_1, '{"a":1}', '{"a":2}')
    topic = Topic()
    sender = shipper(tmp_path, topic)
    ship_all(sender)
    with open(tmp_path / HOUR_1, "r+b") as file:  # a failed append cut back, after the lines were sent
        file.truncate(8)
    ship_all(sender)
    assert sender.measure_unsent() == 0
    append(tmp_path / HOUR_1, '{"a":2}', '{"a":3}')  # written again, and more
    ship_all(sender)
    records = [record for batch in topic.batches for record in batch]
    assert [(line, position) for _, line, position in records] == [
        (b'{"a":1}', f"{HOUR_1}:0"), (b'{"a":2}', f"{HOUR_1}:8"), (b'{"a":2}', f"{HOUR_1}:8"),
        (b'{"a":3}', f"{HOUR_1}:16")]  # the line sent again has its place: a reader counts it once


def test_a_batch_the_topic_finds_too_large_goes_in_halves_and_a_line_it_refuses_alone_waits(
        tmp_path: Path) -> None:
    append(tmp_path / HOUR_1, *(f'{{"a":{index}}}' for index in range(5)))
    topic = Topic()
    topic.largest_batch = 2
    sender = shipper(tmp_path, topic)
    ship_all(sender)
    assert topic.lines() == [f'{{"a":{index}}}'.encode() for index in range(5)]
    assert max(len(batch) for batch in topic.batches) <= 2
    topic.largest_batch = 0  # the topic's max.message.bytes set below a line: it waits for the operator
    append(tmp_path / HOUR_1, '{"a":5}')
    with pytest.raises(ClusterError):
        asyncio.run(sender.ship())
    assert sender.measure_unsent() == 8
    topic.largest_batch = 1_000_000
    append(tmp_path / HOUR_1, '{"a":6}', '{"a":7}')
    ship_all(sender)
    assert topic.lines()[5:] == [b'{"a":5}', b'{"a":6}', b'{"a":7}'] and sender.lines_too_long == 0


def test_a_file_sent_whole_and_deleted_after_a_quiet_spell_is_not_lost(tmp_path: Path) -> None:
    append(tmp_path / HOUR_1, '{"a":1}')
    topic = Topic()
    sender = shipper(tmp_path, topic)
    ship_all(sender)
    (tmp_path / HOUR_1).unlink()  # the retention's, long after
    append(tmp_path / HOUR_2, '{"b":1}')
    ship_all(sender)
    assert topic.lines() == [b'{"a":1}', b'{"b":1}'] and sender.files_lost == 0
