"""Topic quotas against Apache Kafka: one budget for a topic, shared by every principal that writes or reads it.

Kafka has no such quota (KIP-1010 is still under discussion); the proxy charges each topic the record bytes
of its partitions in a Produce request and in a Fetch response, with the byte rates' math. Raw pipelined
producers of two users (one naming the topic by its id, Produce v13) write one topic under a 1 MB/s topic
quota and are held together to Kafka's model (``kafka_quota_model``: both connections charging one rate, each
muted for its own throttles); with 3 windows of 1 s, a burst of 2 MB goes through first and the run takes
seconds. librdkafka and kafka-python producers, then consumers, of two users are compared with the same two
clients under Kafka's own quota shared by both (a client id's, the nearest Kafka has), both sides in the same
run at the same time, Kafka's 11 windows on both. Every case then has the same clients write or read another
topic, with no throttle at all.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as RdTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from protocol.apis import Api
from protocol.codecs import decode_response
from proxy.security.sasl_messages import plain_token
from tests.fidelity import Quota, broker_quotas
from tests.integration.test_produce_quotas import create_topic, metrics, usage_lines
from tests.integration.test_sasl import add_user
from tests.support import (
    LOOPBACK,
    PASSWORDS,
    Cluster,
    ProxyProcess,
    call,
    encode_request,
    kafka_quota_model,
    read_frame,
    record_batch,
    wait_until,
)

pytestmark = pytest.mark.integration
RATE = 1_000_000
"""The topic's budget, bytes/s."""
WINDOWS = 3
BURST = RATE * (WINDOWS - 1)
"""What goes through before the first throttle (Kafka's Rate pads a young window to num - 1 samples)."""
PER_USER = 3_000_000
"""Record bytes each of the two users writes (or reads): 6 MB, 4 MB of them at the quota's rate."""
MODEL_TOLERANCE = 0.1
"""Below the model's time, or around Kafka's (the issue's 10%); measured 0.99-1.04x of Kafka's, 0.99x of the model."""
THROTTLE_TOLERANCE = 0.2
"""Over the throttles the model gives, summed. A client that comes back later than the model's finds a lower rate
and gets less; but with 3 windows of 1 s a later charge may also fall past a sample leaving the window, and the
answer after the burst this lets through pays for it."""
USERS = ("alice", "bob")


class Topics(NamedTuple):
    proxy: ProxyProcess
    limited: str
    """Under a 1 MB/s produce and consume topic quota."""
    free: str
    """Under none."""
    cluster: str
    """The cluster's own bootstrap, around the proxy."""


def topics_proxy(own_proxy, broker: Cluster, tmp_path: Path, topic: str,  # type: ignore[no-untyped-def]
                 windows: int = WINDOWS) -> Topics:
    limited, free = f"{topic}-limited", f"{topic}-free"
    users_file = tmp_path / "users.toml"
    for user in USERS:
        add_user(users_file, user, "PLAIN")
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(f'[settings]\n"quota.window.num" = {windows}\n"quota.window.size.seconds" = 1\n'
                          f'[[quota]]\ntopic = "{limited}"\nproducer_byte_rate = {RATE}\nconsumer_byte_rate = {RATE}\n')
    proxy: ProxyProcess = own_proxy("--sasl-users", str(users_file), "--quota-file", str(quota_file))
    for name in (limited, free):
        create_topic(broker.bootstrap, name)
    return Topics(proxy, limited, free, broker.bootstrap)


