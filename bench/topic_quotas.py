"""Topic quotas at scale (``python -m bench.topic_quotas``): one Kafka 4.3 node holding 100,000 topics, ``--active``
of them (1,000, spread over the names) written and read through a proxy without a topic quota and through one with a
``<default>`` topic quota (a budget per topic, high enough never to throttle), in turns. The proxy's CPU per MB and
its memory (RSS) with the topic quota are compared with those without (the issue's target: within 10%). Raw
pipelined frames, so that no client's cost is in the figures: Produce v7 requests of ``TOPICS_PER_REQUEST`` topics,
one batch of ``--batch-bytes`` each, then Fetch v11 requests of as many topics, from the batches just written. Every
topic's data passes through both proxies; each turn is a new proxy. Writes ``bench/topic-quotas-results.json``.

Not every topic of the cluster is written: each written partition has Kafka map its two index files, and 100,000
of them would pass Linux's default ``vm.max_map_count`` (65,530), which stops the broker. The broker keeps every
partition's log open: the open-files limit is raised for it (``open_files_for``).
"""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import psutil

from bench.report import new_results, write_results
from protocol.apis import Api
from protocol.codecs import decode_response
from proxy.dev.apache_kafka import KafkaCluster
from tests.support import Cluster, ProxyProcess, call, encode_request, read_frame, record_batch

TOPICS = 100_000
ACTIVE = 1_000
TOPICS_PER_REQUEST = 100
BATCH_VALUE_BYTES = 16_000
"""About a Java producer's default ``batch.size`` (16 KiB)."""
IN_FLIGHT = 8
"""Requests written ahead of their answers on the one connection."""
CREATE_PER_REQUEST = 2_000
OPEN_FILES_PER_TOPIC = 1
"""Measured: a broker at an open-files limit of 20,000 stopped making logs at 19,604 topics."""
MIN_PASSES = 4
"""Write passes over every topic, straight on the broker, before the broker is measured through a proxy."""
TOPIC_QUOTA = '[[quota]]\ntopic = "<default>"\nproducer_byte_rate = 1000000000000\nconsumer_byte_rate = 1000000000000\n'


def create_topics(cluster: Cluster, names: list[str]) -> float:
    """Every topic created (one partition each), ``CREATE_PER_REQUEST`` at a time; the seconds it took."""
    started = time.monotonic()
    with socket.create_connection((cluster.host, cluster.port), timeout=300) as sock:
        for start in range(0, len(names), CREATE_PER_REQUEST):
            topics = [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
                      for name in names[start:start + CREATE_PER_REQUEST]]
            answer: Any = call(sock, Api.CREATE_TOPICS, 5, topics=topics, timeout_ms=300_000, validate_only=False)
            failed = [topic.name for topic in answer.topics if topic.error_code not in (0, 36)]  # 36: exists
            assert not failed, f"{len(failed)} topics not created, e.g. {failed[:3]}"
    return time.monotonic() - started


def written_until_settled(cluster: Cluster, names: list[str], batch: bytes, timeout_s: float = 900) -> int:
    """Every topic written straight on the broker, pass after pass, until a pass is quick: a new topic answers
    NOT_LEADER_OR_FOLLOWER until its log is made (those batches are written again), and the pass in which every
    log's index takes its first entry (more than ``log.index.interval.bytes``, 4 KiB, since the log began: the
    third pass of these batches; the index files are made then) takes the broker long (measured: 52 s for 2,000
    topics, the next pass 0.1 s). Settled: at least ``MIN_PASSES``, the last as quick as the quickest but half.
    Returns the offset the next batch of every topic gets."""
    batch = record_batch([b"v" * BATCH_VALUE_BYTES])
    deadline = time.monotonic() + timeout_s
    passes: list[float] = []
    with socket.create_connection((cluster.host, cluster.port), timeout=300) as sock:
        while True:
            assert time.monotonic() < deadline, "the broker never settled"
            started = time.monotonic()
            pending = names
            while pending:
                refused = []
                for frame in produce_frames(pending, batch):
                    sock.sendall(frame)
                    answer = decode_response(Api.PRODUCE, 7, memoryview(read_frame(sock))[4:])
                    refused += [t.name for t in answer.responses if any(p.error_code for p in t.partition_responses)]
                pending = refused
                if pending:
                    time.sleep(0.5)  # the broker is still making logs: give it the CPU
            passes.append(time.monotonic() - started)
            if len(passes) >= MIN_PASSES and passes[-1] <= 1.5 * min(passes):
                return len(passes)


