"""Starting the proxy through its CLI, as users and external tests do; the cluster behind it; raw frames."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.dev.apache_kafka import LOOPBACK, SaslUsers, free_port, free_ports

FOREIGN_PRODUCER_ID = (1 << 48) + 4242
"""A producer ID no broker issued (the proxy's allocator starts at 2^48)."""
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol, with = signs",
             "quota-proxy": "the proxy's own"}
CLUSTER_USERS = SaslUsers(plain=PASSWORDS, scram=PASSWORDS)
"""Who may log in on the SASL listener of the Apache Kafka the tests start (PLAIN and SCRAM alike)."""


def proxy_command() -> list[str]:
    script = Path(sys.executable).with_name("kafka-quota-proxy")
    return [str(script)] if script.exists() else [sys.executable, "-m", "proxy"]


def free_port_base(offsets: Iterable[int]) -> int:
    """A base such that base + every offset is a free port."""
    offsets = tuple(offsets)
    return free_ports(max(offsets) - min(offsets) + 1) - min(offsets)


class Cluster:
    """The Kafka cluster under the integration tests: Apache Kafka started here, or ``KAFKA_BOOTSTRAP``'s.

    ``sasl_bootstrap``: its SASL_PLAINTEXT listener, where the users of ``PASSWORDS`` log in with PLAIN,
    SCRAM-SHA-256, SCRAM-SHA-512 or (any name) unsecured OAUTHBEARER; None when the cluster has none.
    ``ssl_bootstrap``: its SSL listener (Kafka's own TLS), whose certificate ``ssl_cafile`` signed; None when the
    cluster has none.
    """

    def __init__(self, bootstrap: str, sasl_bootstrap: str | None = None, started_here: bool = False,
                 ssl_bootstrap: str | None = None, ssl_cafile: Path | None = None) -> None:
        """``started_here``: the session started it (its state is the tests' own, ``tests.cluster_state``)."""
        self.bootstrap = bootstrap
        self.started_here = started_here
        self.sasl_bootstrap = sasl_bootstrap
        self.ssl_bootstrap = ssl_bootstrap
        self.ssl_cafile = ssl_cafile
        host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.node_ids: tuple[int, ...] = ()

    def wait_until_ready(self, timeout_s: float = 120.0) -> Cluster:
        """Wait until the cluster answers ApiVersions and names its brokers and controller."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection((self.host, self.port), timeout=10) as sock:
                    versions = call(sock, 18, 0)
                    metadata = call(sock, 3, 4, topics=[], allow_auto_topic_creation=False)
                if versions.error_code == 0 and metadata.brokers and metadata.controller_id >= 0:  # type: ignore[attr-defined]
                    self.api_versions = {api.api_key: (api.min_version, api.max_version)
                                         for api in versions.api_keys}  # type: ignore[attr-defined]
                    self.node_ids = tuple(sorted(b.node_id for b in metadata.brokers))  # type: ignore[attr-defined]
                    return self
            except (OSError, AssertionError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster at {self.bootstrap} is not ready after {timeout_s} s")
            time.sleep(1)

    def supports(self, api_key: int, version: int = 0) -> bool:
        low, high = self.api_versions.get(api_key, (0, -1))
        return low <= version <= high

    def leader(self, topic: str, partition: int = 0) -> tuple[int, str, int]:
        """Node id, host and port of the partition's leader, as the cluster advertises it, once it serves it."""
        return serving_leader(self.host, self.port, topic, partition)


def serving_leader(host: str, port: int, topic: str, partition: int = 0, timeout_s: float = 30) -> tuple[int, str, int]:
    """The partition's leader as the Metadata answer of ``host:port`` names it (node id, host, port), once that
    address serves the partition. Kafka answers CreateTopics before the broker has taken the lead of the new
    partitions, and refuses them with NOT_LEADER_OR_FOLLOWER meanwhile: clients retry, raw frames must not
    come before. A ListOffsets answered without an error says the leader serves it (and writes nothing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.create_connection((host, port), timeout=10) as sock:
            metadata = call(sock, 3, 4, topics=[{"name": topic}], allow_auto_topic_creation=False)
        brokers = {b.node_id: (b.host, b.port) for b in metadata.brokers}  # type: ignore[attr-defined]
        leaders = [p.leader_id for t in metadata.topics for p in t.partitions  # type: ignore[attr-defined]
                   if p.partition_index == partition and p.leader_id in brokers]
        if leaders and _serves(*brokers[leaders[0]], topic, partition):
            return (leaders[0], *brokers[leaders[0]])
        if time.monotonic() > deadline:
            raise AssertionError(f"no leader serving {topic}-{partition} after {timeout_s} s (asked {host}:{port})")
        time.sleep(0.1)


def _serves(host: str, port: int, topic: str, partition: int) -> bool:
    with socket.create_connection((host, port), timeout=10) as sock:
        answer = call(sock, 2, 5, replica_id=-1, isolation_level=0, topics=[{"name": topic, "partitions": [
            {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}]}])
    return int(answer.topics[0].partitions[0].error_code) == 0  # type: ignore[attr-defined]


GROUP_RESOURCE = 32
"""``ConfigResource.Type.GROUP``: a group's configs (``share.auto.offset.reset``), IncrementalAlterConfigs."""

