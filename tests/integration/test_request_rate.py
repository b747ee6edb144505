"""The ``request_rate`` quota against Apache Kafka: a client over its requests per second is held to it.

Kafka has no such quota (its ``request_percentage`` is a share of thread time); the proxy follows its byte
rates' math with every request counted as one, so a client is held as a byte-rate quota holds it: each
throttled response is followed by a mute, and the requests behind it wait. Each case is compared with that
model (``kafka_quota_model`` with requests of size 1) from the same run.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaProducer

from protocol.apis import Api
from proxy.security.sasl_messages import plain_token
from tests.integration.test_produce_quotas import assert_held_for_every_throttle, count_messages, create_topic, metrics
from tests.integration.test_sasl import add_user
from tests.support import LOOPBACK, PASSWORDS, ProxyProcess, encode_request, kafka_quota_model, read_frame

pytestmark = pytest.mark.integration
RATE = 5
"""Requests per second: 11 one-second windows admit a burst of 50 before the first throttle."""
BURST = 50
WINDOW_S = 1.0
MODEL_TOLERANCE = 0.2
CHATTY = "chatty"


def request_rate_proxy(own_proxy, tmp_path: Path) -> ProxyProcess:  # type: ignore[no-untyped-def]
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(f'[[quota]]\nclient-id = "{CHATTY}"\nrequest_rate = {RATE}\n')
    proxy: ProxyProcess = own_proxy("--quota-file", str(quota_file))
    return proxy


def pipelined_metadata(proxy: ProxyProcess, client_id: str, count: int, login: list[bytes] | None = None,
                       together: threading.Barrier | None = None) -> list[tuple[int, int, float]]:
    """``count`` Metadata v12 requests written at once on one connection (behind the ``login`` frames, whose
    answers are read first; once connected, after the others of ``together``): (correlation id, throttle_time_ms,
    seconds from the first write to its answer) of each answer, in the order they came."""
    login = login or []
    frames = [encode_request(Api.METADATA, 12, correlation_id=i, client_id=client_id, topics=[],
                             allow_auto_topic_creation=False, include_topic_authorized_operations=False)
              for i in range(count)]
    answered = []
    with socket.create_connection((LOOPBACK, proxy.port), timeout=60) as sock:
        if together is not None:
            together.wait()
        started = time.monotonic()
        writer = threading.Thread(target=sock.sendall, args=(b"".join([*login, *frames]),))
        writer.start()
        for _ in login:
            assert read_frame(sock), "the login was not answered"
        for _ in frames:
            frame = read_frame(sock)
            assert frame, "the proxy closed the connection"
            correlation_id, = struct.unpack_from(">i", frame)
            throttle_ms, = struct.unpack_from(">i", frame, 5)  # header v1: correlation id, no tagged fields
            answered.append((correlation_id, throttle_ms, time.monotonic() - started))
        writer.join()
    return answered


def test_pipelined_raw_requests_over_the_rate_are_held_to_it(own_proxy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proxy = request_rate_proxy(own_proxy, tmp_path)
    count = 60
    calm: list[list[tuple[int, int, float]]] = []
    neighbour = threading.Thread(target=lambda: calm.append(pipelined_metadata(proxy, "calm", count)))
    neighbour.start()
    answered = pipelined_metadata(proxy, CHATTY, count)
    neighbour.join()
    assert [correlation_id for correlation_id, _, _ in answered] == list(range(count))
    throttles = [throttle_ms for _, throttle_ms, _ in answered]
    schedule = [(throttle_ms, round(at, 2)) for _, throttle_ms, at in answered]
    # the burst goes through; after it, never more than Kafka's rate allows by the time of each answer: the
    # window a rate is measured over is at most num - 1 windows plus the time since the first request
    assert throttles[:BURST] == [0] * BURST and any(throttles[BURST:]), schedule
    for number, (_, _, at) in enumerate(answered, start=1):
        assert number <= RATE * (BURST / RATE + at) + 1, schedule
    # each throttle holds the requests behind it: every answer comes after the throttles before it
    assert_held_for_every_throttle([(at, throttle_ms) for _, throttle_ms, at in answered])
    # and no more throttle than Kafka's schedule (the earliest any client could go) gives, as a request decided later
    # finds a lower rate; but one decided a little later than the model's may cross the end of a window, where
    # Kafka's rate jumps (one window more)
    model = kafka_quota_model([[1] * count], RATE)
    print(f"{count} pipelined requests: {sum(throttles)} ms of throttle, Kafka's schedule {model.throttle_ms} ms")
    assert sum(throttles) <= model.throttle_ms * (1 + MODEL_TOLERANCE) + WINDOW_S * 1000, (schedule, model)
    # another client id on its own connection at the same time: no quota, never throttled
    assert {throttle_ms for _, throttle_ms, _ in calm[0]} == {0}


def test_a_users_request_rate_counts_its_requests_after_the_login_not_the_login(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path) -> None:
    users_file = tmp_path / "users.toml"
    add_user(users_file, "alice", "PLAIN")
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(f'[[quota]]\nuser = "alice"\nrequest_rate = {RATE}\n')
    proxy = own_proxy("--sasl-users", str(users_file), "--quota-file", str(quota_file))
    login = [encode_request(Api.API_VERSIONS, 3, correlation_id=-3, client_software_name="t",
                            client_software_version="1"),
             encode_request(Api.SASL_HANDSHAKE, 1, correlation_id=-2, mechanism="PLAIN"),
             encode_request(Api.SASL_AUTHENTICATE, 2, correlation_id=-1,
                            auth_bytes=plain_token("alice", PASSWORDS["alice"]))]
    answered = pipelined_metadata(proxy, "any-client", BURST + 5, login)
    throttles = [throttle_ms for _, throttle_ms, _ in answered]
    # ApiVersions and the login are not charged: alice's whole burst is left for her Metadata requests
    assert throttles[:BURST] == [0] * BURST and any(throttles[BURST:]), throttles


def librdkafka_one_by_one(bootstrap: str, topic: str, count: int) -> float:
    """librdkafka pipelines and ignores throttle_time_ms; each record is flushed alone: one Produce each."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": CHATTY, "acks": "1", "linger.ms": 0})
    started = time.monotonic()
    for i in range(count):
        producer.produce(topic, b"r%d" % i)
        assert producer.flush(60) == 0, "a record left unsent"
    return time.monotonic() - started


