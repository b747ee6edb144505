"""Tenant budgets against Apache Kafka: one ``producer_byte_rate`` (and ``consumer_byte_rate``, ``request_rate``,
``controller_mutation_rate`` and ``producer_ids_rate``) that every principal of a ``[[tenant]]`` shares.

Kafka has no tenant; its nearest is a quota two clients share (a client id's). Raw pipelined producers of two
principals of one tenant are held together to Kafka's model (``kafka_quota_model``: two connections charging one
rate) while a principal of another tenant writes at the same time unthrottled; then a user quota set inside the
tenant (the file reloaded) holds that user to its own, smaller rate. librdkafka and kafka-python producers of the
tenant's two principals are compared with the same two clients under Kafka's own quota in the same run. Two proxies
of a fleet, one principal through each, hold them to the tenant's one rate too.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from tests.integration.test_fleet import start_fleet
from tests.integration.test_mutation_quotas import THROTTLING_QUOTA_EXCEEDED, creatable, create
from tests.integration.test_produce_quotas import create_topic, metrics, usage_totals
from tests.integration.test_produce_refusals import idempotent_request, partition_errors
from tests.integration.test_request_rate import pipelined_metadata
from tests.integration.test_sasl import add_user
from tests.integration.test_topic_quotas import (
    MODEL_TOLERANCE,
    PER_USER,
    RATE,
    WINDOWS,
    Lane,
    SharedBudget,
    held_as_kafka_holds,
    held_to_the_model,
    logged_in,
    login,
    pipelined_fetch,
    pipelined_produce,
    produce_with_kafka_python,
    produce_with_librdkafka,
    read_with_kafka_python,
    read_with_librdkafka,
    sasl,
    side_by_side,
)
from tests.support import Cluster, ProxyProcess, kafka_quota_model, new_producer_id, read_frame, record_batch

pytestmark = pytest.mark.integration
TENANT_USERS = ("alice", "bob")
OTHER_TENANT_USER = "carol"
TENANTS = (f'[[tenant]]\nname = "payments"\nusers = ["{TENANT_USERS[0]}", "{TENANT_USERS[1]}"]\n'
           f'[[tenant]]\nname = "search"\nusers = ["{OTHER_TENANT_USER}"]\n'
           f'[[quota]]\ntenant = "payments"\nproducer_byte_rate = {RATE}\n')
OWN_RATE = RATE // 4
"""bob's own quota, set inside the tenant."""


def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users.toml"
    for user in (*TENANT_USERS, OTHER_TENANT_USER):
        add_user(path, user, "PLAIN")
    return path


def quota_text(windows: int) -> str:
    return f'[settings]\n"quota.window.num" = {windows}\n"quota.window.size.seconds" = 1\n{TENANTS}'


def tenant_throttles(proxy: ProxyProcess, quota_type: str = "producer_byte_rate") -> float:
    return metrics(proxy).get(f'kafka_quota_proxy_tenant_throttled_requests_total{{quota_type="{quota_type}"}}', 0.0)


def user_throttles(proxy: ProxyProcess) -> float:
    return metrics(proxy).get('kafka_quota_proxy_throttled_requests_total{quota_type="producer_byte_rate"}', 0.0)


