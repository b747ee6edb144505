"""The controller mutation quota (KIP-599) on CreateTopics and DeleteTopics, against the real broker."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.header import response_header_length
from tests.integration.test_produce_quotas import final_usage_totals, metrics
from tests.support import Cluster, ProxyProcess, TcpRelay, call, encode_request, read_frame

pytestmark = pytest.mark.integration
THROTTLING_QUOTA_EXCEEDED = 89
REQUEST_TIMED_OUT = 7
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REQUEST = 42


def limited_proxy(own_proxy, tmp_path: Path, *client_ids: str) -> ProxyProcess:  # type: ignore[no-untyped-def]
    """A proxy where each of ``client_ids`` may mutate 2 partitions/s (burst 11 x 1 s x 2 = 22)."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text("".join(f'[[quota]]\nclient-id = "{client_id}"\ncontroller_mutation_rate = 2\n'
                                  for client_id in client_ids))
    return own_proxy("--quota-file", str(quota_file))  # type: ignore[no-any-return]


def connect(proxy: ProxyProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=30)


def creatable(name: str, partitions: int) -> dict[str, object]:
    return {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}


def assert_throttle_less_the_wait(throttle_ms: int, at_once_ms: int, waited_s: float) -> None:
    """A bucket's throttle shrinks by a millisecond for each one that passes: by the refill before it is decided, and
    by Kafka's deduction of the time the request then takes to be answered. ``at_once_ms`` is the throttle were no
    time to pass; a client that waited ``waited_s`` for the answer finds it less by at most that wait (and the
    millisecond the proxy's clock rounds to), however slow the machine."""
    assert at_once_ms - waited_s * 1000 - 1 <= throttle_ms <= at_once_ms, (
        f"throttle {throttle_ms} ms: {at_once_ms} ms at once, the client waited {waited_s * 1000:.0f} ms")


def existing_topics(sock: socket.socket, names: list[str]) -> set[str]:
    response = call(sock, Api.METADATA, 4, client_id="unlimited", topics=[{"name": n} for n in names],
                    allow_auto_topic_creation=False)
    return {t.name for t in response.topics if t.error_code == 0}  # type: ignore[attr-defined]


def test_strict_create_topics_admits_in_order_until_the_bucket_is_empty(own_proxy, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                        topic: str) -> None:
    proxy = limited_proxy(own_proxy, tmp_path, "limited")
    names = [f"{topic}-{i}" for i in range(10)]
    with connect(proxy) as sock:
        started = time.monotonic()
        response = call(sock, Api.CREATE_TOPICS, 7, client_id="limited", timeout_ms=30_000, validate_only=False,
                        topics=[creatable(name, 10) for name in names])
        waited_s = time.monotonic() - started
        results = [(t.name, t.error_code) for t in response.topics]  # type: ignore[attr-defined]
        # 22 -> 12 -> 2 -> -8: three topics fit, the bucket is below zero for the fourth (4 s)
        assert results == [(name, 0) for name in names[:3]] + [(name, THROTTLING_QUOTA_EXCEEDED)
                                                               for name in names[3:]]
        assert_throttle_less_the_wait(response.throttle_time_ms, 4000, waited_s)  # type: ignore[attr-defined]
        assert all(t.error_message == "The throttling quota has been exceeded."  # type: ignore[attr-defined]
                   for t in response.topics[3:])  # type: ignore[attr-defined]
    with connect(proxy) as sock:
        assert existing_topics(sock, names) == set(names[:3])


