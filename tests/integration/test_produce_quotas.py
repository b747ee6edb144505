"""Produce quotas enforced by the proxy against the real broker (principal ANONYMOUS until SASL)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from quotas.usage_record import BLOCK_FIELDS, QUOTAS_FIELD, TOPIC_FIELDS, USAGE_FIELDS
from tests.support import ProxyProcess, kafka_quota_model, new_producer_id, read_to_end, wait_until

pytestmark = pytest.mark.integration
MIB = 1024 * 1024
MEBIBYTES = 17
"""What the throttled client writes at 1 MiB/s: past the credit of Kafka's windows, within the first throttle cycle
(22 MiB and more pay for a second one)."""
MODEL_TOLERANCE = 0.2
"""Under Kafka's model's time and over its throttles (the directions a busy machine cannot break): for requests
that are not all the model's size, nor come back when the model's do."""


def metrics(proxy: ProxyProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def max_throttle_ms(producer: KafkaProducer) -> float:
    """kafka-python's client-side record of broker throttles (its throttle-time-max sensor)."""
    values = [value for group in producer.metrics().values() for name, value in group.items()
              if name == "throttle-time-max"]
    assert values, "kafka-python exposes no throttle-time-max metric"
    return max(values)


def create_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()


def produce(bootstrap: str, topic: str, client_id: str, mebibytes: int) -> tuple[float, KafkaProducer]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks="all", linger_ms=5,
                             batch_size=64 * 1024, max_request_size=2 * MIB)
    payload = b"q" * 1024
    started = time.monotonic()
    for _ in range(mebibytes * 1024):
        producer.send(topic, payload)
    producer.flush(timeout=120)
    return time.monotonic() - started, producer


def pid_quota_file(tmp_path: Path, rate: float, mode: str, window_size_s: float = 5) -> str:
    """A producer_ids_rate quota for ANONYMOUS with 2 windows: burst = 2 x ``window_size_s`` x ``rate``."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(f'[settings]\n"producer.id.quota.window.num" = 2\n'
                          f'"producer.id.quota.window.size.seconds" = {window_size_s}\n'
                          f'"producer.id.quota.mode" = "{mode}"\n'
                          f'[[quota]]\nuser = "ANONYMOUS"\nproducer_ids_rate = {rate}\n')
    return str(quota_file)


def usage_lines(proxy: ProxyProcess) -> list[dict[str, Any]]:
    """The usage log's lines of traffic (not its lines of the quotas in force)."""
    return [line for path in (proxy.state_dir / "usage").glob("usage-*.jsonl")
            for line in map(json.loads, path.read_text().splitlines()) if QUOTAS_FIELD not in line]


def final_usage_lines(proxy: ProxyProcess) -> list[dict[str, Any]]:
    """``usage_lines`` once the proxy has stopped: it writes what is left as it stops, so no second is missing
    however late a busy machine runs its once-a-second writer."""
    assert proxy.stop() == 0, proxy.log()
    return usage_lines(proxy)


COUNTERS = frozenset((*USAGE_FIELDS, *TOPIC_FIELDS, *BLOCK_FIELDS))
"""A usage line's counters: what is not its time, its entity (user, client id, topic, tenant) or a broker id."""


def summed_usage(lines: list[dict[str, Any]]) -> dict[str, int]:
    """The usage log's counters summed over ``lines``."""
    totals: dict[str, int] = {}
    for line in lines:
        for key, value in line.items():
            if key in COUNTERS:
                totals[key] = totals.get(key, 0) + value
    return totals


def usage_totals(proxy: ProxyProcess, ready: Callable[[dict[str, int]], object]) -> dict[str, int]:
    """The usage log's counters summed over every line, once ``ready`` holds of them: the log is written a second at
    a time by a thread of the proxy, which a busy machine may hold back (``final_usage_totals`` where the proxy may
    stop first)."""
    totals: dict[str, int] = {}

    def written() -> object:
        totals.clear()
        totals.update(summed_usage(usage_lines(proxy)))
        return ready(totals)

    wait_until(written, 60, "the usage log's counters")
    return totals


