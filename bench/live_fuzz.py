"""Mutated and random frames against a running proxy in front of Apache Kafka, beside well-behaved clients
(``python -m bench.live_fuzz``, ``make fuzz``; ten minutes by default).

The proxy terminates SASL (PLAIN and SCRAM users) under a producer byte-rate and a mutation quota, with a 32 MiB
``max-buffered-bytes``. Fuzzing connections, two at a time, each take one of: random bytes; a well-formed request
of some api (Produce, Fetch, Metadata, ApiVersions, CreateTopics, DeleteTopics, InitProducerId, the client-quota
apis, the SASL ones) mutated (bits flipped, bytes cut, inserted or repeated, its size prefix changed), sent
before any login or after a good one; a login mutated. Each reads what comes back for a moment and goes. Meanwhile
a librdkafka producer writes numbered records at 200 a second and a librdkafka consumer reads them.

It holds when: the proxy never exits; its log has no traceback and no "unexpected error" (a bad frame closes its
connection with a warning, nothing else); its RSS grows by no more than the 32 MiB + 25%; every record the producer
had acknowledged is consumed, exactly once by its number; and no second of the run passes without the producer's
records being acknowledged (a stall over 1 s is counted). Writes ``bench/live-fuzz-results.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, KafkaError, Producer

from bench.report import new_results, write_results
from protocol.apis import Api
from proxy.dev.apache_kafka import KafkaCluster
from proxy.security.sasl_messages import plain_token
from tests.integration.test_produce_quotas import create_topic
from tests.integration.test_sasl import add_user
from tests.support import CLUSTER_USERS, PASSWORDS, Cluster, ProxyProcess, encode_request, record_batch

MIB = 1 << 20
BOUND = 32 * MIB
ALLOWED_GROWTH = int(BOUND * 1.25)
RECORDS_PER_S = 200
STALL_S = 1.0
FUZZERS = 2
RECORD_PREFIX = b"record-"
"""The well-behaved producer's values (``record-<number>``): the fuzzers write to the same topic."""
USER = "bob"
"""A PLAIN user: the well-behaved clients and the fuzzers that log in first."""


def well_formed(topic: str) -> list[bytes]:
    """A well-formed frame of each api a client reaches (size prefix included), to mutate."""
    batch = record_batch([b"fuzz-value"])
    victim = f"fuzz-victim-{uuid.uuid4().hex[:6]}"  # never the well-behaved clients' topic
    return [
        encode_request(Api.PRODUCE, 7, transactional_id=None, acks=1, timeout_ms=5000,
                       topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]),
        encode_request(Api.FETCH, 11, replica_id=-1, max_wait_ms=10, min_bytes=1, max_bytes=1 << 20,
                       isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                       topics=[{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                                "fetch_offset": 0, "log_start_offset": -1,
                                                                "partition_max_bytes": 1 << 16}]}]),
        encode_request(Api.METADATA, 12, topics=[{"name": topic, "topic_id": None}], allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False),
        encode_request(Api.API_VERSIONS, 3, client_software_name="fuzz", client_software_version="1"),
        encode_request(Api.CREATE_TOPICS, 5, timeout_ms=5000, validate_only=True,
                       topics=[{"name": victim, "num_partitions": 2, "replication_factor": 1, "assignments": [],
                                "configs": []}]),
        encode_request(Api.DELETE_TOPICS, 6, timeout_ms=5000, topics=[{"name": victim, "topic_id": None}]),
        encode_request(Api.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=60_000,
                       producer_id=-1, producer_epoch=-1),
        encode_request(Api.DESCRIBE_CLIENT_QUOTAS, 1, components=[{"entity_type": "user", "match_type": 1,
                                                                   "match": None}], strict=False),
        encode_request(Api.ALTER_CLIENT_QUOTAS, 1, validate_only=True, entries=[
            {"entity": [{"entity_type": "user", "entity_name": "fuzz"}],
             "ops": [{"key": "producer_byte_rate", "value": 1e6, "remove": False}]}]),
        *login(),
    ]


def login() -> list[bytes]:
    return [encode_request(Api.SASL_HANDSHAKE, 1, correlation_id=1000, mechanism="PLAIN"),
            encode_request(Api.SASL_AUTHENTICATE, 2, correlation_id=1001,
                           auth_bytes=plain_token(USER, PASSWORDS[USER]))]


