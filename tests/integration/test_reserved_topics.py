"""The proxy's own topics (the fleet's usage and quotas topics, the producer-ID blocks topic) are out of every
client's reach: the proxy writes them with its own login, which the cluster lets write them whoever the client is.

The scenario: a client writes, to the fleet's quotas topic, the record the proxy itself writes to lift a user's
quota. Every client gets TOPIC_AUTHORIZATION_FAILED for that topic, as Kafka answers a topic the principal may not
write, and the rest of its request is served.
"""

from __future__ import annotations

import json
import socket
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

from protocol.apis import Api
from tests.fidelity import java_tool
from tests.integration.test_fleet import described_producer_rate, start_fleet, until_every_member_describes
from tests.integration.test_produce_refusals import PRODUCE_VERSION, produce_response
from tests.integration.test_sasl import add_user
from tests.support import (
    PASSWORDS,
    Cluster,
    ProxyProcess,
    answer_to,
    call,
    call_with_body,
    closed_by_peer,
    create_topic_on_one_broker,
    decoded_response,
    encode_request,
    read_frame,
    read_to_end,
    record_batch,
    wait_until,
)

pytestmark = pytest.mark.integration
TOPIC_AUTHORIZATION_FAILED = 29
LIFTED_KEY = b'{"quota":"producer_byte_rate","user":"mallory"}'
LIFTED_VALUE = b'{"limit":null}'
LARGE = 512 * 1024  # well past the 64 KiB after which a request is forwarded as it arrives


def alter_producer_rate(proxy: ProxyProcess, user: str, rate: float) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        answer = call(sock, Api.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[{
            "entity": [{"entity_type": "user", "entity_name": user}],
            "ops": [{"key": "producer_byte_rate", "value": rate, "remove": False}]}])
    assert [entry.error_code for entry in answer.entries] == [0]  # type: ignore[attr-defined]


def lifting_batch() -> bytes:
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16)
    builder.append(0, LIFTED_KEY, LIFTED_VALUE)
    builder.close()
    return bytes(builder.buffer())