@pytest.fixture
def topics(own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> Topics:  # type: ignore[no-untyped-def]
    return topics_proxy(own_proxy, broker, tmp_path, topic)


def login(user: str) -> list[bytes]:
    return [encode_request(Api.SASL_HANDSHAKE, 1, correlation_id=1000, mechanism="PLAIN"),
            encode_request(Api.SASL_AUTHENTICATE, 2, correlation_id=1001,
                           auth_bytes=plain_token(user, PASSWORDS[user]))]


@contextlib.contextmanager
def logged_in(proxy: ProxyProcess, user: str) -> Iterator[socket.socket]:
    """A connection to the proxy on which ``user`` has logged in (SASL PLAIN, raw frames)."""
    with socket.create_connection((LOOPBACK, proxy.port), timeout=60) as sock:
        for frame in login(user):
            sock.sendall(frame)
            assert read_frame(sock), "the login was not answered"
        yield sock


def topic_id(cluster: str, topic: str) -> uuid.UUID:
    host, port = cluster.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        answer: Any = call(sock, Api.METADATA, 12, topics=[{"name": topic, "topic_id": None}],
                           allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return answer.topics[0].topic_id  # type: ignore[no-any-return]


def pipelined_produce(proxy: ProxyProcess, user: str, topic: str | uuid.UUID, batches: list[bytes],
                      started: threading.Barrier) -> list[tuple[int, float]]:
    """Every batch in its own Produce request, all written at once behind a login: (throttle_time_ms, seconds
    from the barrier to the answer) of each answer, every one checked to be without error. A topic named by its
    id is written with Produce v13, which names topics so; a topic named by name with v7."""
    version = 13 if isinstance(topic, uuid.UUID) else 7
    named = {"topic_id": topic} if isinstance(topic, uuid.UUID) else {"name": topic}
    frames = [encode_request(Api.PRODUCE, version, correlation_id=i, client_id=f"raw-{user}", transactional_id=None,
                             acks=-1, timeout_ms=30_000,
                             topic_data=[{**named, "partition_data": [{"index": 0, "records": batch}]}])
              for i, batch in enumerate(batches)]
    answered = []
    with logged_in(proxy, user) as sock:
        started.wait()
        began = time.monotonic()
        writer = threading.Thread(target=sock.sendall, args=(b"".join(frames),))
        writer.start()
        for correlation_id in range(len(frames)):
            frame = read_frame(sock)
            assert frame and int.from_bytes(frame[:4], "big") == correlation_id
            header_bytes = 5 if version >= 9 else 4  # a flexible response header has its tagged fields
            response = decode_response(Api.PRODUCE, version, frame[header_bytes:])
            assert [p.error_code for t in response.responses for p in t.partition_responses] == [0]
            answered.append((response.throttle_time_ms, time.monotonic() - began))
        writer.join()
    return answered


def side_by_side(*runs: Callable[[], Any]) -> tuple[list[Any], float]:
    """Each run in its own thread, started together: their results, and the seconds until the last ended (a run's
    exception raised here)."""
    results: list[Any] = [None] * len(runs)
    failures: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = runs[index]()
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(runs))]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    if failures:
        raise failures[0]
    return results, time.monotonic() - began


def topic_throttles(proxy: ProxyProcess, quota_type: str) -> float:
    return metrics(proxy).get(f'kafka_quota_proxy_topic_throttled_requests_total{{quota_type="{quota_type}"}}', 0.0)


def held_to_the_model(what: str, elapsed_s: float, throttles_ms: list[int], request_bytes: list[list[int]],
                      window_num: int = WINDOWS, fetch: bool = False, rate: float = RATE) -> None:
    """Held at least as long as Kafka's model says (the proxy throttles by its own clock from the bytes it charged: a
    busy machine only adds time), and given no more throttle in all than the model gives clients that come back the
    moment their throttle ends (a bound on the time above would be one on the machine's speed)."""
    expected = kafka_quota_model(request_bytes, rate, window_num=window_num, fetch=fetch)
    given_ms = sum(throttles_ms)
    summary = (f"{what}: {elapsed_s:.2f} s, {given_ms} ms of throttle given; Kafka's model {expected.elapsed_s:.2f} s, "
               f"{expected.throttle_ms} ms")
    print(summary)
    assert elapsed_s >= expected.elapsed_s * (1 - MODEL_TOLERANCE), summary
    assert given_ms <= expected.throttle_ms * (1 + THROTTLE_TOLERANCE), summary