_READY = "ready: "
_MAX_WORKERS = 2
"""The most ``--workers`` a test runs."""


class ProxyProcess:
    """The proxy CLI in a child process; ``bootstrap`` is where clients connect."""

    def __init__(self, upstream: str, log_path: Path, *extra_args: str,
                 node_ids: tuple[int, ...], command: list[str] | None = None) -> None:
        """``command``: what runs the CLI, when not ``proxy_command()``."""
        self.port = free_port()
        self.bootstrap = f"{LOOPBACK}:{self.port}"
        self.broker_port_base = free_port_base(node_ids)
        self.metrics_port = free_port_base(range(_MAX_WORKERS))  # worker N serves metrics on metrics_port + N
        self.log_path = log_path
        self.state_dir = log_path.parent / f"{log_path.stem}-state"
        self.args = [*(command or proxy_command()), "--upstream", upstream, "--listen", self.bootstrap,
                     "--broker-port-base", str(self.broker_port_base), "--state-dir", str(self.state_dir),
                     "--metrics-listen", f"{LOOPBACK}:{self.metrics_port}", *extra_args]
        self.process: subprocess.Popen[bytes] | None = None
        self._starts_before = 0

    def start(self, timeout_s: float = 60.0) -> ProxyProcess:
        """Start (or restart, appending to the same log) and wait for this start's "ready"."""
        return self.launch().wait_ready(timeout_s)

    def launch(self) -> ProxyProcess:
        """Start (or restart, appending to the same log) without waiting for it: ``wait_ready`` does."""
        self._starts_before = self.log().count(_READY) if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(self.args, stdout=log_file, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self

    def wait_ready(self, timeout_s: float = 60.0) -> ProxyProcess:
        """Wait for the "ready" of the last ``launch``."""
        self.wait_for_log(_READY, timeout_s, occurrence=self._starts_before + 1)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout_s: float = 30.0, occurrence: int = 1) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            content = self.log()
            if content.count(text) >= occurrence:
                return content
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"proxy exited with {self.process.returncode}:\n{content}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not in proxy log after {timeout_s} s:\n{content}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


def admin_config(directory: Path, *principals: str) -> tuple[str, str]:
    """Proxy flags naming ``principals`` (default ``User:ANONYMOUS``) in ``[admin]``: without them no
    client may use AlterClientQuotas or DescribeClientQuotas."""
    path = directory / "admin.toml"
    names = ", ".join(f'"{principal}"' for principal in principals or ("User:ANONYMOUS",))
    path.write_text(f"[admin]\nprincipals = [{names}]\n")
    return "--config", str(path)


def encode_request(api_key: int, api_version: int, correlation_id: int = 1, client_id: str = "raw-test",
                   **fields: object) -> bytes:
    from protocol.apis import request_class
    from protocol.codecs import build

    request = build(request_class(api_key)[api_version], dict(fields))
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


def leader_port(proxy: ProxyProcess, topic: str, partition: int = 0) -> int:
    """The proxy's port for the partition's leader, from a Metadata answer through the proxy (raw
    Produce and Fetch frames must reach the leader when the cluster has several brokers)."""
    return serving_leader(LOOPBACK, proxy.port, topic, partition)[2]


def connect_to_leader(proxy: ProxyProcess, topic: str, timeout_s: float = 30) -> socket.socket:
    return socket.create_connection((LOOPBACK, leader_port(proxy, topic)), timeout=timeout_s)


def create_topic_on_one_broker(cluster: Cluster, topic: str, partitions: int = 1, node_id: int | None = None) -> None:
    """Every partition led by the same broker (``node_id``, default the first), so one raw Produce can
    carry several partitions."""
    create_topic_led_by(cluster, topic, [cluster.node_ids[0] if node_id is None else node_id] * partitions)


