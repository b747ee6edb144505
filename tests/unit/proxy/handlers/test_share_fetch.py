"""ShareFetch under the consumer byte-rate quotas, as Kafka's ``handleShareFetchRequest`` meters it: one fetch quota
with Fetch, the answer's bytes charged, a throttled answer without records that keeps the acknowledgements' results,
topic quotas, observe mode and the usage log."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from protocol.apis import Api
from protocol.codecs import decode_request, decode_response, encode_response
from protocol.header import encode_response_header, read_request_header
from proxy.cluster.topic_names import TopicNames
from proxy.decision.outcome import FORWARD, Caller, Forward
from proxy.handlers.share_fetch import ShareFetchHandler
from proxy.reporting.usage_log import UsageLog
from proxy.state.quota_service import QuotaService, now_ms
from quotas.config import QuotaKey
from tests.support import encode_request
from tests.unit.proxy.outcomes import charge_of, forwarded, handled, on_response

ORDERS_ID = uuid.UUID(int=7)
CLICKS_ID = uuid.UUID(int=8)
NAMES = {ORDERS_ID: "orders", CLICKS_ID: "clicks"}
ACKNOWLEDGED = [{"first_offset": 0, "last_offset": 3, "acknowledge_types": [1]}]


def share_handler(tmp_path: Path, quotas: str) -> tuple[ShareFetchHandler, QuotaService, UsageLog]:
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(quotas)
    service = QuotaService(quota_file, CollectorRegistry())

    async def topics_by_id(topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]:
        return {topic_id: (NAMES[topic_id], 1) for topic_id in topic_ids if topic_id in NAMES}

    names = TopicNames(topics_by_id)
    for topic_id, name in NAMES.items():
        names.learn(topic_id.bytes, name)
    usage = UsageLog(tmp_path / "usage")
    return ShareFetchHandler(service, usage, names), service, usage


def share_fetch(client_id: str, max_bytes: int = 50 << 20) -> memoryview:
    frame = encode_request(Api.SHARE_FETCH, 2, client_id=client_id, group_id="g", member_id="m",
                           share_session_epoch=1, max_wait_ms=500, min_bytes=1 << 20, max_bytes=max_bytes,
                           max_records=500, batch_size=500, forgotten_topics_data=[], topics=[
                               {"topic_id": ORDERS_ID, "partitions": [
                                   {"partition_index": 0, "acknowledgement_batches": ACKNOWLEDGED},
                                   {"partition_index": 1, "acknowledgement_batches": []}]},
                               {"topic_id": CLICKS_ID, "partitions": [
                                   {"partition_index": 0, "acknowledgement_batches": []}]}])
    return memoryview(frame)[4:]


def answer(records: dict[uuid.UUID, int], error_code: int = 0) -> memoryview:
    leader = {"leader_id": 1, "leader_epoch": 0}
    responses = [{"topic_id": topic_id, "partitions": [
        {"partition_index": 0, "error_code": 0, "acknowledge_error_code": 0, "current_leader": leader,
         "records": bytes(size), "acquired_records": [{"first_offset": 0, "last_offset": 9, "delivery_count": 1}]},
        {"partition_index": 1, "error_code": 0, "acknowledge_error_code": 0, "current_leader": leader,
         "records": b"", "acquired_records": []}]} for topic_id, size in records.items()]
    body = encode_response(Api.SHARE_FETCH, 2, {"throttle_time_ms": 0, "error_code": error_code,
                                                "error_message": None, "acquisition_lock_timeout_ms": 30000,
                                                "responses": responses, "node_endpoints": []})
    return memoryview(encode_response_header(1, True) + body)


def decided(handler: ShareFetchHandler, request: memoryview, user: str = "ANONYMOUS") -> Forward:
    return forwarded(handled(handler, request, Caller(user, now_ms(), clock=now_ms)))


def max_bytes_sent(outcome: Forward) -> int:
    assert outcome.replacement is not None
    capped = memoryview(outcome.replacement)[4:]
    return int(decode_request(Api.SHARE_FETCH, 2, capped[read_request_header(capped).length:]).max_bytes)


def logged(tmp_path: Path, usage: UsageLog) -> list[dict[str, Any]]:
    usage.start()
    usage.stop(1_790_000_000)
    return [json.loads(line) for path in (tmp_path / "usage").glob("usage-*.jsonl")
            for line in path.read_text().splitlines()]


def test_a_share_consumer_gets_kafkas_cap_and_pays_for_each_answer(tmp_path: Path) -> None:
    handler, quotas, usage = share_handler(tmp_path, '[[quota]]\nclient-id = "metered"\nconsumer_byte_rate = 1000000\n')
    assert handled(handler, share_fetch("free"), Caller("ANONYMOUS", now_ms(), clock=now_ms)) is FORWARD
    outcome = decided(handler, share_fetch("metered"))
    assert max_bytes_sent(outcome) == 10_000_000 and on_response(outcome).read_whole  # 1 MB/s x (11 - 1) x 1 s
    charge = charge_of(outcome)
    within = answer({ORDERS_ID: 6_000_000})
    assert charge(within, len(within)) == (0, None)
    assert quotas.fetch.rate_of(QuotaKey("", "metered"), now_ms()) == pytest.approx(len(within) / 10, rel=0.05)
    refused = answer({}, error_code=87)  # an error of the whole request: Kafka records nothing for it
    assert charge(refused, len(refused)) == (0, None)
    [line] = [line for line in logged(tmp_path, usage) if "fetch_bytes" in line]
    # 4 + the body (the frame without its 5-byte header), as a Fetch answer is counted
    assert line["client_id"] == "metered" and line["fetch_bytes"] == len(within) - 1


def test_an_answer_over_the_quota_keeps_only_its_acknowledgements_and_gives_its_bytes_back(tmp_path: Path) -> None:
    handler, quotas, usage = share_handler(tmp_path, '[[quota]]\nclient-id = "metered"\nconsumer_byte_rate = 1000000\n')
    charge = charge_of(decided(handler, share_fetch("metered")))
    over = answer({ORDERS_ID: 11_000_000, CLICKS_ID: 1000})
    throttle_ms, emptied = charge(over, len(over))
    assert 900 < throttle_ms <= 1010 and emptied is not None  # (11 MB / 10 s - 1 MB/s) / 1 MB/s x 10 s
    sent = decode_response(Api.SHARE_FETCH, 2, emptied)
    assert (sent.throttle_time_ms, sent.error_code) == (throttle_ms, 0)
    # the one partition with acknowledgements answers for them, without records; nothing else is sent
    assert [(topic.topic_id, partition.partition_index, partition.records, partition.acquired_records)
            for topic in sent.responses for partition in topic.partitions] == [(ORDERS_ID, 0, b"", [])]
    assert quotas.fetch.rate_of(QuotaKey("", "metered"), now_ms()) == 0  # taken back
    [line] = [line for line in logged(tmp_path, usage) if "fetch_bytes" in line]
    assert (line["fetch_bytes"], line["throttle_ms"]) == (0, throttle_ms)


def test_a_topic_quota_caps_the_window_and_empties_an_answer_over_it(tmp_path: Path) -> None:
    handler, _, usage = share_handler(tmp_path, '[[quota]]\ntopic = "orders"\nconsumer_byte_rate = 500000\n')
    outcome = decided(handler, share_fetch("app"), user="alice")
    assert max_bytes_sent(outcome) == 5_000_000  # the smallest window of the topics named
    charge = charge_of(outcome)
    within = answer({ORDERS_ID: 4_000_000, CLICKS_ID: 9_000_000})
    assert charge(within, len(within)) == (0, None)
    over = answer({ORDERS_ID: 2_000_000})
    throttle_ms, emptied = charge(over, len(over))
    assert throttle_ms > 0 and emptied is not None
    topics = {(line["topic"], line["topic_fetch_bytes"]) for line in logged(tmp_path, usage) if "topic" in line}
    assert topics == {("orders", 4_000_000), ("clicks", 9_000_000)}


def test_in_observe_mode_the_throttle_is_counted_and_the_records_go_through(tmp_path: Path) -> None:
    handler, _, usage = share_handler(tmp_path, '[settings]\n"quota.mode" = "observe"\n'
                                                '[[quota]]\nclient-id = "metered"\nconsumer_byte_rate = 1000000\n')
    outcome = decided(handler, share_fetch("metered"))
    assert outcome.replacement is None  # nothing capped
    charge = charge_of(outcome)
    over = answer({ORDERS_ID: 12_000_000})
    assert charge(over, len(over)) == (0, None)  # the whole answer, no throttle
    [line] = [line for line in logged(tmp_path, usage) if "fetch_bytes" in line]
    assert line["fetch_bytes"] == len(over) - 1 and line["observed_throttle_ms"] > 0