def test_strict_delete_topics_refuses_topics_past_the_quota(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    proxy = limited_proxy(own_proxy, tmp_path, "deleter")
    names = [f"{topic}-{i}" for i in range(4)]
    with connect(proxy) as sock:
        created = call(sock, Api.CREATE_TOPICS, 7, client_id="unlimited", timeout_ms=30_000, validate_only=False,
                       topics=[creatable(name, 10) for name in names])
        assert [t.error_code for t in created.topics] == [0] * 4  # type: ignore[attr-defined]
        # the proxy learns each topic's 10 partitions from the cluster before charging
        response = call(sock, Api.DELETE_TOPICS, 6, client_id="deleter", timeout_ms=30_000,
                        topics=[{"name": name, "topic_id": None} for name in names])
        results = [(r.name, r.error_code) for r in response.responses]  # type: ignore[attr-defined]
        assert results == [(name, 0) for name in names[:3]] + [(names[3], THROTTLING_QUOTA_EXCEEDED)]
        assert existing_topics(sock, names) == {names[3]}


def test_old_version_is_admitted_then_throttled_and_muted(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    proxy = limited_proxy(own_proxy, tmp_path, "old")
    names = [f"{topic}-{i}" for i in range(3)]
    with connect(proxy) as sock:
        started = time.monotonic()
        response = call(sock, Api.CREATE_TOPICS, 4, client_id="old", timeout_ms=30_000, validate_only=False,
                        topics=[creatable(name, 10) for name in names])
        throttle_ms = response.throttle_time_ms  # type: ignore[attr-defined]
        # permissive: all three created although the third drives the bucket to -8 (4 s)
        assert [t.error_code for t in response.topics] == [0, 0, 0]  # type: ignore[attr-defined]
        assert_throttle_less_the_wait(throttle_ms, 4000, time.monotonic() - started)
        call(sock, Api.API_VERSIONS, 0, client_id="old")
        # the mute began once the answer was written, after the request had been sent
        assert time.monotonic() - started >= throttle_ms / 1000, "the connection was not muted for the throttle time"
        assert existing_topics(sock, names) == set(names)


def test_validate_only_is_charged_as_kraft_does(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    proxy = limited_proxy(own_proxy, tmp_path, "validator")
    with connect(proxy) as sock:
        started = time.monotonic()
        first = call(sock, Api.CREATE_TOPICS, 7, client_id="validator", timeout_ms=30_000, validate_only=True,
                     topics=[creatable(f"{topic}-0", 50)])
        assert first.topics[0].error_code == 0  # type: ignore[attr-defined]
        # KRaft applies the quota and then drops the records: 22 - 50 = -28 (14 s), the next one is refused
        second = call(sock, Api.CREATE_TOPICS, 7, client_id="validator", timeout_ms=30_000, validate_only=True,
                      topics=[creatable(f"{topic}-1", 1)])
        waited_s = time.monotonic() - started
        assert second.topics[0].error_code == THROTTLING_QUOTA_EXCEEDED  # type: ignore[attr-defined]
        assert_throttle_less_the_wait(second.throttle_time_ms, 14_000, waited_s)  # type: ignore[attr-defined]


def test_requests_behind_one_waiting_for_the_cluster_are_answered_in_order(own_proxy, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                          topic: str) -> None:
    proxy = limited_proxy(own_proxy, tmp_path, "deleter")
    with connect(proxy) as sock:
        # DeleteTopics waits for the topic's partition count; the requests pipelined behind it wait too
        pipelined = encode_request(Api.DELETE_TOPICS, 6, correlation_id=1, client_id="deleter", timeout_ms=30_000,
                                   topics=[{"name": topic, "topic_id": None}])
        pipelined += b"".join(encode_request(Api.API_VERSIONS, 0, correlation_id=i) for i in range(2, 12))
        sock.sendall(pipelined)
        correlation_ids = [int.from_bytes(read_frame(sock)[:4], "big") for _ in range(11)]
        assert correlation_ids == list(range(1, 12))


def test_minus_one_partitions_is_charged_what_the_cluster_created(  # type: ignore[no-untyped-def]
        own_proxy, three_brokers: Cluster, tmp_path: Path, topic: str) -> None:
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "defaults"\ncontroller_mutation_rate = 0.1\n')  # burst 1.1
    proxy = own_proxy("--quota-file", str(quota_file), cluster=three_brokers)
    started = time.monotonic()
    with connect(proxy) as sock:
        response = call(sock, Api.CREATE_TOPICS, 7, client_id="defaults", timeout_ms=30_000, validate_only=False,
                        topics=[creatable(topic, -1) | {"replication_factor": -1}])
        created = response.topics[0]  # type: ignore[attr-defined]
        assert created.error_code == 0
        if created.num_partitions == 1:  # KAFKA_BOOTSTRAP's cluster may keep Kafka's default
            pytest.skip("the cluster's num.partitions is 1: what it created cannot be told from a fallback of 1")
    left, refilled = tokens_refilled_since(proxy, "defaults", started, rate=0.1)
    assert left <= 1.1 - created.num_partitions + refilled  # charged the real count, not the fallback of 1


def tokens(proxy: ProxyProcess, client_id: str) -> float:
    return metrics(proxy)[f'kafka_quota_proxy_controller_mutation_tokens{{client_id="{client_id}",user=""}}']


def tokens_refilled_since(proxy: ProxyProcess, client_id: str, since: float, rate: float = 2) -> tuple[float, float]:
    """The client's tokens now, and the most its bucket (``rate`` a second) can have refilled since ``since``, a
    ``time.monotonic()`` taken before what they are compared with: the proxy's quota clock is monotonic too, and
    rounds to the millisecond."""
    left = tokens(proxy, client_id)
    return left, rate * (time.monotonic() - since + 0.001)


def create(sock: socket.socket, client_id: str, *topics: dict[str, object]) -> list[int]:
    response = call(sock, Api.CREATE_TOPICS, 7, client_id=client_id, timeout_ms=30_000, validate_only=False,
                    topics=list(topics))
    return [t.error_code for t in response.topics]  # type: ignore[attr-defined]


def test_an_invalid_count_is_refused_and_cannot_refill_the_bucket(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    """The issue's bypass: num_partitions = -2147483648 was charged as a negative number."""
    proxy = limited_proxy(own_proxy, tmp_path, "limited")
    bad, next_one = f"{topic}-bad", f"{topic}-next"
    with connect(proxy) as sock:
        assert create(sock, "limited", creatable(f"{topic}-debt", 40)) == [0]  # 22 - 40 = -18
        assert create(sock, "limited", creatable(bad, -2147483648), creatable(next_one, 1)) == [
            INVALID_PARTITIONS, THROTTLING_QUOTA_EXCEEDED]
        assert create(sock, "limited", creatable(bad, 3) | {"replication_factor": -5}) == [INVALID_REPLICATION_FACTOR]
        assert existing_topics(sock, [bad, next_one]) == set()


def test_delete_topics_named_by_id_are_charged_their_partitions(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    proxy = limited_proxy(own_proxy, tmp_path, "deleter")
    names = [f"{topic}-{i}" for i in range(4)]
    with connect(proxy) as sock:
        created = call(sock, Api.CREATE_TOPICS, 7, client_id="unlimited", timeout_ms=30_000, validate_only=False,
                       topics=[creatable(name, 10) for name in names])
        ids = [t.topic_id for t in created.topics]  # type: ignore[attr-defined]
        response = call(sock, Api.DELETE_TOPICS, 6, client_id="deleter", timeout_ms=30_000,
                        topics=[{"name": None, "topic_id": topic_id} for topic_id in ids])
        # 22 -> 12 -> 2 -> -8: the fourth is refused, and every answer names its topic by id
        results = {r.topic_id: r.error_code for r in response.responses}  # type: ignore[attr-defined]
        assert results == {ids[0]: 0, ids[1]: 0, ids[2]: 0, ids[3]: THROTTLING_QUOTA_EXCEEDED}
        assert existing_topics(sock, names) == {names[3]}


def test_existing_and_unknown_topics_get_the_clusters_error_never_89(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    """A Streams or Connect application creating its topics "if missing" at every start pays nothing."""
    proxy = limited_proxy(own_proxy, tmp_path, "app")
    with connect(proxy) as sock:
        assert create(sock, "unlimited", creatable(topic, 8)) == [0]
        assert create(sock, "app", creatable(f"{topic}-debt", 40)) == [0]  # -18: in debt
        since = time.monotonic()
        before = tokens(proxy, "app")
        assert create(sock, "app", creatable(topic, 8)) == [TOPIC_ALREADY_EXISTS]
        response = call(sock, Api.DELETE_TOPICS, 6, client_id="app", timeout_ms=30_000,
                        topics=[{"name": f"{topic}-never", "topic_id": None}])
        assert response.responses[0].error_code == UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[attr-defined]
    after, refilled = tokens_refilled_since(proxy, "app", since)
    assert before <= after <= before + refilled  # the refill alone: nothing charged, nothing given back


def test_a_name_given_twice_is_refused_every_time_and_costs_nothing(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    proxy = limited_proxy(own_proxy, tmp_path, "twice")
    twice, once = f"{topic}-twice", f"{topic}-once"
    started = time.monotonic()
    with connect(proxy) as sock:
        assert create(sock, "twice", creatable(twice, 5), creatable(once, 2), creatable(twice, 7)) == [
            INVALID_REQUEST, 0, INVALID_REQUEST]
        assert existing_topics(sock, [twice, once]) == {once}
    left, refilled = tokens_refilled_since(proxy, "twice", started)
    assert 20 <= left <= 20 + refilled  # 22 - 2: the topic given once, and nothing else


def test_the_throttle_sent_is_what_is_left_of_it_when_the_answer_leaves(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    """Kafka deducts the time a mutation took from its throttle: a slow CreateTopics is not throttled twice."""
    delay_s = 1.5
    relay = TcpRelay(broker.host, broker.port, response_delay_s=delay_s)  # every answer of the cluster takes longer
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "slow"\ncontroller_mutation_rate = 2\n')
    proxy = own_proxy("--quota-file", str(quota_file), upstream=f"127.0.0.1:{relay.port}")
    try:
        with connect(proxy) as sock:  # the bootstrap listener: through the relay
            started = time.monotonic()
            response = call(sock, Api.CREATE_TOPICS, 4, client_id="slow", timeout_ms=30_000, validate_only=False,
                            topics=[creatable(f"{topic}-{i}", 10) for i in range(3)])
            waited_s = time.monotonic() - started
    finally:
        relay.stop()
    # permissive: 22 - 30 = -8 tokens is 4 s when charged; the answer left at least the relay's delay later
    assert [t.error_code for t in response.topics] == [0, 0, 0]  # type: ignore[attr-defined]
    assert response.throttle_time_ms <= 2_700  # type: ignore[attr-defined]
    # and no more was deducted than the client waited, less the relay's delay of the partition-count lookup, which
    # came before the charge
    assert_throttle_less_the_wait(response.throttle_time_ms, 4000, waited_s - delay_s)  # type: ignore[attr-defined]


def test_a_failed_partition_count_lookup_is_answered_and_the_connection_goes_on(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    relay = TcpRelay(broker.host, broker.port)  # the proxy's own requests to the cluster go through it
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "deleter"\ncontroller_mutation_rate = 2\n')
    proxy = own_proxy("--quota-file", str(quota_file), upstream=f"127.0.0.1:{relay.port}")
    broker_listener = proxy.broker_port_base + broker.node_ids[0]  # connects to a broker itself, not the relay
    with socket.create_connection(("127.0.0.1", broker_listener), timeout=30) as sock:
        assert create(sock, "unlimited", creatable(topic, 2)) == [0]
        relay.stop()  # the cluster can no longer be asked for partition counts
        pipelined = encode_request(Api.API_VERSIONS, 0, correlation_id=1)
        pipelined += encode_request(Api.DELETE_TOPICS, 6, correlation_id=2, client_id="deleter", timeout_ms=30_000,
                                    topics=[{"name": topic, "topic_id": None}])
        pipelined += encode_request(Api.API_VERSIONS, 0, correlation_id=3)
        sock.sendall(pipelined)
        frames = [read_frame(sock) for _ in range(3)]
        assert [int.from_bytes(frame[:4], "big") for frame in frames] == [1, 2, 3]
        deleted = call(sock, Api.METADATA, 4, client_id="unlimited", topics=[{"name": topic}],
                       allow_auto_topic_creation=False)
        assert deleted.topics[0].error_code == 0  # type: ignore[attr-defined]  # not deleted: nothing was forwarded
    answer = decode_response(Api.DELETE_TOPICS, 6, memoryview(frames[1])[response_header_length(frames[1], True):])
    assert answer.responses[0].error_code == REQUEST_TIMED_OUT


def test_pipelined_mutations_wait_for_the_throttle(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    proxy = limited_proxy(own_proxy, tmp_path, "pipeliner")
    requests = [encode_request(Api.CREATE_TOPICS, 4, correlation_id=i, client_id="pipeliner", timeout_ms=30_000,
                               validate_only=False, topics=[creatable(f"{topic}-{i}", 30 if i == 0 else 1)])
                for i in range(3)]
    with connect(proxy) as sock:
        started = time.monotonic()
        sock.sendall(b"".join(requests))  # 22 - 30 = -8 tokens: a 4 s throttle on the first
        answered = []
        for _ in requests:
            frame = read_frame(sock)
            answered.append((time.monotonic() - started,
                             decode_response(Api.CREATE_TOPICS, 4, memoryview(frame)[response_header_length(frame,
                                                                                                          False):])))
    first_at_s, first = answered[0]
    assert_throttle_less_the_wait(first.throttle_time_ms, 4000, first_at_s)
    # the second was not read (nor charged) before the first's throttle had run out: the mute began once the first
    # answer was written, after the requests had been sent
    assert answered[1][0] >= first.throttle_time_ms / 1000
    assert answered[1][1].throttle_time_ms <= 500  # charged when read: the bucket had refilled to about 0


def test_librdkafka_admin_requests_are_held_to_the_quota(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import AdminClient, NewTopic

    proxy = limited_proxy(own_proxy, tmp_path, "librdkafka-admin")
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap, "client.id": "librdkafka-admin"})
    started = time.monotonic()
    # 30 partitions leave the bucket at -8 (4 s); then 2 more, one request each, sent without waiting on the connection
    # muted for that throttle. The 30 are answered first: librdkafka sends requests made together in an order of its
    # own, and with the 30 last nothing would be held
    first = f"{topic}-0"
    admin.create_topics([NewTopic(first, 30, 1)], operation_timeout=30)[first].result(timeout=60)
    futures = [admin.create_topics([NewTopic(f"{topic}-{i}", 1, 1)], operation_timeout=30) for i in (1, 2)]
    for future in futures:
        for created in future.values():
            created.result(timeout=60)
    elapsed = time.monotonic() - started
    totals = final_usage_totals(proxy)
    # what the proxy decided first: all 32 partitions charged, the first request throttled 4 s (30 from 22)
    assert totals["mutations"] == 32 and totals["throttle_ms"] >= 4000, totals
    assert elapsed >= 3.8, f"three CreateTopics past the quota answered in {elapsed:.1f} s; the proxy decided {totals}"


def test_create_partitions_is_charged_the_increase(own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    proxy = limited_proxy(own_proxy, tmp_path, "grower")
    first, second = f"{topic}-a", f"{topic}-b"

    def grow(*counts: tuple[str, int]) -> list[int]:
        response = call(sock, Api.CREATE_PARTITIONS, 3, client_id="grower", timeout_ms=30_000, validate_only=False,
                        topics=[{"name": name, "count": count, "assignments": None} for name, count in counts])
        return [r.error_code for r in response.results]  # type: ignore[attr-defined]

    with connect(proxy) as sock:
        assert create(sock, "unlimited", creatable(first, 2), creatable(second, 1)) == [0, 0]
        assert grow((first, 22)) == [0]  # 20 new partitions: 22 -> 2
        # no increase: Kafka's INVALID_PARTITIONS, free; then 20 more are admitted (2 >= 0): -> -18, 9 s to refill
        assert grow((first, 22), (second, 21)) == [INVALID_PARTITIONS, 0]
        assert grow((second, 22)) == [THROTTLING_QUOTA_EXCEEDED]
        grown = call(sock, Api.METADATA, 4, client_id="unlimited", topics=[{"name": first}, {"name": second}],
                     allow_auto_topic_creation=False)
        counts = {t.name: len(t.partitions) for t in grown.topics}  # type: ignore[attr-defined]
    assert counts == {first: 22, second: 21}


def test_quick_increases_are_charged_what_each_adds(own_proxy, broker: Cluster, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                    topic: str) -> None:
    """A broker's metadata follows its controller by a moment: read at once after an increase, it still shows
    the count before it, which charged the next increase the partitions the last one added (740 mutations for
    600 in a side-by-side run with Kafka's own quota)."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "grower"\ncontroller_mutation_rate = 1000\n')
    proxy = own_proxy("--quota-file", str(quota_file))
    steps, added = 30, 5
    with connect(proxy) as sock:
        assert create(sock, "unlimited", creatable(topic, 1)) == [0]
        for step in range(1, steps + 1):
            grown = {"name": topic, "count": 1 + step * added, "assignments": None}
            response = call(sock, Api.CREATE_PARTITIONS, 3, client_id="grower", timeout_ms=30_000,
                            validate_only=False, topics=[grown])
            assert [r.error_code for r in response.results] == [0]  # type: ignore[attr-defined]
    assert final_usage_totals(proxy)["mutations"] == steps * added


def test_a_topic_deleted_at_once_after_its_creation_is_charged_its_partitions(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path, topic: str) -> None:
    """Kafka's controller charges a deletion the partitions it knows the topic has; the proxy asks a broker, whose
    metadata may not show a topic created a moment ago: it counts what it saw the cluster create."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "churner"\ncontroller_mutation_rate = 1000\n')
    proxy = own_proxy("--quota-file", str(quota_file))
    rounds, partitions = 30, 5
    with connect(proxy) as sock:
        for number in range(rounds):
            name = f"{topic}-{number}"
            made = call(sock, Api.CREATE_TOPICS, 7, client_id="churner", timeout_ms=30_000, validate_only=False,
                        topics=[creatable(name, partitions)])
            assert [t.error_code for t in made.topics] == [0]  # type: ignore[attr-defined]
            gone = call(sock, Api.DELETE_TOPICS, 6, client_id="churner", timeout_ms=30_000,
                        topics=[{"name": name, "topic_id": None}])
            assert [t.error_code for t in gone.responses] == [0]  # type: ignore[attr-defined]
    assert final_usage_totals(proxy)["mutations"] == 2 * rounds * partitions
