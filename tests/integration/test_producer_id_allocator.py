"""Producer-ID blocks served by the proxy (KIP-730), local InitProducerId, and the PID ledger."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer

from protocol.apis import Api
from tests.integration.test_produce_quotas import create_topic, metrics
from tests.support import Cluster, ProxyProcess, call, connect_to_leader, new_producer_id, read_to_end, record_batch

pytestmark = pytest.mark.integration
FIRST_ID = 1 << 48
CLUSTER_AUTHORIZATION_FAILED = 31
STALE_BROKER_EPOCH = 77


def config_file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def allocate(proxy: ProxyProcess, *requests: tuple[int, int]) -> list[Any]:
    """The answers to AllocateProducerIds ``requests`` (broker id, broker epoch), one after another on one
    connection (a throttled answer holds the next request until its throttle has run out, as on a broker)."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        return [call(sock, Api.ALLOCATE_PRODUCER_IDS, 0, correlation_id=n, broker_id=broker_id, broker_epoch=epoch)
                for n, (broker_id, epoch) in enumerate(requests, start=1)]


def init_producer_ids(proxy: ProxyProcess, count: int) -> list[int]:
    """``count`` idempotent InitProducerId answers, retrying COORDINATOR_LOAD_IN_PROGRESS."""
    issued: list[int] = []
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        while len(issued) < count:
            response = new_producer_id(sock)
            assert response.error_code == 0 and response.producer_epoch == 0
            issued.append(response.producer_id)
    return issued


