"""Large plaintext Produce requests and Fetch responses: the rest of each frame moves from one socket to the
other inside the kernel (``splice``), in order with everything around it, and arrives whole."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import sys
import time
from pathlib import Path

import psutil
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.codecs import decode_response
from protocol.header import response_header_length
from proxy.connection.reading import CUT_THROUGH_AFTER_BYTES, READ_AFTER_SPLICED_RECORDS_BYTES, READ_BYTES
from proxy.dev.apache_kafka import KafkaCluster
from tests.integration.test_produce_quotas import metrics
from tests.support import (
    Cluster,
    ProxyProcess,
    connect_to_leader,
    encode_request,
    new_producer_id,
    produce_request,
    read_frame,
    record_batch,
    wait_until,
)

pytestmark = pytest.mark.integration
MIB = 1024 * 1024
SPLICED = "kafka_quota_proxy_client_received_spliced_bytes_total"
SPLICED_OUT = "kafka_quota_proxy_client_sent_spliced_bytes_total"


def values(tag: str, count: int, size: int = 1000) -> list[bytes]:
    """Distinct record values: a reordered, dropped or corrupted byte shows in what is read back."""
    return [(f"{tag}-{i}-".encode() + hashlib.sha256(f"{tag}{i}".encode()).digest() * size)[:size]
            for i in range(count)]


def create_topic(broker: Cluster, topic: str, partitions: int = 1) -> None:
    """Partitions taking batches of up to 64 MiB (a Produce request carries one batch per partition)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config={"max.message.bytes": str(64 * MIB)})])[topic].result(30)