def kafka_python_one_by_one(bootstrap: str, topic: str, count: int) -> float:
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=CHATTY, acks=1, linger_ms=0)
    started = time.monotonic()
    for i in range(count):
        producer.send(topic, b"r%d" % i).get(timeout=60)
    elapsed = time.monotonic() - started
    producer.close()
    return elapsed


@pytest.mark.parametrize("client", [librdkafka_one_by_one, kafka_python_one_by_one],
                         ids=["confluent-kafka", "kafka-python"])
def test_a_client_over_its_request_rate_is_held_to_it(own_proxy, tmp_path: Path, topic: str, client) -> None:  # type: ignore[no-untyped-def]
    proxy = request_rate_proxy(own_proxy, tmp_path)
    create_topic(proxy.bootstrap, topic)
    count = 60
    elapsed = client(proxy.bootstrap, topic, count)
    # at least one Produce per record, besides the client's Metadata: no client gets through faster than the
    # model of these Produce requests alone, and the proxy throttles no more than the model of all it charged
    model = kafka_quota_model([[1] * count], RATE)
    assert elapsed >= model.elapsed_s * (1 - MODEL_TOLERANCE), f"{count} requests at {RATE}/s: {elapsed:.1f} s, " \
        f"Kafka's model {model.elapsed_s:.1f} s"
    values = metrics(proxy)
    assert any(key.startswith('kafka_quota_proxy_request_rate{broker="') and f'client_id="{CHATTY}",user=""' in key
               and rate > 0 for key, rate in values.items())
    throttled_ms = values[f'kafka_quota_proxy_throttle_time_ms_total{{client_id="{CHATTY}",quota_type="request_rate",'
                          f'user=""}}']
    ceiling = kafka_quota_model([[1] * (count + 20)], RATE).throttle_ms * (1 + MODEL_TOLERANCE)
    assert 0 < throttled_ms <= ceiling, (throttled_ms, ceiling)
    assert count_messages(proxy.bootstrap, topic) == count
