"""Topic quotas at scale (``python -m bench.topic_quotas``): a Kafka 4.3 cluster holding 100,000 topics, some of them
(one broker's) written and read through a proxy without a topic quota and through one with a ``<default>`` topic quota
(a budget per topic, high enough never to throttle), in turns. The proxy's CPU per MB and its memory (RSS) with the
topic quota are compared with those without (the issue's target: within 10%). Raw pipelined frames, so that no
client's cost is in the figures: Produce v7 requests of several topics, one batch each, then Fetch v11 requests of as
many topics, from the batches just written. Two workloads: many small batches (a Java producer's default
``batch.size``, 16 KiB) and fewer large ones. Every topic's data passes through both proxies; each turn is a new
proxy. Writes ``bench/topic-quotas-results.json``.

A broker keeps every partition's log open, and this machine lets a process open 20,000 files (a broker stopped
making logs at 19,604 topics): the topics are spread over as many brokers as that takes (``brokers_for``), behind one
controller. Not every topic is written: each written partition has Kafka map its two index files, and 100,000 of
them would pass Linux's default ``vm.max_map_count`` (65,530), which stops a broker.
"""

from __future__ import annotations

import argparse
import math
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


class Workload(NamedTuple):
    name: str
    active: int
    """Topics written and read, all led by one broker, spread over the names."""
    batch_bytes: int
    """Each batch's record value."""
    topics_per_request: int
    passes: int
    """Batches written to (and read from) every active topic in a turn."""


WORKLOADS = (
    Workload("small-batches", active=1_000, batch_bytes=16_000, topics_per_request=100, passes=20),
    # about a Java producer's default batch.size (16 KiB), 1.6 MB a request
    Workload("large-batches", active=100, batch_bytes=256_000, topics_per_request=6, passes=20),
    # the batches a busy librdkafka producer makes (its batch.size is 1 MB), as large a request
)
IN_FLIGHT = 8
"""Requests written ahead of their answers on the one connection."""
CREATE_PER_REQUEST = 2_000
QUIET_S = 5
QUIET_CORES = 0.25
"""The brokers are quiet once they use less than this share of a core (measured idle: 0.1 for eight JVMs holding
100,000 topics; making logs, several cores)."""
OPEN_FILES_SPARE = 4_000
"""Open files a broker keeps beside its logs' (sockets, jars, the metadata log): measured, a broker at an open-files
limit of 20,000 stopped making logs at 19,604 topics; kept well clear of that."""
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


def written_until_settled(leader: tuple[str, int], names: list[str], batch: bytes, per_request: int,
                          timeout_s: float = 900) -> int:
    """Every topic written straight on its leader, pass after pass, until a pass is quick: a new topic answers
    NOT_LEADER_OR_FOLLOWER until its log is made (those batches are written again), and the pass in which every
    log's index takes its first entry (more than ``log.index.interval.bytes``, 4 KiB, since the log began: the
    third pass of these batches; the index files are made then) takes the broker long (measured: 52 s for 2,000
    topics, the next pass 0.1 s). Settled: at least ``MIN_PASSES``, the last as quick as the quickest but half.
    Returns the offset the next batch of every topic gets."""
    deadline = time.monotonic() + timeout_s
    passes: list[float] = []
    with socket.create_connection(leader, timeout=300) as sock:
        while True:
            assert time.monotonic() < deadline, "the broker never settled"
            started = time.monotonic()
            pending = names
            while pending:
                refused = []
                for frame in produce_frames(pending, batch, per_request):
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


def produce_frames(names: list[str], batch: bytes, per_request: int) -> list[bytes]:
    return [encode_request(Api.PRODUCE, 7, correlation_id=index, client_id="bench-topics", transactional_id=None,
                           acks=1, timeout_ms=30_000,
                           topic_data=[{"name": name, "partition_data": [{"index": 0, "records": batch}]}
                                       for name in names[start:start + per_request]])
            for index, start in enumerate(range(0, len(names), per_request))]


