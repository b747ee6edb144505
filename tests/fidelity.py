"""One workload twice on one Apache Kafka node: against Kafka's own quota (the quota set on the broker,
no proxy), and through the proxy (the same quota in the proxy, none on the broker). Used by
``tests/integration/test_fidelity.py`` (short runs, asserted) and ``bench/fidelity.py`` (the table).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from protocol.apis import Api
from protocol.errors import THROTTLING_QUOTA_EXCEEDED
from tests.support import GROUP_RESOURCE, Cluster, call, produce_request, read_frame, record_batch, serving_leader

DEFAULT = None
"""An entity's name for the default of its type (``<default>`` in the quota file)."""


@dataclass(frozen=True)
class Quota:
    """One quota: ``entity`` as (type, name) pairs, a name of None for the type's default."""

    entity: tuple[tuple[str, str | None], ...]
    key: str
    value: float

    def toml(self) -> str:
        """The proxy's quota file holding this quota alone."""
        lines = ["[[quota]]"]
        for entity_type, name in self.entity:
            lines.append(f'{entity_type} = "{"<default>" if name is None else name}"')
        lines.append(f"{self.key} = {self.value:g}")
        return "\n".join(lines) + "\n"

    def components(self) -> list[dict[str, object]]:
        return [{"entity_type": entity_type, "entity_name": name} for entity_type, name in self.entity]


def _alter(cluster: Cluster, quota: Quota, remove: bool) -> None:
    with socket.create_connection((cluster.host, cluster.port), timeout=30) as sock:
        answer = call(sock, Api.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
            {"entity": quota.components(), "ops": [{"key": quota.key, "value": quota.value, "remove": remove}]}])
        assert [entry.error_code for entry in answer.entries] == [0], answer  # type: ignore[attr-defined]
        deadline = time.monotonic() + 30
        while _described(sock, quota) != (None if remove else quota.value):
            assert time.monotonic() < deadline, f"the broker does not describe {quota} after 30 s"
            time.sleep(0.05)


def _described(sock: socket.socket, quota: Quota) -> float | None:
    answer = call(sock, Api.DESCRIBE_CLIENT_QUOTAS, 1, strict=True, components=[
        {"entity_type": entity_type, "match_type": 1 if name is None else 0, "match": name}
        for entity_type, name in quota.entity])
    for entry in answer.entries or []:  # type: ignore[attr-defined]
        for value in entry.values:
            if value.key == quota.key:
                return float(value.value)
    return None


QUOTAS_SETTLE_S = 0.5
"""After the broker describes the last quota of a change: the describe reads the metadata image, and the quota
managers follow it in the same publisher, which applies a change's records in order."""


@contextmanager
def broker_quotas(cluster: Cluster, quotas: tuple[Quota, ...]) -> Iterator[None]:
    """``quotas`` set on the broker itself, removed after (and gone from its quota managers on leaving)."""
    for quota in quotas:
        _alter(cluster, quota, remove=False)
    time.sleep(QUOTAS_SETTLE_S)
    try:
        yield
    finally:
        for quota in quotas:
            _alter(cluster, quota, remove=True)
        time.sleep(QUOTAS_SETTLE_S)


def proxy_quota_file(directory: Path, quotas: tuple[Quota, ...]) -> str:
    path = directory / "fidelity-quotas.toml"
    path.write_text("".join(quota.toml() for quota in quotas))
    return str(path)