def pipelined(sock: socket.socket, frames: list[bytes], api_key: int, version: int) -> int:
    """Every frame written with ``IN_FLIGHT`` ahead of its answer, each answer checked to carry no partition
    error; the record bytes of the answers (a Fetch's)."""
    answered = written = records = 0
    while answered < len(frames):
        while written < len(frames) and written - answered < IN_FLIGHT:
            sock.sendall(frames[written])
            written += 1
        frame = read_frame(sock)
        assert frame, "the proxy closed the connection"
        answer = decode_response(api_key, version, memoryview(frame)[4:])
        partitions = [p for t in answer.responses for p in (t.partitions if api_key == Api.FETCH
                                                             else t.partition_responses)]
        errors = {p.error_code for p in partitions} - {0}
        assert not errors and not answer.throttle_time_ms, f"errors {errors}, throttle {answer.throttle_time_ms}"
        records += sum(len(p.records or b"") for p in partitions) if api_key == Api.FETCH else 0
        answered += 1
    return records


def produce_frames(names: list[str], batch: bytes) -> list[bytes]:
    return [encode_request(Api.PRODUCE, 7, correlation_id=index, client_id="bench-topics", transactional_id=None,
                           acks=1, timeout_ms=30_000,
                           topic_data=[{"name": name, "partition_data": [{"index": 0, "records": batch}]}
                                       for name in names[start:start + TOPICS_PER_REQUEST]])
            for index, start in enumerate(range(0, len(names), TOPICS_PER_REQUEST))]


def fetch_frames(names: list[str], offset: int, batch_bytes: int) -> list[bytes]:
    """Fetches of the batch at ``offset`` of every topic, and of nothing after it."""
    return [encode_request(Api.FETCH, 11, correlation_id=index, client_id="bench-topics", replica_id=-1,
                           max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, isolation_level=0, session_id=0,
                           session_epoch=-1, rack_id="", forgotten_topics_data=[],
                           topics=[{"topic": name, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                                   "fetch_offset": offset, "log_start_offset": -1,
                                                                   "partition_max_bytes": batch_bytes}]}
                                   for name in names[start:start + TOPICS_PER_REQUEST]])
            for index, start in enumerate(range(0, len(names), TOPICS_PER_REQUEST))]


def through_proxy(cluster: Cluster, names: list[str], batch: bytes, offset: int, passes: int, quota: bool,
                  directory: Path) -> dict[str, float]:
    """One proxy's turn: every topic written ``passes`` batches (from ``offset``), then read back; its CPU per MB
    moved (requests written, record bytes read), produce and fetch apart, and its RSS."""
    quota_file = directory / f"quotas-{offset}.toml"
    quota_file.write_text(TOPIC_QUOTA if quota else "")
    proxy = ProxyProcess(cluster.bootstrap, directory / f"proxy-{offset}.log", "--log-level", "WARNING",
                         "--quota-file", str(quota_file), node_ids=cluster.node_ids).start()
    assert proxy.process is not None
    process = psutil.Process(proxy.process.pid)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=300) as sock:
            rss_before = process.memory_info().rss
            produced = produce_frames(names, batch)
            fetches = [fetch_frames(names, offset + number, len(batch)) for number in range(passes)]
            fetched = 0

            def produce_passes() -> None:
                for _ in range(passes):
                    pipelined(sock, produced, Api.PRODUCE, 7)

            def fetch_passes() -> None:
                nonlocal fetched
                for frames in fetches:
                    fetched += pipelined(sock, frames, Api.FETCH, 11)

            produce = measured(process, produce_passes)
            fetch_cost = measured(process, fetch_passes)
            assert fetched == passes * len(batch) * len(names), f"{fetched} record bytes read"
            rss_after = process.memory_info().rss
    finally:
        proxy.stop()
    produce_mb = passes * sum(len(frame) for frame in produced) / 1e6
    fetch_mb = fetched / 1e6
    return {"mb": round(produce_mb + fetch_mb, 1), "seconds": round(produce.seconds + fetch_cost.seconds, 2),
            "cpu_ms_per_mb": round(1000 * (produce.cpu_s + fetch_cost.cpu_s) / (produce_mb + fetch_mb), 3),
            "produce_cpu_ms_per_mb": round(1000 * produce.cpu_s / produce_mb, 3),
            "fetch_cpu_ms_per_mb": round(1000 * fetch_cost.cpu_s / fetch_mb, 3),
            "rss_before_mb": round(rss_before / 1e6, 1), "rss_after_mb": round(rss_after / 1e6, 1)}


