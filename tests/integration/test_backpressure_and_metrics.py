"""Bounded buffering when a client stops reading, and the Prometheus endpoint."""

from __future__ import annotations

import socket
import struct
import time
import urllib.request

import psutil
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import FetchRequest

from tests.integration.test_produce_quotas import metrics
from tests.support import connect_to_leader, encode_request, read_frame

pytestmark = pytest.mark.integration
MIB = 1024 * 1024


def fill_topic(bootstrap: str, topic: str, mebibytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for _ in range(mebibytes * 64):
        producer.produce(topic, b"p" * 16384)
        producer.poll(0)
    assert producer.flush(60) == 0


def test_a_client_that_stops_reading_does_not_grow_the_proxy(own_proxy, topic: str) -> None:  # type: ignore[no-untyped-def]
    proxy = own_proxy("--write-buffer-high-bytes", str(MIB))
    fill_topic(proxy.bootstrap, topic, mebibytes=8)
    partition = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=8 * MIB)
    fetches = 40  # 40 answers of ~8 MiB: ~320 MiB if the proxy buffered them
    requests = b"".join(
        encode_request(1, 4, correlation_id=i, replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=8 * MIB,
                       isolation_level=0, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[partition])])
        for i in range(fetches))
    process = psutil.Process(proxy.process.pid)
    rss_before = process.memory_info().rss
    with connect_to_leader(proxy, topic) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(requests)
        peak = 0
        for _ in range(30):  # the client reads nothing for 3 s
            time.sleep(0.1)
            peak = max(peak, process.memory_info().rss - rss_before)
        assert peak < 64 * MIB, f"proxy grew by {peak / MIB:.0f} MiB while the client did not read"
        answers = [struct.unpack_from(">i", read_frame(sock))[0] for _ in range(fetches)]
    assert answers == list(range(fetches))


def test_metrics_endpoint_counts_connections_requests_and_bytes(own_proxy) -> None:  # type: ignore[no-untyped-def]
    proxy = own_proxy()  # its own: what it counts is this test's requests alone
    waited_s = 0.0
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        for correlation_id in range(3):
            sent_at = time.perf_counter()
            sock.sendall(encode_request(18, 0, correlation_id=correlation_id))
            read_frame(sock)
            waited_s += time.perf_counter() - sent_at
        values = metrics(proxy)
    assert values['kafka_quota_proxy_requests_total{api="ApiVersions"}'] == 3
    assert values['kafka_quota_proxy_request_latency_seconds_count{api="ApiVersions"}'] == 3
    assert values['kafka_quota_proxy_request_latency_seconds_bucket{api="ApiVersions",le="+Inf"}'] == 3
    # each latency is timed inside the client's own wait for its answer (the same clock): in seconds, not ms
    assert 0 < values['kafka_quota_proxy_request_latency_seconds_sum{api="ApiVersions"}'] <= waited_s
    assert values["kafka_quota_proxy_client_connections"] >= 1
    assert values["kafka_quota_proxy_client_received_bytes_total"] > 0
    assert values["kafka_quota_proxy_client_sent_bytes_total"] > 0
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port}/other", timeout=30)