@dataclass
class Run:
    """What one side of a case measured."""

    started: float = field(default_factory=time.monotonic)
    events: list[tuple[float, int]] = field(default_factory=list)
    """(when, units) as the client saw them delivered: bytes acknowledged or fetched, mutations done."""
    throttles_ms: list[int] = field(default_factory=list)
    """``throttle_time_ms`` of every response, for clients that read them (raw frames)."""

    def delivered(self, units: int) -> None:
        self.events.append((time.monotonic(), units))

    @property
    def units(self) -> int:
        return sum(units for _, units in self.events)

    @property
    def elapsed_s(self) -> float:
        return self.events[-1][0] - self.started if self.events else 0.0

    def rate_after(self, fraction: float = 0.5) -> float:
        """Units per second over the last ``1 - fraction`` of the run: past the initial credit."""
        if not self.events:
            return 0.0
        since = self.started + self.elapsed_s * fraction
        later = [(at, units) for at, units in self.events if at > since]
        if not later:
            return 0.0
        return sum(units for _, units in later) / (self.events[-1][0] - since)

    def summary(self) -> dict[str, object]:
        return {"elapsed_s": round(self.elapsed_s, 3), "units": self.units,
                "rate_after_credit": round(self.rate_after(), 1), "throttles_ms": self.throttles_ms}


Workload = Callable[[str], Run]
"""Runs against the bootstrap address it is given and says what it measured."""


def raw_produce(topic: str, requests: int, batch_bytes: int, client_id: str, user: str | None = None) -> Workload:
    """One connection, one Produce (acks=1) at a time, sent as soon as the last was answered whatever its
    throttle (as librdkafka does): Kafka mutes the channel for the throttle, the proxy holds the request for it.
    Without ``user``: to the partition's leader; with it: a PLAIN login on the bootstrap connection first (one node:
    the leader)."""
    values = [bytes(1024)] * (batch_bytes // 1024)

    def run(bootstrap: str) -> Run:
        host, port = bootstrap.rsplit(":", 1)
        target = (host, int(port)) if user else serving_leader(host, int(port), topic)[1:]
        batch = record_batch(values)
        result = Run()
        with socket.create_connection(target, timeout=60) as sock:
            if user:
                _log_in(sock, user)
            for correlation_id in range(1, requests + 1):
                sock.sendall(produce_request(topic, batch, correlation_id, acks=1, client_id=client_id))
                answer = read_frame(sock)
                assert answer, "connection closed"
                result.throttles_ms.append(produce_throttle_ms(answer))
                result.delivered(len(batch))
        return result

    return run


def _log_in(sock: socket.socket, user: str) -> None:
    from proxy.security.sasl_messages import plain_token
    from tests.support import PASSWORDS

    assert call(sock, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0  # type: ignore[attr-defined]
    answer = call(sock, Api.SASL_AUTHENTICATE, 2, correlation_id=2, auth_bytes=plain_token(user, PASSWORDS[user]))
    assert answer.error_code == 0, answer  # type: ignore[attr-defined]


def produce_throttle_ms(frame: bytes) -> int:
    from protocol.codecs import decode_response
    from protocol.header import response_header_length

    body = memoryview(frame)[response_header_length(frame, False):]
    response = decode_response(Api.PRODUCE, 7, body)
    for topic in response.responses:  # type: ignore[attr-defined]
        for partition in topic.partition_responses:
            assert partition.error_code == 0, partition
    return int(response.throttle_time_ms)  # type: ignore[attr-defined]


RECORD = b"f" * 1024


def librdkafka_produce(topic: str, records: int, client_id: str) -> Workload:
    def run(bootstrap: str) -> Run:
        from confluent_kafka import Producer

        result = Run()
        failed: list[object] = []

        def acknowledged(error: object, message: object) -> None:
            if error is not None:
                failed.append(error)
            else:
                result.delivered(len(RECORD))

        producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                             "batch.size": 64 * 1024, "acks": 1})
        for _ in range(records):
            while True:
                try:
                    producer.produce(topic, RECORD, on_delivery=acknowledged)
                    break
                except BufferError:  # its queue is full: wait for acknowledgements, as an application does
                    producer.poll(0.05)
            producer.poll(0)
        assert producer.flush(180) == 0 and not failed, failed
        return result

    return run