def create_topic_led_by(cluster: Cluster, topic: str, leaders: list[int]) -> None:
    """Partition i on broker ``leaders[i]`` alone (replication factor 1)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    admin.create_topics([NewTopic(topic, replica_assignments={i: [node] for i, node in enumerate(leaders)})])
    admin.close()
    for partition in range(len(leaders)):
        cluster.leader(topic, partition)


def record_batch(values: list[bytes], producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1) -> bytes:
    """One magic-2 record batch holding ``values`` (idempotent when ``producer_id`` is set)."""
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=max(1 << 16, 2 * sum(map(len, values))),
                                   producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)
    for value in values:
        builder.append(int(time.time() * 1000), None, value)
    builder.close()
    return bytes(builder.buffer())


def produce_request(topic: str, records: bytes | None, correlation_id: int = 1, acks: int = -1, version: int = 7,
                    partition: int = 0, client_id: str = "raw-test") -> bytes:
    """A whole Produce frame carrying ``records`` (one batch, or any bytes) for one partition."""
    partitions = [{"index": partition, "records": records}]
    return encode_request(0, version, correlation_id=correlation_id, client_id=client_id, transactional_id=None,
                          acks=acks, timeout_ms=30_000, topic_data=[{"name": topic, "partition_data": partitions}])


def read_frame(sock: socket.socket) -> bytes:
    """One whole frame without its size prefix; b"" when the peer closed."""
    prefix = _read_exactly(sock, 4)
    if not prefix:
        return b""
    return _read_exactly(sock, int.from_bytes(prefix, "big", signed=True))


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the peer closed instead of answering. A peer that closes with our unread requests still
    in its buffer resets the connection rather than ending it cleanly; both are a close."""
    try:
        return read_frame(sock) == b""
    except ConnectionResetError:
        return True


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return bytes(data)


def decoded_response(frame: bytes, api_key: int, api_version: int) -> Any:
    """A response frame (size prefix excluded) decoded as ``api_key``'s at ``api_version``: its header skipped,
    v1 for a flexible version but ApiVersions' (always v0)."""
    from protocol.apis import is_flexible_request
    from protocol.codecs import decode_response
    from protocol.header import response_header_length

    flexible = is_flexible_request(api_key, api_version) and api_key != 18
    return decode_response(api_key, api_version, memoryview(frame)[response_header_length(frame, flexible):])


def answer_to(sock: socket.socket, api_key: int, api_version: int) -> Any:
    """The next response on ``sock``, decoded as ``api_key``'s at ``api_version`` (AssertionError if closed)."""
    frame = read_frame(sock)
    assert frame, "the connection closed"
    return decoded_response(frame, api_key, api_version)


def call_with_body(sock: socket.socket, api_key: int, api_version: int, body: bytes) -> Any:
    """Send one request of a non-flexible version whose body is written byte by byte (as no encoder writes it), and
    return its decoded response."""
    header = api_key.to_bytes(2, "big") + api_version.to_bytes(2, "big") + (9).to_bytes(4, "big") + b"\x00\x03raw"
    sock.sendall((len(header) + len(body)).to_bytes(4, "big") + header + body)
    return decoded_response(read_frame(sock), api_key, api_version)


def call(sock: socket.socket, api_key: int, api_version: int, correlation_id: int = 1, client_id: str = "raw-test",
         **fields: object) -> object:
    """Send one request on ``sock`` and return its decoded response (AssertionError if closed)."""
    sock.sendall(encode_request(api_key, api_version, correlation_id, client_id, **fields))
    return answer_to(sock, api_key, api_version)


COORDINATOR_LOAD_IN_PROGRESS = 14


def new_producer_id(sock: socket.socket, timeout_s: float = 30.0, transactional_id: str | None = None,
                    transaction_timeout_ms: int = 60_000) -> Any:
    """An idempotent (or ``transactional_id``'s) producer's InitProducerId answer on ``sock``. A Kafka broker answers
    COORDINATOR_LOAD_IN_PROGRESS until its controller has given it a block of IDs (at its first
    producer, and whenever a block runs out before the next arrived): asked again, as Kafka's producers do."""
    from protocol.apis import Api

    deadline = time.monotonic() + timeout_s
    while True:
        answer = call(sock, Api.INIT_PRODUCER_ID, 4, transactional_id=transactional_id,
                      transaction_timeout_ms=transaction_timeout_ms, producer_id=-1, producer_epoch=-1)
        if answer.error_code != COORDINATOR_LOAD_IN_PROGRESS:  # type: ignore[attr-defined]
            return answer
        assert time.monotonic() < deadline, f"no producer ID after {timeout_s} s"
        time.sleep(0.005)


