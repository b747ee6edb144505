"""The consumer byte-rate quota (KIP-13's consumer side) with kafka-python, librdkafka and aiokafka.

Each consumer reads 16 MiB at a 1 MiB/s quota through the proxy and is compared with Kafka's model
(``kafka_quota_model`` with ``fetch``: a response is charged; one that would be throttled is answered
empty, its bytes un-recorded and the connection muted for its throttle, the same records fetched again
after that) over the bytes the proxy delivered, in responses of the consumer's ``fetch.max.bytes``. The
throttles the proxy decided are bounded from above by the model's (a client coming back later than its
throttle finds a lower rate, whatever the machine's speed), and the time from below (the proxy's throttles run
on its own clock: a busy machine only adds time); how far past the model a consumer ends is its own speed and
the machine's, not the proxy's decision. Every record must arrive exactly once, in order per partition.
``test_fidelity`` holds the same reads against Kafka's own quota.
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
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, ShareConsumer
from confluent_kafka import TopicPartition as RdTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.record import MemoryRecords

from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.header import response_header_length
from proxy.connection.reading import CUT_THROUGH_AFTER_BYTES
from proxy.handlers.api_versions import FETCH_VERSION_CEILING
from tests.integration.test_produce_quotas import assert_held_for_every_throttle, final_usage_lines, metrics
from tests.support import (
    GROUP_RESOURCE,
    LOOPBACK,
    Cluster,
    QuotaModel,
    TcpRelay,
    call,
    encode_request,
    kafka_quota_model,
    leader_port,
    read_frame,
)

pytestmark = pytest.mark.integration
MIB = 1 << 20
QUOTA = MIB
PARTITIONS = 2
RECORDS = 16 * 1024
"""1 KiB each: 16 MiB, past the credit of Kafka's quota windows, so the read ends held to the rate (Kafka's model
holds the credit too), and within the first throttle cycle (a read past 22 MiB pays for a second one)."""
FETCH_MAX_BYTES = MIB
BATCH_BYTES = 16 * 1024
"""Small batches make every full response about ``FETCH_MAX_BYTES`` on any cluster, as the model assumes (a
cluster may answer a fetch with one batch more than asked for, or always return a partition's first batch)."""
MODEL_TOLERANCE = 0.2
"""Under the model's time (a consumer coming back later than the model's can meet Kafka's windows at another phase,
docs/testing.md "Timing assertions"), and over the model's throttles for several consumers, whose order of coming
back changes every throttle."""
THROTTLE_TOLERANCE = 0.05
"""Over the model's throttles for one consumer: real responses are not all the model's equal size."""
READ_DEADLINE_S = 300
"""For a read the quota makes last about the model's time (under a minute): it only ends one that never would."""
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
    """Numbered 1 KiB records, alternating between the partitions, written to the cluster directly. Idempotent:
    a new topic's first batch may be refused (its leader not ready yet) and retried after later ones, which
    without idempotence would store them out of order."""
    failed: list[object] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20, "batch.size": BATCH_BYTES,
                         "enable.idempotence": True})
    for sequence in range(records):
        producer.produce(topic, f"{sequence // PARTITIONS:08d}".encode().ljust(1024, b"."),
                         partition=sequence % PARTITIONS, on_delivery=lambda error, _: error and failed.append(error))
        if sequence % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(180) == 0 and failed == []