def kafka_python_produce(topic: str, records: int, client_id: str) -> Workload:
    def run(bootstrap: str) -> Run:
        from kafka import KafkaProducer

        result = Run()
        producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=1, linger_ms=5,
                                 batch_size=64 * 1024)
        for _ in range(records):
            producer.send(topic, RECORD).add_callback(lambda _: result.delivered(len(RECORD)))
        producer.flush(timeout=180)
        producer.close()
        assert result.units == records * len(RECORD)
        return result

    return run


def aiokafka_produce(topic: str, records: int, client_id: str) -> Workload:
    def run(bootstrap: str) -> Run:
        import asyncio

        from aiokafka import AIOKafkaProducer

        async def produce() -> Run:
            result = Run()
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=1, linger_ms=5,
                                        max_batch_size=64 * 1024)
            await producer.start()
            try:
                pending = []
                for _ in range(records):
                    sent = await producer.send(topic, RECORD)
                    sent.add_done_callback(lambda _: result.delivered(len(RECORD)))
                    pending.append(sent)
                await asyncio.gather(*pending)
            finally:
                await producer.stop()
            return result

        return asyncio.run(produce())

    return run


def java_tool(main_class: str, *args: str, succeeds: bool | None = True, timeout_s: float = 300,
              system_properties: dict[str, str] | None = None, input_text: str | None = None) -> str:
    """Run one of Kafka's tools from the jars the launcher resolved: its standard output, or when it is expected to
    fail (``succeeds`` False), everything it printed; ``succeeds`` None: everything it printed, whatever its exit
    status (a tool that reports a failure and exits 0). ``system_properties``: the JVM's ``-D`` options;
    ``input_text``: its standard input."""
    import subprocess

    from proxy.dev.kafka_jars import ClassSharing, java_executable, kafka_libs

    properties = [f"-D{name}={value}" for name, value in (system_properties or {}).items()]
    libs = kafka_libs()
    sharing = ClassSharing(libs)
    succeeded = False
    try:
        done = subprocess.run([java_executable(), "-Xmx256m", *sharing.options, *properties, "-cp", f"{libs}/*",
                               main_class, *args], input=input_text, capture_output=True, text=True,
                              timeout=timeout_s)
        succeeded = done.returncode == 0
    finally:
        sharing.done(succeeded)
    printed = f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
    if succeeds:
        assert done.returncode == 0, f"{main_class} exited {done.returncode}:\n{printed}"
        return done.stdout
    assert succeeds is None or done.returncode != 0, f"{main_class} succeeded:\n{printed}"
    return printed


JAVA_SOURCES = Path(__file__).parent / "java"


def java_admin_create_topics(topic: str, topics: int, partitions: int, client_id: str) -> Workload:
    """Kafka's Java AdminClient (``tests/java/CreateTopics.java``) creating ``topics`` topics in one call, with its
    own retries: the ones refused with THROTTLING_QUOTA_EXCEEDED asked for again after the throttle. Timed by its
    own clock from the call (no JVM start-up in it)."""
    def run(bootstrap: str) -> Run:
        result = Run()
        output = java_tool(str(JAVA_SOURCES / "CreateTopics.java"), bootstrap, client_id, topic, str(topics),
                           str(partitions))
        created = sorted(int(ms) for ms in re.findall(r"^created (\d+) ", output, re.M))
        assert len(created) == topics, output
        result.events.extend((result.started + ms / 1000, partitions) for ms in created)
        return result

    return run