def final_usage_totals(proxy: ProxyProcess) -> dict[str, int]:
    """``usage_totals`` once the proxy has stopped (``final_usage_lines``)."""
    return summed_usage(final_usage_lines(proxy))


def count_messages(bootstrap: str, topic: str) -> int:
    return len(read_to_end(bootstrap, topic, fetch_max_bytes=16 * MIB))


def assert_held_to_kafkas_model(elapsed_s: float, usage: dict[str, int], quota: float, what: str) -> None:
    """A producer that took ``elapsed_s`` against Kafka's model for its requests (``usage``: the usage log's totals
    of them) at their mean size, one at a time. No client gets through faster: the proxy's throttles run on its own
    clock from the bytes it charged, so a busy machine only adds time. And the proxy gave no more throttle than Kafka
    would give a client that comes back the moment it may: one coming back later finds a lower rate and gets less.
    Both hold for requests small beside the quota (a second's quota is many requests); with requests of a second's
    quota each, Kafka's windows move the end and the throttles by steps of a second either way, more than a
    request's lateness does."""
    requests, charged = usage["produce_requests"], usage["bytes"]
    model = kafka_quota_model([[charged // requests] * requests], quota)
    what = f"{what} ({charged} B in {requests} requests)"
    print(f"{what}: {elapsed_s / model.elapsed_s:.3f}x Kafka's model's time, "
          f"{usage['throttle_ms'] / model.throttle_ms:.3f}x its throttle")
    assert elapsed_s >= model.elapsed_s * (1 - MODEL_TOLERANCE), \
        f"{what}: {elapsed_s:.1f} s, Kafka's model {model.elapsed_s:.1f} s"
    assert 0 < usage["throttle_ms"] <= model.throttle_ms * (1 + MODEL_TOLERANCE), \
        f"{what}: throttled {usage['throttle_ms']} ms, Kafka's model at most {model.throttle_ms} ms"


def assert_held_for_every_throttle(answers: list[tuple[float, int]]) -> None:
    """``answers``: (seconds since the first request was written, throttle_time_ms) of one connection's responses,
    in order. The proxy reads nothing more from a connection until a throttle it gave has run out, so each answer
    comes no sooner than the throttles before it add up; a busy machine only makes it later."""
    held_ms = 0
    for at_s, throttle_ms in answers:
        assert at_s * 1000 >= held_ms, f"answered {at_s:.3f} s in, after {held_ms} ms of throttle: {answers}"
        held_ms += throttle_ms


def test_byte_rate_quota_throttles_only_its_client(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "slow"\nproducer_byte_rate = 1048576\n')
    proxy = own_proxy("--quota-file", str(quota_file))
    create_topic(proxy.bootstrap, topic)
    fast_topic = f"{topic}-fast"
    create_topic(proxy.bootstrap, fast_topic)
    throttled = 'kafka_quota_proxy_throttled_requests_total{quota_type="producer_byte_rate"}'
    unlimited_delivered = threading.Event()

    def unlimited() -> None:
        wait_until(lambda: metrics(proxy).get(throttled, 0) > 0, 60, "the slow client's first throttle")
        _, producer = produce(proxy.bootstrap, fast_topic, "fast", MEBIBYTES)  # while the slow one is held back
        producer.close()
        unlimited_delivered.set()

    other = threading.Thread(target=unlimited)
    other.start()
    elapsed, producer = produce(proxy.bootstrap, topic, "slow", MEBIBYTES)
    throttle = max_throttle_ms(producer)
    producer.close()
    other.join()
    assert throttle > 0
    assert unlimited_delivered.is_set(), "the unlimited client did not deliver beside the throttled one"
    assert count_messages(proxy.bootstrap, topic) == MEBIBYTES * 1024
    values = metrics(proxy)
    assert values[throttled] > 0
    assert any(key.startswith('kafka_quota_proxy_produce_byte_rate{broker="127.0.0.1:')
               and 'client_id="slow",user=""' in key for key in values)
    assert not any('client_id="fast"' in key for key in values)
    lines = final_usage_lines(proxy)
    slow = summed_usage([line for line in lines if line["client_id"] == "slow"])
    assert slow["bytes"] >= MEBIBYTES * MIB  # every record charged (and the requests' framing)
    assert_held_to_kafkas_model(elapsed, slow, MIB, f"{MEBIBYTES} MiB at 1 MiB/s")
    # the unlimited client, beside it, was given no throttle (how fast it then ran is the machine's to decide)
    assert summed_usage([line for line in lines if line["client_id"] == "fast"]).get("throttle_ms", 0) == 0


class Delivery(NamedTuple):
    seconds: float
    throttles: list[float]
    """The largest throttle each client reported."""
    failures: list[str]
    """Delivery errors reported to the application."""


def kafka_python_producers(bootstrap: str, topic: str, count: int) -> Delivery:
    """``count`` idempotent producers sending one record each."""
    producers = [KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                               retries=1_000, retry_backoff_ms=200, delivery_timeout_ms=120_000,
                               client_id=f"p{i}") for i in range(count)]
    started = time.monotonic()
    futures = [producer.send(topic, f"from {i}".encode()) for i, producer in enumerate(producers)]
    for producer in producers:
        producer.flush(timeout=120)
    elapsed = time.monotonic() - started
    failures = [str(future.exception) for future in futures if future.failed()]
    throttles = [max_throttle_ms(producer) for producer in producers]
    for producer in producers:
        producer.close()
    return Delivery(elapsed, throttles, failures)


def librdkafka_producers(bootstrap: str, topic: str, count: int) -> Delivery:
    """The same with confluent-kafka; throttles as librdkafka reports them in its statistics."""
    throttles: list[float] = [0]
    failures: list[str] = []
    reported: set[str] = set()
    """The producers that emitted statistics since it was last emptied."""

    def on_stats(text: str) -> None:
        stats = json.loads(text)
        reported.add(stats["client_id"])
        throttles.extend(broker["throttle"]["max"] for broker in stats["brokers"].values() if broker.get("throttle"))

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failures.append(error.name())

    producers = [Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "client.id": f"r{i}",
                           "statistics.interval.ms": 100, "stats_cb": on_stats}) for i in range(count)]
    started = time.monotonic()
    for i, producer in enumerate(producers):
        producer.produce(topic, f"from {i}".encode(), on_delivery=delivered)
    for producer in producers:
        assert producer.flush(120) == 0
    elapsed = time.monotonic() - started
    reported.clear()

    def reported_after_delivery() -> bool:
        """Each producer's next statistics hold the throttles of its last responses."""
        for producer in producers:
            producer.poll(0)
        return len(reported) == count

    wait_until(reported_after_delivery, 30, "every producer's statistics after its deliveries")
    return Delivery(elapsed, throttles, failures)


@pytest.mark.parametrize("client", [kafka_python_producers, librdkafka_producers], ids=["kafka-python", "librdkafka"])
@pytest.mark.parametrize("mode", ["reject", "throttle"])
def test_producer_id_quota(own_proxy, broker, tmp_path: Path, topic: str, mode: str, client) -> None:  # type: ignore[no-untyped-def]
    # burst = 2 windows x 5 s x 2 PIDs/s = 20 new producer IDs, then 2 per second
    proxy = own_proxy("--quota-file", pid_quota_file(tmp_path, rate=2, mode=mode))
    create_topic(proxy.bootstrap, topic)
    delivery = client(proxy.bootstrap, topic, 30)
    # librdkafka (unlike Kafka's Java client and kafka-python) treats THROTTLING_QUOTA_EXCEEDED on a
    # Produce as final (rd_kafka_handle_Produce_error): in reject mode its application is told, nothing
    # is lost silently, and the refused records never reach the cluster
    refused_for_good = len(delivery.failures) if client is librdkafka_producers and mode == "reject" else 0
    assert set(delivery.failures) <= {"THROTTLING_QUOTA_EXCEEDED"} and len(delivery.failures) == refused_for_good
    delivered = 30 - refused_for_good
    values = metrics(proxy)
    assert values["kafka_quota_proxy_producer_ids_admitted_total"] == delivered
    through_proxy = count_messages(proxy.bootstrap, topic)
    direct = None if through_proxy == delivered else count_messages(broker.bootstrap, topic)
    assert through_proxy == delivered, f"{through_proxy} read through the proxy, {direct} read from the broker"
    lines = final_usage_lines(proxy)
    usage = summed_usage(lines)
    assert usage["new_pids"] == delivered
    assert usage["produce_requests"] >= 30
    if mode == "reject":
        assert usage["rejections"] >= 1
        # second by second, the cluster never saw more new IDs than burst + rate x elapsed: a line is stamped with
        # the second its flush began, and a busy machine may run that flush up to a second late (one second more)
        seconds = sorted(lines, key=lambda line: line["time"])
        first_second = seconds[0]["time"]
        admitted = 0
        for line in seconds:
            admitted += line["new_pids"]
            assert admitted <= 20 + 2 * (line["time"] - first_second + 2), (line, admitted)
        assert values['kafka_quota_proxy_rejected_requests_total{quota_type="producer_ids_rate"}'] >= 1
        if not refused_for_good:  # the cluster saw the burst at once; the other 10 waited for tokens (2/s)
            assert delivery.seconds >= 4, f"30 new producer IDs admitted in {delivery.seconds:.1f} s"
        else:
            assert delivered >= 20
    else:
        assert values['kafka_quota_proxy_throttled_requests_total{quota_type="producer_ids_rate"}'] >= 1
        assert max(delivery.throttles) > 0


def test_producer_ids_of_large_requests_forwarded_as_they_arrive_are_still_checked(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path, topic: str) -> None:
    # throttle mode lets a large request through while it arrives (cut-through) and reads its
    # producer ID once it is complete: burst = 2 x 5 s x 0.1/s = 1 new ID, then one per 10 s
    proxy = own_proxy("--quota-file", pid_quota_file(tmp_path, rate=0.1, mode="throttle"))
    create_topic(proxy.bootstrap, topic)
    throttles = []
    for i in range(3):
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, enable_idempotence=True, acks="all",
                                 linger_ms=50, batch_size=1 << 20, max_request_size=2 * MIB)
        for _ in range(4):
            producer.send(topic, bytes([i]) * 200_000)  # one ~800 KB request per producer
        producer.flush(timeout=60)
        throttles.append(max_throttle_ms(producer))
        producer.close()
    values = metrics(proxy)
    assert values["kafka_quota_proxy_producer_ids_admitted_total"] == 3
    assert throttles[0] == 0 and throttles[2] > 0, throttles
    assert count_messages(proxy.bootstrap, topic) == 12


def test_init_producer_id_carries_the_pending_producer_id_throttle(own_proxy, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                   topic: str) -> None:
    # burst = 2 windows x 5 s x 0.1/s = 1: the second new producer ID leaves the bucket at -1 (10 s)
    proxy = own_proxy("--quota-file", pid_quota_file(tmp_path, rate=0.1, mode="throttle"))
    create_topic(proxy.bootstrap, topic)
    started = time.monotonic()  # both new IDs are charged after this
    for _ in range(2):
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, enable_idempotence=True, acks="all")
        producer.send(topic, b"x").get(timeout=30)
        producer.close()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        response = new_producer_id(sock)
    since_ms = (time.monotonic() - started) * 1000
    assert response.error_code == 0
    # what is left of the 10 s: less the refill from the first charge to the second (10 s less the time between
    # them) and the time since, together no more than the time since the first producer started. A proxy that does
    # not carry it answers 0, which fails unless the machine took all of the 10 s (here about 1 s)
    assert 10_000 - since_ms <= response.throttle_time_ms <= 10_000, since_ms  # type: ignore[attr-defined]
    assert final_usage_totals(proxy)["throttle_ms"] >= response.throttle_time_ms  # the usage log counts it too
