"""Pass-through benchmark: one Apache Kafka node measured directly and through this proxy, in one run.
Writes bench/results.json (``make bench``).

(a) producer throughput: confluent-kafka, 1 KB records, large batches, idempotent
(b) produce latency p50/p99: one request in flight, acks=1, 100-byte records (raw socket)
(c) produce request rate: 16 connections pipelining small requests (raw sockets, uvloop)
(d) proxy resident memory with 1000 idle client connections
(e) throughput through the proxy with quotas configured but not binding, against no quotas
(f) consumer throughput: confluent-kafka reading 1 KB records, direct and through the proxy with a
    consumer quota configured but not binding; the quota proxy's CPU per MB in both directions
(h) Kafka's own ProducerPerformance, direct and through the quota proxy while another client's
    produce quota binds on it
Kroxylicious (``bench/kroxylicious.py``), a pass-through virtual cluster, beside the proxy in (a), (b),
(f) and (h), with its CPU per MB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import uvloop
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.memory_records import MemoryRecordsBuilder

from bench.kroxylicious import KroxyliciousProcess
from bench.report import write_results
from bench.rounds import rotated
from proxy.dev.apache_kafka import KafkaCluster
from tests.fidelity import java_tool
from tests.support import ProxyProcess, encode_request, read_frame

PRODUCE = 0
# Every measured client is under a byte-rate and a producer-ID quota that it never reaches, so the whole
# enforcement path runs (size charged, every batch header scanned, PIDs checked) without throttling; one
# more client (BOUND_CLIENT) has a quota that binds.
QUOTAS = """
[[quota]]
user = "<default>"
producer_byte_rate = 100000000000
consumer_byte_rate = 100000000000
producer_ids_rate = 1000

[[quota]]
user = "<default>"
client-id = "bench-bound"
producer_byte_rate = 1000000
"""
BOUND_CLIENT = "bench-bound"
"""A producer beside the measured ones whose quota binds: the quota proxy throttles it all along (h)."""


ClientSettings = dict[str, Any]
"""librdkafka settings beyond the bootstrap servers (e.g. TLS)."""


def create_topic(bootstrap: str, partitions: int = 1, client: ClientSettings | None = None,
                 prefix: str = "bench-") -> str:
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})  # must outlive the result
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def throughput_mb_s(bootstrap: str, records: int, record_bytes: int = 1024, client: ClientSettings | None = None
                    ) -> float:
    topic = create_topic(bootstrap, client=client)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 20, "batch.size": 1_000_000, "batch.num.messages": 100_000,
                         "queue.buffering.max.kbytes": 1_048_576, "compression.type": "none", **(client or {})})
    started = time.perf_counter()
    produce_all(producer, topic, records, record_bytes)
    elapsed = time.perf_counter() - started
    delete_topic(bootstrap, topic, client)
    return records * record_bytes / elapsed / 1e6


def fill_topic(bootstrap: str, records: int, record_bytes: int = 1024) -> str:
    topic = create_topic(bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576})
    produce_all(producer, topic, records, record_bytes)
    return topic


def produce_all(producer: Producer, topic: str, records: int, record_bytes: int) -> None:
    payload = b"x" * record_bytes
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, payload, partition=0)
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(120) != 0:
        raise RuntimeError("producer did not deliver everything")


def consume_mb_s(bootstrap: str, topic: str, records: int, record_bytes: int = 1024,
                 client: ClientSettings | None = None) -> float:
    """Read the topic from the start with librdkafka's default fetch sizes, timed from the first
    records received to the last: the consumer's start-up (about half a second, the same through the
    proxy, mostly librdkafka's own) is latency, which (b) measures."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, **(client or {})})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    count = first_count = 0
    started = 0.0
    while count < records:
        messages = consumer.consume(10_000, timeout=5)
        if not messages:
            raise RuntimeError(f"no records after {count} of {records}")
        count += sum(1 for message in messages if message.error() is None)
        if not started:
            started, first_count = time.perf_counter(), count
    elapsed = time.perf_counter() - started
    consumer.close()
    return (records - first_count) * record_bytes / elapsed / 1e6