def producer_performance(topic: str, records: int, client_id: str) -> Workload:
    """Kafka's ``ProducerPerformance``: its report lines (every 5 s, and the total) as the delivery events."""

    def run(bootstrap: str) -> Run:
        result = Run()
        output = java_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                            "--num-records", str(records), "--record-size", str(len(RECORD)), "--throughput", "-1",
                            "--command-property", f"bootstrap.servers={bootstrap}", f"client.id={client_id}", "acks=1",
                            "linger.ms=5", "batch.size=65536")
        windows = [(int(sent), float(per_s)) for sent, per_s in
                   re.findall(r"^(\d+) records sent, ([\d.]+) records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
                              r"[\d.]+ ms max latency\.$", output, re.M)]
        total = re.search(r"^(\d+) records sent, ([\d.]+) records/sec", output.splitlines()[-1])
        assert total and int(total.group(1)) == records, output
        # the tool's own clock: each window's records over its rate, from when the producer was made
        result.events.clear()
        at = result.started
        for sent, per_s in windows:
            at += sent / per_s if per_s else 0
            result.events.append((at, sent * len(RECORD)))
        end = result.started + records / float(total.group(2))
        done = sum(sent for sent, _ in windows)
        result.events.append((max(end, at), (records - done) * len(RECORD)))
        return result

    return run


def fill(bootstrap: str, topic: str, records: int, partitions: int = 1) -> None:
    """``records`` numbered records of 1 KiB, round-robin over the partitions, written directly to the cluster
    (idempotent: a new topic's first batch may be refused and retried after later ones)."""
    from confluent_kafka import Producer

    failed: list[object] = []

    def acknowledged(error: object, _: object) -> None:
        if error is not None:
            failed.append(error)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 16 * 1024,
                         "enable.idempotence": True})
    for sequence in range(records):
        producer.produce(topic, f"{sequence:08d}".encode().ljust(len(RECORD), b"."), partition=sequence % partitions,
                         on_delivery=acknowledged)
        if sequence % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0 and not failed, failed


def raw_fetch(topic: str, records: int, client_id: str, max_bytes: int = 1 << 20) -> Workload:
    """One connection to the partition's leader, one Fetch at a time from where the last ended: a throttled
    empty answer (Kafka's) is asked again at the same offset, as consumers do."""
    from kafka.record import MemoryRecords

    from protocol.codecs import decode_response
    from protocol.header import response_header_length
    from tests.support import encode_request

    def run(bootstrap: str) -> Run:
        host, port = bootstrap.rsplit(":", 1)
        _, leader_host, leader_port = serving_leader(host, int(port), topic)
        result = Run()
        offset = 0
        correlation_id = 0
        with socket.create_connection((leader_host, leader_port), timeout=60) as sock:
            while offset < records:
                correlation_id += 1
                sock.sendall(encode_request(
                    Api.FETCH, 4, correlation_id=correlation_id, client_id=client_id, replica_id=-1,
                    max_wait_ms=500, min_bytes=1, max_bytes=max_bytes, isolation_level=0, topics=[
                        {"topic": topic, "partitions": [
                            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": max_bytes}]}]))
                frame = read_frame(sock)
                assert frame, "connection closed"
                response = decode_response(Api.FETCH, 4, memoryview(frame)[response_header_length(frame, False):])
                result.throttles_ms.append(int(response.throttle_time_ms))  # type: ignore[attr-defined]
                fetched = 0
                # Kafka answers a fetch it throttles with no partitions at all (``getThrottledResponse``)
                for partition in (p for topic in response.responses for p in topic.partitions):  # type: ignore[attr-defined]
                    assert partition.error_code == 0, partition
                    if not partition.records:
                        continue
                    batches = MemoryRecords(bytes(partition.records))
                    while (batch := batches.next_batch()) is not None:
                        for record in batch:
                            if record.offset >= offset:
                                offset = record.offset + 1
                                fetched += len(record.value or b"")
                result.delivered(fetched)
        return result

    return run


def librdkafka_consume(topic: str, records: int, client_id: str, partitions: int = 1) -> Workload:
    def run(bootstrap: str) -> Run:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        result = Run()
        consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"g-{client_id}",
                             "enable.auto.commit": False, "fetch.max.bytes": 1 << 20,
                             "max.partition.fetch.bytes": 1 << 20, "fetch.wait.max.ms": 500})
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        count = 0
        deadline = time.monotonic() + 300
        while count < records and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            count += 1
            result.delivered(len(message.value() or b""))
        consumer.close()
        assert count == records, f"{count} of {records} records"
        return result

    return run


def kafka_python_consume(topic: str, records: int, client_id: str, partitions: int = 1) -> Workload:
    def run(bootstrap: str) -> Run:
        from kafka import KafkaConsumer, TopicPartition

        result = Run()
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                                 fetch_max_bytes=1 << 20, max_partition_fetch_bytes=1 << 20, fetch_max_wait_ms=500)
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        count = 0
        deadline = time.monotonic() + 300
        while count < records and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=100).values():
                for record in batch:
                    count += 1
                    result.delivered(len(record.value or b""))
        consumer.close()
        assert count == records, f"{count} of {records} records"
        return result

    return run


def aiokafka_consume(topic: str, records: int, client_id: str, partitions: int = 1) -> Workload:
    def run(bootstrap: str) -> Run:
        import asyncio

        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def read() -> Run:
            result = Run()
            consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                                        fetch_max_bytes=1 << 20, max_partition_fetch_bytes=1 << 20)
            await consumer.start()
            count = 0
            try:
                consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
                await consumer.seek_to_beginning()
                async with asyncio.timeout(300):
                    while count < records:
                        for batch in (await consumer.getmany(timeout_ms=500)).values():
                            for record in batch:
                                count += 1
                                result.delivered(len(record.value or b""))
            finally:
                await consumer.stop()
            return result

        return asyncio.run(read())

    return run