def mutated(frame: bytes, generator: random.Random) -> bytes:
    data = bytearray(frame)
    for _ in range(generator.randint(1, 4)):
        action = generator.choice(("flip", "cut", "insert", "repeat", "size"))
        at = generator.randrange(len(data)) if data else 0
        if action == "flip" and data:
            data[at] ^= 1 << generator.randrange(8)
        elif action == "cut":
            del data[at:at + generator.randint(1, 16)]
        elif action == "insert":
            data[at:at] = generator.randbytes(generator.randint(1, 16))
        elif action == "repeat":
            data[at:at] = data[at:at + generator.randint(1, 64)]
        elif len(data) >= 4:  # a size prefix that does not match what follows, or is absurd
            data[:4] = generator.choice((len(data) - 4 + generator.randint(-8, 8), -1, 1 << 30, 0,
                                         generator.randrange(1 << 31))).to_bytes(4, "big", signed=True)
    return bytes(data)


class Fuzzing:
    """Connections that send the proxy what no client should, until stopped; what was sent, counted."""

    def __init__(self, port: int, topic: str, seed: int) -> None:
        self._port = port
        self._frames = well_formed(topic)
        self._generator = random.Random(seed)
        self.connections = self.frames = self.closed_by_proxy = 0
        self.stop = threading.Event()

    def run(self) -> None:
        generator = random.Random(self._generator.random())
        while not self.stop.is_set():
            with contextlib.suppress(OSError):
                self._one_connection(generator)

    def _one_connection(self, generator: random.Random) -> None:
        with socket.create_connection(("127.0.0.1", self._port), timeout=2) as sock:
            self.connections += 1
            kind = generator.random()
            if kind < 0.1:
                payloads = [generator.randbytes(generator.randint(1, 512))]
            elif kind < 0.4:
                payloads = [mutated(generator.choice(self._frames), generator) for _ in range(generator.randint(1, 8))]
            else:  # logged in first: the parsers a principal reaches
                payloads = [*login(), *(mutated(generator.choice(self._frames[:-2]), generator)
                                        for _ in range(generator.randint(1, 8)))]
            for payload in payloads:
                sock.sendall(payload)
                self.frames += 1
            sock.settimeout(0.2)
            try:
                while sock.recv(1 << 16):
                    pass
                self.closed_by_proxy += 1
            except (TimeoutError, ConnectionResetError):
                pass


