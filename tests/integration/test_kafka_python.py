"""kafka-python through the proxy against the real broker."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.support import Cluster, ProxyProcess, read_to_end, wait_until

pytestmark = pytest.mark.integration


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def test_create_and_delete_topics(proxy: ProxyProcess) -> None:
    names = [f"admin-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap)
    try:
        admin.create_topics([NewTopic(name, 3, 1) for name in names])
        wait_until(lambda: set(names) <= set(admin.list_topics()), 30, "topics to appear")
        admin.delete_topics(names)
        wait_until(lambda: not set(names) & set(admin.list_topics()), 30, "topics to disappear")
    finally:
        admin.close()


def test_idempotent_produce_10k_and_consume_every_message(proxy: ProxyProcess, topic: str) -> None:
    create_topic(proxy.bootstrap, topic, partitions=3)
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all", enable_idempotence=True,
                             linger_ms=5)
    sent = {f"key-{i}".encode(): f"value-{i}-{'x' * (i % 50)}".encode() for i in range(10_000)}
    futures = [producer.send(topic, key=key, value=value) for key, value in sent.items()]
    producer.flush(timeout=60)
    assert all(future.succeeded() for future in futures)
    producer.close()

    received: dict[bytes, bytes] = {}
    for record in read_to_end(proxy.bootstrap, topic):
        assert record.key not in received, f"duplicate {record.key!r}"
        received[record.key] = record.value
    assert received == sent


def test_consumer_group_commits_leaves_and_resumes(proxy: ProxyProcess, topic: str) -> None:
    create_topic(proxy.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all")
    for i in range(100):
        producer.send(topic, value=f"m{i}".encode())
    producer.flush()
    group = f"g-{uuid.uuid4().hex[:8]}"

    def group_consumer() -> KafkaConsumer:
        return KafkaConsumer(topic, bootstrap_servers=proxy.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             max_poll_records=10, session_timeout_ms=30_000)

    first = group_consumer()
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < 40 and time.monotonic() < deadline:
        for records in first.poll(timeout_ms=1000, max_records=40 - len(seen)).values():
            seen.extend(record.value for record in records)
    assert len(seen) == 40
    first.commit()
    assert first.committed(TopicPartition(topic, 0)) == 40
    first.close()

    second = group_consumer()
    rest: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(rest) < 60 and time.monotonic() < deadline:
        for records in second.poll(timeout_ms=1000).values():
            rest.extend(record.value for record in records)
    second.close()
    assert seen + rest == [f"m{i}".encode() for i in range(100)]


def run_transaction(bootstrap: str, topic: str, tag: str, commit: bool) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:6]}")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(10):
        producer.send(topic, value=f"{tag}-{i}".encode())
    producer.flush()
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()
    producer.close()


def read_committed(bootstrap: str, topic: str) -> list[bytes]:
    """Every record up to the last stable offset when asked, with no idle timeout to outlast a slow first fetch: the
    committed transaction's, and past the aborted one's once its marker is written (the coordinator writes the
    markers just after answering the producer's EndTxn)."""
    return [record.value for record in read_to_end(bootstrap, topic, isolation_level="read_committed")]


def test_transactions_commit_and_abort(proxy: ProxyProcess, broker: Cluster, topic: str) -> None:
    create_topic(proxy.bootstrap, topic)
    run_transaction(proxy.bootstrap, topic, "committed", commit=True)
    run_transaction(proxy.bootstrap, topic, "aborted", commit=False)

    through_proxy = read_committed(proxy.bootstrap, topic)
    assert through_proxy == [f"committed-{i}".encode() for i in range(10)]  # no aborted record
    assert through_proxy == read_committed(broker.bootstrap, topic)


def test_clients_only_learn_proxy_addresses(proxy: ProxyProcess, broker: Cluster, topic: str) -> None:
    create_topic(proxy.bootstrap, topic)
    consumer = KafkaConsumer(topic, bootstrap_servers=proxy.bootstrap, group_id=f"g-{uuid.uuid4().hex[:6]}",
                             auto_offset_reset="earliest")

    def found_coordinator() -> bool:
        consumer.poll(timeout_ms=200)  # joins the group: metadata and FindCoordinator both through the proxy
        return consumer._coordinator.coordinator_id is not None

    wait_until(found_coordinator, 30, "the group's coordinator, found through the proxy")
    brokers = {(b.node_id, b.host, b.port) for b in consumer._client.cluster.brokers()}
    coordinator_id = consumer._coordinator.coordinator_id
    consumer.close()
    assert brokers == {(node_id, "127.0.0.1", proxy.broker_port_base + node_id) for node_id in broker.node_ids}
    assert coordinator_id in {*broker.node_ids, *(f"coordinator-{node_id}" for node_id in broker.node_ids)}