def topic_charges(proxy: ProxyProcess, field: str, total: int) -> dict[tuple[str, str], int]:
    """The usage log's ``field`` (``topic_bytes``, ``topic_fetch_bytes``) per (user, topic), once it holds ``total``
    bytes in all: the log is written a second at a time by a thread of the proxy, which a busy machine may hold
    back."""
    charged: dict[tuple[str, str], int] = {}

    def summed() -> bool:
        charged.clear()
        for line in usage_lines(proxy):
            if "topic" in line:
                key = (line["user"], line["topic"])
                charged[key] = charged.get(key, 0) + line[field]
        return sum(charged.values()) >= total

    wait_until(summed, 60, f"{total} bytes of {field} in the usage log")
    return charged


def test_raw_pipelined_producers_of_two_users_share_the_topics_budget(
        topics: Topics) -> None:
    proxy, limited, free, cluster = topics
    batches = [record_batch([bytes(99_900)]) for _ in range(PER_USER // 100_000)]
    barrier = threading.Barrier(len(USERS))
    # alice names the topic by its id (Produce v13): the proxy asks the cluster its name before charging it
    alice_topic = topic_id(cluster, limited)
    answers, _ = side_by_side(lambda: pipelined_produce(proxy, "alice", alice_topic, batches, barrier),
                              lambda: pipelined_produce(proxy, "bob", limited, batches, barrier))
    # the last answer of either: both users' bytes went at the topic's one rate, as Kafka's model says
    elapsed_s = max(at for answered in answers for _, at in answered)
    held_to_the_model("two raw producers", elapsed_s, [ms for answered in answers for ms, _ in answered],
                      [[len(batch) for batch in batches]] * len(USERS))
    assert all(any(throttle_ms for throttle_ms, _ in answered) for answered in answers), "each user throttled"
    # what was charged: each user's record batches to the topic, as the usage log has them per (user, topic)
    per_user = sum(map(len, batches))
    charged = topic_charges(proxy, "topic_bytes", len(USERS) * per_user)
    assert charged == {(user, limited): per_user for user in USERS}
    throttled = topic_throttles(proxy, "producer_byte_rate")
    barrier = threading.Barrier(len(USERS))
    answers, _ = side_by_side(*[lambda user=user: pipelined_produce(proxy, user, free, batches, barrier)
                                for user in USERS])
    assert [throttle_ms for answered in answers for throttle_ms, _ in answered] == [0] * 2 * len(batches)
    assert topic_throttles(proxy, "producer_byte_rate") == throttled


def pipelined_fetch(proxy: ProxyProcess, user: str, topic: str | uuid.UUID, batch_bytes: int, batches: int,
                    started: threading.Barrier) -> tuple[list[int], float]:
    """Every batch (one a record, at offsets 0 to ``batches`` - 1) asked for in a Fetch of its own, all written at
    once behind a login, then each answered empty asked for again, one at a time, until every batch has come: the
    throttle of every answer, and the seconds from the barrier until the last batch came. A topic named by its id is
    read with Fetch v13, which names topics so; a topic named by name with v11. Kafka answers a throttled fetch
    with no records at all, so an answer is the batch asked for or nothing, with a throttle."""
    version = 13 if isinstance(topic, uuid.UUID) else 11
    named = {"topic_id": topic} if isinstance(topic, uuid.UUID) else {"topic": topic}

    def fetch(offset: int) -> bytes:
        partition = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
                     "partition_max_bytes": batch_bytes}  # the batch asked for, not a byte of the next
        return encode_request(Api.FETCH, version, correlation_id=offset, client_id=f"raw-{user}", replica_id=-1,
                              max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, isolation_level=0, session_id=0,
                              session_epoch=-1, rack_id="", forgotten_topics_data=[],
                              topics=[{**named, "partitions": [partition]}])

    throttles: list[int] = []

    def answer(sock: socket.socket, offset: int) -> bool:
        """Whether the answer to the fetch of ``offset`` carried its batch."""
        frame = read_frame(sock)
        assert frame and int.from_bytes(frame[:4], "big") == offset
        response = decode_response(Api.FETCH, version, frame[5 if version >= 12 else 4:])
        partitions = [p for t in response.responses for p in t.partitions]
        throttles.append(response.throttle_time_ms)
        if not partitions:  # Kafka's throttled answer (``getThrottledResponse``) names no partition
            assert response.throttle_time_ms > 0, "an empty answer without a throttle"
            return False
        assert [(p.error_code, len(p.records or b"")) for p in partitions] == [(0, batch_bytes)]
        return True

    with logged_in(proxy, user) as sock:
        started.wait()
        began = time.monotonic()
        writer = threading.Thread(target=sock.sendall, args=(b"".join(fetch(offset) for offset in range(batches)),))
        writer.start()
        missing = [offset for offset in range(batches) if not answer(sock, offset)]
        writer.join()
        for offset in missing:
            sock.sendall(fetch(offset))
            while not answer(sock, offset):
                sock.sendall(fetch(offset))
    return throttles, time.monotonic() - began


def test_raw_pipelined_consumers_of_two_users_share_the_topics_budget(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    """Kafka's throttled-empty-answer rule: a fetch over the topic's budget is answered with no records and the
    throttle, its bytes taken back, and asked for again after the throttle. alice names the topic by its id.

    Kafka's 11 windows: with 3, Apache Kafka 4.3.1 itself took 5.1-6.1 s against the model's 4.1 for this very
    pattern (two connections sharing a client id's quota, 3 runs), as the proxy did: a sample leaving the window
    lets a burst through that the next answer pays for with a second's throttle. With 11, Kafka took 11.91-12.03 s
    against the model's 12.00 (3 runs)."""
    proxy, limited, free, cluster = topics_proxy(own_proxy, broker, tmp_path, topic, windows=11)
    batches = KAFKA_PER_USER // 100_000
    producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=0, acks="all")
    for name in (limited, free):
        for _ in range(batches):
            producer.send(name, bytes(99_900)).get(30)  # a batch a record: offsets 0 to batches - 1
    producer.close()
    size = len(record_batch([bytes(99_900)]))  # the producer's batches have its size: the same value, no key
    barrier = threading.Barrier(len(USERS))
    answers, _ = side_by_side(lambda: pipelined_fetch(proxy, "alice", topic_id(cluster, limited), size, batches,
                                                      barrier),
                              lambda: pipelined_fetch(proxy, "bob", limited, size, batches, barrier))
    elapsed_s = max(at for _, at in answers)
    held_to_the_model("two raw consumers", elapsed_s, [ms for throttles, _ in answers for ms in throttles],
                      [[size] * batches] * len(USERS), window_num=11, fetch=True)
    assert sum(len(throttles) for throttles, _ in answers) > len(USERS) * batches, "some answers were empty"
    # what was charged: each user's batches once, to the topic; the empty answers' bytes were taken back
    charged = topic_charges(proxy, "topic_fetch_bytes", len(USERS) * batches * size)
    assert charged == {(user, limited): batches * size for user in USERS}
    throttled = topic_throttles(proxy, "consumer_byte_rate")
    barrier = threading.Barrier(len(USERS))
    answers, _ = side_by_side(*[lambda user=user: pipelined_fetch(proxy, user, free, size, batches, barrier)
                                for user in USERS])
    assert [throttles for throttles, _ in answers] == [[0] * batches] * len(USERS)
    assert topic_throttles(proxy, "consumer_byte_rate") == throttled


def sasl(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": PASSWORDS[user]}


def kafka_python_sasl(user: str) -> dict[str, str]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": user,
            "sasl_plain_password": PASSWORDS[user]}


MESSAGE = bytes(10_000)
BATCH_BYTES = 100_000


class Arrivals:
    """When a client's records were acknowledged (a producer's) or received (a consumer's): its time from the
    first to the last is what it saw of the quota (its start-up, metadata and login, is not in it)."""

    def __init__(self) -> None:
        self.at: list[float] = []
        self.failed: list[object] = []

    def arrived(self, error: object = None) -> None:
        if error is None:
            self.at.append(time.monotonic())
        else:
            self.failed.append(error)


def produce_with_librdkafka(bootstrap: str, topic: str, records: int, **settings: str) -> Arrivals:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": BATCH_BYTES, "acks": "all",
                         **settings})
    deliveries = Arrivals()
    for _ in range(records):
        producer.produce(topic, MESSAGE, on_delivery=lambda error, _: deliveries.arrived(error))
        producer.poll(0)
    assert producer.flush(120) == 0
    return deliveries