class CpuPerMb:
    """A process's CPU seconds per MB moved, over the measurements wrapped by ``measure``."""

    def __init__(self, process: psutil.Process) -> None:
        self._process = process
        self.cpu_s = 0.0
        self.mb = 0.0

    def measure(self, mb: float, run: Any) -> Any:
        before = self._process.cpu_times()
        result = run()
        after = self._process.cpu_times()
        self.cpu_s += (after.user - before.user) + (after.system - before.system)
        self.mb += mb
        return result

    @property
    def ms_per_mb(self) -> float:
        return 1000 * self.cpu_s / self.mb


def measured_cpu(measure: Callable[[str], float], mb: float, cpus: dict[str, CpuPerMb]) -> Callable[[str], float]:
    """``measure`` of a target, its CPU counted when ``cpus`` names the target's bootstrap."""

    def run(bootstrap: str) -> float:
        cpu = cpus.get(bootstrap)
        return cpu.measure(mb, lambda: measure(bootstrap)) if cpu else measure(bootstrap)
    return run


_PERFORMANCE_TOTAL = re.compile(r"^(\d+) records sent, [\d.]+ records/sec \(([\d.]+) MB/sec\), [\d.]+ ms avg latency, "
                                r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, (\d+) ms 99th", re.M)


def producer_performance_mb_s(bootstrap: str, records: int, p99_ms: list[float], *properties: str,
                              client: ClientSettings | None = None) -> float:
    """Kafka's ``ProducerPerformance`` with (a)'s producer settings (and Java client ``properties`` such as
    TLS's; ``client`` is the same for librdkafka, to create the topic): its MB/s (MiB, as the tool counts),
    and its per-record p99 appended to ``p99_ms`` (queueing at full speed, not a round trip)."""
    topic = create_topic(bootstrap, client=client)
    output = java_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
                       "--record-size", "1024", "--throughput", "-1", "--command-property",
                       f"bootstrap.servers={bootstrap}", "acks=all", "enable.idempotence=true", "linger.ms=20",
                       "batch.size=1000000", "buffer.memory=268435456", "compression.type=none", *properties)
    delete_topic(bootstrap, topic, client=client)
    total = _PERFORMANCE_TOTAL.search(output)
    if total is None or int(total.group(1)) != records:
        raise RuntimeError(f"ProducerPerformance did not report {records} records:\n{output[-2000:]}")
    p99_ms.append(float(total.group(3)))
    return float(total.group(2))


class BoundProducer:
    """``BOUND_CLIENT`` producing through the quota proxy as fast as it is let, on a thread, while the
    measured clients run: its quota binds (the proxy throttles it; ``throttles`` counts librdkafka's
    throttle events)."""

    def __init__(self, bootstrap: str) -> None:
        self.throttles = 0
        self.delivered = 0
        self._topic = create_topic(bootstrap)
        self._bootstrap = bootstrap
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bound-producer", daemon=True)

    def _on_throttle(self, event: Any) -> None:
        if event.throttle_time > 0:
            self.throttles += 1

    def _on_delivery(self, error: Any, _message: Any) -> None:
        if error is None:
            self.delivered += 1

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self._bootstrap, "client.id": BOUND_CLIENT, "linger.ms": 20,
                             "queue.buffering.max.kbytes": 8192, "throttle_cb": self._on_throttle})
        payload = b"b" * 1024
        while not self._stop.is_set():
            try:
                producer.produce(self._topic, payload, on_delivery=self._on_delivery)
            except BufferError:
                producer.poll(0.05)
        producer.flush(60)

    def __enter__(self) -> BoundProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)
        delete_topic(self._bootstrap, self._topic)