class WellBehaved:
    """A librdkafka producer writing numbered records at ``RECORDS_PER_S`` and a consumer reading them."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": USER,
                "sasl.password": PASSWORDS[USER]}
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **sasl})
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"live-fuzz-{uuid.uuid4().hex[:6]}",
                                   "auto.offset.reset": "earliest", "enable.auto.commit": False, **sasl})
        self._consumer.subscribe([topic])
        self._topic = topic
        self.acknowledged: set[int] = set()
        self.failed = 0
        self.consumed: list[int] = []
        self.foreign = 0
        self.acknowledged_at: list[float] = []
        self.stop = threading.Event()

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self.failed += 1
            return
        self.acknowledged.add(int(message.value().removeprefix(RECORD_PREFIX)))
        self.acknowledged_at.append(time.monotonic())

    def produce(self) -> None:
        number = 0
        started = time.monotonic()
        while not self.stop.is_set():
            self._producer.produce(self._topic, RECORD_PREFIX + str(number).encode(), on_delivery=self._delivered)
            number += 1
            self._producer.poll(0)
            time.sleep(max(0.0, started + number / RECORDS_PER_S - time.monotonic()))
        assert self._producer.flush(60) == 0

    def consume(self, until: Callable[[], bool]) -> None:
        while not until():
            message = self._consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            value = message.value() or b""
            if value.startswith(RECORD_PREFIX):
                self.consumed.append(int(value.removeprefix(RECORD_PREFIX)))
            else:
                self.foreign += 1  # a fuzzer's Produce, mutated and still whole, went through

    def close(self) -> None:
        self._consumer.close()

    def longest_stall_s(self, started: float, ended: float) -> float:
        """The longest time without an acknowledgement between ``started`` and ``ended``."""
        times = [started, *sorted(at for at in self.acknowledged_at if started <= at <= ended), ended]
        return max(later - earlier for earlier, later in zip(times, times[1:], strict=False))


def run(seconds: float, directory: Path) -> dict[str, Any]:
    with KafkaCluster(users=CLUSTER_USERS, log_directory=directory / "kafka") as kafka:
        cluster = Cluster(kafka.bootstrap).wait_until_ready()
        topic = f"live-fuzz-{uuid.uuid4().hex[:8]}"
        create_topic(cluster.bootstrap, topic)
        users = directory / "users.toml"
        add_user(users, USER, "PLAIN")
        add_user(users, "alice", "SCRAM-SHA-256")
        quotas = directory / "quotas.toml"
        quotas.write_text('[[quota]]\nuser = "<default>"\nproducer_byte_rate = 10000000\n'
                          'controller_mutation_rate = 10\n')
        proxy = ProxyProcess(cluster.bootstrap, directory / "proxy.log", "--sasl-users", str(users), "--quota-file",
                             str(quotas), "--max-buffered-bytes", str(BOUND), node_ids=cluster.node_ids).start()
        assert proxy.process is not None
        process = psutil.Process(proxy.process.pid)
        rss_start = rss_peak = process.memory_info().rss
        clients = WellBehaved(proxy.bootstrap, topic)
        fuzzing = Fuzzing(proxy.port, topic, seed=7)
        threads = [threading.Thread(target=clients.produce), *(threading.Thread(target=fuzzing.run)
                                                              for _ in range(FUZZERS))]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        consumer = threading.Thread(target=clients.consume, args=(lambda: clients.stop.is_set() and len(
            set(clients.consumed)) >= len(clients.acknowledged),))
        consumer.start()
        exited = None
        while time.monotonic() - started < seconds:
            time.sleep(1)
            if proxy.process.poll() is not None:
                exited = proxy.process.returncode
                break
            rss_peak = max(rss_peak, process.memory_info().rss)
        fuzzing.stop.set()
        clients.stop.set()
        ended = time.monotonic()
        for thread in threads:
            thread.join(120)
        consumer.join(120)
        clients.close()
        log = proxy.log()
        proxy.stop()
    lost = clients.acknowledged - set(clients.consumed)
    duplicates = len(clients.consumed) - len(set(clients.consumed))
    tracebacks = log.count("Traceback") + log.count("unexpected error")
    result = {"seconds": round(ended - started), "fuzzing_connections": fuzzing.connections,
              "frames_sent": fuzzing.frames, "connections_closed_by_the_proxy": fuzzing.closed_by_proxy,
              "bad_frames_logged": log.count("bad request frame"), "proxy_exit_code": exited,
              "tracebacks_or_unexpected_errors": tracebacks, "rss_start_mb": round(rss_start / MIB, 1),
              "rss_peak_mb": round(rss_peak / MIB, 1), "rss_growth_mb": round((rss_peak - rss_start) / MIB, 1),
              "rss_growth_allowed_mb": round(ALLOWED_GROWTH / MIB, 1),
              "records_acknowledged": len(clients.acknowledged), "records_failed": clients.failed,
              "records_consumed": len(clients.consumed), "fuzzers_records_consumed": clients.foreign,
              "acknowledged_not_consumed": len(lost), "consumed_twice": duplicates,
              "longest_stall_s": round(clients.longest_stall_s(started, ended), 2)}
    result["held"] = (exited is None and not tracebacks and rss_peak - rss_start <= ALLOWED_GROWTH and not lost
                      and not duplicates and result["longest_stall_s"] <= STALL_S and clients.acknowledged != set())
    if tracebacks:
        result["first_traceback"] = log[max(0, log.find("Traceback") - 300):][:3000]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/live-fuzz-results.json")
    parser.add_argument("--seconds", type=float, default=600)
    args = parser.parse_args()
    results = new_results()
    with tempfile.TemporaryDirectory(prefix="kqp-live-fuzz-") as scratch:
        results["cases"]["live"] = run(args.seconds, Path(scratch))
    write_results(args.out, results)
    return 0 if results["cases"]["live"]["held"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