def produce_with_kafka_python(bootstrap: str, topic: str, records: int, **settings: str) -> Arrivals:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=BATCH_BYTES, acks="all",
                             **settings)
    deliveries = Arrivals()
    for _ in range(records):
        future = producer.send(topic, MESSAGE)
        future.add_callback(lambda _: deliveries.arrived())
        future.add_errback(deliveries.arrived)
    producer.flush(120)
    producer.close()
    return deliveries


def spread_s(arrivals: list[Arrivals], records: int) -> float:
    """Every client's every record arrived: from the first arrival at any to the last."""
    assert [(len(each.at), each.failed) for each in arrivals] == [(records, [])] * len(arrivals)
    return max(max(each.at) for each in arrivals) - min(min(each.at) for each in arrivals)


SHARED_CLIENT = "topic-quota-shared"
KAFKA_PER_USER = 6_000_000
"""Kafka's 11 windows of 1 s: 10 MB of the 12 go through at once, 2 MB at the rate."""


FETCH_BYTES = 500_000
"""Each fetch's max bytes: the responses the model charges."""


def read_with_librdkafka(bootstrap: str, topic: str, count: int, **settings: str) -> Arrivals:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                         "fetch.max.bytes": FETCH_BYTES, "max.partition.fetch.bytes": FETCH_BYTES,
                         "message.max.bytes": FETCH_BYTES, **settings})
    consumer.assign([RdTopicPartition(topic, 0, OFFSET_BEGINNING)])
    arrivals = Arrivals()
    deadline = time.monotonic() + 120
    while len(arrivals.at) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            arrivals.arrived(message.error())
    consumer.close()
    return arrivals