def group_consume(topic: str, records: int, client_id: str, user: str, fill_bootstrap: str,
                  members: int = 2) -> Workload:
    """A consumer group of ``members`` librdkafka consumers logged in as ``user`` (PLAIN; the quota is the user's,
    shared by them), one partition each: they join while ``topic`` is empty, then ``records`` are written to it
    directly (at ``fill_bootstrap``), and the run is timed from then to the last record."""
    def run(bootstrap: str) -> Run:
        from confluent_kafka import Consumer

        from tests.support import PASSWORDS

        consumers = [Consumer({"bootstrap.servers": bootstrap, "client.id": f"{client_id}-{i}", "group.id": topic,
                               "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                               "sasl.username": user, "sasl.password": PASSWORDS[user], "enable.auto.commit": False,
                               "auto.offset.reset": "earliest", "fetch.max.bytes": 1 << 20,
                               "max.partition.fetch.bytes": 1 << 20, "fetch.wait.max.ms": 500})
                     for i in range(members)]
        try:
            for consumer in consumers:
                consumer.subscribe([topic])
            deadline = time.monotonic() + 90
            while not all(len(consumer.assignment()) == 1 for consumer in consumers):
                assert time.monotonic() < deadline, "the group did not settle with one partition per member"
                for consumer in consumers:
                    assert consumer.poll(0.1) is None  # nothing written yet
            result = Run()
            fill(fill_bootstrap, topic, records, partitions=members)
            count = 0
            deadline = time.monotonic() + 300
            while count < records and time.monotonic() < deadline:
                for consumer in consumers:
                    for message in consumer.consume(1000, 0.05):
                        assert message.error() is None, message.error()
                        count += 1
                        result.delivered(len(message.value() or b""))
            assert count == records, f"{count} of {records} records"
            return result
        finally:
            for consumer in consumers:
                consumer.close()

    return run


def consumer_performance(topic: str, records: int, client_id: str, partitions: int = 1) -> Workload:
    """Kafka's ``ConsumerPerformance``: elapsed and rate from its own report (fetch time, after the join)."""
    def run(bootstrap: str) -> Run:
        result = Run()
        output = java_tool("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
                            "--topic", topic, "--num-records", str(records), "--timeout", "60000", "--command-property",
                            f"client.id={client_id}", "fetch.max.bytes=1048576", "max.partition.fetch.bytes=1048576")
        lines = output.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
        header, values = lines[at:at + 2]
        assert len(header.split(",")) == len(values.split(",")), output
        report = dict(zip((name.strip() for name in header.split(",")), (v.strip() for v in values.split(",")),
                          strict=True))
        assert int(report["data.consumed.in.nMsg"]) >= records, output
        fetch_s = int(report["fetch.time.ms"]) / 1000
        result.events.append((result.started + fetch_s, int(report["data.consumed.in.nMsg"]) * len(RECORD)))
        return result

    return run


