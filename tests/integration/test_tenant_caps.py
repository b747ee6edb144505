"""A tenant's caps on the topics and partitions it owns, against Apache Kafka: what Kafka's ``CreateTopicPolicy``
would answer (POLICY_VIOLATION with a message naming the tenant, its count and its cap), to raw pipelined frames,
librdkafka's admin client and Kafka's own ``kafka-topics``, with topics made around the proxy counted."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.header import response_header_length
from tests.fidelity import java_tool
from tests.integration.test_mutation_quotas import creatable, existing_topics
from tests.support import Cluster, ProxyProcess, call, encode_request, read_frame

pytestmark = pytest.mark.integration
POLICY_VIOLATION = 44
CREATE_TOPICS_VERSION = 7
CREATE_PARTITIONS_VERSION = 3


def tenant_proxy(own_proxy, tmp_path: Path, prefix: str, *settings: str) -> ProxyProcess:  # type: ignore[no-untyped-def]
    """A proxy whose tenant "payments" (ANONYMOUS, every client here) owns the topics under ``prefix``."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[tenant]]\nname = "payments"\nusers = ["ANONYMOUS"]\n'
                          f'topic-prefix = "{prefix}"\n' + "".join(f"{line}\n" for line in settings))
    return own_proxy("--quota-file", str(quota_file))  # type: ignore[no-any-return]