def wait_until(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll ``condition`` until it holds, failing the test after ``timeout_s``: often at first (most waits end within
    a fraction of a second), then every 0.2 s (a long wait's polls stay light on a busy machine)."""
    deadline = time.monotonic() + timeout_s
    pause_s = 0.02
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(pause_s)
        pause_s = min(0.2, pause_s * 1.5)


def read_to_end(bootstrap: str, topic: str, timeout_s: float = 60, **settings: Any) -> list[Any]:
    """Every record of ``topic`` up to the end offsets it has when asked, read through ``bootstrap`` with
    kafka-python (``settings``: its consumer's, for TLS or SASL), each partition in order. It stops at those
    offsets: no idle ``consumer_timeout_ms`` at the end, which cost every such read its whole length."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                             **settings)
    try:
        wait_until(lambda: consumer.partitions_for_topic(topic), timeout_s, f"the partitions of {topic}")
        partitions = [TopicPartition(topic, partition) for partition in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        records: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(partition) < ends[partition] for partition in partitions):
            assert time.monotonic() < deadline, f"{topic} not read to its end offsets {ends} in {timeout_s} s"
            for fetched in consumer.poll(timeout_ms=500).values():
                records.extend(fetched)
        return records
    finally:
        consumer.close()


@dataclass(frozen=True)
class QuotaModel:
    """Kafka's schedule for clients that come back the moment their throttle ends (none can be faster)."""

    elapsed_s: float
    """From the first charge to the last: a lower bound for any real client's time."""
    throttle_ms: int
    """The throttles of every response together: an upper bound, as a client that comes back later finds a
    lower rate and gets less."""


def kafka_quota_model(bytes_per_connection: list[list[int]], quota_bytes_per_s: float,
                      window_num: int = 11, window_size_s: float = 1.0, fetch: bool = False) -> QuotaModel:
    """When a Kafka broker would send the last response to connections charging one quota, each read one request
    at a time: a request is read only after the previous response was sent and its throttle has run out
    (``SocketServer`` mutes the channel), computed with the project's own rate (Kafka's ``SampledStat``). Each
    connection is muted for its own throttle; the next charge is the connection ready first,
    connections ready together taking turns (clients running side by side). ``fetch``: Kafka's Fetch,
    where a response that would be throttled is answered empty, its bytes un-recorded, and the same
    bytes asked for again once the throttle has run out."""
    from quotas.config import Window
    from quotas.rate import SampledRate, rate_throttle_ms

    window = Window(window_num, window_size_s)
    rate = SampledRate()
    start_ms = 1_000_000_000
    ready_ms = [start_ms] * len(bytes_per_connection)
    remaining = [list(sizes) for sizes in bytes_per_connection]
    charged = [0] * len(bytes_per_connection)
    answered_ms = start_ms
    throttled_ms = 0
    while any(remaining):
        connection = min((i for i, sizes in enumerate(remaining) if sizes), key=lambda i: (ready_ms[i], charged[i]))
        now_ms = answered_ms = ready_ms[connection]
        size = remaining[connection].pop(0)
        rate.record(size, now_ms, window)
        charged[connection] += 1
        measured, window_ms = rate.measure_with_window(now_ms, window)
        throttle_ms = rate_throttle_ms(measured, quota_bytes_per_s, window_ms) if measured > quota_bytes_per_s else 0
        if throttle_ms:
            ready_ms[connection] = now_ms + throttle_ms
            throttled_ms += throttle_ms
            if fetch:
                rate.record(-size, now_ms, window)
                remaining[connection].insert(0, size)
    return QuotaModel((answered_ms - start_ms) / 1000, throttled_ms)


class TcpRelay:
    """A loopback TCP relay to a broker, for putting a slow or vanishing hop (or a load balancer) before it.

    ``response_delay_s`` holds each chunk coming back from the target for that long. ``stop`` closes
    the listening socket and every relayed connection.
    """

    def __init__(self, target_host: str, target_port: int, response_delay_s: float = 0.0) -> None:
        self._target = (target_host, target_port)
        self._delay_s = response_delay_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                server = socket.create_connection(self._target)
            except OSError:
                return
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, 0.0), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, self._delay_s), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, delay_s: float) -> None:
        try:
            while chunk := source.recv(1 << 16):
                if delay_s:
                    time.sleep(delay_s)
                sink.sendall(chunk)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread; close alone would not
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
