"""The controller mutation quota (KIP-599) on CreateTopics and DeleteTopics, against the real broker."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from protocol.apis import Api
from tests.integration.test_produce_quotas import metrics
from tests.support import ProxyProcess, call, encode_request, read_frame

pytestmark = pytest.mark.integration
THROTTLING_QUOTA_EXCEEDED = 89


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


def existing_topics(sock: socket.socket, names: list[str]) -> set[str]:
    response = call(sock, Api.METADATA, 4, client_id="unlimited", topics=[{"name": n} for n in names],
                    allow_auto_topic_creation=False)
    return {t.name for t in response.topics if t.error_code == 0}  # type: ignore[attr-defined]


def test_strict_create_topics_admits_in_order_until_the_bucket_is_empty(own_proxy, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                        topic: str) -> None:
    proxy = limited_proxy(own_proxy, tmp_path, "limited")
    names = [f"{topic}-{i}" for i in range(10)]
    with connect(proxy) as sock:
        response = call(sock, Api.CREATE_TOPICS, 7, client_id="limited", timeout_ms=30_000, validate_only=False,
                        topics=[creatable(name, 10) for name in names])
        results = [(t.name, t.error_code) for t in response.topics]  # type: ignore[attr-defined]
        # 22 -> 12 -> 2 -> -8: three topics fit, the bucket is below zero for the fourth
        assert results == [(name, 0) for name in names[:3]] + [(name, THROTTLING_QUOTA_EXCEEDED)
                                                               for name in names[3:]]
        assert 3900 <= response.throttle_time_ms <= 4000  # type: ignore[attr-defined]
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
        response = call(sock, Api.CREATE_TOPICS, 4, client_id="old", timeout_ms=30_000, validate_only=False,
                        topics=[creatable(name, 10) for name in names])
        # permissive: all three created although the third drives the bucket to -8 (4 s)
        assert [t.error_code for t in response.topics] == [0, 0, 0]  # type: ignore[attr-defined]
        assert 3900 <= response.throttle_time_ms <= 4000  # type: ignore[attr-defined]
        started = time.monotonic()
        call(sock, Api.API_VERSIONS, 0, client_id="old")
        assert time.monotonic() - started >= 3.0, "the connection was not muted for the throttle time"
        assert existing_topics(sock, names) == set(names)


def test_validate_only_is_not_charged(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    proxy = limited_proxy(own_proxy, tmp_path, "validator")
    with connect(proxy) as sock:
        for attempt in range(3):
            response = call(sock, Api.CREATE_TOPICS, 7, client_id="validator", timeout_ms=30_000,
                            validate_only=True, topics=[creatable(f"{topic}-{attempt}", 50)])
            assert response.throttle_time_ms == 0  # type: ignore[attr-defined]
            assert response.topics[0].error_code != THROTTLING_QUOTA_EXCEEDED  # type: ignore[attr-defined]


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


def test_minus_one_partitions_is_charged_what_the_cluster_created(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "defaults"\ncontroller_mutation_rate = 0.1\n')  # burst 1.1
    proxy = own_proxy("--quota-file", str(quota_file))
    with connect(proxy) as sock:
        response = call(sock, Api.CREATE_TOPICS, 7, client_id="defaults", timeout_ms=30_000, validate_only=False,
                        topics=[creatable(topic, -1) | {"replication_factor": -1}])
        created = response.topics[0]  # type: ignore[attr-defined]
        assert created.error_code == 0 and created.num_partitions > 1  # Tansu's default is 3
    tokens = metrics(proxy)['kafka_quota_controller_mutation_tokens{client_id="defaults",user=""}']
    assert tokens < 1.1 - created.num_partitions + 0.5  # charged the real count, not the fallback of 1