def fetch_frames(names: list[str], offset: int, batch_bytes: int, per_request: int) -> list[bytes]:
    """Fetches of the batch at ``offset`` of every topic, and of nothing after it."""
    return [encode_request(Api.FETCH, 11, correlation_id=index, client_id="bench-topics", replica_id=-1,
                           max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, isolation_level=0, session_id=0,
                           session_epoch=-1, rack_id="", forgotten_topics_data=[],
                           topics=[{"topic": name, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                                   "fetch_offset": offset, "log_start_offset": -1,
                                                                   "partition_max_bytes": batch_bytes}]}
                                   for name in names[start:start + per_request]])
            for index, start in enumerate(range(0, len(names), per_request))]


def through_proxy(cluster: Cluster, leader: int, names: list[str], batch: bytes, offset: int, workload: Workload,
                  quota: bool, directory: Path) -> dict[str, float]:
    """One proxy's turn: every topic written ``passes`` batches (from ``offset``) through the proxy's listener for
    their leader, then read back; the proxy's CPU per MB moved (requests written, record bytes read), produce and
    fetch apart (and its user-space share), and its RSS."""
    quota_file = directory / f"quotas-{workload.name}-{offset}.toml"
    quota_file.write_text(TOPIC_QUOTA if quota else "")
    proxy = ProxyProcess(cluster.bootstrap, directory / f"proxy-{workload.name}-{offset}.log", "--log-level",
                         "WARNING", "--quota-file", str(quota_file), node_ids=cluster.node_ids).start()
    assert proxy.process is not None
    process = psutil.Process(proxy.process.pid)
    per_request, passes = workload.topics_per_request, workload.passes
    try:
        with socket.create_connection(("127.0.0.1", proxy.broker_port_base + leader), timeout=300) as sock:
            rss_before = process.memory_info().rss
            produced = produce_frames(names, batch, per_request)
            fetches = [fetch_frames(names, offset + number, len(batch), per_request) for number in range(passes)]
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
            "user_cpu_ms_per_mb": round(1000 * (produce.user_s + fetch_cost.user_s) / (produce_mb + fetch_mb), 3),
            "produce_cpu_ms_per_mb": round(1000 * produce.cpu_s / produce_mb, 3),
            "fetch_cpu_ms_per_mb": round(1000 * fetch_cost.cpu_s / fetch_mb, 3),
            "rss_before_mb": round(rss_before / 1e6, 1), "rss_after_mb": round(rss_after / 1e6, 1)}


class Cost(NamedTuple):
    seconds: float
    cpu_s: float
    user_s: float
    """The part of ``cpu_s`` spent in user space (the rest is the kernel's: copies, splices, loopback TCP)."""


def measured(process: psutil.Process, run: Callable[[], object]) -> Cost:
    """The wall time ``run`` took and the CPU ``process`` spent meanwhile."""
    before, started = process.cpu_times(), time.monotonic()
    run()
    after = process.cpu_times()
    user_s = after.user - before.user
    return Cost(time.monotonic() - started, user_s + after.system - before.system, user_s)


def open_files_limit() -> int:
    """This process's open-files limit (which the brokers inherit), raised as far as it may be."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def brokers_for(topics: int, open_files: int) -> int:
    """Brokers enough to keep ``topics`` logs open (one partition each) under ``open_files`` a process."""
    per_broker = open_files - OPEN_FILES_SPARE
    if per_broker < 1_000:
        raise SystemExit(f"a broker may open only {open_files} files here: raise the limit (ulimit -n)")
    return max(1, math.ceil(topics / per_broker))


def wait_for_logs(kafka: KafkaCluster, prefix: str, topics: int, timeout_s: float = 1800) -> float:
    """Wait until the brokers have made the log of every one of ``topics`` topics named ``prefix``-N (they make them
    after CreateTopics has answered, for minutes at 100,000), then until they are quiet: a broker busy making logs
    would take the CPU the proxies are measured on. The seconds it took."""
    started = time.monotonic()
    while (made := sum(1 for broker in kafka.brokers for entry in (broker.directory / "data").iterdir()
                       if entry.name.startswith(prefix))) < topics:
        assert time.monotonic() - started < timeout_s, f"{made} logs of {topics} made after {timeout_s} s"
        time.sleep(2)
    nodes = [psutil.Process(node.pid) for node in kafka.nodes if node.pid is not None]
    while True:
        before = sum(sum(node.cpu_times()[:2]) for node in nodes)
        time.sleep(QUIET_S)
        busy = sum(sum(node.cpu_times()[:2]) for node in nodes) - before
        if busy < QUIET_CORES * QUIET_S or time.monotonic() - started > timeout_s:
            return time.monotonic() - started


def leaders(cluster: Cluster) -> dict[str, int]:
    """The leader of every topic's partition 0, by topic name (one Metadata request for every topic)."""
    with socket.create_connection((cluster.host, cluster.port), timeout=300) as sock:
        metadata: Any = call(sock, Api.METADATA, 4, topics=None, allow_auto_topic_creation=False)
    return {topic.name: partition.leader_id for topic in metadata.topics for partition in topic.partitions
            if partition.partition_index == 0}