def read_back(broker: Cluster, topic: str, count: int, bootstrap: str | None = None, partition: int = 0) -> list[bytes]:
    """The partition's record values, read from the cluster directly (or through ``bootstrap``)."""
    consumer = Consumer({"bootstrap.servers": bootstrap or broker.bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    read: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(read) < count and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=1):
            assert message.error() is None, message.error()
            read.append(message.value())
    consumer.close()
    return read


def wait_for_records(broker: Cluster, topic: str, counts: list[int]) -> None:
    """Until each partition's log ends at its count: the cluster has written the records (and answered)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"offsets-{topic}"})
    try:
        deadline = time.monotonic() + 60
        while [consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
               for partition in range(len(counts))] != counts:
            assert time.monotonic() < deadline, f"{topic} does not hold {counts} records after 60 s"
            time.sleep(0.05)
    finally:
        consumer.close()


def large_batch_producer(bootstrap: str) -> Producer:
    """An idempotent librdkafka producer sending batches of up to 1 MB: its requests are spliced."""
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 50,
                     "batch.size": 1_000_000, "compression.type": "none"})


def produce_error_codes(frame: bytes) -> list[int]:
    answer = decode_response(0, 7, memoryview(frame)[response_header_length(frame, False):])
    return [p.error_code for t in answer.responses for p in t.partition_responses]  # type: ignore[attr-defined]


def produce_throttle_ms(frame: bytes) -> int:
    return decode_response(0, 7, memoryview(frame)[response_header_length(frame, False):]).throttle_time_ms  # type: ignore[attr-defined]


@pytest.mark.parametrize("splice", [True, False])
def test_pipelined_large_produce_requests_arrive_whole_and_in_order(own_proxy, broker: Cluster, topic: str,  # type: ignore[no-untyped-def]
                                                                     splice: bool) -> None:
    proxy = own_proxy(*([] if splice else ["--no-splice"]))
    create_topic(broker, topic)
    first, second, third = values("a", 3000), values("b", 2000), values("c", 3)
    frames = [produce_request(topic, record_batch(first), correlation_id=1),
              encode_request(3, 1, correlation_id=2, topics=None),
              produce_request(topic, record_batch(second), correlation_id=3),
              produce_request(topic, record_batch(third), correlation_id=4)]
    with connect_to_leader(proxy, topic) as sock:
        sock.sendall(b"".join(frames))  # one write: the frames follow one another in the socket
        answers = [read_frame(sock) for _ in frames]
    assert [int.from_bytes(answer[:4], "big") for answer in answers] == [1, 2, 3, 4]
    assert [produce_error_codes(answers[i]) for i in (0, 2, 3)] == [[0], [0], [0]]
    assert read_back(broker, topic, 5003) == first + second + third
    spliced = metrics(proxy)[SPLICED]
    if splice:  # all but what the first read of each large frame took (64 KiB or more of its 3 and 2 MB)
        assert 4 * MIB < spliced < 5 * MIB, spliced
    else:
        assert spliced == 0


def test_large_requests_under_a_producer_id_quota_splice_their_records_and_are_still_checked(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, topic: str, tmp_path: Path) -> None:
    # the quota reads each batch's header as it goes by and splices the records after it: burst = 2 windows x
    # 5 s x 0.1/s = 1 new producer ID, so the third request's new ID is throttled
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[settings]\n"producer.id.quota.window.num" = 2\n'
                          '"producer.id.quota.window.size.seconds" = 5\n"producer.id.quota.mode" = "throttle"\n'
                          '[[quota]]\nuser = "ANONYMOUS"\nproducer_ids_rate = 0.1\n')
    proxy = own_proxy("--quota-file", str(quota_file))
    create_topic(broker, topic, partitions=2)
    sent: dict[int, list[bytes]] = {0: [], 1: []}
    frames = []
    with connect_to_leader(proxy, topic) as sock:
        for request in range(3):
            pid = new_producer_id(sock)
            partitions = []
            for partition in sent:  # two batches of 600 KB in each request, each spliced after its header
                batch = values(f"{request}-{partition}", 600)
                sent[partition] += batch
                partitions.append({"index": partition, "records": record_batch(batch, pid.producer_id,
                                                                              pid.producer_epoch, 0)})
            frames.append(encode_request(0, 7, correlation_id=10 + request, transactional_id=None, acks=-1,
                                         timeout_ms=30_000, topic_data=[{"name": topic, "partition_data": partitions}]))
        frames.insert(1, encode_request(3, 1, correlation_id=99, topics=None))
        sock.sendall(b"".join(frames))  # pipelined: the Metadata request waits behind a spliced frame
        answers = [read_frame(sock) for _ in frames]
    assert [int.from_bytes(answer[:4], "big") for answer in answers] == [10, 99, 11, 12]
    produced = [answers[i] for i in (0, 2, 3)]
    assert [produce_error_codes(answer) for answer in produced] == [[0, 0]] * 3
    assert produce_throttle_ms(produced[0]) == 0 and produce_throttle_ms(produced[2]) > 0
    values_now = metrics(proxy)
    assert values_now["kafka_quota_proxy_producer_ids_admitted_total"] == 3
    # of the 3.6 MB of records, all but what each request's reads took before its cut through was decided (less
    # than CUT_THROUGH_AFTER_BYTES, then one read more: reads take what has arrived, less on a slow machine) and
    # the read after each spliced batch (the next batch's header is in it)
    read_whole = 3 * (CUT_THROUGH_AFTER_BYTES + READ_BYTES) + 6 * READ_AFTER_SPLICED_RECORDS_BYTES
    assert values_now[SPLICED] > 3.6e6 - read_whole, values_now[SPLICED]
    for partition, expected in sent.items():
        assert read_back(broker, topic, len(expected), partition=partition) == expected


PROXY_ON_A_SLOW_DISK = """
import sys, time
from pathlib import Path
from allocator.ledger import PidLedger
from proxy.cli.main import main

gate, read = Path(sys.argv.pop(1)), PidLedger.read

def read_when_the_disk_answers(ledger, pid):
    while gate.exists():
        time.sleep(0.01)
    return read(ledger, pid)

PidLedger.read = read_when_the_disk_answers
sys.exit(main(sys.argv[1:]))
"""
"""The proxy's CLI with its PID ledger on a disk that answers no read while the file named first exists."""


def test_the_answer_to_a_spliced_request_waits_for_its_producer_id_verdict(broker: Cluster, topic: str,
                                                                            tmp_path: Path) -> None:
    """A request forwarded as it arrives is checked once it is whole, and a new producer ID is looked up in the
    ledger on disk first: the cluster can answer before the verdict. Its answer waits for the verdict (it lost
    its throttle once, when a loaded machine's ledger thread was slower than the cluster)."""
    quota_file = tmp_path / "quotas.toml"  # burst 2 windows x 5 s x 0.1/s = 1 new producer ID
    quota_file.write_text('[settings]\n"producer.id.quota.window.num" = 2\n'
                          '"producer.id.quota.window.size.seconds" = 5\n"producer.id.quota.mode" = "throttle"\n'
                          '[[quota]]\nuser = "ANONYMOUS"\nproducer_ids_rate = 0.1\n')
    disk_busy = tmp_path / "disk-busy"
    proxy = ProxyProcess(broker.bootstrap, tmp_path / "proxy.log", "--quota-file", str(quota_file),
                         node_ids=broker.node_ids,
                         command=[sys.executable, "-c", PROXY_ON_A_SLOW_DISK, str(disk_busy)]).start()
    try:
        create_topic(broker, topic, partitions=3)
        with connect_to_leader(proxy, topic) as sock:
            partitions = []
            for partition in range(3):  # three new producer IDs, one per batch: the third finds the bucket at -1
                pid = new_producer_id(sock)
                partitions.append({"index": partition, "records": record_batch(
                    values(f"{partition}", 600), pid.producer_id, pid.producer_epoch, 0)})
            disk_busy.touch()
            sock.sendall(encode_request(0, 7, correlation_id=7, transactional_id=None, acks=-1, timeout_ms=30_000,
                                        topic_data=[{"name": topic, "partition_data": partitions}]))
            wait_for_records(broker, topic, [600] * 3)  # written, hence answered by the cluster
            sock.settimeout(3)
            with pytest.raises(TimeoutError):
                early = read_frame(sock)
                pytest.fail(f"answered before the verdict, throttle {produce_throttle_ms(early)} ms")
            disk_busy.unlink()
            sock.settimeout(30)
            answer = read_frame(sock)
        assert int.from_bytes(answer[:4], "big") == 7 and produce_error_codes(answer) == [0, 0, 0]
        # one check at one instant: the bucket, full at 1, goes to -2; -(-2) / 0.1 per second
        assert produce_throttle_ms(answer) == 20_000
        assert metrics(proxy)["kafka_quota_proxy_producer_ids_admitted_total"] == 3
    finally:
        proxy.stop()


def test_librdkafka_producer_through_the_spliced_path_delivers_every_record(own_proxy, broker: Cluster,  # type: ignore[no-untyped-def]
                                                                            topic: str) -> None:
    proxy = own_proxy()
    create_topic(broker, topic)
    sent = values("r", 20_000)
    producer = large_batch_producer(proxy.bootstrap)
    failures: list[object] = []
    for value in sent:
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda error, _message: failures.append(error) if error else None)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failures
    assert read_back(broker, topic, len(sent)) == sent
    assert metrics(proxy)[SPLICED] > 10 * MIB  # of the 20 MB, in batches of up to 1 MB


