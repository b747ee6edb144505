"""Observe mode against the real broker: every quota type over its limit, nothing throttled, refused or muted,
and what enforcement would have done counted; then a live reload to enforce throttles the next request."""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer

from protocol.apis import Api
from tests.fidelity import produce_throttle_ms
from tests.integration.test_produce_quotas import metrics, usage_totals
from tests.support import (
    ProxyProcess,
    call,
    connect_to_leader,
    create_topic_on_one_broker,
    new_producer_id,
    produce_request,
    read_frame,
    record_batch,
)

pytestmark = pytest.mark.integration
CLIENT = "observed"
QUOTAS = """
[settings]
"quota.mode" = "{mode}"
"producer.id.quota.window.num" = 2
"producer.id.quota.window.size.seconds" = 5

[[quota]]
client-id = "observed"
producer_byte_rate = 50000
consumer_byte_rate = 50000
controller_mutation_rate = 1

[[quota]]
user = "ANONYMOUS"
producer_ids_rate = 0.2

[[quota]]
ip = "<default>"
connection_creation_rate = 1
"""
"""Each far below what the test sends: 50 kB/s has 500 kB of credit, 0.2 producer IDs/s two IDs, one mutation/s
eleven mutations, one connection/s ten connections."""


def explain(proxy: ProxyProcess, query: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port}/quotas/explain?{query}",
                                    timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def pipelined_produce(sock: socket.socket, topic: str, batches: list[bytes]) -> list[int]:
    """All requests sent before any answer is read; the answers' throttle times, in order."""
    sock.sendall(b"".join(produce_request(topic, batch, 100 + n, acks=1, client_id=CLIENT)
                          for n, batch in enumerate(batches)))
    return [produce_throttle_ms(read_frame(sock)) for _ in batches]


def test_observed_quotas_let_everything_through_and_count_what_enforcement_would_have_done(  # type: ignore[no-untyped-def]
        own_proxy, broker, tmp_path: Path, topic: str) -> None:
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(QUOTAS.format(mode="observe"))
    proxy = own_proxy("--quota-file", str(quota_file))
    create_topic_on_one_broker(broker, topic)

    # librdkafka, idempotent (a new producer ID), 1.5 MB at once: three times the byte quota's credit
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "client.id": CLIENT, "enable.idempotence": True,
                         "linger.ms": 5})
    failed: list[object] = []
    for _ in range(1500):
        producer.produce(topic, b"o" * 1000, on_delivery=lambda error, _: error and failed.append(error))
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed

    # raw pipelined frames: six producers' first batches of 100 kB, each a new producer ID, none answered yet
    with connect_to_leader(proxy, topic) as sock:
        producer_ids = [new_producer_id(sock) for _ in range(6)]
        batches = [record_batch([b"r" * 1000] * 100, answer.producer_id, answer.producer_epoch, 0)
                   for answer in producer_ids]
        assert pipelined_produce(sock, topic, batches) == [0] * 6

    # strict CreateTopics: 3 topics of 8 partitions, three times, all created, none throttled
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        for burst in range(3):
            answer: Any = call(sock, Api.CREATE_TOPICS, 7, correlation_id=burst, client_id=CLIENT, timeout_ms=30_000,
                               validate_only=False, topics=[
                                   {"name": f"{topic}-{burst}-{n}", "num_partitions": 8, "replication_factor": 1,
                                    "assignments": [], "configs": []} for n in range(3)])
            assert [result.error_code for result in answer.topics] == [0, 0, 0] and answer.throttle_time_ms == 0

    # kafka-python reads all 2.1 MB back at once
    consumer = KafkaConsumer(topic, bootstrap_servers=proxy.bootstrap, client_id=CLIENT, auto_offset_reset="earliest",
                             consumer_timeout_ms=20_000, fetch_max_bytes=4 << 20, max_partition_fetch_bytes=4 << 20)
    read = sum(1 for _ in zip(range(1500 + 600), consumer, strict=False))
    consumer.close()
    assert read == 2100

    seen = metrics(proxy)
    for quota_type in ("producer_byte_rate", "consumer_byte_rate", "controller_mutation_rate", "producer_ids_rate"):
        user, client = ("ANONYMOUS", "") if quota_type == "producer_ids_rate" else ("", CLIENT)
        labels = f'{{client_id="{client}",quota_type="{quota_type}",user="{user}"}}'
        assert seen.get(f"kafka_quota_observed_throttled_requests_total{labels}", 0) > 0, quota_type
        assert seen[f"kafka_quota_observed_throttle_time_ms_total{labels}"] > 0, quota_type
        assert seen[f"kafka_quota_usage_ratio{labels}"] > 0, quota_type
        assert seen[f'kafka_quota_throttled_requests_total{{quota_type="{quota_type}"}}'] == 0
        assert seen[f'kafka_quota_rejected_requests_total{{quota_type="{quota_type}"}}'] == 0
    # the producer-ID rate is still over its 0.2/s: seven IDs over 10 s
    assert seen['kafka_quota_usage_ratio{client_id="",quota_type="producer_ids_rate",user="ANONYMOUS"}'] > 1
    connections = '{client_id="",quota_type="connection_creation_rate",user=""}'
    assert seen[f"kafka_quota_observed_throttled_requests_total{connections}"] > 0
    assert all(value == 0 for name, value in seen.items() if name.startswith("kafka_proxy_listener_connections")
               and ('outcome="throttled"' in name or 'outcome="refused"' in name))
    totals = usage_totals(proxy)
    assert totals["throttle_ms"] == totals["rejections"] == 0 and totals["observed_throttled"] > 0

    status, answer = explain(proxy, f"client_id={CLIENT}")
    assert status == 200 and answer["user"] == "ANONYMOUS"
    produce = next(quota for quota in answer["quotas"] if quota["quota_type"] == "producer_byte_rate")
    assert produce["mode"] == "observe" and produce["quota"] == 50000 and produce["entity"] == {"client-id": CLIENT}
    assert produce["origin"] == f"{quota_file} line 8" and produce["rate"] > 0
    assert explain(proxy, "user=%3Cdefault%3E")[0] == 400 and explain(proxy, "users=alice")[0] == 400

    # a live switch to enforce: the next produce over the quota is throttled
    quota_file.write_text(QUOTAS.format(mode="enforce"))
    proxy.wait_for_log("reloaded", timeout_s=10)
    with connect_to_leader(proxy, topic) as sock:
        assert pipelined_produce(sock, topic, [record_batch([b"e" * 1000] * 100)])[0] > 0
    assert metrics(proxy)['kafka_quota_throttled_requests_total{quota_type="producer_byte_rate"}'] >= 1
