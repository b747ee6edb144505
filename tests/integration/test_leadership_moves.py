"""Leadership and coordinators moving under the proxy: what a change to the connection room breaks most easily.

A cluster of three brokers (and a controller of its own, so that the brokers can go one by one while the
cluster keeps deciding), every topic on all three with ``min.insync.replicas`` 2. Each test runs the same
clients through the proxy and straight to the cluster at the same time, under the same faults: what the
direct clients get is what the proxied ones must get.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from proxy.dev.apache_kafka import KafkaCluster
from proxy.dev.kafka_jars import java_executable, kafka_libs
from tests.integration.test_produce_quotas import metrics
from tests.support import Cluster, ProxyProcess, wait_until

REPLICATED = {"offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
              "transaction.state.log.min.isr": "2", "default.replication.factor": "3", "min.insync.replicas": "2",
              "num.partitions": "3",
              # a killed broker is fenced, and its leaderships moved, after 4 s without a heartbeat, not 9
              "broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "1000"}
ROLLING_CLIENT_ID = "rolling"
QUOTA_BYTES_PER_S = 4096
"""Below what the producer offers (a few hundred small batches a second): the proxy throttles it throughout."""


@dataclass
class Moving:
    kafka: KafkaCluster
    proxy: ProxyProcess

    def fully_replicated(self, *topics: str) -> bool:
        """Every partition of ``topics`` (and of the transaction log) has all three brokers in sync."""
        from confluent_kafka import TopicCollection
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.kafka.bootstrap})
        try:
            described = admin.describe_topics(TopicCollection(list(topics)), request_timeout=10)
            return all(len(partition.isr) == 3 for future in described.values()
                       for partition in future.result(15).partitions)
        except Exception:  # a broker going or coming: asked again
            return False


@pytest.fixture(scope="module")
def moving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moving]:
    directory = tmp_path_factory.mktemp("kafka-moving")
    quota_file = directory / "quotas.toml"
    quota_file.write_text(f'[[quota]]\nclient-id = "{ROLLING_CLIENT_ID}"\nproducer_byte_rate = {QUOTA_BYTES_PER_S}\n')
    with KafkaCluster(3, dedicated_controller=True, log_directory=directory, extra_properties=REPLICATED) as kafka:
        Cluster(kafka.bootstrap).wait_until_ready()
        proxy = ProxyProcess(kafka.bootstrap, directory / "proxy.log", "--quota-file", str(quota_file),
                             node_ids=kafka.broker_ids).start()
        try:
            yield Moving(kafka, proxy)
        finally:
            assert proxy.stop() == 0, proxy.log()


def create_replicated(bootstrap: str, *topics: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answers: its end would cancel them
    for future in admin.create_topics([NewTopic(name, 3, 3) for name in topics]).values():
        future.result(60)


class VerifiableProducer:
    """Kafka's own ``VerifiableProducer`` (idempotent, acks=all) writing until stopped; its JSON events in a file."""

    def __init__(self, bootstrap: str, topic: str, client_id: str, directory: Path) -> None:
        settings = directory / f"{client_id}-{topic}.properties"
        settings.write_text(f"client.id={client_id}\nenable.idempotence=true\nretries=2147483647\n"
                            "delivery.timeout.ms=300000\nrequest.timeout.ms=30000\n")
        self.events_path = directory / f"{client_id}-{topic}.jsonl"
        with open(self.events_path, "wb") as events:
            self.process = subprocess.Popen(
                [java_executable(), "-Xmx256m", "-cp", f"{kafka_libs()}/*", "org.apache.kafka.tools.VerifiableProducer",
                 "--bootstrap-server", bootstrap, "--topic", topic, "--max-messages", "-1", "--throughput", "200",
                 "--acks", "-1", "--command-config", str(settings)],
                stdout=events, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def events(self, name: str) -> list[dict[str, Any]]:
        """Its events of that name so far: complete lines only (the one it is writing is read next time)."""
        printed = self.events_path.read_text(errors="replace")
        return [event for line in printed[:printed.rfind("\n") + 1].splitlines()
                if line.startswith("{") and (event := json.loads(line))["name"] == name]

    def acknowledged(self) -> list[str]:
        return [event["value"] for event in self.events("producer_send_success")]

    def stop(self) -> str:
        """SIGTERM: its shutdown hook closes the producer, which delivers what it holds, and prints its totals."""
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=330)
        return self.events_path.read_text(errors="replace")[-3000:]


