"""What a Produce the proxy refuses (in part or whole) looks like to the client and to the cluster.

Raw frames on one connection, pipelined, against the real broker; producer IDs come from the
broker's own InitProducerId.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.errors import INVALID_RECORD, THROTTLING_QUOTA_EXCEEDED
from protocol.header import response_header_length
from tests.integration.test_produce_quotas import pid_quota_file
from tests.support import (
    Cluster,
    ProxyProcess,
    closed_by_peer,
    connect_to_leader,
    create_topic_on_one_broker,
    encode_request,
    new_producer_id,
    produce_request,
    read_frame,
    read_to_end,
    record_batch,
)

pytestmark = pytest.mark.integration
PRODUCE_VERSION = 8  # the first with per-partition error messages


def producer_id_from(proxy: ProxyProcess) -> int:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        return int(new_producer_id(sock).producer_id)


def idempotent_request(topic: str, pid: int, sequence: int, correlation_id: int, acks: int = -1) -> bytes:
    records = record_batch([f"{pid}-{sequence}".encode()], producer_id=pid, producer_epoch=0, base_sequence=sequence)
    return produce_request(topic, records, correlation_id, acks=acks, version=PRODUCE_VERSION)


def produce_response(frame: bytes) -> Any:
    return decode_response(Api.PRODUCE, PRODUCE_VERSION, memoryview(frame)[response_header_length(frame, False):])


def partition_errors(frame: bytes) -> dict[int, int]:
    return {p.index: p.error_code for topic in produce_response(frame).responses for p in topic.partition_responses}


def read_all(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    values: dict[int, list[bytes]] = {}
    for record in read_to_end(bootstrap, topic):
        values.setdefault(record.partition, []).append(record.value)
    return values


def spend_the_burst(sock: socket.socket, topic: str, producer_ids: list[int], followed_by: bytes = b"") -> None:
    """Admit ``producer_ids`` as new, one request each, leaving the bucket that much under its burst (plus what it
    refills meanwhile); sent in one write with ``followed_by`` (its answers left to read), so that the bucket has
    no time to refill in between, however slow the machine."""
    sock.sendall(b"".join(idempotent_request(topic, producer_id, 0, correlation_id=100 + i)
                          for i, producer_id in enumerate(producer_ids)) + followed_by)
    for _ in producer_ids:
        assert partition_errors(read_frame(sock)) == {0: 0}


def test_reject_mode_keeps_a_pipelining_producers_batches_in_order(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    # burst = 2 windows x 1 s x 1 PID/s = 2 tokens: three new IDs leave the bucket at -1
    proxy = own_proxy("--quota-file", pid_quota_file(tmp_path, rate=1, mode="reject", window_size_s=1))
    create_topic_on_one_broker(broker, topic)
    pid, *spenders = (producer_id_from(proxy) for _ in range(4))
    with connect_to_leader(proxy, topic) as sock:
        spent_from = time.monotonic()
        # right behind the three, a producer pipelining its first two batches while its ID is over the quota
        spend_the_burst(sock, topic, spenders, followed_by=idempotent_request(topic, pid, 0, correlation_id=1)
                        + idempotent_request(topic, pid, 1, 2))
        first = produce_response(read_frame(sock))
        refilled_ms = 1000 * (time.monotonic() - spent_from)  # at most, at 1 token/s, when the first was charged
        second = read_frame(sock)
        assert first.responses[0].partition_responses[0].error_code == THROTTLING_QUOTA_EXCEEDED
        assert 1000 - refilled_ms - 1 <= first.throttle_time_ms <= 1000, refilled_ms
        # the second is read after the first's throttle, when the bucket has room for a new ID again:
        # it is refused all the same, or the cluster would see sequence 1 before sequence 0
        assert partition_errors(second) == {0: THROTTLING_QUOTA_EXCEEDED}
        # a batch the producer sent before it saw the refusals, arriving when the bucket has room
        time.sleep(1.1)
        sock.sendall(idempotent_request(topic, pid, 1, correlation_id=3))
        assert partition_errors(read_frame(sock)) == {0: THROTTLING_QUOTA_EXCEEDED}
        # the producer retries in order: both go through
        sock.sendall(idempotent_request(topic, pid, 0, correlation_id=4) + idempotent_request(topic, pid, 1, 5))
        assert partition_errors(read_frame(sock)) == {0: 0}
        assert partition_errors(read_frame(sock)) == {0: 0}
    assert read_all(proxy.bootstrap, topic)[0][-2:] == [f"{pid}-0".encode(), f"{pid}-1".encode()]


def test_reject_mode_closes_an_acks_0_connection_instead_of_dropping_its_records(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    # burst = 2 windows x 5 s x 0.1/s = 1 token: two new IDs leave the bucket at -1
    proxy = own_proxy("--quota-file", pid_quota_file(tmp_path, rate=0.1, mode="reject"))
    create_topic_on_one_broker(broker, topic)
    pid, *spenders = (producer_id_from(proxy) for _ in range(3))
    with connect_to_leader(proxy, topic) as sock:
        spend_the_burst(sock, topic, spenders)
        sock.sendall(idempotent_request(topic, pid, 0, correlation_id=1, acks=0))
        sock.sendall(encode_request(Api.API_VERSIONS, 0, correlation_id=2))
        assert closed_by_peer(sock), "the connection stays open: the producer cannot tell its records were lost"
    assert "acks=0 request with a partition error" in proxy.log()


def two_batches(value: bytes) -> bytes:
    return record_batch([value]) + record_batch([value])


@pytest.mark.parametrize("scanning", ["producer-id quota", "no quota"])
def test_an_invalid_partition_gets_invalid_record_and_the_others_are_written(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str, scanning: str) -> None:
    # with a producer-ID quota the proxy reads the batches and answers the invalid partition itself
    extra = ["--quota-file", pid_quota_file(tmp_path, rate=100, mode="throttle")] if scanning != "no quota" else []
    proxy = own_proxy(*extra)
    create_topic_on_one_broker(broker, topic, partitions=3)
    partitions = [{"index": 0, "records": record_batch([b"good-0"])},
                  {"index": 1, "records": two_batches(b"bad")},
                  {"index": 2, "records": record_batch([b"good-2"])}]
    request = encode_request(Api.PRODUCE, PRODUCE_VERSION, correlation_id=7, transactional_id=None, acks=-1,
                             timeout_ms=30_000, topic_data=[{"name": topic, "partition_data": partitions}])
    with connect_to_leader(proxy, topic) as sock:
        sock.sendall(request + encode_request(Api.API_VERSIONS, 0, correlation_id=8))
        response = read_frame(sock)
        assert struct.unpack_from(">i", response)[0] == 7
        assert struct.unpack_from(">i", read_frame(sock))[0] == 8  # the connection goes on
    # without a quota the request goes untouched and Kafka judges it: the proxy answers as Kafka does
    answer = produce_response(response)
    results = {p.index: p for p in answer.responses[0].partition_responses}
    assert [results[i].error_code for i in range(3)] == [0, INVALID_RECORD, 0]
    if scanning != "no quota":  # Kafka's own answer carries no message (KafkaApis.handleProduceRequest)
        assert "exactly one record batch" in results[1].error_message, results[1].error_message
    assert read_all(proxy.bootstrap, topic) == {0: [b"good-0"], 2: [b"good-2"]}


def test_acks_0_with_an_invalid_partition_writes_the_rest_then_closes(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    proxy = own_proxy("--quota-file", pid_quota_file(tmp_path, rate=100, mode="throttle"))
    create_topic_on_one_broker(broker, topic, partitions=2)
    partitions = [{"index": 0, "records": record_batch([b"good"])}, {"index": 1, "records": b""}]
    request = encode_request(Api.PRODUCE, PRODUCE_VERSION, correlation_id=1, transactional_id=None, acks=0,
                             timeout_ms=30_000, topic_data=[{"name": topic, "partition_data": partitions}])
    with connect_to_leader(proxy, topic) as sock:
        sock.sendall(request)
        assert read_frame(sock) == b""
    assert read_all(proxy.bootstrap, topic) == {0: [b"good"]}