def test_librdkafka_producers_under_a_producer_id_quota_splice_their_records_and_are_charged(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, topic: str, tmp_path: Path) -> None:
    # a quota that never binds, so that what is asserted is what the proxy decided, not when librdkafka's producer
    # IDs arrived (a throttle depends on that; the raw-frame test above throttles a spliced request)
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[settings]\n"producer.id.quota.mode" = "throttle"\n'
                          '[[quota]]\nuser = "ANONYMOUS"\nproducer_ids_rate = 100\n')
    proxy = own_proxy("--quota-file", str(quota_file))
    create_topic(broker, topic, partitions=3)
    producers = [large_batch_producer(proxy.bootstrap) for _ in range(3)]
    sent = [values(f"p{partition}", 6_000) for partition in range(3)]
    failures: list[object] = []
    for next_values in zip(*sent, strict=True):  # one record for each producer in turn
        for partition, (producer, value) in enumerate(zip(producers, next_values, strict=True)):
            producer.produce(topic, value, partition=partition,
                             on_delivery=lambda error, _message: failures.append(error) if error else None)
            producer.poll(0)
    assert [producer.flush(60) for producer in producers] == [0, 0, 0] and not failures
    for partition, expected in enumerate(sent):
        assert read_back(broker, topic, len(expected), partition=partition) == expected
    values_now = metrics(proxy)
    # each producer's ID, read from a batch header
    assert values_now["kafka_quota_proxy_producer_ids_admitted_total"] == 3
    assert values_now[SPLICED] > 9 * MIB  # of the 18 MB, in batches of up to 1 MB: headers read, records spliced


