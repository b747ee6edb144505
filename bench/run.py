"""Pass-through benchmark: one Apache Kafka node measured directly and through this proxy, in one run.
Writes bench/results.json (``make bench``).

(a) producer throughput: confluent-kafka, 1 KB records, large batches, idempotent
(b) produce latency p50/p99: one request in flight, acks=1, 100-byte records (raw socket)
(c) produce request rate: 16 connections pipelining small requests (raw sockets, uvloop)
(d) proxy resident memory with 1000 idle client connections
(e) throughput through the proxy with quotas configured but not binding, against no quotas
(f) consumer throughput: confluent-kafka reading 1 KB records, direct and through the proxy with a
    consumer quota configured but not binding; the quota proxy's CPU per MB in both directions
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import uvloop
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.memory_records import MemoryRecordsBuilder

from bench.report import write_results
from proxy.dev.apache_kafka import KafkaCluster
from tests.support import ProxyProcess, encode_request, read_frame

PRODUCE = 0
# Every producer is under a byte-rate and a producer-ID quota that it never reaches, so the whole
# enforcement path runs (size charged, every batch header scanned, PIDs checked) without throttling.
NON_BINDING_QUOTAS = """
[[quota]]
user = "<default>"
producer_byte_rate = 100000000000
consumer_byte_rate = 100000000000
producer_ids_rate = 1000
"""


ClientSettings = dict[str, Any]
"""librdkafka settings beyond the bootstrap servers (e.g. TLS)."""


def create_topic(bootstrap: str, partitions: int = 1, client: ClientSettings | None = None) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
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


def latency_samples_us(bootstrap: str, topic: str, requests: int) -> list[float]:
    host, port = bootstrap.split(":")
    frame = produce_frame(topic, 100, acks=1)
    samples = []
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(50):  # warm-up
            sock.sendall(frame)
            read_frame(sock)
        for _ in range(requests):
            started = time.perf_counter_ns()
            sock.sendall(frame)
            read_frame(sock)
            samples.append((time.perf_counter_ns() - started) / 1000)
    return samples


def latency_percentiles(targets: dict[str, str], rounds: int, requests_per_round: int) -> dict[str, Any]:
    """One request in flight; samples pooled over interleaved rounds, as for the other figures."""
    topics = {name: create_topic(bootstrap) for name, bootstrap in targets.items()}
    pooled: dict[str, list[float]] = {name: [] for name in targets}
    names = list(targets)
    for round_index in range(rounds):
        for name in names[round_index % len(names):] + names[:round_index % len(names)]:
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
    """Keeps ``depth`` produce requests in flight; counts responses by their size prefixes."""

    def __init__(self, frame: bytes, depth: int, done: asyncio.Future[None], deadline: float) -> None:
        self._frame, self._depth, self._done, self._deadline = frame, depth, done, deadline
        self._buffer = bytearray()
        self.responses = 0
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        transport.write(self._frame * self._depth)  # type: ignore[attr-defined]

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
        elif not self._done.done():
            self._done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_exception(exc or ConnectionError("closed"))


def request_rate(bootstrap: str, connections: int, depth: int, seconds: float) -> float:
    topic = create_topic(bootstrap)
    host, port = bootstrap.split(":")
    frame = produce_frame(topic, 100, acks=1)

    async def run() -> float:
        loop = asyncio.get_running_loop()
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()
        clients = []
        for _ in range(connections):
            done: asyncio.Future[None] = loop.create_future()
            protocol = _Pipeliner(frame, depth, done, deadline)
            await loop.create_connection(lambda: protocol, host, int(port))  # noqa: B023 (called at once)
            clients.append((protocol, done))
        await asyncio.gather(*(done for _, done in clients))
        elapsed = time.perf_counter() - started
        return sum(protocol.responses for protocol, _ in clients) / elapsed

    rate = uvloop.run(run())
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
        for name in names[round_index % len(names):] + names[:round_index % len(names)]:
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
    with KafkaCluster(log_directory=workdir) as broker:
        ours = ProxyProcess(broker.bootstrap, workdir / "proxy.log", "--log-level", "WARNING",
                            node_ids=broker.broker_ids).start()
        non_binding = workdir / "quotas.toml"
        non_binding.write_text(NON_BINDING_QUOTAS)
        with_quotas = ProxyProcess(broker.bootstrap, workdir / "proxy-quotas.log", "--log-level", "WARNING",
                                   "--quota-file", str(non_binding), node_ids=broker.broker_ids).start()
        targets = {"direct": broker.bootstrap, "proxy": ours.bootstrap}
        try:
            def record(name: str, figures: dict[str, Any]) -> None:
                results[name] = figures
                print(name, json.dumps(figures), file=sys.stderr, flush=True)

            record("a_throughput_mb_s", interleaved_medians(
                targets, args.rounds, lambda b: throughput_mb_s(b, args.records)))
            record("b_latency_us", latency_percentiles(targets, args.rounds, args.latency_requests))
            record("c_requests_per_s", interleaved_medians(
                targets, args.rounds, lambda b: request_rate(b, 16, 8, args.rate_seconds)))
            results["d_idle_connections"] = idle_connections_rss_mb(ours, args.idle_connections)
            assert with_quotas.process is not None
            quota_proxy = psutil.Process(with_quotas.process.pid)
            produce_cpu = CpuPerMb(quota_proxy)
            mb = args.records * 1024 / 1e6
            record("e_quotas_not_binding_mb_s", interleaved_medians(
                {"proxy": ours.bootstrap, "proxy_with_quotas": with_quotas.bootstrap}, args.rounds,
                lambda b: (produce_cpu.measure(mb, lambda: throughput_mb_s(b, args.records))
                           if b == with_quotas.bootstrap else throughput_mb_s(b, args.records))))
            consume_cpu = CpuPerMb(quota_proxy)
            filled = fill_topic(broker.bootstrap, args.records)
            record("f_consume_mb_s", interleaved_medians(
                {"direct": broker.bootstrap, "proxy_with_quotas": with_quotas.bootstrap}, args.rounds,
                lambda b: (consume_cpu.measure(mb, lambda: consume_mb_s(b, filled, args.records))
                           if b == with_quotas.bootstrap else consume_mb_s(b, filled, args.records))))
            results["f_quota_proxy_cpu_ms_per_mb"] = {"produce": produce_cpu.ms_per_mb,
                                                      "consume": consume_cpu.ms_per_mb}
        finally:
            ours.stop()
            with_quotas.stop()

    a = {target: figures["median"] for target, figures in results["a_throughput_mb_s"].items()}
    c = {target: figures["median"] for target, figures in results["c_requests_per_s"].items()}
    b = results["b_latency_us"]
    results["ratios"] = {
        "a_throughput_proxy_vs_direct": a["proxy"] / a["direct"],
        "b_added_p50_us": b["proxy"]["p50_us"] - b["direct"]["p50_us"],
        "b_added_p99_us": b["proxy"]["p99_us"] - b["direct"]["p99_us"],
        "c_rate_proxy_vs_direct": c["proxy"] / c["direct"],
        "d_rss_mb_with_1000_idle": results["d_idle_connections"]["rss_with_idle_mb"],
        "e_throughput_with_quotas_vs_proxy": (results["e_quotas_not_binding_mb_s"]["proxy_with_quotas"]["median"]
                                              / results["e_quotas_not_binding_mb_s"]["proxy"]["median"]),
        "f_consume_with_quotas_vs_direct": (results["f_consume_mb_s"]["proxy_with_quotas"]["median"]
                                            / results["f_consume_mb_s"]["direct"]["median"]),
        "f_cpu_ms_per_mb_produce": results["f_quota_proxy_cpu_ms_per_mb"]["produce"],
        "f_cpu_ms_per_mb_consume": results["f_quota_proxy_cpu_ms_per_mb"]["consume"],
    }
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