def test_allocate_producer_ids_authorization_epochs_and_rate(own_proxy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proxy = own_proxy("--config", config_file(tmp_path, "proxy.toml", '[allocator]\ncluster_principals = '
                                              '["User:ANONYMOUS"]\nallocations_per_second = 0.5\n'))
    # burst 11 x 1 s x 0.5 = 5.5 allocations: the 7th request leaves the bucket below zero. On one connection the
    # requests follow at once, and the 6th's throttle holds the 7th until the bucket is back at 0: no new
    # connection per request (slow on a loaded machine) lets the bucket refill enough to spare the 7th
    first, second, stale, *rated = allocate(proxy, (1, 100), (1, 101), (1, 100), *[(2, 1)] * 4)
    assert (first.error_code, first.producer_id_start, first.producer_id_len) == (0, FIRST_ID, 1000)
    assert second.producer_id_start == FIRST_ID + 1000
    assert stale.error_code == STALE_BROKER_EPOCH
    throttles = [answer.throttle_time_ms for answer in rated]
    assert throttles[:2] == [0, 0] and throttles[-1] > 0

    other = own_proxy("--config", config_file(tmp_path, "other.toml", '[allocator]\ncluster_principals = '
                                              '["User:admin"]\n'))
    assert allocate(other, (1, 1))[0].error_code == CLUSTER_AUTHORIZATION_FAILED


def test_an_epoch_far_ahead_cannot_lock_a_broker_id_out_and_a_restart_is_a_newer_epoch(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path) -> None:
    """A cluster principal sending broker epoch 2^63-1 used to be stored, fencing the real broker id
    for ever; epochs now come from the proxy's own counter (1, 2, ... per start, never the clock)."""
    authority = own_proxy("--config", config_file(tmp_path, "authority.toml",
                                                  '[allocator]\ncluster_principals = ["User:ANONYMOUS"]\n'))
    assert allocate(authority, (5, (1 << 63) - 1))[0].error_code == STALE_BROKER_EPOCH
    settings = (f'[allocator]\npid_source = "allocator"\nbootstrap = "{authority.bootstrap}"\nbroker_id = 5\n'
                'allocations_per_second = 100\n')
    client = own_proxy("--config", config_file(tmp_path, "client.toml", settings))
    before = init_producer_ids(client, 1)
    assert client.stop() == 0
    assert (client.state_dir / "allocator-epoch").read_text() == "1"
    client.start()  # same state directory: epoch 2, which fences epoch 1
    after = init_producer_ids(client, 1)
    assert (client.state_dir / "allocator-epoch").read_text() == "2"
    assert after[0] > before[0]
    assert allocate(authority, (5, 1))[0].error_code == STALE_BROKER_EPOCH


def test_local_init_producer_id_and_two_proxies_sharing_one_allocator(own_proxy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    authority = own_proxy("--config", config_file(tmp_path, "authority.toml",
                                                  '[allocator]\ncluster_principals = ["User:ANONYMOUS"]\n'
                                                  'pid_source = "allocator"\nbroker_id = 1\n'))
    shared = f'[allocator]\npid_source = "allocator"\nbootstrap = "{authority.bootstrap}"\n'
    first = own_proxy("--config", config_file(tmp_path, "first.toml", shared + "broker_id = 2\n"))
    second = own_proxy("--config", config_file(tmp_path, "second.toml", shared + "broker_id = 3\n"))
    issued = {name: init_producer_ids(proxy, 2500) for name, proxy in
              (("authority", authority), ("first", first), ("second", second))}
    everything = [pid for pids in issued.values() for pid in pids]
    assert len(set(everything)) == len(everything) == 7500  # three blocks each, never the same PID
    assert min(everything) >= FIRST_ID
    # a transactional producer's InitProducerId still goes to the cluster's coordinator (Kafka's own IDs start at
    # 0); the first FindCoordinator creates the transaction-state topic, loaded soon after
    from kafka import KafkaProducer as TransactionalProducer

    producer = TransactionalProducer(bootstrap_servers=first.bootstrap, transactional_id=f"tx-{uuid.uuid4().hex}")
    producer.init_transactions()
    assert 0 <= producer._transaction_manager.producer_id_and_epoch.producer_id < FIRST_ID
    producer.close()


PID_SOURCES = {
    "allocator": '[allocator]\npid_source = "allocator"\nbroker_id = 1\n',
    "cluster": '[allocator]\npid_source = "cluster"\nblocks_topic = "{topic}-blocks"\n',
}


@pytest.mark.parametrize("client", ["kafka-python", "librdkafka"])
@pytest.mark.parametrize("pid_source", sorted(PID_SOURCES))
def test_idempotent_producers_with_proxy_issued_ids_deliver_everything_exactly_once(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str, pid_source: str, client: str) -> None:
    """Apache Kafka takes idempotent batches from producer IDs it did not issue: the ID space belongs to
    whoever allocates blocks, here the proxy."""
    proxy = own_proxy("--config", config_file(tmp_path, "proxy.toml", PID_SOURCES[pid_source].format(topic=topic)))
    create_topic(proxy.bootstrap, topic)
    values = [f"{client}-{i}".encode() for i in range(500)]
    if client == "kafka-python":
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, enable_idempotence=True, acks="all",
                                 delivery_timeout_ms=30_000, request_timeout_ms=10_000, linger_ms=5)
        futures = [producer.send(topic, value) for value in values]
        producer.flush(timeout=30)
        assert all(future.succeeded() for future in futures)
        producer.close(timeout=5)
    else:
        from confluent_kafka import Producer

        failures: list[object] = []
        librdkafka = Producer({"bootstrap.servers": proxy.bootstrap, "enable.idempotence": True, "acks": "all",
                               "linger.ms": 5, "message.timeout.ms": 30_000})
        for value in values:
            librdkafka.produce(topic, value, on_delivery=lambda error, _: error and failures.append(error))
            librdkafka.poll(0)
        assert librdkafka.flush(30) == 0 and failures == []
    received = [record.value for record in read_to_end(proxy.bootstrap, topic)]
    assert received == values
    producer_ids = stored_producer_ids(broker, topic)
    assert len(producer_ids) == 1 and min(producer_ids) >= FIRST_ID, producer_ids  # the proxy's, not Kafka's


def stored_producer_ids(cluster: Cluster, topic: str) -> set[int]:
    """The producer ids in the batches the cluster stored for partition 0, read directly from its leader."""
    from kafka.record.memory_records import MemoryRecords

    _, host, port = cluster.leader(topic)
    with socket.create_connection((host, port), timeout=30) as sock:
        response = call(sock, Api.FETCH, 11, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 24,
                        isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                        topics=[{"topic": topic, "partitions": [{
                            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                            "partition_max_bytes": 1 << 24}]}])
    records = MemoryRecords(bytes(response.responses[0].partitions[0].records))  # type: ignore[attr-defined]
    producer_ids = set()
    while (batch := records.next_batch()) is not None:
        producer_ids.add(batch.producer_id)
    return producer_ids


def produce_with(proxy: ProxyProcess, topic: str, pid: int, sequence: int) -> int:
    """One idempotent record (producer ``pid``, epoch 0) through ``proxy``; the partition's error code."""
    records = record_batch([b"v"], producer_id=pid, producer_epoch=0, base_sequence=sequence)
    with connect_to_leader(proxy, topic) as sock:
        response = call(sock, Api.PRODUCE, 9, transactional_id=None, acks=-1, timeout_ms=10_000,
                        topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": records}]}])
    return int(response.responses[0].partition_responses[0].error_code)  # type: ignore[attr-defined]


def test_a_pid_seen_before_a_restart_is_not_new_again(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    quotas = config_file(tmp_path, "quotas.toml", '[[quota]]\nuser = "ANONYMOUS"\nproducer_ids_rate = 1\n')
    proxy = own_proxy("--quota-file", quotas)
    create_topic(proxy.bootstrap, topic)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        pid = new_producer_id(sock).producer_id
    assert produce_with(proxy, topic, pid, 0) == 0
    assert metrics(proxy)["kafka_quota_proxy_producer_ids_admitted_total"] == 1
    assert proxy.stop() == 0

    restarted = own_proxy("--quota-file", quotas, "--state-dir", str(proxy.state_dir))
    assert produce_with(restarted, topic, pid, 1) == 0  # the same producer, its next batch
    assert metrics(restarted)["kafka_quota_proxy_producer_ids_admitted_total"] == 0  # known from the ledger
    with socket.create_connection(("127.0.0.1", restarted.port), timeout=30) as sock:
        other = new_producer_id(sock).producer_id
    assert produce_with(restarted, topic, other, 0) == 0
    assert metrics(restarted)["kafka_quota_proxy_producer_ids_admitted_total"] == 1  # a new PID still counts


_ALLOCATING_LOOP = """
import sys
from pathlib import Path
from allocator.block_log import BlockLog
log = BlockLog(Path(sys.argv[1]), first_id=0)
while True:
    block = log.allocate(1, 1)
    print(block.first_id, block.last_id, flush=True)
"""


def test_no_block_overlaps_after_50_kill_9s(tmp_path: Path) -> None:
    path = tmp_path / "blocks.log"
    answered: list[tuple[int, int]] = []
    root = Path(__file__).resolve().parents[2]
    for attempt in range(50):
        writer = subprocess.Popen([sys.executable, "-c", _ALLOCATING_LOOP, str(path)], stdout=subprocess.PIPE,
                                  text=True, cwd=root)
        assert writer.stdout is not None
        for lines, line in enumerate(writer.stdout, start=1):
            first, last = map(int, line.split())
            assert all(last < start or first > end for start, end in answered), f"overlap in run {attempt}"
            answered.append((first, last))
            if lines >= 1 + attempt % 7:
                break
        time.sleep((attempt % 5) / 1000)  # kills land at different points of a write
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        writer.stdout.close()
    assert len(answered) >= 50


def test_idempotent_producer_survives_the_proxy_being_killed_mid_stream(own_proxy, topic: str) -> None:  # type: ignore[no-untyped-def]
    # the cluster's own PIDs (pid_source = "upstream"): retries after a dropped connection are
    # deduplicated by the broker, so every record arrives exactly once
    proxy = own_proxy()
    create_topic(proxy.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, enable_idempotence=True, acks="all",
                             retries=1_000, retry_backoff_ms=100, delivery_timeout_ms=120_000,
                             reconnect_backoff_ms=50, linger_ms=5)
    futures = [producer.send(topic, f"{i}".encode()) for i in range(2_000)]
    time.sleep(0.05)
    proxy.stop(signal.SIGKILL)  # connections drop with requests in flight
    futures += [producer.send(topic, f"{i}".encode()) for i in range(2_000, 4_000)]
    proxy.start()  # same ports: the producer reconnects and retries
    producer.flush(timeout=120)
    assert all(future.succeeded() for future in futures)
    producer.close()
    values = [record.value.decode() for record in read_to_end(proxy.bootstrap, topic)]
    assert sorted(values, key=int) == [str(i) for i in range(4_000)]
