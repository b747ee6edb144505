"""Every quota side by side with Apache Kafka's own: the same workload once against the quota set on the broker
(no proxy), once through the proxy holding the same quota (none on the broker), on one Kafka node in the same
run. Within 10% of Kafka's time, or where the proxy deliberately differs, the difference README "Measured against
Kafka itself" gives. Short runs; ``make bench`` runs longer ones for the table (``bench/fidelity.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import fidelity
from tests.fidelity import Case, Quota, SideBySide, side_by_side
from tests.support import Cluster

MIB = 1 << 20
MARGIN = 0.1
"""Kafka's time and the proxy's: measured 0.98-1.01x for the produce, mutation and connection cases under load."""


def client_of(case: str) -> str:
    """Each case its own client id: Kafka keeps a client's quota state (its rate's samples, its token bucket)
    after the quota is removed, and a case must not start where the last one left it."""
    return "fidelity-" + re.sub(r"[^A-Za-z0-9]+", "-", case).strip("-")


def quota(case: str, key: str, value: float) -> tuple[Quota, ...]:
    return (Quota((("client-id", client_of(case)),), key, value),)


def compare(broker: Cluster, tmp_path: Path, case: Case) -> SideBySide:
    result = side_by_side(broker, case, tmp_path)
    print(case.name, result.summary())
    assert result.proxy.units == result.kafka.units
    return result


def assert_within_margin(result: SideBySide) -> None:
    assert 1 - MARGIN <= result.elapsed_ratio <= 1 + MARGIN, result.summary()


def produce_case(name: str, workload: Callable[[str, str], fidelity.Workload]) -> Case:
    return Case(name, quota(name, "producer_byte_rate", MIB), lambda topic: workload(topic, client_of(name)),
                fidelity.new_topic())


def mutation_case(name: str, workload: Callable[[str, str], fidelity.Workload],
                  prepare: Callable[[Cluster, str], None] = lambda cluster, topic: None) -> Case:
    return Case(name, quota(name, "controller_mutation_rate", 20), lambda topic: workload(topic, client_of(name)),
                prepare)


CASES = [
    produce_case("produce-raw", lambda topic, client: fidelity.raw_produce(topic, 256, 64 * 1024, client)),
    produce_case("produce-librdkafka", lambda topic, client: fidelity.librdkafka_produce(topic, 16 * 1024, client)),
    mutation_case("create-topics-strict", lambda topic, client: fidelity.raw_create_topics(topic, 30, 10, 6, client)),
    mutation_case("create-topics-permissive",
                  lambda topic, client: fidelity.raw_create_topics(topic, 30, 10, 5, client)),
    mutation_case("create-partitions-strict",
                  lambda topic, client: fidelity.raw_create_partitions(topic, 30, 10, 3, client), fidelity.new_topic()),
    mutation_case("delete-topics-strict", lambda topic, client: fidelity.raw_delete_topics(topic, 30, 10, 5, client),
                  fidelity.many_topics(30, 10)),
    Case("connection-rate", (Quota((("ip", fidelity.CLIENT_IP),), "connection_creation_rate", 20),),
         lambda topic: fidelity.connections(300), lambda cluster, topic: None),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_proxy_takes_kafkas_time(broker: Cluster, tmp_path: Path, case: Case) -> None:
    assert_within_margin(compare(broker, tmp_path, case))


def test_a_throttled_raw_producer_gets_kafkas_throttles(broker: Cluster, tmp_path: Path) -> None:
    """Produce has the same formula on both sides: the same requests are throttled, by the same amounts."""
    result = compare(broker, tmp_path, CASES[0])
    kafka, proxy = result.kafka.throttles_ms, result.proxy.throttles_ms
    assert sum(1 for ms in kafka if ms) > 10
    assert abs(sum(1 for ms in proxy if ms) - sum(1 for ms in kafka if ms)) <= 3, (kafka, proxy)
    assert abs(max(proxy) - max(kafka)) <= 100, (kafka, proxy)


def test_a_throttled_fetch_gets_its_records_from_the_proxy_and_none_from_kafka(broker: Cluster,
                                                                             tmp_path: Path) -> None:
    """Where the proxy deliberately differs (README "Measured against Kafka itself"): Kafka answers a fetch it
    throttles with no records, un-records them and reads them again after the throttle; the proxy, which has the
    records when it learns their size, passes them on and mutes the connection for the throttle. Same records in
    the end; the times differ both ways (1.25x Kafka's for this short read, 0.84-0.86x for 32 MiB)."""
    case = Case("consume-raw", quota("consume-raw", "consumer_byte_rate", MIB),
                lambda topic: fidelity.raw_fetch(topic, 16 * 1024, client_of("consume-raw")),
                fidelity.filled_topic(16 * 1024))
    result = compare(broker, tmp_path, case)
    throttled_and_empty = [ms for ms, (_, units) in zip(result.kafka.throttles_ms, result.kafka.events, strict=True)
                           if ms and not units]
    assert throttled_and_empty, "Kafka answered every throttled fetch with records"
    assert max(result.proxy.throttles_ms) > 0
    assert all(units for _, units in result.proxy.events), "the proxy answered a fetch without its records"


@pytest.mark.parametrize("level", fidelity.ENTITY_LEVELS)
def test_each_entity_level_resolves_as_kafka_resolves_it(broker: Cluster, tmp_path: Path, level: str) -> None:
    result = compare(broker, tmp_path, fidelity.entity_case(level, client_of(level), 192))
    assert max(result.kafka.throttles_ms) > 0
    assert_within_margin(result)