def topic_id(broker: Cluster, topic: str) -> uuid.UUID:
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        answer = call(sock, Api.METADATA, 12, topics=[{"name": topic, "topic_id": None}],
                      allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    (described,) = answer.topics  # type: ignore[attr-defined]
    assert described.error_code == 0
    return uuid.UUID(str(described.topic_id))


@pytest.fixture
def fleet_member(own_proxy, tmp_path: Path) -> tuple[ProxyProcess, str]:  # type: ignore[no-untyped-def]
    """One fleet member (no SASL: every client is ANONYMOUS, which may set quotas) with mallory at 100 kB/s."""
    quotas_topic = f"quotas-{uuid.uuid4().hex[:8]}"
    (proxy,) = start_fleet(own_proxy, tmp_path, "[settings]\n", members=1, quotas_topic=quotas_topic)
    alter_producer_rate(proxy, "mallory", 100_000)
    until_every_member_describes([proxy], "mallory", 100_000)
    return proxy, quotas_topic


def assert_nothing_lifted(proxy: ProxyProcess, broker: Cluster, quotas_topic: str) -> None:
    """A quota set after the attempts has reached the member, so any record they appended before it was read too:
    mallory's quota stands, and the topic holds none of their records."""
    alter_producer_rate(proxy, "sentinel", 1_000)
    until_every_member_describes([proxy], "sentinel", 1_000)
    assert described_producer_rate(proxy, "mallory") == 100_000
    written = [(record.key, record.value) for record in read_to_end(broker.bootstrap, quotas_topic)]
    assert (LIFTED_KEY, LIFTED_VALUE) not in written


def test_clients_cannot_write_the_fleets_quotas_topic(fleet_member: tuple[ProxyProcess, str], broker: Cluster,
                                                      topic: str) -> None:
    proxy, quotas_topic = fleet_member
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "message.timeout.ms": 30_000})
    producer.produce(quotas_topic, LIFTED_VALUE, LIFTED_KEY, on_delivery=lambda error, _: reports.append(error))
    assert producer.flush(60) == 0
    assert [error.code() if error else None for error in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    kafka_python = KafkaProducer(bootstrap_servers=proxy.bootstrap, retries=0)
    with pytest.raises(TopicAuthorizationFailedError):
        kafka_python.send(quotas_topic, key=LIFTED_KEY, value=LIFTED_VALUE).get(timeout=30)
    kafka_python.close()

    # raw: the reserved topic refused beside another of the same broker, which is written
    leader, _, _ = broker.leader(quotas_topic)
    create_topic_on_one_broker(broker, topic, node_id=leader)
    port = proxy.broker_port_base + leader
    both = [{"name": quotas_topic, "partition_data": [{"index": 0, "records": lifting_batch()}]},
            {"name": topic, "partition_data": [{"index": 0, "records": record_batch([b"served"])}]}]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(encode_request(Api.PRODUCE, PRODUCE_VERSION, transactional_id=None, acks=-1,
                                    timeout_ms=30_000, topic_data=both))
        answer = read_frame(sock)
        by_id = [{"topic_id": topic_id(broker, quotas_topic),
                  "partition_data": [{"index": 0, "records": lifting_batch()}]}]
        by_id_answer = call(sock, Api.PRODUCE, 13, correlation_id=2, transactional_id=None, acks=-1,
                            timeout_ms=30_000, topic_data=by_id)
        # a request too large to be held before it is forwarded, the reserved topic after the other's records
        large = [{"name": topic, "partition_data": [{"index": 0, "records": record_batch([b"L" * LARGE])}]},
                 both[0]]
        sock.sendall(encode_request(Api.PRODUCE, PRODUCE_VERSION, correlation_id=3, transactional_id=None,
                                    acks=-1, timeout_ms=30_000, topic_data=large))
        large_answer = read_frame(sock)
        sock.sendall(encode_request(Api.PRODUCE, PRODUCE_VERSION, correlation_id=4, transactional_id=None, acks=0,
                                    timeout_ms=30_000, topic_data=both[:1]))
        assert closed_by_peer(sock)  # acks=0 with an error closes the connection, as Kafka does
    assert _errors_by_topic(answer) == _errors_by_topic(large_answer) == {
        quotas_topic: TOPIC_AUTHORIZATION_FAILED, topic: 0}
    assert [p.error_code for result in by_id_answer.responses  # type: ignore[attr-defined]
            for p in result.partition_responses] == [TOPIC_AUTHORIZATION_FAILED]
    assert [record.value for record in read_to_end(broker.bootstrap, topic)] == [b"served", b"L" * LARGE]
    assert_nothing_lifted(proxy, broker, quotas_topic)


def _errors_by_topic(frame: bytes) -> dict[str, int]:
    return {result.name: partition.error_code for result in produce_response(frame).responses
            for partition in result.partition_responses}


def described_topics(proxy: ProxyProcess, topics: list[dict[str, object]] | None) -> dict[object, int]:
    """Metadata v12 through ``proxy``: error code of each topic answered, by name (or by id when it has none)."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        answer = call(sock, Api.METADATA, 12, topics=topics, allow_auto_topic_creation=True,
                      include_topic_authorized_operations=False)
    return {topic.name if topic.name is not None else uuid.UUID(str(topic.topic_id)): topic.error_code
            for topic in answer.topics}  # type: ignore[attr-defined]


def test_metadata_leaves_the_proxys_topics_out_and_refuses_them_when_named(
        fleet_member: tuple[ProxyProcess, str], broker: Cluster, tmp_path: Path, topic: str) -> None:
    proxy, quotas_topic = fleet_member
    usage_topic = tomllib.loads((tmp_path / "fleet0.toml").read_text())["fleet"]["topic"]
    create_topic_on_one_broker(broker, topic)
    everything = described_topics(proxy, None)
    assert topic in everything and quotas_topic not in everything and usage_topic not in everything
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:  # every topic, to Kafka's reader
        written_as_minus_two = {t.name for t in call_with_body(sock, Api.METADATA, 1, b"\xff\xff\xff\xfe").topics}
    assert topic in written_as_minus_two and not written_as_minus_two & {quotas_topic, usage_topic}
    named = described_topics(proxy, [{"name": quotas_topic, "topic_id": None}, {"name": topic, "topic_id": None},
                                     {"name": usage_topic, "topic_id": None}])
    assert named == {topic: 0, quotas_topic: TOPIC_AUTHORIZATION_FAILED, usage_topic: TOPIC_AUTHORIZATION_FAILED}
    quotas_id, served_id = topic_id(broker, quotas_topic), topic_id(broker, topic)
    by_id = described_topics(proxy, [{"name": None, "topic_id": quotas_id}, {"name": None, "topic_id": served_id}])
    assert by_id == {quotas_id: TOPIC_AUTHORIZATION_FAILED, topic: 0}  # the id refused, its name not disclosed
    # DescribeTopicPartitions, which Kafka's Java AdminClient describes topics with, alike
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        every = call(sock, Api.DESCRIBE_TOPIC_PARTITIONS, 0, topics=[], response_partition_limit=2000, cursor=None)
        both = call(sock, Api.DESCRIBE_TOPIC_PARTITIONS, 0, response_partition_limit=2000, cursor=None,
                    topics=[{"name": quotas_topic}, {"name": topic}])
        only = call(sock, Api.DESCRIBE_TOPIC_PARTITIONS, 0, response_partition_limit=2000, cursor=None,
                    topics=[{"name": usage_topic}])
    names = {t.name for t in every.topics}  # type: ignore[attr-defined]
    assert topic in names and quotas_topic not in names and usage_topic not in names
    assert {t.name: t.error_code for t in both.topics} == {  # type: ignore[attr-defined]
        topic: 0, quotas_topic: TOPIC_AUTHORIZATION_FAILED}
    assert [(t.name, t.error_code) for t in only.topics] == [  # type: ignore[attr-defined]
        (usage_topic, TOPIC_AUTHORIZATION_FAILED)]
    # nor do the cursors of its pages of every topic: a page of one partition, of a topic sorted just before the
    # quotas topic (the cluster, asked for every topic, would name the quotas topic next)
    before = quotas_topic[:-1]
    create_topic_on_one_broker(broker, before)

    def first_page() -> Any:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            return call(sock, Api.DESCRIBE_TOPIC_PARTITIONS, 0, topics=[], response_partition_limit=1,
                        cursor={"topic_name": before, "partition_index": 0})

    wait_until(lambda: [t.name for t in first_page().topics] == [before], 30, "the topic created shown")
    following = first_page().next_cursor  # type: ignore[attr-defined]
    assert following is None or following.topic_name not in (quotas_topic, usage_topic), following
    # nor ListConfigResources, whose v1 lists every topic's name (and the brokers, kept)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        listed = call(sock, Api.LIST_CONFIG_RESOURCES, 1, resource_types=[2, 4])
    resources = {(resource.resource_type, resource.resource_name)
                 for resource in listed.config_resources}  # type: ignore[attr-defined]
    assert (2, topic) in resources and (4, str(broker.node_ids[0])) in resources, resources
    assert not {name for _, name in resources} & {quotas_topic, usage_topic}


def test_the_proxys_topics_cannot_be_created_deleted_or_extended(fleet_member: tuple[ProxyProcess, str],
                                                                  broker: Cluster, topic: str) -> None:
    proxy, quotas_topic = fleet_member
    quotas_id = topic_id(broker, quotas_topic)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        created = call(sock, Api.CREATE_TOPICS, 7, timeout_ms=30_000, validate_only=False, topics=[
            {"name": quotas_topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}])
        extended = call(sock, Api.CREATE_PARTITIONS, 3, timeout_ms=30_000, validate_only=False,
                        topics=[{"name": quotas_topic, "count": 4, "assignments": None}])
        deleted_by_name = call(sock, Api.DELETE_TOPICS, 5, timeout_ms=30_000, topic_names=[quotas_topic])
        deleted_by_id = call(sock, Api.DELETE_TOPICS, 6, timeout_ms=30_000,
                             topics=[{"name": None, "topic_id": quotas_id}, {"name": topic, "topic_id": None}])
    assert [(t.name, t.error_code, t.error_message) for t in created.topics] == [  # type: ignore[attr-defined]
        (quotas_topic, TOPIC_AUTHORIZATION_FAILED, "Authorization failed."), (topic, 0, None)]
    assert [(t.name, t.error_code) for t in extended.results] == [  # type: ignore[attr-defined]
        (quotas_topic, TOPIC_AUTHORIZATION_FAILED)]
    assert [(t.name, t.error_code, t.error_message) for t in deleted_by_name.responses] == [  # type: ignore[attr-defined]
        (quotas_topic, TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")]
    refused, served = deleted_by_id.responses  # type: ignore[attr-defined]
    assert (refused.name, refused.topic_id, refused.error_code) == (None, quotas_id, TOPIC_AUTHORIZATION_FAILED)
    assert (served.name, served.error_code) == (topic, 0)
    assert topic_id(broker, quotas_topic) == quotas_id  # the same topic, its one partition


def test_the_proxys_topics_partitions_and_configs_are_refused_and_the_rest_served(
        fleet_member: tuple[ProxyProcess, str], broker: Cluster, topic: str) -> None:
    proxy, quotas_topic = fleet_member
    leader, _, _ = broker.leader(quotas_topic)
    create_topic_on_one_broker(broker, topic, node_id=leader)

    def partitions(name_field: str, index_field: str, **partition: object) -> list[dict[str, object]]:
        return [{name_field: name, "partitions": [{index_field: 0, **partition}]} for name in (quotas_topic, topic)]

    with socket.create_connection(("127.0.0.1", proxy.broker_port_base + leader), timeout=30) as sock:
        offsets = call(sock, Api.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=partitions(
            "name", "partition_index", current_leader_epoch=-1, timestamp=-1))
        epochs = call(sock, Api.OFFSET_FOR_LEADER_EPOCH, 4, replica_id=-1, topics=partitions(
            "topic", "partition", current_leader_epoch=-1, leader_epoch=0))
        deleted = call(sock, Api.DELETE_RECORDS, 2, timeout_ms=30_000, topics=partitions(
            "name", "partition_index", offset=-1))
        altered = call(sock, Api.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[
            {"resource_type": 2, "resource_name": quotas_topic,
             "configs": [{"name": "cleanup.policy", "config_operation": 0, "value": "delete"}]}])
        described = call(sock, Api.DESCRIBE_CONFIGS, 4, include_synonyms=False, include_documentation=False,
                         resources=[{"resource_type": 2, "resource_name": name, "configuration_keys": None}
                                    for name in (quotas_topic, topic)])
        # the cluster-level ones too: its leaders and replicas are not the clients' to move
        elected = call(sock, Api.ELECT_LEADERS, 2, election_type=0, timeout_ms=30_000, topic_partitions=[
            {"topic": name, "partitions": [0]} for name in (quotas_topic, topic)])
        reassigned = call(sock, Api.ALTER_PARTITION_REASSIGNMENTS, 0, timeout_ms=30_000, topics=[
            {"name": name, "partitions": [{"partition_index": 0, "replicas": None}]} for name in (quotas_topic, topic)])
    assert {r.topic: [p.error_code for p in r.partition_result]
            for r in elected.replica_election_results}[quotas_topic] == [TOPIC_AUTHORIZATION_FAILED]  # type: ignore[attr-defined]
    assert {r.name: [p.error_code for p in r.partitions]
            for r in reassigned.responses}[quotas_topic] == [TOPIC_AUTHORIZATION_FAILED]  # type: ignore[attr-defined]
    for answer, name_field in ((offsets, "name"), (epochs, "topic"), (deleted, "name")):
        assert {getattr(result, name_field): [p.error_code for p in result.partitions]
                for result in answer.topics} == {quotas_topic: [TOPIC_AUTHORIZATION_FAILED], topic: [0]}  # type: ignore[attr-defined]
    assert [(r.resource_name, r.error_code, r.error_message) for r in altered.responses] == [  # type: ignore[attr-defined]
        (quotas_topic, TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")]
    assert {r.resource_name: r.error_code for r in described.results} == {  # type: ignore[attr-defined]
        topic: 0, quotas_topic: TOPIC_AUTHORIZATION_FAILED}
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:  # straight to the cluster
        direct = call(sock, Api.DESCRIBE_CONFIGS, 4, include_synonyms=False, include_documentation=False,
                      resources=[{"resource_type": 2, "resource_name": quotas_topic,
                                  "configuration_keys": ["cleanup.policy"]}])
    assert [c.value for c in direct.results[0].configs] == ["compact"]  # type: ignore[attr-defined]


def fetch_errors(answer: object, version: int) -> dict[object, list[int]]:
    return {(uuid.UUID(str(topic.topic_id)) if version >= 13 else topic.topic): [p.error_code for p in topic.partitions]
            for topic in answer.responses}  # type: ignore[attr-defined]


def test_clients_cannot_read_the_proxys_topics_and_the_rest_of_a_fetch_is_served(
        fleet_member: tuple[ProxyProcess, str], broker: Cluster, topic: str) -> None:
    proxy, quotas_topic = fleet_member
    leader, _, _ = broker.leader(quotas_topic)
    create_topic_on_one_broker(broker, topic, node_id=leader)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"readable")
    assert producer.flush(30) == 0

    def fetch(version: int, names: list[object], session_epoch: int = -1) -> object:
        field = "topic_id" if version >= 13 else "topic"
        topics = [{field: name, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                "last_fetched_epoch": -1, "log_start_offset": -1,
                                                "partition_max_bytes": 1 << 20}]} for name in names]
        with socket.create_connection(("127.0.0.1", proxy.broker_port_base + leader), timeout=30) as sock:
            return call(sock, Api.FETCH, version, replica_id=-1, max_wait_ms=100, min_bytes=0, max_bytes=1 << 20,
                        isolation_level=0, session_id=0 if session_epoch < 1 else 7, session_epoch=session_epoch,
                        topics=topics, forgotten_topics_data=[], rack_id="")

    by_name = fetch(12, [quotas_topic, topic], session_epoch=0)
    assert fetch_errors(by_name, 12) == {topic: [0], quotas_topic: [TOPIC_AUTHORIZATION_FAILED]}
    assert b"readable" in next(p.records for t in by_name.responses for p in t.partitions  # type: ignore[attr-defined]
                               if t.topic == topic)
    assert by_name.session_id == 0  # type: ignore[attr-defined]  # no session opened without the refused topic
    quotas_id, served_id = topic_id(broker, quotas_topic), topic_id(broker, topic)
    assert fetch_errors(fetch(13, [quotas_id, served_id]), 13) == {served_id: [0],
                                                                     quotas_id: [TOPIC_AUTHORIZATION_FAILED]}
    assert fetch_errors(fetch(12, [quotas_topic]), 12) == {quotas_topic: [TOPIC_AUTHORIZATION_FAILED]}
    incremental = fetch(12, [quotas_topic], session_epoch=3)
    assert incremental.error_code == 70 and not incremental.responses  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["terminate", "inspect"])
def test_a_logged_in_client_cannot_write_the_quotas_topic_either(own_proxy, broker: Cluster,  # type: ignore[no-untyped-def]
                                                                 tmp_path: Path, mode: str) -> None:
    """The proxy's login writes the topic in both modes (in inspect mode the client's own login reaches the cluster,
    but the cluster's ACLs may well let it write there: the proxy refuses it whatever they say)."""
    quotas_topic = f"quotas-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "proxy.toml"
    fleet = (f'[fleet]\ntopic = "usage-{uuid.uuid4().hex[:8]}"\nquotas-topic = "{quotas_topic}"\n'
             'instance-id = "solo"\npublish-interval-ms = 200\n')
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[settings]\n"quota.scope" = "cluster"\n')
    if mode == "terminate":
        users_file = tmp_path / "users.toml"
        add_user(users_file, "alice", "SCRAM-SHA-512")
        config.write_text(fleet)
        proxy = own_proxy("--sasl-users", str(users_file), "--config", str(config), "--quota-file", str(quota_file))
    else:
        if broker.sasl_bootstrap is None:
            pytest.skip("the cluster under test names no SASL listener (KAFKA_SASL_BOOTSTRAP)")
        config.write_text('[upstream-sasl]\nmechanism = "SCRAM-SHA-512"\nusername = "quota-proxy"\n'
                          f'password = "{PASSWORDS["quota-proxy"]}"\n' + fleet)
        proxy = own_proxy("--sasl-mode", "inspect", "--config", str(config), "--quota-file", str(quota_file),
                          upstream=broker.sasl_bootstrap)
    proxy.wait_for_log("client quotas: can read the quota topic", timeout_s=30)
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                         "sasl.password": PASSWORDS["alice"], "message.timeout.ms": 30_000})
    producer.produce(quotas_topic, LIFTED_VALUE, LIFTED_KEY, on_delivery=lambda error, _: reports.append(error))
    assert producer.flush(60) == 0
    assert [error.code() if error else None for error in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_share_groups_cannot_read_or_acknowledge_the_proxys_topics(fleet_member: tuple[ProxyProcess, str],
                                                                   broker: Cluster) -> None:
    proxy, quotas_topic = fleet_member
    leader, _, _ = broker.leader(quotas_topic)
    quotas_id = topic_id(broker, quotas_topic)
    acknowledged = [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]
    with socket.create_connection(("127.0.0.1", proxy.broker_port_base + leader), timeout=30) as sock:
        fetched = call(sock, Api.SHARE_FETCH, 1, group_id="g", member_id="m", share_session_epoch=0, max_wait_ms=100,
                       min_bytes=1, max_bytes=1 << 20, max_records=100, batch_size=100, forgotten_topics_data=[],
                       topics=[{"topic_id": quotas_id, "partitions": [
                           {"partition_index": 0, "acknowledgement_batches": acknowledged}]}])
        acknowledging = call(sock, Api.SHARE_ACKNOWLEDGE, 1, group_id="g", member_id="m", share_session_epoch=1,
                             topics=[{"topic_id": quotas_id, "partitions": [
                                 {"partition_index": 0, "acknowledgement_batches": acknowledged}]}])
    assert [(uuid.UUID(str(t.topic_id)), [(p.partition_index, p.error_code, p.acknowledge_error_code, p.records)
                                          for p in t.partitions])
            for t in fetched.responses] == [  # type: ignore[attr-defined]
        (quotas_id, [(0, TOPIC_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, b"")])]
    assert [(uuid.UUID(str(t.topic_id)), [(p.partition_index, p.error_code) for p in t.partitions])
            for t in acknowledging.responses] == [  # type: ignore[attr-defined]
        (quotas_id, [(0, TOPIC_AUTHORIZATION_FAILED)])]


def test_kafkas_java_clients_and_pipelined_frames_cannot_reach_the_proxys_topics(
        fleet_member: tuple[ProxyProcess, str], broker: Cluster, topic: str) -> None:
    proxy, quotas_topic = fleet_member
    leader, _, _ = broker.leader(quotas_topic)
    create_topic_on_one_broker(broker, topic, node_id=leader)
    # Kafka's Java producer is refused the topic; its AdminClient neither lists nor describes it
    sent = java_tool("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", proxy.bootstrap,
                     "--topic", quotas_topic, "--max-messages", "1", "--acks", "-1")
    events = [json.loads(line) for line in sent.splitlines() if line.startswith("{")]
    assert [event["exception"] for event in events if event["name"] == "producer_send_error"] == [
        "class org.apache.kafka.common.errors.TopicAuthorizationException"], sent
    listed = java_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", proxy.bootstrap, "--list")
    assert topic in listed.split() and quotas_topic not in listed.split()
    described = java_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", proxy.bootstrap,
                          "--describe", "--topic", quotas_topic, succeeds=False)
    assert "TopicAuthorizationException" in described or "does not exist" in described, described
    # raw frames written at once: each answered in order, the proxy's topic refused in each, the rest served
    both = [{"name": quotas_topic, "partition_data": [{"index": 0, "records": lifting_batch()}]},
            {"name": topic, "partition_data": [{"index": 0, "records": record_batch([b"pipelined"])}]}]
    offsets = [{"name": name, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}
               for name in (quotas_topic, topic)]
    with socket.create_connection(("127.0.0.1", proxy.broker_port_base + leader), timeout=30) as sock:
        sock.sendall(
            encode_request(Api.METADATA, 12, correlation_id=1, topics=None, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
            + encode_request(Api.PRODUCE, PRODUCE_VERSION, correlation_id=2, transactional_id=None, acks=-1,
                             timeout_ms=30_000, topic_data=both)
            + encode_request(Api.LIST_OFFSETS, 7, correlation_id=3, replica_id=-1, isolation_level=0, topics=offsets)
            + encode_request(Api.METADATA, 12, correlation_id=4, allow_auto_topic_creation=True,
                             include_topic_authorized_operations=False,
                             topics=[{"name": quotas_topic, "topic_id": None}]))
        metadata, produced, listed_offsets, named = (read_frame(sock) for _ in range(4))
    assert [int.from_bytes(frame[:4], "big") for frame in (metadata, produced, listed_offsets, named)] == [1, 2, 3, 4]
    every = {t.name for t in decoded_response(metadata, Api.METADATA, 12).topics}
    assert topic in every and quotas_topic not in every
    assert _errors_by_topic(produced) == {quotas_topic: TOPIC_AUTHORIZATION_FAILED, topic: 0}
    offsets_answer = decoded_response(listed_offsets, Api.LIST_OFFSETS, 7)
    assert {t.name: t.partitions[0].error_code for t in offsets_answer.topics} == {
        quotas_topic: TOPIC_AUTHORIZATION_FAILED, topic: 0}
    assert [(t.name, t.error_code) for t in decoded_response(named, Api.METADATA, 12).topics] == [
        (quotas_topic, TOPIC_AUTHORIZATION_FAILED)]
    assert [record.value for record in read_to_end(broker.bootstrap, topic)] == [b"pipelined"]
    assert_nothing_lifted(proxy, broker, quotas_topic)


def test_the_share_groups_offset_apis_refuse_the_proxys_topics(fleet_member: tuple[ProxyProcess, str],
                                                               broker: Cluster, topic: str) -> None:
    proxy, quotas_topic = fleet_member
    create_topic_on_one_broker(broker, topic)
    group = f"share-{topic}"
    # a share group of the client's topic, empty again once Kafka's console share consumer has gone
    java_tool("org.apache.kafka.tools.consumer.ConsoleShareConsumer", "--bootstrap-server", broker.bootstrap,
              "--topic", topic, "--group", group, "--timeout-ms", "2000")
    requests = [
        (Api.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": group, "topics": [
            {"topic_name": name, "partitions": [{"partition_index": 0, "start_offset": 0}]}
            for name in (quotas_topic, topic)]}),
        (Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [
            {"group_id": group, "topics": [{"topic_name": name, "partitions": [0]} for name in (quotas_topic, topic)]},
            {"group_id": group, "topics": None}]}),
        (Api.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": group, "topics": [{"topic_name": quotas_topic}]}),
    ]
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:  # written at once
        sock.sendall(b"".join(encode_request(api_key, version, correlation_id=n, **fields)
                              for n, (api_key, version, fields) in enumerate(requests, 1)))
        altered, described, deleted = (answer_to(sock, api_key, version) for api_key, version, _ in requests)
    assert altered.error_code == 0, altered
    errors = {t.topic_name: [p.error_code for p in t.partitions] for t in altered.responses}
    assert errors[quotas_topic] == [TOPIC_AUTHORIZATION_FAILED] and errors[topic] != [TOPIC_AUTHORIZATION_FAILED]
    named, every = described.groups
    assert (named.error_code, every.error_code) == (0, 0), described
    assert {t.topic_name: [p.error_code for p in t.partitions] for t in named.topics}[quotas_topic] == [
        TOPIC_AUTHORIZATION_FAILED]
    assert quotas_topic not in {t.topic_name for t in every.topics}
    assert [(t.topic_name, t.error_code) for t in deleted.responses] == [(quotas_topic, TOPIC_AUTHORIZATION_FAILED)]
    # Kafka's own kafka-share-groups, through the proxy, cannot reset the group on the proxy's topic
    reset = java_tool("org.apache.kafka.tools.consumer.group.ShareGroupCommand", "--bootstrap-server",
                      proxy.bootstrap, "--reset-offsets", "--group", group, "--topic", f"{quotas_topic}:0",
                      "--to-earliest", "--execute", succeeds=None)  # it reports the failure and exits 0
    assert "TopicAuthorizationException: Topic authorization failed." in reset, reset