def spread(names: list[str], count: int) -> list[str]:
    """``count`` of ``names``, evenly spaced."""
    return names[::max(1, len(names) // count)][:count]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/topic-quotas-results.json")
    parser.add_argument("--topics", type=int, default=TOPICS, help="topics the cluster holds")
    parser.add_argument("--rounds", type=int, default=3, help="turns of each proxy, alternating, per workload")
    parser.add_argument("--workloads", nargs="*", choices=[workload.name for workload in WORKLOADS],
                        help="the workloads to run (all when not given)")
    args = parser.parse_args()
    workloads = [workload for workload in WORKLOADS if not args.workloads or workload.name in args.workloads]
    open_files = open_files_limit()
    brokers = brokers_for(args.topics, open_files)
    results = new_results()
    results["settings"] = {"topics": args.topics, "brokers": brokers, "open_files_limit": open_files,
                           "rounds": args.rounds, "in_flight": IN_FLIGHT}
    prefix = "bench-topic-"
    names = [f"{prefix}{number}" for number in range(args.topics)]
    with tempfile.TemporaryDirectory(prefix="kqp-topic-quotas-") as scratch, \
            KafkaCluster(brokers, dedicated_controller=brokers > 1, log_directory=Path(scratch) / "kafka",
                         heap_mb=2048 if brokers == 1 else 1024) as kafka:
        cluster = Cluster(kafka.bootstrap).wait_until_ready()
        results["create_topics_s"] = round(create_topics(cluster, names), 1)
        print(f"{args.topics} topics created on {brokers} brokers in {results['create_topics_s']} s", flush=True)
        results["logs_made_s"] = round(wait_for_logs(kafka, prefix, args.topics), 1)
        print(f"every log made and the brokers quiet after {results['logs_made_s']} s", flush=True)
        led_by = leaders(cluster)
        leader = cluster.node_ids[0]
        led = [name for name in names if led_by.get(name) == leader]
        leader_address = (cluster.host, int(kafka.node(leader).bootstrap.rpartition(":")[2]))
        results["leader_topics"] = len(led)
        for workload in workloads:
            active = spread(led, workload.active)
            batch = record_batch([b"v" * workload.batch_bytes])
            offset = written_until_settled(leader_address, active, batch, workload.topics_per_request)
            turns: dict[str, list[dict[str, float]]] = {"without": [], "with_default_topic_quota": []}
            for _ in range(args.rounds):
                for name, quota in (("without", False), ("with_default_topic_quota", True)):
                    turn = through_proxy(cluster, leader, active, batch, offset, workload, quota, Path(scratch))
                    offset += workload.passes
                    turns[name].append(turn)
                    print(f"{workload.name} {name}: {turn}", flush=True)

            def ratio(figure: str, turns: dict[str, list[dict[str, float]]] = turns) -> float:
                """The topic quota's median over the median without."""
                return round(statistics.median(turn[figure] for turn in turns["with_default_topic_quota"])
                             / statistics.median(turn[figure] for turn in turns["without"]), 3)

            results["cases"][workload.name] = {
                "settings": workload._asdict(), "turns": turns,
                "ratios": {figure.removesuffix("_ms_per_mb").removesuffix("_mb"): ratio(figure)
                           for figure in ("cpu_ms_per_mb", "user_cpu_ms_per_mb", "produce_cpu_ms_per_mb",
                                          "fetch_cpu_ms_per_mb", "rss_after_mb")}}
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
