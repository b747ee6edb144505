"""The same produce/consume round trip with confluent-kafka (librdkafka) and aiokafka."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support import Cluster, ProxyProcess, create_topic_led_by

pytestmark = pytest.mark.integration
MESSAGES = 2_000


def expected_messages() -> dict[bytes, bytes]:
    return {f"k{i}".encode(): f"v{i}".encode() * (1 + i % 7) for i in range(MESSAGES)}


@pytest.mark.parametrize("brokers", [1, 3])
def test_confluent_kafka_round_trip(own_proxy, request: pytest.FixtureRequest, topic: str,  # type: ignore[no-untyped-def]
                                    brokers: int) -> None:
    """Partitions led by every broker: each reached through that broker's listener on the proxy."""
    cluster: Cluster = request.getfixturevalue("broker" if brokers == 1 else "three_brokers")
    proxy = own_proxy(cluster=cluster)
    leaders = [node_id for node_id in cluster.node_ids for _ in range(2 if brokers == 1 else 1)]
    create_topic_led_by(cluster, topic, leaders)

    failures: list[str] = []

    def on_delivery(error: KafkaException | None, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    producer = Producer({"bootstrap.servers": proxy.bootstrap, "enable.idempotence": True, "acks": "all"})
    sent = expected_messages()
    for key, value in sent.items():
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert failures == []

    metadata = producer.list_topics(timeout=10)
    assert {(b.id, b.host, b.port) for b in metadata.brokers.values()} == {
        (node_id, "127.0.0.1", proxy.broker_port_base + node_id) for node_id in cluster.node_ids}

    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": f"cg-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, partition, 0) for partition in range(len(leaders))])
    received: dict[bytes, bytes] = {}
    deadline = time.monotonic() + 30
    while len(received) < len(sent) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            received[message.key()] = message.value()
    consumer.close()
    assert received == sent


def test_aiokafka_round_trip(proxy: ProxyProcess, topic: str) -> None:
    async def round_trip() -> dict[bytes, bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all", enable_idempotence=True)
        await producer.start()
        try:
            batch = [producer.send(topic, key=key, value=value) for key, value in expected_messages().items()]
            await asyncio.gather(*[await future for future in batch])
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=proxy.bootstrap, auto_offset_reset="earliest",
                                    enable_auto_commit=False)
        await consumer.start()
        received: dict[bytes, bytes] = {}
        try:
            async with asyncio.timeout(30):
                while len(received) < MESSAGES:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        received.update((record.key, record.value) for record in records)
        finally:
            await consumer.stop()
        return received

    assert asyncio.run(round_trip()) == expected_messages()


def test_describe_cluster_and_group_coordinator_name_only_the_proxy(proxy: ProxyProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    cluster = admin.describe_cluster(request_timeout=20).result(timeout=30)
    assert {(node.host, node.port) for node in cluster.nodes} == {
        ("127.0.0.1", proxy.broker_port_base + node.id) for node in cluster.nodes}
    assert cluster.controller is None or cluster.controller.port == proxy.broker_port_base + cluster.controller.id

    producer = Producer({"bootstrap.servers": proxy.bootstrap})
    producer.produce(topic, b"for the group")
    assert producer.flush(30) == 0
    group = f"cg-{topic}"
    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    message = None
    while message is None and time.monotonic() < deadline:
        candidate = consumer.poll(0.5)
        if candidate is not None and candidate.error() is None:
            message = candidate
    assert message is not None and message.value() == b"for the group"
    consumer.commit(message, asynchronous=False)  # goes to the coordinator found through the proxy
    consumer.close()
    described = admin.describe_consumer_groups([group])[group].result(timeout=30)
    assert (described.coordinator.host, described.coordinator.port) == (
        "127.0.0.1", proxy.broker_port_base + described.coordinator.id)
