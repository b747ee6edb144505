"""Every quota side by side with Apache Kafka's own (``python -m bench.fidelity``): each case once against the
quota set on a Kafka 4.3.1 node (no proxy), once through the proxy holding the same quota (none on the broker),
in one run on one node. Writes ``bench/fidelity-results.json``; docs/fidelity.md is its
table. Longer workloads than ``tests/integration/test_fidelity.py``, whose short runs assert the margins.
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

from bench.report import case_arguments, new_results, write_results
from proxy.dev.apache_kafka import KafkaCluster
from tests import fidelity
from tests.fidelity import Case, Quota, side_by_side
from tests.support import CLUSTER_USERS, Cluster

MIB = 1 << 20
RECORDS = 24 * 1024
"""1 KiB records: 24 MiB at 1 MiB/s, past the ten seconds of credit."""


def client_of(case: str) -> str:
    return "bench-" + re.sub(r"[^A-Za-z0-9]+", "-", case).strip("-")


def by_client(case: str, key: str, value: float) -> tuple[Quota, ...]:
    return (Quota((("client-id", client_of(case)),), key, value),)


def cases(cluster: Cluster) -> list[Case]:
    produce = {
        "produce raw frames": lambda topic, client: fidelity.raw_produce(topic, 384, 64 * 1024, client),
        "produce librdkafka": lambda topic, client: fidelity.librdkafka_produce(topic, RECORDS, client),
        "produce kafka-python": lambda topic, client: fidelity.kafka_python_produce(topic, RECORDS, client),
        "produce aiokafka": lambda topic, client: fidelity.aiokafka_produce(topic, RECORDS, client),
        "produce ProducerPerformance": lambda topic, client: fidelity.producer_performance(topic, RECORDS, client),
    }
    consume = {
        "consume raw frames": fidelity.raw_fetch,
        "consume librdkafka": fidelity.librdkafka_consume,
        "consume kafka-python": fidelity.kafka_python_consume,
        "consume aiokafka": fidelity.aiokafka_consume,
        "consume ConsumerPerformance": fidelity.consumer_performance,
    }
    mutations = {
        "CreateTopics v6 (strict)": (lambda topic, client: fidelity.raw_create_topics(topic, 60, 10, 6, client), None),
        "CreateTopics, Java AdminClient (its own retries)": (
            lambda topic, client: fidelity.java_admin_create_topics(topic, 60, 10, client), None),
        "CreateTopics v5 (permissive)": (lambda topic, client: fidelity.raw_create_topics(topic, 60, 10, 5, client),
                                         None),
        "CreatePartitions v3 (strict)": (lambda topic, client: fidelity.raw_create_partitions(topic, 60, 10, 3, client),
                                         fidelity.new_topic()),
        "CreatePartitions v2 (permissive)": (
            lambda topic, client: fidelity.raw_create_partitions(topic, 60, 10, 2, client), fidelity.new_topic()),
        "DeleteTopics v5 (strict)": (lambda topic, client: fidelity.raw_delete_topics(topic, 60, 10, 5, client),
                                     fidelity.many_topics(60, 10)),
        "DeleteTopics v4 (permissive)": (lambda topic, client: fidelity.raw_delete_topics(topic, 60, 10, 4, client),
                                         fidelity.many_topics(60, 10)),
    }
    built = [Case(name, by_client(name, "producer_byte_rate", MIB),
                  lambda topic, make=make, name=name: make(topic, client_of(name)), fidelity.new_topic())
             for name, make in produce.items()]
    built += [Case(name, by_client(name, "consumer_byte_rate", MIB),
                   lambda topic, read=read, name=name: read(topic, RECORDS, client_of(name)),
                   fidelity.filled_topic(RECORDS))
              for name, read in consume.items()]
    built += [Case(name, by_client(name, "controller_mutation_rate", 20),
                   lambda topic, make=make, name=name: make(topic, client_of(name)),
                   prepare or (lambda cluster, topic: None))
              for name, (make, prepare) in mutations.items()]
    built.append(Case("consume, a group of two sharing a user quota", (Quota((("user", "carol"),), "consumer_byte_rate",
                                                                             MIB),),
                      lambda topic: fidelity.group_consume(topic, RECORDS, client_of("group"), "carol",
                                                           cluster.bootstrap),
                      fidelity.new_topic(partitions=2), logs_in=True))
    built.append(Case("connection_creation_rate per IP", (
        Quota((("ip", fidelity.CLIENT_IP),), "connection_creation_rate", 20),), lambda topic: fidelity.connections(400),
        lambda cluster, topic: None))
    return built


def entity_cases() -> list[Case]:
    return [fidelity.entity_case(level, client_of(f"entity {level}"), 256) for level in fidelity.ENTITY_LEVELS]


def main() -> int:
    args = case_arguments(__doc__, "bench/fidelity-results.json")
    results = new_results()
    with tempfile.TemporaryDirectory(prefix="kqp-fidelity-") as scratch, \
            KafkaCluster(users=CLUSTER_USERS, log_directory=Path(scratch) / "kafka") as kafka:
        cluster = Cluster(kafka.bootstrap, kafka.sasl_bootstrap).wait_until_ready()
        for case in cases(cluster) + entity_cases():
            if args.only and case.name not in args.only:
                continue
            started = time.monotonic()
            outcome = side_by_side(cluster, case, Path(scratch))
            results["cases"][case.name] = {
                **outcome.summary(), "kafka_empty_responses": sum(1 for _, units in outcome.kafka.events if not units),
                "proxy_empty_responses": sum(1 for _, units in outcome.proxy.events if not units)}
            print(f"{case.name}: Kafka {outcome.kafka.elapsed_s:.1f} s, the proxy {outcome.proxy.elapsed_s:.1f} s "
                  f"({outcome.elapsed_ratio:.2f}x), {time.monotonic() - started:.0f} s", flush=True)
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