def topics_shown(sock: socket.socket, names: list[str], expected: set[str]) -> set[str]:
    """Which of ``names`` the cluster shows, once it shows ``expected`` (a broker's metadata follows its controller by
    a moment) or after 30 s."""
    deadline = time.monotonic() + 30
    while (shown := existing_topics(sock, names)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return shown


def create_topics(sock: socket.socket, *topics: dict[str, object], validate_only: bool = False) -> list[Any]:
    response = call(sock, Api.CREATE_TOPICS, CREATE_TOPICS_VERSION, timeout_ms=30_000, validate_only=validate_only,
                    topics=list(topics))
    return [(topic.name, topic.error_code, topic.error_message) for topic in response.topics]  # type: ignore[attr-defined]


def test_raw_frames_are_refused_past_the_caps_entry_by_entry_and_topics_made_around_the_proxy_count(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    prefix = f"{topic}."
    proxy = tenant_proxy(own_proxy, tmp_path, prefix, "max_partitions = 10", "max_topics = 3",
                         "topics-only-under-prefix = true")
    with socket.create_connection((broker.host, broker.port), timeout=30) as direct:
        assert create_topics(direct, creatable(f"{prefix}direct", 4)) == [(f"{prefix}direct", 0, None)]
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        assert create_topics(sock, creatable(f"{prefix}a", 4), creatable(f"{prefix}b", 4), creatable(f"{prefix}c", 2),
                             creatable(f"{topic}-elsewhere", 1)) == [
            (f"{prefix}a", 0, None),
            (f"{prefix}b", POLICY_VIOLATION,
             f"Tenant payments owns 8 partition(s) under '{prefix}'; 4 more would be over its cap of 10."),
            (f"{prefix}c", 0, None),
            (f"{topic}-elsewhere", POLICY_VIOLATION,
             f"Tenant payments may create topics only under its prefix '{prefix}': '{topic}-elsewhere' is not.")]
        refusal = (f"{prefix}d", POLICY_VIOLATION,
                   f"Tenant payments owns 3 topic(s) under '{prefix}'; one more would be over its cap of 3.")
        assert create_topics(sock, creatable(f"{prefix}d", 1), validate_only=True) == [refusal]
        grown = call(sock, Api.CREATE_PARTITIONS, CREATE_PARTITIONS_VERSION, timeout_ms=30_000, validate_only=False,
                     topics=[{"name": f"{prefix}a", "count": 5, "assignments": None}])
        assert [(r.error_code, r.error_message) for r in grown.results] == [  # type: ignore[attr-defined]
            (POLICY_VIOLATION, f"Tenant payments owns 10 partition(s) under '{prefix}'; 1 more would be over its cap "
                               "of 10.")]
        expected = {f"{prefix}direct", f"{prefix}a", f"{prefix}c"}
        assert topics_shown(sock, [f"{prefix}{name}" for name in ("direct", "a", "b", "c", "d")] +
                            [f"{topic}-elsewhere"], expected) == expected


def test_pipelined_creations_count_the_ones_in_flight_before_them(own_proxy, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                  topic: str) -> None:
    """Ten CreateTopics of 3 partitions each, written at once under a cap of 10: each counts the creations before it
    whose answers have not come back, so three are created, not ten."""
    prefix = f"{topic}."
    proxy = tenant_proxy(own_proxy, tmp_path, prefix, "max_partitions = 10")
    names = [f"{prefix}{i}" for i in range(10)]
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(b"".join(encode_request(Api.CREATE_TOPICS, CREATE_TOPICS_VERSION, correlation_id=i,
                                             timeout_ms=30_000, validate_only=False, topics=[creatable(name, 3)])
                              for i, name in enumerate(names)))
        answers = [decode_response(Api.CREATE_TOPICS, CREATE_TOPICS_VERSION, frame[response_header_length(
            frame, flexible=True):]) for frame in (read_frame(sock) for _ in names)]
        assert [answer.topics[0].error_code for answer in answers] == [0] * 3 + [POLICY_VIOLATION] * 7
        assert topics_shown(sock, names, set(names[:3])) == set(names[:3])


def test_librdkafka_and_kafka_topics_are_refused_with_the_tenants_message(own_proxy, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                         topic: str) -> None:
    prefix = f"{topic}."
    proxy = tenant_proxy(own_proxy, tmp_path, prefix, "max_partitions = 6")
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    created = admin.create_topics([NewTopic(f"{prefix}a", 4, 1), NewTopic(f"{prefix}b", 4, 1)], operation_timeout=30)
    created[f"{prefix}a"].result(30)
    with pytest.raises(Exception) as raised:
        created[f"{prefix}b"].result(30)
    error = raised.value.args[0]
    assert isinstance(error, KafkaError) and error.code() == KafkaError.POLICY_VIOLATION
    assert error.str() == f"Tenant payments owns 4 partition(s) under '{prefix}'; 4 more would be over its cap of 6."
    with pytest.raises(Exception) as raised:
        admin.create_partitions([NewPartitions(f"{prefix}a", 8)], operation_timeout=30)[f"{prefix}a"].result(30)
    assert raised.value.args[0].code() == KafkaError.POLICY_VIOLATION

    printed = java_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", proxy.bootstrap, "--create",
                        "--topic", f"{prefix}c", "--partitions", "3", "--replication-factor", "1", succeeds=False)
    assert "PolicyViolationException" in printed and \
        f"Tenant payments owns 4 partition(s) under '{prefix}'; 3 more would be over its cap of 6." in printed, printed
    assert f"Created topic {prefix}c." in java_tool(
        "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", proxy.bootstrap, "--create", "--topic",
        f"{prefix}c", "--partitions", "2", "--replication-factor", "1")


def test_metadata_does_not_auto_create_a_topic_a_cap_governs(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    """The cluster creates the topics a Metadata request names when asked (``auto.create.topics.enable``, Kafka's
    default): not those a tenant's cap governs, which only CreateTopics, judged by the cap, creates."""
    prefix = f"{topic}."
    proxy = tenant_proxy(own_proxy, tmp_path, prefix, "max_partitions = 1")
    governed, elsewhere = f"{prefix}auto", f"{topic}-auto"

    def auto_created(name: str, within_s: float) -> bool:
        """Metadata asking to create ``name``, again until the cluster shows it."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            answer = call(sock, Api.METADATA, 12, topics=[{"name": name, "topic_id": None}],
                          allow_auto_topic_creation=True, include_topic_authorized_operations=False)
            if answer.topics[0].error_code == 0:  # type: ignore[attr-defined]
                return True
            time.sleep(0.1)
        return False

    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        started = time.monotonic()
        assert auto_created(elsewhere, 30)  # the cluster creates what Metadata asks it to
        assert not auto_created(governed, 3 * (time.monotonic() - started) + 1)  # thrice the time that took
        assert topics_shown(sock, [governed, elsewhere], {elsewhere}) == {elsewhere}