class Cost(NamedTuple):
    seconds: float
    cpu_s: float


def measured(process: psutil.Process, run: Callable[[], object]) -> Cost:
    """The wall time ``run`` took and the CPU ``process`` spent meanwhile."""
    before, started = process.cpu_times(), time.monotonic()
    run()
    after = process.cpu_times()
    return Cost(time.monotonic() - started, (after.user - before.user) + (after.system - before.system))


def open_files_for(topics: int) -> None:
    """Raise this process's open-files limit (which the broker inherits) to what ``topics`` logs need, or stop
    saying so: Kafka keeps each partition's log file open ("Too many open files" past the limit)."""
    wanted = OPEN_FILES_PER_TOPIC * topics + 5_000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, max(hard, wanted)))
    except (ValueError, OSError) as error:
        raise SystemExit(f"{topics} topics need {wanted} open files for the broker, this process may open {soft} "
                         f"({error}): raise the limit (ulimit -n) or pass fewer --topics") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/topic-quotas-results.json")
    parser.add_argument("--topics", type=int, default=TOPICS, help="topics the cluster holds")
    parser.add_argument("--active", type=int, default=ACTIVE, help="topics written and read")
    parser.add_argument("--batch-bytes", type=int, default=BATCH_VALUE_BYTES, help="each batch's record value")
    parser.add_argument("--rounds", type=int, default=2, help="turns of each proxy, alternating")
    parser.add_argument("--passes", type=int, default=10, help="batches written to (and read from) every topic "
                        "in a turn")
    args = parser.parse_args()
    open_files_for(args.topics)
    names = [f"bench-topic-{number}" for number in range(args.topics)]
    active = names[::max(1, args.topics // args.active)][:args.active]
    results = new_results()
    results["settings"] = {"topics": args.topics, "active_topics": len(active), "batch_value_bytes": args.batch_bytes,
                           "passes": args.passes, "topics_per_request": TOPICS_PER_REQUEST, "in_flight": IN_FLIGHT}
    with tempfile.TemporaryDirectory(prefix="kqp-topic-quotas-") as scratch, \
            KafkaCluster(log_directory=Path(scratch) / "kafka", heap_mb=2048) as kafka:
        cluster = Cluster(kafka.bootstrap).wait_until_ready()
        results["create_topics_s"] = round(create_topics(cluster, names), 1)
        print(f"{args.topics} topics created in {results['create_topics_s']} s", flush=True)
        batch = record_batch([b"v" * args.batch_bytes])
        offset = written_until_settled(cluster, active, batch)
        turns: dict[str, list[dict[str, float]]] = {"without": [], "with_default_topic_quota": []}
        for _ in range(args.rounds):
            for name, quota in (("without", False), ("with_default_topic_quota", True)):
                turn = through_proxy(cluster, active, batch, offset, args.passes, quota, Path(scratch))
                offset += args.passes
                turns[name].append(turn)
                print(f"{name}: {turn}", flush=True)
        results["cases"] = turns

        def ratio(figure: str) -> float:
            """The topic quota's median over the median without."""
            return round(statistics.median(turn[figure] for turn in turns["with_default_topic_quota"])
                         / statistics.median(turn[figure] for turn in turns["without"]), 3)

        results["cpu_per_mb_ratio"] = ratio("cpu_ms_per_mb")
        results["produce_cpu_per_mb_ratio"] = ratio("produce_cpu_ms_per_mb")
        results["fetch_cpu_per_mb_ratio"] = ratio("fetch_cpu_ms_per_mb")
        results["rss_ratio"] = ratio("rss_after_mb")
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