def read_with_kafka_python(bootstrap: str, topic: str, count: int, **settings: str) -> Arrivals:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_bytes=FETCH_BYTES,
                             max_partition_fetch_bytes=FETCH_BYTES, **settings)
    consumer.assign([KafkaTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    arrivals = Arrivals()
    deadline = time.monotonic() + 120
    while len(arrivals.at) < count and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            for _ in batch:
                arrivals.arrived()
    consumer.close()
    return arrivals


def write_directly(cluster: str, topic: str, messages: int) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster, linger_ms=20, batch_size=BATCH_BYTES)
    for _ in range(messages):
        producer.send(topic, MESSAGE)
    producer.flush(120)
    producer.close()


Client = Callable[..., Arrivals]
"""``(bootstrap, topic, records, **settings)``: a client writing or reading ``records`` records of the topic."""


class Lane(NamedTuple):
    """A topic, written or read through the proxy by librdkafka as one user and kafka-python as another."""

    topic: str
    users: tuple[str, str]


class SharedBudget(NamedTuple):
    """A budget of the proxy's that two users share, and what it is measured against."""

    proxy: ProxyProcess
    held: Lane
    """The two users on a topic, under the budget."""
    free: Lane
    """Under none."""
    throttled: Callable[[], float]
    """The requests the budget has throttled so far (a metric of the proxy's)."""


def held_as_kafka_holds(broker: Cluster, topic: str, budget: SharedBudget, quota_type: str, librdkafka: Client,
                        kafka_python: Client, written: bool, what: str) -> None:
    """The same two clients, librdkafka and kafka-python (each with its own way with a throttle), under Kafka's own
    ``quota_type`` quota shared by both (a client id's, the nearest Kafka has) and, at the same time, through the
    proxy under its shared ``budget``, as two users: the proxy's time within 10% of Kafka's, Kafka's windows on both
    sides. Then the same clients of the proxy on the free lane: the budget throttles nothing. ``written``: the topics
    are filled first, straight to the cluster (the clients read them)."""
    records = KAFKA_PER_USER // len(MESSAGE)
    kafka_topic = f"{topic}-kafka"
    create_topic(broker.bootstrap, kafka_topic)
    proxy, held, free = budget.proxy, budget.held, budget.free
    for name in {kafka_topic, held.topic, free.topic} if written else ():
        write_directly(broker.bootstrap, name, records)

    def through_the_proxy(lane: Lane) -> list[Arrivals]:
        arrivals, _ = side_by_side(
            lambda: librdkafka(proxy.bootstrap, lane.topic, records, **sasl(lane.users[0])),
            lambda: kafka_python(proxy.bootstrap, lane.topic, records, **kafka_python_sasl(lane.users[1])))
        return arrivals  # type: ignore[no-any-return]

    with broker_quotas(broker, (Quota((("client-id", SHARED_CLIENT),), quota_type, RATE),)):
        (under_kafka, under_proxy), _ = side_by_side(
            lambda: side_by_side(
                lambda: librdkafka(broker.bootstrap, kafka_topic, records, **{"client.id": SHARED_CLIENT}),
                lambda: kafka_python(broker.bootstrap, kafka_topic, records, client_id=SHARED_CLIENT)),
            lambda: through_the_proxy(held))
    kafka_s, proxy_s = spread_s(under_kafka[0], records), spread_s(under_proxy, records)
    print(f"{quota_type}, librdkafka and kafka-python: {proxy_s:.2f} s through the proxy's {what}, "
          f"{kafka_s:.2f} s under Kafka's quota")
    assert 1 - MODEL_TOLERANCE <= proxy_s / kafka_s <= 1 + MODEL_TOLERANCE
    throttled = budget.throttled()
    assert throttled > 0
    spread_s(through_the_proxy(free), records)
    assert budget.throttled() == throttled


def topics_budget(own_proxy, broker: Cluster, tmp_path: Path, topic: str,  # type: ignore[no-untyped-def]
                  quota_type: str) -> SharedBudget:
    proxy, limited, free, _ = topics_proxy(own_proxy, broker, tmp_path, topic, windows=11)
    return SharedBudget(proxy, Lane(limited, USERS), Lane(free, USERS), lambda: topic_throttles(proxy, quota_type))


def test_librdkafka_and_kafka_python_producers_of_two_users_share_the_topics_budget_as_kafka_shares_a_quota(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    budget = topics_budget(own_proxy, broker, tmp_path, topic, "producer_byte_rate")
    held_as_kafka_holds(broker, topic, budget, "producer_byte_rate", produce_with_librdkafka,
                        produce_with_kafka_python, written=False, what="topic quota")


def test_consumers_of_two_users_share_the_topics_budget_as_kafka_shares_a_quota(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    """Kafka's throttled-empty-answer rule on both sides. librdkafka fetches by topic id (Fetch v13+), which the
    proxy names through the cluster's metadata."""
    budget = topics_budget(own_proxy, broker, tmp_path, topic, "consumer_byte_rate")
    held_as_kafka_holds(broker, topic, budget, "consumer_byte_rate", read_with_librdkafka,
                        read_with_kafka_python, written=True, what="topic quota")