def assert_each_record_once_in_order(received: Received) -> None:
    per_partition: dict[int, list[int]] = {}
    for partition, value in received:
        per_partition.setdefault(partition, []).append(int(value[:8]))
    assert sorted(per_partition) == list(range(PARTITIONS))
    for partition, sequences in per_partition.items():
        expected = list(range(RECORDS // PARTITIONS))
        assert sequences == expected, f"partition {partition}: lost, duplicated or reordered records"


def charged(usage: list[dict[str, Any]], client_ids: set[str], field: str = "fetch_bytes") -> int:
    """What the usage log's lines hold for ``client_ids``: fetch bytes charged (delivered), or throttle_ms given."""
    return sum(line.get(field, 0) for line in usage if line["client_id"] in client_ids)


def model(fetched_bytes: int, connections: int = 1) -> QuotaModel:
    """Kafka's model for ``connections`` consumers reading equal shares in responses of ``FETCH_MAX_BYTES``."""
    share = fetched_bytes // connections
    responses = -(-share // FETCH_MAX_BYTES)
    return kafka_quota_model([[share // responses] * responses] * connections, QUOTA, fetch=True)


def assert_within_model(usage: list[dict[str, Any]], client_ids: set[str], since_start_s: float, what: str,
                        connections: int = 1) -> None:
    """``since_start_s`` not much shorter than the model, and no more throttle than the model's (a little more
    with several connections, whose order of coming back changes every throttle). ``usage``: the usage log's
    lines."""
    fetched = charged(usage, client_ids)
    assert fetched >= RECORDS * 1024
    expected = model(fetched, connections)
    assert since_start_s >= expected.elapsed_s * (1 - MODEL_TOLERANCE), (
        f"{what}: {since_start_s:.1f} s for {fetched} B, faster than the model's {expected.elapsed_s:.1f} s")
    throttled_ms = charged(usage, client_ids, "throttle_ms")
    print(f"{what}: {since_start_s:.2f} s from the start, throttled {throttled_ms} ms for {fetched} B; the model "
          f"{expected.elapsed_s:.2f} s, {expected.throttle_ms} ms")
    tolerance = THROTTLE_TOLERANCE if connections == 1 else MODEL_TOLERANCE
    assert 0 < throttled_ms <= expected.throttle_ms * (1 + tolerance), (
        f"{what}: throttled {throttled_ms} ms, the model {expected.throttle_ms} ms")


class Timed:
    """When a consumer started (before it could send a fetch), got its first record and its last."""

    def __init__(self) -> None:
        self.received: Received = []
        self.started = time.monotonic()
        self.first = self.last = 0.0

    def add(self, partition: int, value: bytes) -> None:
        now = time.monotonic()
        if not self.received:
            self.first = now
        self.last = now
        self.received.append((partition, value))

    @property
    def since_start_s(self) -> float:
        """Start to last record: at least the time from its first charge to its last."""
        return self.last - self.started


def read_with_kafka_python(bootstrap: str, topic: str, client_id: str) -> Timed:
    timed = Timed()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                             fetch_max_bytes=FETCH_MAX_BYTES, max_partition_fetch_bytes=FETCH_MAX_BYTES,
                             isolation_level="read_committed", fetch_max_wait_ms=500)
    consumer.assign([KafkaTopicPartition(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    deadline = time.monotonic() + READ_DEADLINE_S
    while len(timed.received) < RECORDS and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=100).values():
            for record in batch:
                timed.add(record.partition, record.value)
    consumer.close()
    return timed


def read_with_librdkafka(bootstrap: str, topic: str, client_id: str) -> Timed:
    timed = Timed()
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"unused-{client_id}",
                         "enable.auto.commit": False, "fetch.max.bytes": FETCH_MAX_BYTES,
                         "max.partition.fetch.bytes": FETCH_MAX_BYTES, "fetch.wait.max.ms": 500})
    consumer.assign([RdTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    deadline = time.monotonic() + READ_DEADLINE_S
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
        timed = Timed()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                                    fetch_max_bytes=FETCH_MAX_BYTES, max_partition_fetch_bytes=FETCH_MAX_BYTES)
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            async with asyncio.timeout(READ_DEADLINE_S):
                while len(timed.received) < RECORDS:
                    for batch in (await consumer.getmany(timeout_ms=500)).values():
                        for record in batch:
                            timed.add(record.partition, record.value)  # type: ignore[arg-type]
            return timed
        finally:
            await consumer.stop()

    return asyncio.run(read())


READERS: dict[str, Callable[[str, str, str], Timed]] = {
    "confluent-kafka": read_with_librdkafka, "aiokafka": read_with_aiokafka}
"""The metered readers; kafka-python reads beside each, unmetered."""


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
    other.join(READ_DEADLINE_S)
    assert_each_record_once_in_order(metered.received)
    assert_each_record_once_in_order(unmetered[0].received)
    rates = metrics(proxy)
    assert any(name.startswith("kafka_quota_proxy_consume_throttle_time_ms{") and 'client_id="metered"' in name
               and value > 0 for name, value in rates.items())
    assert not any(name.startswith("kafka_quota_proxy_consume_throttle_time_ms{") and 'client_id="free"' in name
                   and value > 0 for name, value in rates.items())
    assert rates['kafka_quota_proxy_throttled_requests_total{quota_type="consumer_byte_rate"}'] > 0
    usage = final_usage_lines(proxy)
    assert_within_model(usage, {"metered"}, metered.since_start_s, client)
    # the other consumer was given no throttle: it read beside the metered one at its own speed, which is the
    # machine's to decide
    assert charged(usage, {"free"}, "throttle_ms") == 0


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
    timed = [Timed() for _ in members]  # started: the members have been fetching since they joined, all empty
    stop = time.monotonic() + READ_DEADLINE_S

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
        thread.join(READ_DEADLINE_S + 10)
    for member in members:
        member.close()
    assert_each_record_once_in_order(timed[0].received + timed[1].received)
    elapsed = max(t.last for t in timed) - min(t.first for t in timed)
    since_start = max(t.last for t in timed) - min(t.started for t in timed)
    assert_within_model(final_usage_lines(proxy), {"member-0", "member-1"}, since_start,
                        "two members sharing one user quota", connections=2)
    # each member given the whole quota would have read its half within the credit, in no time by Kafka's model
    assert model(RECORDS * 1024 // 2).elapsed_s == 0
    assert elapsed > 0.5 * model(RECORDS * 1024, connections=2).elapsed_s, "each member was given the whole quota"


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
    deadline = time.monotonic() + 30
    values: list[bytes] = []
    while not values and time.monotonic() < deadline:
        values = [record.value for batch in consumer.poll(timeout_ms=500).values() for record in batch]
    consumer.close()
    assert values == [b"late"]
    fetches = metrics(proxy).get('kafka_quota_proxy_requests_total{api="Fetch"}', 0.0)
    assert fetches >= 2, "no long-poll fetch went through the proxy"


def fetch_from_start(topic: str, correlation_id: int, max_bytes: int) -> bytes:
    return encode_request(
        Api.FETCH, 4, correlation_id=correlation_id, client_id="metered", replica_id=-1, max_wait_ms=500,
        min_bytes=1, max_bytes=max_bytes, isolation_level=0, topics=[{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": max_bytes}]}])


def read_sequences(response: Any) -> list[int]:
    """The record numbers a v4 Fetch response carries (none for Kafka's throttled answer)."""
    sequences = []
    for partition in (p for topic in response.responses for p in topic.partitions):
        batches = MemoryRecords(bytes(partition.records or b""))
        while (batch := batches.next_batch()) is not None:
            sequences += [int(record.value[:8]) for record in batch]
    return sequences


def test_a_large_fetch_response_is_passed_on_as_it_arrives_or_dropped_when_throttled(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    """Holding a Fetch response until its last byte would add a transfer to every fetch: the proxy charges it
    by its size prefix and passes the rest on as it comes. The next one, over the quota, is answered at once
    with Kafka's empty answer and its throttle while the cluster's response is read and dropped; the connection
    stays in step (the third fetch, after the throttle, gets its records, charged as if the second never was)."""
    create_topic(broker, topic)
    fill_topic(broker, topic, records=4 * 1024)  # 2 MiB on each partition
    _, host, port = broker.leader(topic)
    relay = TcpRelay(host, port, response_delay_s=0.02)  # the cluster's answer comes slowly, chunk by chunk
    quota_file = tmp_path / "quotas.toml"
    # a 4 MiB cap (quota x 10 windows): a partition's 2 MiB fit, and are 0.2 MiB/s over the 10 s window
    quota_file.write_text('[[quota]]\nclient-id = "metered"\nconsumer_byte_rate = 307200\n')
    try:
        proxy = own_proxy("--quota-file", str(quota_file), upstream=f"127.0.0.1:{relay.port}")
        with socket.create_connection((LOOPBACK, proxy.port), timeout=30) as sock:  # through the relay
            versions = call(sock, Api.API_VERSIONS, 0)
            offered = {api.api_key: api.max_version for api in versions.api_keys}  # type: ignore[attr-defined]
            assert offered[Api.FETCH] <= FETCH_VERSION_CEILING  # no KIP-951 endpoints at the end to rewrite
            sock.sendall(fetch_from_start(topic, 1, 4 * MIB))
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
            # the same 2 MiB again: 4 MiB in the 10 s window, over 3 MiB
            sock.sendall(fetch_from_start(topic, 2, 4 * MIB))
            asked_s = time.monotonic()
            throttled = read_frame(sock)
            answered_s = time.monotonic()
            sock.sendall(fetch_from_start(topic, 3, 1024))  # one batch, read after the throttle
            again = read_frame(sock)
    finally:
        relay.stop()
    first = decode_response(Api.FETCH, 4, memoryview(frame)[response_header_length(frame, False):])
    assert first.throttle_time_ms == 0  # type: ignore[attr-defined]
    assert read_sequences(first) == list(range(2048))  # the whole partition
    assert ended_s - started_s > 0.2, "the response was held until its last byte"
    empty = decode_response(Api.FETCH, 4, memoryview(throttled)[response_header_length(throttled, False):])
    assert empty.throttle_time_ms > 0 and empty.responses == []  # type: ignore[attr-defined]
    assert answered_s - asked_s < ended_s - started_s, "the empty answer waited for the dropped response"
    # had the withheld 2 MiB been kept, this batch would be over the quota as well
    batch = decode_response(Api.FETCH, 4, memoryview(again)[response_header_length(again, False):])
    assert batch.throttle_time_ms == 0 and 0 < len(read_sequences(batch)) < 100  # type: ignore[attr-defined]
    assert read_sequences(batch) == list(range(len(read_sequences(batch))))
    # 4 + body each (header v0: the correlation id)
    assert charged(final_usage_lines(proxy), {"metered"}) == size + len(again)


def test_pipelined_raw_fetches_are_served_one_throttle_at_a_time(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    """Fetch requests written sixteen at a time: once one is throttled (answered empty, as Kafka answers it), the
    next is not read (nor charged) until the throttle has run out, so getting sixteen responses with records
    takes Kafka's one-at-a-time time."""
    create_topic(broker, topic)
    fill_topic(broker, topic, records=4 * 1024)
    quota = 100 * 1024
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(f'[[quota]]\nclient-id = "metered"\nconsumer_byte_rate = {quota}\n')
    proxy = own_proxy("--quota-file", str(quota_file))
    sizes: list[int] = []
    answers: list[tuple[float, int]] = []  # seconds since the first fetch was written, throttle_time_ms
    with socket.create_connection((LOOPBACK, leader_port(proxy, topic)), timeout=60) as sock:
        started = time.monotonic()
        while len(sizes) < 16:
            asked = 16 - len(sizes)
            sock.sendall(b"".join(fetch_from_start(topic, n, 128 * 1024) for n in range(asked)))
            for _ in range(asked):
                frame = read_frame(sock)
                response = decode_response(Api.FETCH, 4, memoryview(frame)[response_header_length(frame, False):])
                answers.append((time.monotonic() - started, response.throttle_time_ms))  # type: ignore[attr-defined]
                if response.responses:  # type: ignore[attr-defined]
                    assert response.throttle_time_ms == 0, "records with a throttle"  # type: ignore[attr-defined]
                    sizes.append(4 + len(frame) - 4)  # what Kafka charges: the size prefix and the body, no header
    throttles = [throttle_ms for _, throttle_ms in answers]
    assert sum(sizes) > 15 * quota  # beyond the ten windows' credit: some are throttled
    assert throttles[0] == 0 and max(throttles) > 0, (sizes, throttles)
    assert_held_for_every_throttle(answers)
    expected = kafka_quota_model([sizes], quota, fetch=True)
    assert answers[-1][0] >= expected.elapsed_s * (1 - MODEL_TOLERANCE), (answers, sizes)
    assert sum(throttles) <= expected.throttle_ms * (1 + THROTTLE_TOLERANCE), (expected.throttle_ms, answers, sizes)
    assert charged(final_usage_lines(proxy), {"metered"}) == sum(sizes)


SHARE_RECORDS = 1500
SHARE_QUOTA = 100_000
"""1.5 MB at 100 kB/s: past the quota window's 1 MB, so the proxy must throttle the share consumer."""


def test_librdkafka_share_consumer_is_held_to_the_consume_quota(broker: Cluster, own_proxy, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                topic: str) -> None:
    """A share group (KIP-932) read with librdkafka's ShareConsumer, which ignores throttle_time_ms: every record
    arrives once, its bytes are charged to the client id's consume quota, and the proxy throttles it."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    for sequence in range(SHARE_RECORDS):
        producer.produce(topic, f"{sequence:08d}".encode() + b"s" * 992)
    assert producer.flush(60) == 0
    group = f"share-{topic}"
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:  # the group reads from the start
        altered = call(sock, Api.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[
            {"resource_type": GROUP_RESOURCE, "resource_name": group,
             "configs": [{"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"},
                         # the records of an answer the proxy empties stay locked this long, as on Kafka's own
                         # throttle: the shortest lock the broker allows (group.share.min.record.lock.duration.ms)
                         {"name": "share.record.lock.duration.ms", "config_operation": 0, "value": "15000"}]}])
    assert [r.error_code for r in altered.responses] == [0]  # type: ignore[attr-defined]
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(f'[[quota]]\nclient-id = "share-lib"\nconsumer_byte_rate = {SHARE_QUOTA}\n')
    proxy = own_proxy("--quota-file", str(quota_file))
    consumer = ShareConsumer({"bootstrap.servers": proxy.bootstrap, "group.id": group, "client.id": "share-lib"})
    consumer.subscribe([topic])
    received: list[int] = []
    deadline = time.monotonic() + 120
    while len(received) < SHARE_RECORDS and time.monotonic() < deadline:
        for message in consumer.poll(1.0) or []:
            if message.error() is None:
                received.append(int(message.value()[:8]))
    consumer.close()
    assert sorted(received) == list(range(SHARE_RECORDS)), "lost or repeated records"
    usage = final_usage_lines(proxy)
    assert charged(usage, {"share-lib"}) >= SHARE_RECORDS * 1000
    assert charged(usage, {"share-lib"}, "throttle_ms") > 0, "the share consumer was never throttled"
