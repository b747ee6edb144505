"""A fleet's report from the usage log's topic against the same report from files (``python -m bench.report_sources``).

A day of usage of 100 principals (every second of each: 8.64 M lines) is written as the proxy writes its hourly
files, and appended to a topic of Apache Kafka as the proxy appends them (one record per line, the member as its key,
the line's place as a header: ``proxy.cluster.usage_topic``); then the report is made from each, in one local Spark
session using every core, and the two are checked to be the same figure for figure. Measured: each report's time.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from bench.report import new_results, write_results
from pipeline.job import run, spark_session
from pipeline.sources import KAFKA_CONNECTOR, Sources, UsageTopic
from pipeline.synthetic import many_principals, stream_usage_log
from proxy.dev.apache_kafka import KafkaCluster
from quotas.usage_record import POSITION_HEADER

MEMBER = b"bench-member"


def append_to_topic(bootstrap: str, topic: str, usage: Path) -> int:
    """Every line of the usage files, in order, as the proxy's shipper appends them; how many."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20,
                         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000,
                         "enable.idempotence": True})
    log_id = uuid.uuid4().hex
    sent = 0
    for path in sorted(usage.glob("usage-*.jsonl")):
        offset = 0
        with path.open("rb") as file:
            for line in file:
                while True:
                    try:
                        producer.produce(topic, line.rstrip(b"\n"), MEMBER,
                                         headers=[(POSITION_HEADER, f"{log_id}/{path.name}:{offset}".encode())])
                        break
                    except BufferError:  # the local queue is full: let librdkafka send some
                        producer.poll(0.1)
                offset += len(line)
                sent += 1
        producer.poll(0)
    assert producer.flush(600) == 0, "records left unsent"
    return sent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/report-sources-results.json")
    parser.add_argument("--principals", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=86_400)
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--kafka-connector", default=KAFKA_CONNECTOR)
    args = parser.parse_args()
    results = new_results()
    results.update(cpus=os.cpu_count(), master="local[*]", driver_memory=args.driver_memory,
                   principals=args.principals, seconds=args.seconds, kafka_connector=args.kafka_connector)
    with tempfile.TemporaryDirectory(prefix="kqp-report-sources-") as directory:
        workdir = Path(directory)
        usage = workdir / "usage"
        lines = args.principals * args.seconds
        started = time.perf_counter()
        stream_usage_log(usage, lines, principals=many_principals(args.principals))
        results["generate_s"] = round(time.perf_counter() - started, 1)
        results["usage_log_mb"] = round(sum(path.stat().st_size for path in usage.iterdir()) / 1e6)
        with KafkaCluster(log_directory=workdir / "kafka") as broker:
            topic = f"usage-log-{uuid.uuid4().hex[:8]}"
            started = time.perf_counter()
            assert append_to_topic(broker.bootstrap, topic, usage) == lines
            results["append_to_topic_s"] = round(time.perf_counter() - started, 1)
            spark = spark_session("local[*]", args.driver_memory, args.kafka_connector)
            try:
                warm_up = workdir / "warm-up"  # Spark's first job compiles much: neither report pays for it
                stream_usage_log(warm_up, 1000)
                run(spark, str(warm_up), workdir / "report-warm-up")
                reports = {}
                for name, sources in (("files", Sources((str(usage),), ())),
                                      ("topic", Sources((), (UsageTopic(broker.bootstrap, topic),)))):
                    started = time.perf_counter()
                    reports[name] = run(spark, sources, workdir / f"report-{name}")
                    results[f"report_from_{name}_s"] = round(time.perf_counter() - started, 1)
                    print(name, results, flush=True)
            finally:
                spark.stop()
    assert reports["files"].lines == reports["topic"].lines == lines
    assert reports["files"].summary == reports["topic"].summary, "the reports differ"
    results["same_report"] = True
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
