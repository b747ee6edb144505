"""Requests larger than one read are forwarded while they arrive, and still answered in order."""

from __future__ import annotations

import struct
import time

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.support import (
    ProxyProcess,
    connect_to_leader,
    encode_request,
    produce_request,
    read_frame,
    read_to_end,
    record_batch,
)

pytestmark = pytest.mark.integration


def test_a_large_produce_sent_slowly_then_a_small_request_both_answered(proxy: ProxyProcess, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"max.message.bytes": str(8 << 20)})])  # Kafka's is 1 MB
    admin.close()
    values = [bytes([i % 251]) * 100_000 for i in range(30)]  # a 3 MB request
    large = produce_request(topic, record_batch(values), correlation_id=1)
    small = encode_request(18, 0, correlation_id=2)
    with connect_to_leader(proxy, topic) as sock:
        for start in range(0, len(large) - 1000, 300_000):
            sock.sendall(large[start:start + 300_000])
            time.sleep(0.02)
        sock.sendall(large[start + 300_000:] + small)
        first, second = read_frame(sock), read_frame(sock)
    assert struct.unpack_from(">i", first)[0] == 1
    assert struct.unpack_from(">i", second)[0] == 2
    received = [record.value for record in read_to_end(proxy.bootstrap, topic, fetch_max_bytes=8 << 20,
                                                       max_partition_fetch_bytes=8 << 20)]
    assert received == values