def test_a_rolling_restart_loses_no_acknowledged_record_through_the_proxy_or_direct(
        moving: Moving, tmp_path: Path) -> None:
    """Kafka's VerifiableProducer, idempotent with acks=all, through the proxy under a binding quota and straight to
    the cluster, while each broker in turn is shut down and started again (its leaderships moving to the others and
    back): every acknowledged record is consumed once, through the proxy and direct alike."""
    from tests.support import read_to_end

    proxied_topic, direct_topic = f"roll-proxied-{uuid.uuid4().hex[:6]}", f"roll-direct-{uuid.uuid4().hex[:6]}"
    create_replicated(moving.kafka.bootstrap, proxied_topic, direct_topic)
    producers = [VerifiableProducer(moving.proxy.bootstrap, proxied_topic, ROLLING_CLIENT_ID, tmp_path),
                 VerifiableProducer(moving.kafka.bootstrap, direct_topic, "rolling-direct", tmp_path)]
    try:
        def all_acknowledging(beyond: list[int]) -> bool:
            return all(len(producer.acknowledged()) > count + 100
                       for producer, count in zip(producers, beyond, strict=True))

        wait_until(lambda: all_acknowledging([0, 0]), 120, "both producers' first acknowledgements")
        for broker in moving.kafka.brokers:
            broker.stop()  # Kafka's controlled shutdown: its leaderships move to the other two first
            moving.kafka.restart(broker)
            wait_until(lambda: moving.fully_replicated(proxied_topic, direct_topic), 120,
                       f"broker {broker.node_id} back in every in-sync replica set")
            since_back = [len(producer.acknowledged()) for producer in producers]
            wait_until(lambda: all_acknowledging(since_back), 120,  # noqa: B023 (used before the next round)
                       f"both producers acknowledged again after broker {broker.node_id} came back")
    finally:
        printed = [producer.stop() for producer in producers]
    for producer, tail in zip(producers, printed, strict=True):
        assert producer.events("producer_send_error") == [], tail
        assert producer.events("tool_data"), tail  # its shutdown hook ran to the end
    throttled = metrics(moving.proxy).get('kafka_quota_proxy_throttled_requests_total{quota_type="producer_byte_rate"}')
    assert throttled, "the quota did not bind: the proxied producer was never throttled"
    for bootstrap, topic, producer in ((moving.proxy.bootstrap, proxied_topic, producers[0]),
                                       (moving.kafka.bootstrap, direct_topic, producers[1])):
        acknowledged = producer.acknowledged()
        consumed = Counter(record.value.decode() for record in read_to_end(bootstrap, topic))
        assert [value for value, times in consumed.items() if times > 1] == [], f"duplicates in {topic}"
        assert set(acknowledged) <= set(consumed), f"{topic} lost {len(set(acknowledged) - set(consumed))} records"
        assert len(acknowledged) == len(set(acknowledged))


@dataclass
class TransactionLog:
    """What a transactional producer was told of each of its transactions, by number."""

    committed: list[int] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)
    uncertain: list[int] = field(default_factory=list)
    """Ended by a fatal error in its commit: committed or aborted, but all of it or none."""
    fatal: list[str] = field(default_factory=list)
    failure: BaseException | None = None

    def ended(self) -> int:
        return len(self.committed) + len(self.aborted) + len(self.uncertain)


RECORDS_PER_TRANSACTION = 12


