"""The CLI contract: configuration, readiness, shutdown, upstream failures, limits."""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.protocol.consumer import FetchRequest

from proxy.dev.apache_kafka import KafkaCluster
from tests.integration.test_produce_quotas import metrics
from tests.support import (
    FOREIGN_PRODUCER_ID,
    Cluster,
    ProxyProcess,
    connect_to_leader,
    create_topic_on_one_broker,
    encode_request,
    produce_request,
    proxy_command,
    read_frame,
    record_batch,
    wait_until,
)

pytestmark = pytest.mark.integration

API_VERSIONS = 18
METADATA = 3
FETCH = 1


def correlation_id(frame: bytes) -> int:
    return int(struct.unpack_from(">i", frame, 0)[0])


def test_sigterm_lets_in_flight_requests_finish_and_exits_zero(own_proxy, broker: Cluster, topic: str) -> None:  # type: ignore[no-untyped-def]
    proxy = own_proxy("--shutdown-grace-seconds", "60")  # time to write the record that ends the fetch, loaded or not
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    partition = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    fetch = encode_request(FETCH, 4, correlation_id=7, replica_id=-1, max_wait_ms=20_000, min_bytes=1,
                           max_bytes=1 << 20, isolation_level=0,
                           topics=[FetchRequest.FetchTopic(topic=topic, partitions=[partition])])
    record = b"written after the proxy began stopping"
    # once the leader serves the new partition: before that the fetch is refused at once, not held
    with connect_to_leader(proxy, topic) as sock:
        sock.sendall(encode_request(METADATA, 1, correlation_id=6, topics=None))
        assert correlation_id(read_frame(sock)) == 6
        sock.sendall(fetch)  # an empty topic: the broker holds it until a record comes
        wait_until(lambda: metrics(proxy).get('kafka_quota_proxy_requests_total{api="Fetch"}', 0) >= 1, 30,
                   "the fetch forwarded")
        proxy.process.send_signal(signal.SIGTERM)
        proxy.wait_for_log("stopping: ", 30)
        # the record the broker answers the fetch with comes only now, straight to the broker: the answer
        # cannot have left before the proxy began stopping
        _, leader_host, leader_port = broker.leader(topic)
        with socket.create_connection((leader_host, leader_port), timeout=30) as direct:
            direct.sendall(produce_request(topic, record_batch([record])))
            assert read_frame(direct)
        answer = read_frame(sock)
        assert correlation_id(answer) == 7 and record in answer
        assert read_frame(sock) == b""
    assert proxy.process.wait(timeout=30) == 0
    log = proxy.log()
    assert "stopping" in log and "stopped" in log


def test_settings_come_from_config_file_and_flags_win(broker: Cluster, tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text(f'upstream = "{broker.bootstrap}"\nlisten = "127.0.0.1:1"\n'
                      'idle-timeout-seconds = 1\n[allocator]\npid_source = "upstream"\n')
    proxy = ProxyProcess(broker.bootstrap, tmp_path / "p.log", "--config", str(config), node_ids=broker.node_ids)
    proxy.args.remove("--upstream")
    proxy.args.remove(broker.bootstrap)
    proxy.start()
    try:
        # listen came from the flag (the file's port 1 would have failed); idle timeout from the file, 1 s: closed
        # after half a second at least (a loaded machine is only later), and before the socket's 30 s (the
        # default is 600 s)
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            started = time.monotonic()
            assert sock.recv(16) == b""
            assert time.monotonic() - started > 0.5
    finally:
        assert proxy.stop() == 0


@pytest.mark.parametrize(("args", "message"), [
    (["--listen", "127.0.0.1:9"], "upstream: required"),
    (["--upstream", "nohostport", "--listen", "127.0.0.1:9"], "expected HOST:PORT"),
    (["--upstream", "127.0.0.1:9", "--max-frame-bytes", "-1"], "must be positive"),
])
def test_bad_settings_exit_2_with_a_reason(args: list[str], message: str) -> None:
    result = subprocess.run([*proxy_command(), *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert message in result.stderr


def test_unreachable_upstream_closes_client_and_recovers(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    late = KafkaCluster(log_directory=tmp_path)  # its ports are chosen; nothing listens on them yet
    proxy = own_proxy("--connect-timeout-seconds", "2", upstream=late.bootstrap)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(encode_request(API_VERSIONS, 0))
        # closed with the request unread, the kernel may reset instead of a clean FIN
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(16) == b""
    assert "upstream unreachable" in proxy.wait_for_log("upstream unreachable")

    with late:
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all")
        assert producer.send(topic, value=b"after the broker came up").get(timeout=30).offset == 0
        producer.close()


def test_pipelined_requests_beyond_the_in_flight_limit_all_get_answers(own_proxy) -> None:  # type: ignore[no-untyped-def]
    proxy = own_proxy("--max-in-flight-requests", "4")
    requests = b"".join(encode_request(METADATA, 1, correlation_id=i, topics=[]) for i in range(300))
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(requests)
        assert [correlation_id(read_frame(sock)) for _ in range(300)] == list(range(300))


def test_pipelined_produce_requests_held_for_producer_id_checks_beyond_the_limit_all_get_answers(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    """Each request carries a new producer ID, checked (in the ledger) before it goes on: the ones read while
    a check is pending wait, and more than the in-flight limit were read. Before, once a check ended with
    the limit reached, nothing released them: 34 of 50 were answered."""
    quotas = tmp_path / "quotas.toml"
    quotas.write_text('[[quota]]\nuser = "ANONYMOUS"\nproducer_ids_rate = 1000\n')
    proxy = own_proxy("--quota-file", str(quotas), "--max-in-flight-requests", "8")
    create_topic_on_one_broker(broker, topic)
    frames = [produce_request(topic, record_batch([b"v"], producer_id=FOREIGN_PRODUCER_ID + n, producer_epoch=0,
                                                  base_sequence=0), correlation_id=n + 1) for n in range(50)]
    with connect_to_leader(proxy, topic) as sock:
        sock.sendall(b"".join(frames))
        assert [correlation_id(read_frame(sock)) for _ in frames] == list(range(1, 51))
