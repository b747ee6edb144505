"""Produce latency with the PID ledger on: one idempotent request in flight, acks=1, 100-byte records.

Targets, measured in interleaved rounds in one run against one broker: the broker directly, the
proxy without quotas (the ledger untouched), and the proxy with a producer-ID quota that never
binds (every batch header scanned, every PID checked against the ledger). Two request shapes:
``known_pid`` (one producer: its PID is in the ledger's cache after the first request) and
``new_pid`` (every request from a PID the proxy has not seen: a lookup on the ledger's worker
thread and a record written there before the request is decided). PIDs are issued by the broker
(InitProducerId), so every request is a valid idempotent append.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.report import write_results
from bench.rounds import rotated
from bench.run import create_topic, delete_topic
from proxy.dev.apache_kafka import KafkaCluster
from tests.support import ProxyProcess, encode_request, new_producer_id, read_frame, record_batch

PRODUCE = 0
LEDGER_ON = '[[quota]]\nuser = "<default>"\nproducer_ids_rate = 100000\n'


def broker_issued_pids(bootstrap: str, count: int) -> Iterator[int]:
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port))) as sock:
        for _ in range(count):
            yield new_producer_id(sock).producer_id


def produce_frame(topic: str, pid: int, sequence: int) -> bytes:
    partitions = [{"index": 0, "records": record_batch([b"v" * 100], producer_id=pid, producer_epoch=0,
                                                       base_sequence=sequence)}]
    return encode_request(PRODUCE, 7, transactional_id=None, acks=1, timeout_ms=30_000,
                          topic_data=[{"name": topic, "partition_data": partitions}])


def samples_us(bootstrap: str, frames: list[bytes]) -> list[float]:
    host, port = bootstrap.split(":")
    samples = []
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for frame in frames:
            started = time.perf_counter_ns()
            sock.sendall(frame)
            assert read_frame(sock)
            samples.append((time.perf_counter_ns() - started) / 1000)
    return samples


def percentiles(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {"p50_us": round(samples[len(samples) // 2], 1), "p99_us": round(samples[int(len(samples) * 0.99)], 1),
            "samples": len(samples)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/ledger-latency-results.json")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=400, help="per target, shape and round")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kqp-ledger-bench-"))
    quota_file = workdir / "quotas.toml"
    quota_file.write_text(LEDGER_ON)
    results: dict[str, Any] = {"settings": vars(args)}
    with KafkaCluster(log_directory=workdir) as broker:
        plain = ProxyProcess(broker.bootstrap, workdir / "plain.log", "--log-level", "WARNING",
                             node_ids=broker.broker_ids).start()
        ledger = ProxyProcess(broker.bootstrap, workdir / "ledger.log", "--log-level", "WARNING",
                              "--quota-file", str(quota_file), node_ids=broker.broker_ids).start()
        targets = {"direct": broker.bootstrap, "proxy": plain.bootstrap, "proxy_with_ledger": ledger.bootstrap}
        pooled: dict[tuple[str, str], list[float]] = {}
        try:
            names = list(targets)
            for round_index in range(args.rounds):
                for name in rotated(names, round_index):
                    topic = create_topic(broker.bootstrap)
                    (known,) = broker_issued_pids(broker.bootstrap, 1)
                    fresh = list(broker_issued_pids(broker.bootstrap, args.requests))
                    shapes = {"known_pid": [produce_frame(topic, known, n) for n in range(args.requests)],
                              "new_pid": [produce_frame(topic, pid, 0) for pid in fresh]}
                    for shape, frames in shapes.items():
                        pooled.setdefault((name, shape), []).extend(samples_us(targets[name], frames))
                    delete_topic(broker.bootstrap, topic)
        finally:
            plain.stop()
            ledger.stop()
    for (name, shape), samples in pooled.items():
        results.setdefault(shape, {})[name] = percentiles(samples)
    results["added_p99_us_vs_direct"] = {shape: {name: round(figures[name]["p99_us"] - figures["direct"]["p99_us"], 1)
                                                 for name in targets if name != "direct"}
                                         for shape, figures in results.items() if shape in ("known_pid", "new_pid")}
    print(results, file=sys.stderr)
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