BATCHES = [record_batch([bytes(99_900)]) for _ in range(PER_USER // 100_000)]


def test_raw_pipelined_producers_of_one_tenant_share_its_budget_and_a_user_quota_inside_it_holds(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(quota_text(WINDOWS))
    proxy = own_proxy("--sasl-users", str(users_file(tmp_path)), "--quota-file", str(quota_file))
    create_topic(broker.bootstrap, topic)
    users = (*TENANT_USERS, OTHER_TENANT_USER)
    barrier = threading.Barrier(len(users))
    answers, _ = side_by_side(*[lambda user=user: pipelined_produce(proxy, user, topic, BATCHES, barrier)
                                for user in users])
    *tenant_answers, other_answers = answers
    # the last answer of either: both principals' bytes went at the tenant's one rate, as Kafka's model says
    elapsed_s = max(at for answered in tenant_answers for _, at in answered)
    held_to_the_model("two raw producers of a tenant", elapsed_s,
                      [ms for answered in tenant_answers for ms, _ in answered],
                      [[len(batch) for batch in BATCHES]] * len(TENANT_USERS))
    assert all(any(throttle_ms for throttle_ms, _ in answered) for answered in tenant_answers), "each throttled"
    assert [throttle_ms for throttle_ms, _ in other_answers] == [0] * len(BATCHES), "another tenant's slowed"
    assert tenant_throttles(proxy) > 0 and user_throttles(proxy) == 0

    # bob's own quota, a quarter of the tenant's, set in the file: it holds him to it, and the budget stays far
    quota_file.write_text(quota_text(WINDOWS) + f'[[quota]]\nuser = "bob"\nproducer_byte_rate = {OWN_RATE}\n')
    proxy.wait_for_log("reloaded 2 quota entries", timeout_s=30)
    time.sleep(WINDOWS + 1)  # the tenant's samples out of its window
    tenant_throttled = tenant_throttles(proxy)
    own_batches = BATCHES[:len(BATCHES) // 3]
    answered = pipelined_produce(proxy, "bob", topic, own_batches, threading.Barrier(1))
    held_to_the_model("bob under his own quota", answered[-1][1], [ms for ms, _ in answered],
                      [[len(batch) for batch in own_batches]], rate=OWN_RATE)
    assert user_throttles(proxy) > 0 and tenant_throttles(proxy) == tenant_throttled


def test_librdkafka_and_kafka_python_producers_of_a_tenant_share_its_budget_as_kafka_shares_a_quota(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(quota_text(11))
    proxy = own_proxy("--sasl-users", str(users_file(tmp_path)), "--quota-file", str(quota_file))
    create_topic(broker.bootstrap, topic)
    budget = SharedBudget(proxy, Lane(topic, TENANT_USERS), Lane(topic, (OTHER_TENANT_USER, OTHER_TENANT_USER)),
                          lambda: tenant_throttles(proxy))
    held_as_kafka_holds(broker, topic, budget, "producer_byte_rate", produce_with_librdkafka,
                        produce_with_kafka_python, written=False, what="tenant's budget")


def test_two_proxies_of_a_fleet_hold_the_principals_of_a_tenant_to_its_one_budget(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    members = start_fleet(own_proxy, tmp_path, quota_text(WINDOWS), members=2,
                          arguments=("--sasl-users", str(users_file(tmp_path))))
    create_topic(broker.bootstrap, topic)
    barrier = threading.Barrier(len(TENANT_USERS))
    answers, _ = side_by_side(*[lambda member=member, user=user: pipelined_produce(member, user, topic, BATCHES,
                                                                                     barrier)
                                for member, user in zip(members, TENANT_USERS, strict=True)])
    elapsed_s = max(at for answered in answers for _, at in answered)
    held_to_the_model("two raw producers of a tenant, through two proxies", elapsed_s,
                      [ms for answered in answers for ms, _ in answered],
                      [[len(batch) for batch in BATCHES]] * len(TENANT_USERS))
    assert all(tenant_throttles(member) > 0 for member in members)


def test_a_tenants_mutation_budget_is_shared_by_its_principals_raw_frames_and_librdkafka(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    """One partition a second, eleven of burst, for alice and bob together: alice's 12 partitions (strict CreateTopics
    v7, raw frames) leave nothing for bob's librdkafka AdminClient (CreateTopics v4, permissive: created, throttled),
    and alice's next topic is refused; carol, of another tenant, creates hers."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(f"{TENANTS}controller_mutation_rate = 1\n")
    proxy = own_proxy("--sasl-users", str(users_file(tmp_path)), "--quota-file", str(quota_file))
    with logged_in(proxy, "alice") as sock:
        assert create(sock, "raw", creatable(f"{topic}-alice", 12)) == [0]
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap, **sasl("bob")})
    admin.create_topics([NewTopic(f"{topic}-bob", 1, 1)], operation_timeout=30)[f"{topic}-bob"].result(timeout=60)
    assert tenant_throttles(proxy, "controller_mutation_rate") == 1
    with logged_in(proxy, "alice") as sock:
        assert create(sock, "raw", creatable(f"{topic}-alice-again", 1)) == [THROTTLING_QUOTA_EXCEEDED]
    with logged_in(proxy, OTHER_TENANT_USER) as sock:
        assert create(sock, "raw", creatable(f"{topic}-carol", 12)) == [0]
    rejected = metrics(proxy)
    assert rejected['kafka_quota_proxy_tenant_usage_ratio{quota_type="controller_mutation_rate",tenant="payments"}'] > 0
    assert rejected['kafka_quota_proxy_rejected_requests_total{quota_type="controller_mutation_rate"}'] == 0


def test_a_tenants_producer_id_budget_is_shared_by_its_principals_raw_frames_and_librdkafka(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    """Reject mode, a burst of ten new producer IDs refilled one every 100 seconds, for alice and bob together:
    alice's ten (raw frames) and bob's librdkafka idempotent producer (the bucket at zero admits one more) use it up,
    so bob's next InitProducerId is throttled and its ID refused; carol, of another tenant, is not held back."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[settings]\n"producer.id.quota.window.num" = 2\n'
                          '"producer.id.quota.window.size.seconds" = 500\n'
                          f'"producer.id.quota.mode" = "reject"\n{TENANTS}producer_ids_rate = 0.01\n')
    proxy = own_proxy("--sasl-users", str(users_file(tmp_path)), "--quota-file", str(quota_file))
    create_topic(broker.bootstrap, topic)

    def new_ids(user: str, count: int) -> list[int]:
        """Each of ``count`` new producer IDs' first batch, on a connection of ``user``'s: its error."""
        with logged_in(proxy, user) as sock:
            errors = []
            for sequence in range(count):
                sock.sendall(idempotent_request(topic, new_producer_id(sock).producer_id, 0, sequence))
                (error,) = partition_errors(read_frame(sock)).values()
                errors.append(error)
            return errors

    assert new_ids("alice", 10) == [0] * 10
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "enable.idempotence": True, **sasl("bob")})
    delivered: list[object] = []
    producer.produce(topic, b"bob", on_delivery=lambda error, _: delivered.append(error))
    assert producer.flush(60) == 0 and delivered == [None]
    with logged_in(proxy, "bob") as sock:  # the tenant's bucket below zero: a hundred seconds until an ID fits
        answer = new_producer_id(sock)
    assert 90_000 <= answer.throttle_time_ms <= 100_000  # and the connection muted for it, as Kafka mutes it
    with logged_in(proxy, "bob") as sock:  # a producer that does not wait is refused
        sock.sendall(idempotent_request(topic, answer.producer_id, 0, 0))
        assert partition_errors(read_frame(sock)) == {0: THROTTLING_QUOTA_EXCEEDED}
    assert new_ids(OTHER_TENANT_USER, 3) == [0] * 3
    seen = metrics(proxy)
    assert seen['kafka_quota_proxy_tenant_rejected_requests_total{quota_type="producer_ids_rate"}'] == 1
    assert seen['kafka_quota_proxy_rejected_requests_total{quota_type="producer_ids_rate"}'] == 0


def test_a_tenants_consumers_share_its_fetch_budget_raw_frames(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    """Kafka's throttled-empty-answer rule under the tenant's one budget: alice's and bob's pipelined fetches, 2.1 MB
    each (past the 2 MB burst alone, however their starts fall), take together at least the time Kafka's model gives
    the two under one rate (each under a budget of its own: far less), every record still comes once, and an
    empty answer's bytes are taken back; carol, of another tenant, reads unthrottled."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(quota_text(WINDOWS).replace("producer_byte_rate", "consumer_byte_rate"))
    proxy = own_proxy("--sasl-users", str(users_file(tmp_path)), "--quota-file", str(quota_file))
    create_topic(broker.bootstrap, topic)
    count = 21
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, acks="all")
    for _ in range(count):
        producer.send(topic, bytes(99_900)).get(30)  # a batch a record: offsets 0 to count - 1
    producer.close()
    size = len(record_batch([bytes(99_900)]))
    barrier = threading.Barrier(len(TENANT_USERS))
    answers, _ = side_by_side(*[lambda user=user: pipelined_fetch(proxy, user, topic, size, count, barrier)
                                for user in TENANT_USERS])
    # a lower bound alone (the proxy throttles by its own clock, a busy machine only adds time): with 3 windows a
    # sample leaving the window lets through a burst the next answer pays for, more throttle than the model's
    expected_s = kafka_quota_model([[size] * count] * len(TENANT_USERS), RATE, window_num=WINDOWS, fetch=True).elapsed_s
    elapsed_s = max(at for _, at in answers)
    print(f"pipelined fetches of a tenant: {elapsed_s:.2f} s; Kafka's model {expected_s:.2f} s")
    assert elapsed_s >= expected_s * (1 - MODEL_TOLERANCE)
    assert all(any(throttles) for throttles, _ in answers), "each principal held"
    assert sum(len(throttles) for throttles, _ in answers) > len(TENANT_USERS) * count, "some answers were empty"
    # each record's batch charged once: a refused answer's 100 kB taken back (a response's own bytes are a few dozen)
    delivered = len(TENANT_USERS) * count * size
    fetched = usage_totals(proxy, lambda totals: totals.get("fetch_bytes", 0) >= delivered)["fetch_bytes"]
    assert delivered <= fetched < delivered + len(TENANT_USERS) * count * 1000
    other, _ = pipelined_fetch(proxy, OTHER_TENANT_USER, topic, size, count, threading.Barrier(1))
    assert other == [0] * count


def test_librdkafka_and_kafka_python_consumers_of_a_tenant_share_its_budget_as_kafka_shares_a_quota(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    """librdkafka fetches by topic id and ignores a throttle, kafka-python waits it out: both held to the tenant's one
    budget as Kafka holds them to a quota they share, in the same run."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(quota_text(11).replace("producer_byte_rate", "consumer_byte_rate"))
    proxy = own_proxy("--sasl-users", str(users_file(tmp_path)), "--quota-file", str(quota_file))
    create_topic(broker.bootstrap, topic)
    budget = SharedBudget(proxy, Lane(topic, TENANT_USERS), Lane(topic, (OTHER_TENANT_USER, OTHER_TENANT_USER)),
                          lambda: tenant_throttles(proxy, "consumer_byte_rate"))
    held_as_kafka_holds(broker, topic, budget, "consumer_byte_rate", read_with_librdkafka, read_with_kafka_python,
                        written=True, what="tenant's budget")


REQUESTS = 60
"""Produce requests of one message each, pipelined by librdkafka, against 20 of burst: to pass unthrottled they would
have to be sent about as slowly as the budget's ten a second, for six seconds, and librdkafka sends them at once."""


def test_a_tenants_principals_share_its_request_rate_raw_frames_and_librdkafka(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    """Ten requests a second for alice and bob together: their pipelined Metadata requests are held to Kafka's model
    of one rate while carol's are not; then bob's librdkafka producer, one message a request, is held back by the same
    budget and delivers every message."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(quota_text(WINDOWS).replace(f"producer_byte_rate = {RATE}", "request_rate = 10"))
    proxy = own_proxy("--sasl-users", str(users_file(tmp_path)), "--quota-file", str(quota_file))
    create_topic(broker.bootstrap, topic)
    users = (*TENANT_USERS, OTHER_TENANT_USER)
    barrier = threading.Barrier(len(users))
    answers, _ = side_by_side(*[lambda user=user: pipelined_metadata(proxy, f"raw-{user}", 20, login(user), barrier)
                                for user in users])
    *tenant_answers, other_answers = answers
    held_to_the_model("pipelined requests of a tenant", max(at for answered in tenant_answers for *_, at in answered),
                      [ms for answered in tenant_answers for _, ms, _ in answered], [[1] * 20] * len(TENANT_USERS),
                      rate=10)
    assert [ms for _, ms, _ in other_answers] == [0] * 20
    before = tenant_throttles(proxy, "request_rate")
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "batch.num.messages": 1, "linger.ms": 0,
                         **sasl("bob")})
    delivered: list[object] = []
    for _ in range(REQUESTS):
        producer.produce(topic, b"r", on_delivery=lambda error, _: delivered.append(error))
        producer.poll(0)
    assert producer.flush(60) == 0 and delivered == [None] * REQUESTS
    assert tenant_throttles(proxy, "request_rate") > before