def transactions_until(stop: threading.Event, bootstrap: str, topic: str, log: TransactionLog) -> None:
    """librdkafka's transactional producer, every third transaction aborted, with the error handling its
    documentation asks for: a retriable error retried, an abortable one aborted, a fatal one ends the producer
    and a new one with the same transactional id fences it (and so ends its open transaction)."""
    from confluent_kafka import KafkaException, Producer

    transactional_id = f"moving-{uuid.uuid4().hex[:8]}"

    def new_producer() -> Producer:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                             "transaction.timeout.ms": 60_000, "message.timeout.ms": 60_000})
        producer.init_transactions(120)
        return producer

    def ended(end: Any) -> bool:
        """True once ``end`` (commit or abort) succeeded; False if the transaction had to be aborted instead."""
        while True:
            try:
                end(60)
                return True
            except KafkaException as error:
                if not error.args[0].retriable():
                    raise

    try:
        producer, number = new_producer(), 0
        while not stop.is_set():
            commit = number % 3 != 2
            producer.begin_transaction()
            for record in range(RECORDS_PER_TRANSACTION):
                producer.produce(topic, f"{number}-{record}".encode(), partition=record % 3)
            try:
                if not commit:
                    ended(producer.abort_transaction)
                    log.aborted.append(number)
                elif ended(producer.commit_transaction):
                    log.committed.append(number)
            except KafkaException as error:
                if error.args[0].fatal():
                    log.fatal.append(f"transaction {number}: {error.args[0]}")
                    (log.uncertain if commit else log.aborted).append(number)
                    producer = new_producer()
                elif error.args[0].txn_requires_abort():
                    ended(producer.abort_transaction)
                    log.aborted.append(number)
                else:
                    raise
            number += 1
        producer.flush(30)
    except BaseException as error:  # noqa: BLE001 (the test thread reports it)
        log.failure = error


def test_transactions_across_a_coordinator_killed_commit_each_record_once_through_the_proxy_or_direct(
        moving: Moving) -> None:
    """librdkafka's transactional producer through the proxy and straight to the cluster while the transaction
    coordinator's broker is killed -9 and started again: a read_committed consumer sees every record of each
    committed transaction once and none of an aborted one, whichever way it went."""
    from tests.support import read_to_end

    topics = {"proxied": f"txn-proxied-{uuid.uuid4().hex[:6]}", "direct": f"txn-direct-{uuid.uuid4().hex[:6]}"}
    create_replicated(moving.kafka.bootstrap, *topics.values())
    bootstraps = {"proxied": moving.proxy.bootstrap, "direct": moving.kafka.bootstrap}
    logs = {way: TransactionLog() for way in topics}
    stop = threading.Event()
    threads = [threading.Thread(target=transactions_until, args=(stop, bootstraps[way], topics[way], logs[way]))
               for way in topics]
    for thread in threads:
        thread.start()
    try:
        def each_ended(beyond: int) -> bool:
            failed = [log.failure for log in logs.values() if log.failure is not None]
            assert not failed, failed
            return all(log.ended() >= beyond for log in logs.values())

        wait_until(lambda: each_ended(6), 120, "six transactions of each producer")
        coordinator = moving.kafka.node(transaction_coordinator(moving.kafka.bootstrap))
        coordinator.kill()
        before = min(log.ended() for log in logs.values())
        wait_until(lambda: each_ended(before + 4), 180, "four transactions of each with the coordinator killed")
        moving.kafka.restart(coordinator)
        wait_until(lambda: moving.fully_replicated("__transaction_state", *topics.values()), 120,
                   f"broker {coordinator.node_id} back in every in-sync replica set")
        back = min(log.ended() for log in logs.values())
        wait_until(lambda: each_ended(back + 4), 120, "four transactions of each after the coordinator came back")
    finally:
        stop.set()
        for thread in threads:
            thread.join(180)
    for way, log in logs.items():
        assert log.failure is None, f"{way}: {log.failure!r}"
        consumed = Counter(record.value.decode() for record in
                           read_to_end(bootstraps[way], topics[way], isolation_level="read_committed"))
        assert [value for value, times in consumed.items() if times > 1] == [], f"{way}: duplicates"
        by_transaction = Counter(int(value.split("-")[0]) for value in consumed)
        assert {number: by_transaction[number] for number in log.committed} == {
            number: RECORDS_PER_TRANSACTION for number in log.committed}, f"{way}: a committed transaction not whole"
        assert [number for number in log.aborted if by_transaction[number]] == [], f"{way}: an aborted one read"
        assert all(by_transaction[number] in (0, RECORDS_PER_TRANSACTION) for number in log.uncertain), way
        assert set(by_transaction) <= set(log.committed) | set(log.uncertain), f"{way}: records of no transaction"


def transaction_coordinator(bootstrap: str) -> int:
    """The node leading the transaction log's one partition: every transactional id's coordinator here."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_topics(TopicCollection(["__transaction_state"]), request_timeout=30)
    return int(described["__transaction_state"].result(30).partitions[0].leader.id)
