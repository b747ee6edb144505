"""The consumer byte-rate quota (KIP-13's consumer side) with kafka-python, librdkafka and aiokafka.

Each consumer reads 48 MiB at a 1 MiB/s quota through the proxy; the time from its first record to
its last is compared with Kafka's model (``kafka_produce_model_s``: a response is charged, the
connection muted for its throttle, the next fetch read after that) over the bytes the proxy
charged, in responses of the consumer's ``fetch.max.bytes``, and the rate beyond the window's
initial credit with the quota. Every record must arrive exactly once, in order per partition.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as RdTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.record import MemoryRecords

from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.header import response_header_length
from proxy.connection import CUT_THROUGH_AFTER_BYTES
from proxy.server import FETCH_VERSION_CEILING
from tests.integration.test_produce_quotas import metrics, usage_lines
from tests.support import (
    LOOPBACK,
    Cluster,
    ProxyProcess,
    TcpRelay,
    call,
    encode_request,
    kafka_shared_quota_model_s,
    leader_port,
    read_frame,
)

pytestmark = pytest.mark.integration
MIB = 1 << 20
QUOTA = MIB
PARTITIONS = 2
RECORDS = 48 * 1024  # 1 KiB each: 48 MiB, a read long enough for the rate after the credit to settle
FETCH_MAX_BYTES = MIB
BATCH_BYTES = 16 * 1024
"""Small batches make every full response about ``FETCH_MAX_BYTES`` on any cluster, as the model assumes (a
cluster may answer a fetch with one batch more than asked for, or always return a partition's first batch)."""
MODEL_TOLERANCE = 0.2
INITIAL_CREDIT_BYTES = (11 - 1) * 1 * QUOTA
"""Kafka's rate counts at least ``quota.window.num - 1`` windows (of 1 s), so that much is read before a throttle."""
RATE_TOLERANCE = 0.1
Received = list[tuple[int, bytes]]
"""(partition, value) in the order the consumer got them."""


def consumer_quota_file(tmp_path: Path, entity: str) -> str:
    path = tmp_path / "quotas.toml"
    path.write_text(f"[[quota]]\n{entity}\nconsumer_byte_rate = {QUOTA}\n")
    return str(path)


def create_topic(cluster: Cluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)


def fill_topic(cluster: Cluster, topic: str, records: int = RECORDS) -> None:
    """Numbered 1 KiB records, alternating between the partitions, written to the cluster directly."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20, "batch.size": BATCH_BYTES})
    for sequence in range(records):
        producer.produce(topic, f"{sequence // PARTITIONS:08d}".encode().ljust(1024, b"."),
                         partition=sequence % PARTITIONS)
        if sequence % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def assert_each_record_once_in_order(received: Received) -> None:
    per_partition: dict[int, list[int]] = {}
    for partition, value in received:
        per_partition.setdefault(partition, []).append(int(value[:8]))
    assert sorted(per_partition) == list(range(PARTITIONS))
    for partition, sequences in per_partition.items():
        expected = list(range(RECORDS // PARTITIONS))
        assert sequences == expected, f"partition {partition}: lost, duplicated or reordered records"


def charged_fetch_bytes(proxy: ProxyProcess, client_ids: set[str]) -> int:
    time.sleep(2.5)  # the usage log is written once a second
    return sum(line.get("fetch_bytes", 0) for line in usage_lines(proxy) if line["client_id"] in client_ids)


def model_s(fetched_bytes: int, connections: int = 1) -> float:
    """Kafka's model for ``connections`` consumers reading equal shares in responses of ``FETCH_MAX_BYTES``."""
    share = fetched_bytes // connections
    responses = -(-share // FETCH_MAX_BYTES)
    return kafka_shared_quota_model_s([[share // responses] * responses] * connections, QUOTA)


def assert_within_model(elapsed_s: float, fetched_bytes: int, what: str, connections: int = 1) -> None:
    model = model_s(fetched_bytes, connections)
    low, high = model * (1 - MODEL_TOLERANCE), model * (1 + MODEL_TOLERANCE)
    assert low <= elapsed_s <= high, f"{what}: {elapsed_s:.1f} s for {fetched_bytes} B, model {model:.1f} s"


def assert_rate_after_credit(elapsed_s: float, fetched_bytes: int, what: str) -> None:
    rate = (fetched_bytes - INITIAL_CREDIT_BYTES) / elapsed_s
    assert abs(rate / QUOTA - 1) <= RATE_TOLERANCE, f"{what}: {rate / QUOTA:.2f} x the quota after the credit"


class Timed:
    """First and last record times of one consumer."""

    def __init__(self) -> None:
        self.received: Received = []
        self.first = self.last = 0.0

    def add(self, partition: int, value: bytes) -> None:
        now = time.monotonic()
        if not self.received:
            self.first = now
        self.last = now
        self.received.append((partition, value))

    @property
    def elapsed_s(self) -> float:
        return self.last - self.first


def read_with_kafka_python(bootstrap: str, topic: str, client_id: str) -> Timed:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                             fetch_max_bytes=FETCH_MAX_BYTES, max_partition_fetch_bytes=FETCH_MAX_BYTES,
                             isolation_level="read_committed", fetch_max_wait_ms=500)
    consumer.assign([KafkaTopicPartition(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    timed = Timed()
    deadline = time.monotonic() + 120
    while len(timed.received) < RECORDS and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=100).values():
            for record in batch:
                timed.add(record.partition, record.value)
    consumer.close()
    return timed


def read_with_librdkafka(bootstrap: str, topic: str, client_id: str) -> Timed:
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"unused-{client_id}",
                         "enable.auto.commit": False, "fetch.max.bytes": FETCH_MAX_BYTES,
                         "max.partition.fetch.bytes": FETCH_MAX_BYTES, "fetch.wait.max.ms": 500})
    consumer.assign([RdTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    timed = Timed()
    deadline = time.monotonic() + 120
    while len(timed.received) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        assert message.error() is None, message.error()
        timed.add(message.partition(), message.value())  # type: ignore[arg-type]
    consumer.close()
    return timed


def read_with_aiokafka(bootstrap: str, topic: str, client_id: str) -> Timed:
    async def read() -> Timed:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                                    fetch_max_bytes=FETCH_MAX_BYTES, max_partition_fetch_bytes=FETCH_MAX_BYTES)
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            timed = Timed()
            async with asyncio.timeout(120):
                while len(timed.received) < RECORDS:
                    for batch in (await consumer.getmany(timeout_ms=500)).values():
                        for record in batch:
                            timed.add(record.partition, record.value)  # type: ignore[arg-type]
            return timed
        finally:
            await consumer.stop()

    return asyncio.run(read())


READERS: dict[str, Callable[[str, str, str], Timed]] = {
    "kafka-python": read_with_kafka_python, "confluent-kafka": read_with_librdkafka, "aiokafka": read_with_aiokafka}


@pytest.mark.parametrize("client", READERS)
def test_a_consumer_reads_at_its_quota_and_another_is_not_slowed(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str, client: str) -> None:
    proxy = own_proxy("--quota-file", consumer_quota_file(tmp_path, 'client-id = "metered"'))
    create_topic(broker, topic)
    fill_topic(broker, topic)
    read = READERS[client]
    unmetered: list[Timed] = []
    # a consumer without a quota reads the same records at the same time, through the same proxy
    other = threading.Thread(target=lambda: unmetered.append(read_with_kafka_python(proxy.bootstrap, topic, "free")))
    other.start()
    metered = read(proxy.bootstrap, topic, "metered")
    other.join(120)
    assert_each_record_once_in_order(metered.received)
    assert_each_record_once_in_order(unmetered[0].received)
    fetched = charged_fetch_bytes(proxy, {"metered"})
    assert fetched >= RECORDS * 1024
    assert_within_model(metered.elapsed_s, fetched, client)
    assert_rate_after_credit(metered.elapsed_s, fetched, client)
    assert unmetered[0].elapsed_s < model_s(fetched) / 3, "the consumer without a quota was slowed down"
    rates = metrics(proxy)
    assert any(name.startswith("kafka_quota_consume_throttle_time_ms{") and 'client_id="metered"' in name and value > 0
               for name, value in rates.items())
    assert rates['kafka_quota_throttled_requests_total{quota_type="consumer_byte_rate"}'] > 0


def test_two_members_of_a_group_share_their_users_quota(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    proxy = own_proxy("--quota-file", consumer_quota_file(tmp_path, 'user = "<default>"'))
    create_topic(broker, topic)
    members = [Consumer({"bootstrap.servers": proxy.bootstrap, "client.id": f"member-{i}", "group.id": topic,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.max.bytes": FETCH_MAX_BYTES, "max.partition.fetch.bytes": FETCH_MAX_BYTES,
                         "fetch.wait.max.ms": 500}) for i in range(2)]
    for member in members:
        member.subscribe([topic])
    deadline = time.monotonic() + 90
    while not all(len(member.assignment()) == 1 for member in members):  # one partition each
        assert time.monotonic() < deadline, "the group did not settle with one partition per member"
        for member in members:
            assert member.poll(0.2) is None  # nothing written yet
    fill_topic(broker, topic)
    timed = [Timed() for _ in members]
    stop = time.monotonic() + 120

    def consume(member: Any, into: Timed) -> None:
        while len(into.received) < RECORDS // PARTITIONS and time.monotonic() < stop:
            message = member.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                into.add(message.partition(), message.value())

    threads = [threading.Thread(target=consume, args=pair) for pair in zip(members, timed, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(130)
    for member in members:
        member.close()
    assert_each_record_once_in_order(timed[0].received + timed[1].received)
    elapsed = max(t.last for t in timed) - min(t.first for t in timed)
    fetched = charged_fetch_bytes(proxy, {"member-0", "member-1"})
    assert_within_model(elapsed, fetched, "two members sharing one user quota", connections=2)
    assert_rate_after_credit(elapsed, fetched, "two members sharing one user quota")
    assert elapsed > 1.5 * model_s(fetched // 2), "each member was given the whole quota"


def test_long_polls_of_a_metered_consumer_wait_at_the_cluster_and_get_new_records(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    proxy = own_proxy("--quota-file", consumer_quota_file(tmp_path, 'client-id = "metered"'))
    create_topic(broker, topic)
    consumer = KafkaConsumer(bootstrap_servers=proxy.bootstrap, client_id="metered", enable_auto_commit=False,
                             fetch_max_wait_ms=2_000, isolation_level="read_committed")
    consumer.assign([KafkaTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    assert consumer.poll(timeout_ms=3_000) == {}  # empty: the fetches wait at the cluster, then answer empty
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"late", partition=0)
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 15
    values: list[bytes] = []
    while not values and time.monotonic() < deadline:
        values = [record.value for batch in consumer.poll(timeout_ms=500).values() for record in batch]
    consumer.close()
    assert values == [b"late"]
    fetches = metrics(proxy).get('kafka_proxy_requests_total{api="Fetch"}', 0.0)
    assert fetches >= 2, "no long-poll fetch went through the proxy"


def test_a_large_fetch_response_is_passed_on_as_it_arrives_with_its_throttle(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    """Holding a Fetch response until its last byte would add a transfer to every fetch: the proxy
    charges it by its size prefix, raises the throttle at its start and passes the rest on as it comes."""
    create_topic(broker, topic)
    fill_topic(broker, topic, records=4 * 1024)  # 2 MiB on each partition
    _, host, port = broker.leader(topic)
    relay = TcpRelay(host, port, response_delay_s=0.02)  # the cluster's answer comes slowly, chunk by chunk
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "metered"\nconsumer_byte_rate = 102400\n')  # a 1 MiB window
    try:
        proxy = own_proxy("--quota-file", str(quota_file), upstream=f"127.0.0.1:{relay.port}")
        with socket.create_connection((LOOPBACK, proxy.port), timeout=30) as sock:  # through the relay
            versions = call(sock, Api.API_VERSIONS, 0)
            offered = {api.api_key: api.max_version for api in versions.api_keys}  # type: ignore[attr-defined]
            assert offered[Api.FETCH] <= FETCH_VERSION_CEILING  # no KIP-951 endpoints at the end to rewrite
            sock.sendall(encode_request(
                Api.FETCH, 4, client_id="metered", replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=4 * MIB,
                isolation_level=0, topics=[{"topic": topic, "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 4 * MIB}]}]))
            size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
            frame = bytearray()
            started_s = 0.0
            while len(frame) < size:
                chunk = sock.recv(size - len(frame))
                assert chunk, "the proxy closed in the middle of the response"
                frame += chunk
                if not started_s and len(frame) > CUT_THROUGH_AFTER_BYTES:
                    started_s = time.monotonic()
            ended_s = time.monotonic()
    finally:
        relay.stop()
    response = decode_response(Api.FETCH, 4, memoryview(frame)[response_header_length(frame, False):])
    assert response.throttle_time_ms > 0  # type: ignore[attr-defined]  # Kafka's cap: 1.1 MiB, past the 1 MiB credit
    records = response.responses[0].partitions[0].records  # type: ignore[attr-defined]
    sequences = []
    batches = MemoryRecords(records)
    while (batch := batches.next_batch()) is not None:
        sequences += [int(record.value[:8]) for record in batch]
    assert len(sequences) > 900 and sequences == list(range(len(sequences)))  # about the 1.1 MiB cap
    assert ended_s - started_s > 0.2, "the response was held until its last byte"
    assert charged_fetch_bytes(proxy, {"metered"}) == 4 + size - 4  # header v0: the correlation id


def test_pipelined_raw_fetches_are_served_one_throttle_at_a_time(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    """Sixteen Fetch requests in one write: once one is throttled, the next is not read (nor charged) until its
    response is sent and the throttle has run out, so the reads take Kafka's one-at-a-time time."""
    create_topic(broker, topic)
    fill_topic(broker, topic, records=4 * 1024)
    quota = 100 * 1024
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(f'[[quota]]\nclient-id = "pipelined"\nconsumer_byte_rate = {quota}\n')
    proxy = own_proxy("--quota-file", str(quota_file))
    fetch = b"".join(encode_request(
        Api.FETCH, 4, correlation_id=n, client_id="pipelined", replica_id=-1, max_wait_ms=500, min_bytes=1,
        max_bytes=128 * 1024, isolation_level=0, topics=[{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 128 * 1024}]}]) for n in range(16))
    with socket.create_connection((LOOPBACK, leader_port(proxy, topic)), timeout=60) as sock:
        started = time.monotonic()
        sock.sendall(fetch)
        sizes, throttles = [], []
        for _ in range(16):
            frame = read_frame(sock)
            response = decode_response(Api.FETCH, 4, memoryview(frame)[response_header_length(frame, False):])
            sizes.append(4 + len(frame) - 4)  # what Kafka charges: the size prefix and the body, no header
            throttles.append(response.throttle_time_ms)  # type: ignore[attr-defined]
        elapsed = time.monotonic() - started
    assert sum(sizes) > 15 * quota  # beyond the ten windows' credit: some are throttled
    assert throttles[0] == 0 and max(throttles) > 0, (sizes, throttles)
    model = kafka_shared_quota_model_s([sizes], quota)
    assert model * (1 - MODEL_TOLERANCE) <= elapsed <= model * (1 + MODEL_TOLERANCE), (elapsed, model, sizes)