def test_large_fetch_responses_arrive_as_the_cluster_sent_them(own_proxy, broker: Cluster, topic: str) -> None:  # type: ignore[no-untyped-def]
    proxy = own_proxy()
    create_topic(broker, topic)
    sent = values("f", 6000)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.size": 1_000_000})
    for value in sent:
        producer.produce(topic, value, partition=0)
    assert producer.flush(60) == 0
    fetch = encode_request(1, 4, correlation_id=3, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=16 * MIB,
                           isolation_level=0, topics=[{"topic": topic, "partitions": [
                               {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 16 * MIB}]}])
    _, leader_host, leader_port = broker.leader(topic)
    with socket.create_connection((leader_host, leader_port), timeout=30) as direct:
        direct.sendall(fetch)
        expected = read_frame(direct)
    with connect_to_leader(proxy, topic) as sock:
        sock.sendall(fetch * 3)  # pipelined: each spliced response is followed by the next
        answers = [read_frame(sock) for _ in range(3)]
    assert len(expected) > 5 * MIB
    assert answers == [expected] * 3
    assert metrics(proxy)[SPLICED_OUT] > 3 * 5 * MIB
    assert read_back(broker, topic, len(sent), bootstrap=proxy.bootstrap) == sent  # librdkafka, through the proxy


def test_a_client_gone_in_the_middle_of_a_spliced_frame_closes_only_its_connection(own_proxy, broker: Cluster,  # type: ignore[no-untyped-def]
                                                                                   topic: str) -> None:
    proxy = own_proxy()
    create_topic(broker, topic)
    frame = produce_request(topic, record_batch(values("t", 4000)), correlation_id=1)
    with connect_to_leader(proxy, topic) as other:
        with connect_to_leader(proxy, topic) as quitter:
            quitter.sendall(frame[:len(frame) // 2])
            wait_until(lambda: metrics(proxy)[SPLICED] > 0, 30, "the half frame spliced")
        other.sendall(produce_request(topic, record_batch(values("o", 3)), correlation_id=9))
        answer = read_frame(other)
        assert int.from_bytes(answer[:4], "big") == 9 and produce_error_codes(answer) == [0]
    proxy.wait_for_log("client closed in the middle of a frame", 30)
    assert read_back(broker, topic, 3) == values("o", 3)  # nothing of the half frame reached the log


def test_a_spliced_frame_waits_in_the_kernel_while_the_cluster_reads_nothing(tmp_path: Path) -> None:
    """The cluster stopped (SIGSTOP, its own): the frame's bytes stay in the sockets' buffers, not in the proxy."""
    with KafkaCluster(log_directory=tmp_path) as stopped:
        cluster = Cluster(stopped.bootstrap).wait_until_ready()
        proxy = ProxyProcess(stopped.bootstrap, tmp_path / "proxy.log", node_ids=cluster.node_ids).start()
        try:
            create_topic(cluster, "waits")
            sent = values("w", 40_000)  # 40 MB in one request: more than every buffer on the way holds
            frame = produce_request("waits", record_batch(sent), correlation_id=5)
            assert proxy.process is not None
            process = psutil.Process(proxy.process.pid)
            with connect_to_leader(proxy, "waits", timeout_s=60) as sock:
                before = process.memory_info().rss
                stopped.brokers[0].pause()
                try:
                    sock.settimeout(5)  # nothing taken for 5 s: the buffers are full (not the proxy short of CPU)
                    sent_bytes = 0
                    with contextlib.suppress(TimeoutError):  # every buffer up to the stopped cluster is full
                        while sent_bytes < len(frame):
                            sent_bytes += sock.send(frame[sent_bytes:sent_bytes + MIB])
                    growth = process.memory_info().rss - before
                    spliced = metrics(proxy)[SPLICED]
                finally:
                    stopped.brokers[0].resume()
                sock.settimeout(60)
                sock.sendall(frame[sent_bytes:])
                answer = read_frame(sock)
            assert int.from_bytes(answer[:4], "big") == 5 and produce_error_codes(answer) == [0]
            assert sent_bytes < len(frame), "the whole frame fitted in the buffers: nothing waited"
            assert spliced > MIB, "the frame was not spliced"
            assert growth < 2 * MIB, f"the proxy grew by {growth / MIB:.1f} MiB while {sent_bytes / MIB:.1f} MiB waited"
            assert read_back(cluster, "waits", len(sent)) == sent
        finally:
            proxy.stop()