def delete_topic(bootstrap: str, topic: str, client: ClientSettings | None = None) -> None:
    """Every round starts from the same state: an empty broker, whose page cache holds no earlier round."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    admin.delete_topics([topic])[topic].result(30)


def produce_frame(topic: str, value_bytes: int, acks: int, correlation_id: int = 1) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(int(time.time() * 1000), None, b"v" * value_bytes)
    builder.close()
    data = ProduceRequestParts(topic, bytes(builder.buffer()))
    return encode_request(PRODUCE, 7, correlation_id=correlation_id, transactional_id=None, acks=acks,
                          timeout_ms=30_000, topic_data=data)


def ProduceRequestParts(topic: str, records: bytes) -> list[Any]:  # noqa: N802 (mirrors kafka-python names)
    from kafka.protocol.producer import ProduceRequest

    partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)
    return [ProduceRequest.TopicProduceData(name=topic, partition_data=[partition])]


def one_at_a_time_us(bootstrap: str, frame: bytes, requests: int, warm_up: int = 50) -> list[float]:
    """Microseconds from each request's first byte sent to its answer's last byte read, one request in flight on
    one connection (after ``warm_up`` requests not counted)."""
    host, port = bootstrap.split(":")
    samples = []
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(warm_up):
            sock.sendall(frame)
            read_frame(sock)
        for _ in range(requests):
            started = time.perf_counter_ns()
            sock.sendall(frame)
            read_frame(sock)
            samples.append((time.perf_counter_ns() - started) / 1000)
    return samples


def latency_samples_us(bootstrap: str, topic: str, requests: int) -> list[float]:
    return one_at_a_time_us(bootstrap, produce_frame(topic, 100, acks=1), requests)


def latency_percentiles(targets: dict[str, str], rounds: int, requests_per_round: int) -> dict[str, Any]:
    """One request in flight; samples pooled over interleaved rounds, as for the other figures."""
    topics = {name: create_topic(bootstrap) for name, bootstrap in targets.items()}
    pooled: dict[str, list[float]] = {name: [] for name in targets}
    names = list(targets)
    for round_index in range(rounds):
        for name in rotated(names, round_index):
            pooled[name].extend(latency_samples_us(targets[name], topics[name], requests_per_round))
    for name, topic in topics.items():
        delete_topic(targets[name], topic)
    figures = {}
    for name, samples in pooled.items():
        samples.sort()
        figures[name] = {"p50_us": samples[len(samples) // 2], "p99_us": samples[int(len(samples) * 0.99)],
                         "mean_us": statistics.fmean(samples), "samples": len(samples)}
    return figures


class _Pipeliner(asyncio.Protocol):
    """Keeps ``depth`` requests in flight once started; counts answers by their size prefixes."""

    def __init__(self, frame: bytes, depth: int, done: asyncio.Future[None]) -> None:
        self._frame, self._depth, self.done = frame, depth, done
        self._deadline = 0.0
        self._buffer = bytearray()
        self.responses = 0
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def start(self, deadline: float) -> None:
        """Send requests until ``deadline``, then be done at the next answer."""
        self._deadline = deadline
        assert self._transport is not None
        self._transport.write(self._frame * self._depth)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        complete = 0
        pos = 0
        while len(self._buffer) - pos >= 4:
            end = pos + 4 + int.from_bytes(self._buffer[pos:pos + 4], "big")
            if end > len(self._buffer):
                break
            complete += 1
            pos = end
        del self._buffer[:pos]
        self.responses += complete
        assert self._transport is not None
        if time.perf_counter() < self._deadline:
            self._transport.write(self._frame * complete)
        elif not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(exc or ConnectionError("closed"))


def pipelined_rate(bootstrap: str, frame: bytes, connections: int, depth: int, seconds: float) -> float:
    """Answers a second with ``depth`` requests (``frame``) kept in flight on each of ``connections`` connections,
    all opened before the clock starts."""
    host, port = bootstrap.split(":")

    async def run() -> float:
        loop = asyncio.get_running_loop()
        pipeliners = []
        for _ in range(connections):
            pipeliner = _Pipeliner(frame, depth, loop.create_future())
            await loop.create_connection(lambda: pipeliner, host, int(port))  # noqa: B023 (called at once)
            pipeliners.append(pipeliner)
        started = time.perf_counter()
        for pipeliner in pipeliners:
            pipeliner.start(started + seconds)
        await asyncio.gather(*(pipeliner.done for pipeliner in pipeliners))
        return sum(pipeliner.responses for pipeliner in pipeliners) / (time.perf_counter() - started)

    return uvloop.run(run())


def request_rate(bootstrap: str, connections: int, depth: int, seconds: float) -> float:
    topic = create_topic(bootstrap)
    rate = pipelined_rate(bootstrap, produce_frame(topic, 100, acks=1), connections, depth, seconds)
    delete_topic(bootstrap, topic)
    return rate


def idle_connections_rss_mb(proxy: ProxyProcess, connections: int) -> dict[str, float]:
    assert proxy.process is not None
    process = psutil.Process(proxy.process.pid)
    before = process.memory_info().rss / 1e6
    sockets = []
    try:
        for _ in range(connections):
            sock = socket.create_connection(("127.0.0.1", proxy.port))
            sockets.append(sock)
        time.sleep(2)  # let the proxy open every upstream connection
        open_connections = len(process.net_connections(kind="tcp"))
        after = process.memory_info().rss / 1e6
    finally:
        for sock in sockets:
            sock.close()
    return {"rss_before_mb": before, "rss_with_idle_mb": after, "proxy_tcp_sockets": open_connections}


def interleaved_medians(targets: dict[str, str], rounds: int, measure: Any) -> dict[str, Any]:
    """Measure every target once per round, rotating the order; report each target's median.

    On a 2-core machine the broker, the proxy and the load generator share the CPUs, so single
    runs swing by 20% or more; interleaving spreads any drift over all targets alike.
    """
    samples: dict[str, list[float]] = {name: [] for name in targets}
    names = list(targets)
    for round_index in range(rounds):
        for name in rotated(names, round_index):
            samples[name].append(measure(targets[name]))
    return {name: {"median": statistics.median(values), "runs": values} for name, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/results.json")
    parser.add_argument("--records", type=int, default=200_000, help="records for (a)")
    parser.add_argument("--latency-requests", type=int, default=1_000, help="(b): per target per round")
    parser.add_argument("--rate-seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=5, help="(a) and (c): interleaved runs per target")
    parser.add_argument("--idle-connections", type=int, default=1000)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="kqp-bench-"))
    results: dict[str, Any] = {
        "machine": {"cpus": psutil.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "settings": vars(args),
    }
    with KafkaCluster(log_directory=workdir) as broker, KroxyliciousProcess(broker.bootstrap, workdir) as kroxylicious:
        ours = ProxyProcess(broker.bootstrap, workdir / "proxy.log", "--log-level", "WARNING",
                            node_ids=broker.broker_ids).start()
        quotas = workdir / "quotas.toml"
        quotas.write_text(QUOTAS)
        with_quotas = ProxyProcess(broker.bootstrap, workdir / "proxy-quotas.log", "--log-level", "WARNING",
                                   "--quota-file", str(quotas), node_ids=broker.broker_ids).start()
        assert ours.process is not None and with_quotas.process is not None and kroxylicious.process is not None
        proxies = {name: (bootstrap, psutil.Process(pid))
                   for name, bootstrap, pid in (("proxy", ours.bootstrap, ours.process.pid),
                                                ("proxy_with_quotas", with_quotas.bootstrap, with_quotas.process.pid),
                                                ("kroxylicious", kroxylicious.bootstrap, kroxylicious.process.pid))}
        cpu_by_figure: dict[str, dict[str, CpuPerMb]] = {}

        def cpu_of(figure: str, *names: str) -> dict[str, CpuPerMb]:
            """Fresh CPU meters of the named proxies for one figure, by their bootstraps."""
            cpu_by_figure[figure] = {name: CpuPerMb(proxies[name][1]) for name in names}
            return {proxies[name][0]: meter for name, meter in cpu_by_figure[figure].items()}

        targets = {"direct": broker.bootstrap, "proxy": ours.bootstrap, "kroxylicious": kroxylicious.bootstrap}
        mb = args.records * 1024 / 1e6
        try:
            def record(name: str, figures: dict[str, Any]) -> None:
                results[name] = figures
                print(name, json.dumps(figures), file=sys.stderr, flush=True)

            record("a_throughput_mb_s", interleaved_medians(targets, args.rounds, measured_cpu(
                lambda b: throughput_mb_s(b, args.records), mb, cpu_of("a", "proxy", "kroxylicious"))))
            record("b_latency_us", latency_percentiles(targets, args.rounds, args.latency_requests))
            record("c_requests_per_s", interleaved_medians(
                {"direct": broker.bootstrap, "proxy": ours.bootstrap}, args.rounds,
                lambda b: request_rate(b, 16, 8, args.rate_seconds)))
            results["d_idle_connections"] = idle_connections_rss_mb(ours, args.idle_connections)
            record("e_quotas_not_binding_mb_s", interleaved_medians(
                {"proxy": ours.bootstrap, "proxy_with_quotas": with_quotas.bootstrap}, args.rounds, measured_cpu(
                    lambda b: throughput_mb_s(b, args.records), mb, cpu_of("e", "proxy_with_quotas"))))
            filled = fill_topic(broker.bootstrap, args.records)
            record("f_consume_mb_s", interleaved_medians(
                {"direct": broker.bootstrap, "proxy_with_quotas": with_quotas.bootstrap,
                 "kroxylicious": kroxylicious.bootstrap}, args.rounds, measured_cpu(
                    lambda b: consume_mb_s(b, filled, args.records), mb,
                    cpu_of("f", "proxy_with_quotas", "kroxylicious"))))
            p99_ms: dict[str, list[float]] = {}
            with BoundProducer(with_quotas.bootstrap) as bound:
                performance_targets = {"direct": broker.bootstrap, "proxy_with_quotas": with_quotas.bootstrap,
                                       "kroxylicious": kroxylicious.bootstrap}
                record("h_producer_performance_mb_s", interleaved_medians(
                    performance_targets, args.rounds, measured_cpu(
                        lambda b: producer_performance_mb_s(b, args.records, p99_ms.setdefault(b, [])), mb,
                        cpu_of("h", "proxy_with_quotas", "kroxylicious"))))
            results["h_producer_performance_p99_ms"] = {
                name: statistics.median(p99_ms[bootstrap]) for name, bootstrap in performance_targets.items()}
            results["h_bound_client"] = {"throttle_events": bound.throttles, "records_delivered": bound.delivered}
            results["cpu_ms_per_mb"] = {figure: {name: meter.ms_per_mb for name, meter in meters.items()}
                                        for figure, meters in cpu_by_figure.items()}
        finally:
            ours.stop()
            with_quotas.stop()

    a = {target: figures["median"] for target, figures in results["a_throughput_mb_s"].items()}
    c = {target: figures["median"] for target, figures in results["c_requests_per_s"].items()}
    f = {target: figures["median"] for target, figures in results["f_consume_mb_s"].items()}
    h = {target: figures["median"] for target, figures in results["h_producer_performance_mb_s"].items()}
    b = results["b_latency_us"]
    cpu_ms = results["cpu_ms_per_mb"]
    results["ratios"] = {
        "a_throughput_proxy_vs_direct": a["proxy"] / a["direct"],
        "a_throughput_kroxylicious_vs_direct": a["kroxylicious"] / a["direct"],
        "b_added_p50_us": b["proxy"]["p50_us"] - b["direct"]["p50_us"],
        "b_added_p99_us": b["proxy"]["p99_us"] - b["direct"]["p99_us"],
        "b_kroxylicious_added_p50_us": b["kroxylicious"]["p50_us"] - b["direct"]["p50_us"],
        "b_kroxylicious_added_p99_us": b["kroxylicious"]["p99_us"] - b["direct"]["p99_us"],
        "c_rate_proxy_vs_direct": c["proxy"] / c["direct"],
        "d_rss_mb_with_1000_idle": results["d_idle_connections"]["rss_with_idle_mb"],
        "e_throughput_with_quotas_vs_proxy": (results["e_quotas_not_binding_mb_s"]["proxy_with_quotas"]["median"]
                                              / results["e_quotas_not_binding_mb_s"]["proxy"]["median"]),
        "f_consume_with_quotas_vs_direct": f["proxy_with_quotas"] / f["direct"],
        "f_consume_kroxylicious_vs_direct": f["kroxylicious"] / f["direct"],
        "h_producer_performance_with_quotas_vs_direct": h["proxy_with_quotas"] / h["direct"],
        "h_producer_performance_kroxylicious_vs_direct": h["kroxylicious"] / h["direct"],
        "cpu_ms_per_mb_produce": {"proxy": cpu_ms["a"]["proxy"], "proxy_with_quotas": cpu_ms["e"]["proxy_with_quotas"],
                                  "kroxylicious": cpu_ms["a"]["kroxylicious"]},
        "cpu_ms_per_mb_consume": {"proxy_with_quotas": cpu_ms["f"]["proxy_with_quotas"],
                                  "kroxylicious": cpu_ms["f"]["kroxylicious"]},
    }
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