def share_consumer_performance(topic: str, records: int, client_id: str) -> Workload:
    """Kafka's ``ShareConsumerPerformance`` (KIP-932 share group), its group reading from the earliest offset: elapsed
    and rate from its own report (its fetch time)."""
    def run(bootstrap: str) -> Run:
        result = Run()
        group = f"share-{topic}"
        host, port = bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            altered = call(sock, Api.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[
                {"resource_type": GROUP_RESOURCE, "resource_name": group, "configs": [
                    {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}])
        assert [r.error_code for r in altered.responses] == [0], altered  # type: ignore[attr-defined]
        output = java_tool("org.apache.kafka.tools.ShareConsumerPerformance", "--bootstrap-server", bootstrap,
                           "--topic", topic, "--group", group, "--num-records", str(records), "--timeout", "60000",
                           "--command-property", f"client.id={client_id}", "fetch.max.bytes=1048576",
                           "max.partition.fetch.bytes=1048576")
        lines = output.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
        names = [name.strip() for name in lines[at].split(",")]
        values = next(line for line in lines[at + 1:] if len(line.split(",")) == len(names))
        report = dict(zip(names, (value.strip() for value in values.split(",")), strict=True))
        assert int(report["data.consumed.in.nMsg"]) >= records, output
        fetch_s = int(report["fetch.time.ms"]) / 1000
        result.events.append((result.started + fetch_s, int(report["data.consumed.in.nMsg"]) * len(RECORD)))
        return result

    return run


@dataclass(frozen=True)
class Case:
    """A workload and its quota; ``prepare`` makes a fresh topic for one side (and fills it to be read)."""

    name: str
    quotas: tuple[Quota, ...]
    workload: Callable[[str], Workload]
    """Given the side's topic, the workload to run."""
    prepare: Callable[[Cluster, str], None]
    logs_in: bool = False
    """Its clients log in (SASL PLAIN): Kafka's SASL listener, and a proxy inspecting logins in front of it."""


@dataclass(frozen=True)
class SideBySide:
    case: str
    kafka: Run
    proxy: Run

    @property
    def elapsed_ratio(self) -> float:
        return self.proxy.elapsed_s / self.kafka.elapsed_s

    @property
    def rate_ratio(self) -> float:
        return self.proxy.rate_after() / self.kafka.rate_after()

    def summary(self) -> dict[str, object]:
        return {"kafka": self.kafka.summary(), "proxy": self.proxy.summary(),
                "elapsed_ratio": round(self.elapsed_ratio, 3), "rate_ratio": round(self.rate_ratio, 3)}


def side_by_side(cluster: Cluster, case: Case, directory: Path) -> SideBySide:
    """``case`` against Kafka's own quota, then through a proxy holding it (the broker holding none). Both
    halves rely on the cluster holding no client quota but the case's: a shared one is left so by every test
    (``tests.cluster_state``)."""
    from tests.support import PASSWORDS, ProxyProcess

    topic = f"fidelity-{re.sub(r'[^A-Za-z0-9._-]+', '-', case.name)}-{int(time.time() * 1000) % 10**8}"
    case.prepare(cluster, f"{topic}-kafka")
    case.prepare(cluster, f"{topic}-proxy")
    upstream = cluster.bootstrap
    proxy_args: tuple[str, ...] = ()
    if case.logs_in:
        assert cluster.sasl_bootstrap is not None, "the cluster has no SASL listener"
        upstream = cluster.sasl_bootstrap
        login = directory / "inspect.toml"
        login.write_text('[upstream-sasl]\nmechanism = "SCRAM-SHA-512"\nusername = "quota-proxy"\n'
                         f'password = "{PASSWORDS["quota-proxy"]}"\n')
        proxy_args = ("--sasl-mode", "inspect", "--config", str(login))
    proxy = ProxyProcess(upstream, directory / f"proxy-{case.name}.log", "--quota-file",
                         proxy_quota_file(directory, case.quotas), *proxy_args, node_ids=cluster.node_ids)
    try:
        with broker_quotas(cluster, case.quotas):
            kafka = case.workload(f"{topic}-kafka")(upstream)
            proxy.launch()  # ready while the broker's quotas are taken away: its start-up in neither side's time
        proxy.wait_ready()
        proxied = case.workload(f"{topic}-proxy")(proxy.bootstrap)
    finally:
        if proxy.process is not None:
            proxy.stop()
    return SideBySide(case.name, kafka, proxied)


def new_topic(partitions: int = 1) -> Callable[[Cluster, str], None]:
    def prepare(cluster: Cluster, topic: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
        serving_leader(cluster.host, cluster.port, topic)

    return prepare


def filled_topic(records: int, partitions: int = 1) -> Callable[[Cluster, str], None]:
    def prepare(cluster: Cluster, topic: str) -> None:
        new_topic(partitions)(cluster, topic)
        fill(cluster.bootstrap, topic, records, partitions)

    return prepare



def raw_create_topics(topic: str, topics: int, partitions: int, version: int, client_id: str,
                      validate_only: bool = False) -> Workload:
    """One connection, one CreateTopics (one topic of ``partitions``) at a time. Strict versions (v6+): a topic
    refused with THROTTLING_QUOTA_EXCEEDED is asked again once its throttle has run out, as Kafka's Java
    AdminClient does; permissive ones (v5 and older) are created and throttled. ``validate_only``: nothing is
    created, only checked."""
    def run(bootstrap: str) -> Run:
        host, port = bootstrap.rsplit(":", 1)
        result = Run()
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            for number in range(topics):
                while True:
                    answer = call(sock, Api.CREATE_TOPICS, version, client_id=client_id, timeout_ms=30_000,
                                  validate_only=validate_only, topics=[
                                      {"name": f"{topic}-{number}", "num_partitions": partitions,
                                       "replication_factor": 1, "assignments": [], "configs": []}])
                    throttle_ms = int(answer.throttle_time_ms)  # type: ignore[attr-defined]
                    result.throttles_ms.append(throttle_ms)
                    error = answer.topics[0].error_code  # type: ignore[attr-defined]
                    if error != THROTTLING_QUOTA_EXCEEDED:
                        assert error == 0, answer
                        result.delivered(partitions)
                        break
                    time.sleep(throttle_ms / 1000)
        return result

    return run


def _mutate_until_admitted(sock: socket.socket, result: Run, api_key: int, version: int, client_id: str,
                           mutations: int, **fields: object) -> None:
    """Send one topic mutation; a strict refusal (THROTTLING_QUOTA_EXCEEDED) is asked again after its throttle."""
    while True:
        answer = call(sock, api_key, version, client_id=client_id, **fields)
        throttle_ms = int(answer.throttle_time_ms)  # type: ignore[attr-defined]
        result.throttles_ms.append(throttle_ms)
        results = (answer.responses if api_key == Api.DELETE_TOPICS  # type: ignore[attr-defined]
                   else answer.results)  # type: ignore[attr-defined]
        error = results[0].error_code
        if error != THROTTLING_QUOTA_EXCEEDED:
            assert error == 0, answer
            result.delivered(mutations)
            return
        time.sleep(throttle_ms / 1000)


def raw_create_partitions(topic: str, steps: int, added: int, version: int, client_id: str) -> Workload:
    """One topic grown by ``added`` partitions ``steps`` times, one CreatePartitions at a time (strict: v3+)."""
    def run(bootstrap: str) -> Run:
        host, port = bootstrap.rsplit(":", 1)
        result = Run()
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            for step in range(1, steps + 1):
                _mutate_until_admitted(sock, result, Api.CREATE_PARTITIONS, version, client_id, added,
                                       timeout_ms=30_000, validate_only=False, topics=[
                                           {"name": topic, "count": 1 + step * added, "assignments": None}])
        return result

    return run


def raw_delete_topics(topic: str, topics: int, partitions: int, version: int, client_id: str) -> Workload:
    """``topics`` topics of ``partitions`` (made by ``many_topics``), one DeleteTopics at a time (strict: v5+)."""
    def run(bootstrap: str) -> Run:
        host, port = bootstrap.rsplit(":", 1)
        result = Run()
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            for number in range(topics):
                _mutate_until_admitted(sock, result, Api.DELETE_TOPICS, version, client_id, partitions,
                                       timeout_ms=30_000, topic_names=[f"{topic}-{number}"])
        return result

    return run


def many_topics(topics: int, partitions: int) -> Callable[[Cluster, str], None]:
    def prepare(cluster: Cluster, topic: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        created = admin.create_topics([NewTopic(f"{topic}-{number}", partitions, 1) for number in range(topics)])
        for future in created.values():
            future.result(60)

    return prepare


CLIENT_IP = "127.0.0.2"
"""Where connection-rate cases connect from (any 127/8 address reaches loopback): the harness's own
connections, from 127.0.0.1, stay out of the quota."""


def connections(count: int) -> Workload:
    """New connections from ``CLIENT_IP`` one after another, each asking ApiVersions, until ``count`` were
    answered; one closed unanswered (a throttled connection, which Kafka closes once its throttle has run out)
    is made again at once."""
    from tests.support import encode_request

    def run(bootstrap: str) -> Run:
        host, port = bootstrap.rsplit(":", 1)
        result = Run()
        while result.units < count:
            with socket.create_connection((host, int(port)), timeout=60, source_address=(CLIENT_IP, 0)) as sock:
                sock.sendall(encode_request(Api.API_VERSIONS, 3, client_software_name="fidelity",
                                            client_software_version="1"))
                try:
                    answered = bool(read_frame(sock))
                except ConnectionResetError:
                    answered = False
            if answered:
                result.delivered(1)
            else:
                result.throttles_ms.append(-1)  # one closed unanswered
        return result

    return run


ENTITY_LEVELS = ("user + client-id", "user + default client-id", "user", "default user + client-id",
                 "default user + default client-id", "default user", "client-id", "default client-id")
"""Kafka's eight quota levels, highest precedence first (``ClientQuotaManager``)."""


def entity_case(level: str, client_id: str, requests: int) -> Case:
    """The quota at ``level`` 1 MiB/s and every level below it 8 MiB/s, for a raw producer logged in as alice with
    ``client_id``: resolving to the wrong level would be throttled far less. Kafka keeps a user-level quota's state
    per user, so the "default user" level logs in as bob (after the "user" level has drained alice's)."""
    mib = 1 << 20
    entities = [(("user", "alice"), ("client-id", client_id)), (("user", "alice"), ("client-id", DEFAULT)),
                (("user", "alice"),), (("user", DEFAULT), ("client-id", client_id)),
                (("user", DEFAULT), ("client-id", DEFAULT)), (("user", DEFAULT),), (("client-id", client_id),),
                (("client-id", DEFAULT),)]
    index = ENTITY_LEVELS.index(level)
    quotas = (Quota(entities[index], "producer_byte_rate", mib),
              *(Quota(entity, "producer_byte_rate", 8 * mib) for entity in entities[index + 1:]))
    user = "bob" if level == "default user" else "alice"
    return Case(f"entity: {level}", quotas,
                lambda topic: raw_produce(topic, requests, 64 * 1024, client_id, user=user), new_topic(), logs_in=True)
