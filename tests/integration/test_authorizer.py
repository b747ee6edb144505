"""The proxy's authorizer side by side with Apache Kafka's own: one Kafka cluster running ``StandardAuthorizer``
with SASL, the same ACLs created there (with Kafka's admin API) and given to a proxy terminating the logins, and the
same requests of alice, bob and carol sent to both, Kafka's SASL listener and the proxy. Every answer must be the
same, error code for error code: the matrix of what each principal may do (``test_each_answer_is_kafkas``), with raw
frames and with librdkafka.

The proxy reaches the cluster as a super user, which the cluster lets do anything: a request the proxy let through
that Kafka would refuse shows as a difference.
"""

from __future__ import annotations

import re
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from protocol.apis import Api
from protocol.errors import FETCH_SESSION_ID_NOT_FOUND, SHARE_SESSION_NOT_FOUND
from proxy.dev.apache_kafka import LOOPBACK, KafkaCluster
from proxy.security.sasl_messages import plain_token
from proxy.security.users import UserStore, plain_credential, save_users
from tests.fidelity import JAVA_SOURCES, java_tool
from tests.support import (
    CLUSTER_USERS,
    GROUP_RESOURCE,
    PASSWORDS,
    Cluster,
    ProxyProcess,
    call,
    call_with_body,
    closed_by_peer,
    decoded_response,
    encode_request,
    new_producer_id,
    read_frame,
    record_batch,
    wait_until,
)

pytestmark = pytest.mark.integration

SUPER_USER = "quota-proxy"
ACLS = [  # principal, resource type, name, pattern type, operation, permission, as kafka-acls names them
    ("User:alice", "topic", "acl-a.", "prefixed", "all", "allow"),
    ("User:alice", "topic", "acl-a.locked", "literal", "write", "deny"),
    ("User:alice", "topic", "acl-shared", "literal", "describe", "allow"),
    ("User:alice", "topic", "acl-new.", "prefixed", "describe", "allow"),
    ("User:alice", "transactional-id", "tx-a", "literal", "write", "allow"),
    ("User:bob", "topic", "acl-shared", "literal", "read", "allow"),
    ("User:bob", "topic", "acl-shared", "literal", "write", "allow"),
    ("User:bob", "topic", "acl-new.", "prefixed", "describe", "allow"),
    ("User:bob", "topic", "acl-new.", "prefixed", "create", "allow"),
    ("User:*", "topic", "acl-public", "literal", "describe", "allow"),
    ("User:alice", "group", "alice-", "prefixed", "read", "allow"),
    ("User:alice", "topic", "acl-a.one", "literal", "read", "allow"),
    ("User:alice", "group", "shared-group", "literal", "describe", "allow"),
    ("User:bob", "group", "shared-group", "literal", "read", "allow"),
    ("User:bob", "transactional-id", "tx-", "prefixed", "describe", "allow"),
    ("User:bob", "topic", "acl-shared", "literal", "describe-configs", "allow"),
    ("User:bob", "group", "shared-group", "literal", "alter-configs", "allow"),
    ("User:bob", "cluster", "kafka-cluster", "literal", "describe-configs", "allow"),
    ("User:alice", "group", "alice-g", "literal", "delete", "allow"),
    ("User:alice", "group", "alice-share", "literal", "delete", "allow"),
    ("User:alice", "user", "User:bob", "literal", "create-tokens", "allow"),
    ("User:carol", "cluster", "kafka-cluster", "literal", "alter", "allow"),
]
TOPICS = ["acl-a.one", "acl-a.locked", "acl-shared", "acl-public", "acl-hidden"]
USERS = ("alice", "bob", "carol", SUPER_USER)
ZERO_ID = uuid.UUID(int=0)
STREAMS_GROUP_DESCRIBE = 89
OPEN_TRANSACTION = "tx-open"
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 77, 78, 79
DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS = 90, 91, 92
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED = 29, 30


def kafka_binding(principal: str, resource_type: str, name: str, pattern: str, operation: str,
                  permission: str) -> AclBinding:
    kind = "broker" if resource_type == "cluster" else resource_type  # confluent-kafka's name of the cluster
    return AclBinding(ResourceType[kind.upper().replace("-", "_")], name,
                      ResourcePatternType[pattern.upper()], principal, "*",
                      AclOperation[operation.upper().replace("-", "_")],
                      AclPermissionType[permission.upper()])


def acl_file_text() -> str:
    return "".join(f'[[acl]]\nprincipal = "{principal}"\nresource-type = "{kind}"\nresource-name = "{name}"\n'
                   f'pattern-type = "{pattern}"\noperations = ["{operation}"]\npermission = "{permission}"\n\n'
                   for principal, kind, name, pattern, operation, permission in ACLS)


class Side(NamedTuple):
    """Where a principal's requests go: Kafka's SASL listener, or the proxy; ``broker``: the one broker's address."""

    name: str
    bootstrap: str
    broker: tuple[str, int]

    def connect(self, user: str) -> socket.socket:
        """A connection to the broker, logged in as ``user`` with PLAIN."""
        sock = socket.create_connection(self.broker, timeout=30)
        handshake = call(sock, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        assert handshake.error_code == 0, handshake  # type: ignore[attr-defined]
        login = call(sock, Api.SASL_AUTHENTICATE, 2, auth_bytes=plain_token(user, PASSWORDS[user]))
        assert login.error_code == 0, login  # type: ignore[attr-defined]
        return sock


class Setup(NamedTuple):
    kafka: Side
    proxy: Side
    acl_file: Path
    """The proxy's ACL file."""
    proxy_process: ProxyProcess


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("authorizer")
    with KafkaCluster(1, users=CLUSTER_USERS, log_directory=directory / "kafka", extra_properties={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # the proxy's and the controller's logins (PLAINTEXT), and the super user of the tests
            "super.users": f"User:ANONYMOUS;User:{SUPER_USER}",
            "group.initial.rebalance.delay.ms": "0"}) as kafka:
        cluster = Cluster(kafka.bootstrap, kafka.sasl_bootstrap, started_here=True).wait_until_ready()
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        for future in admin.create_topics([NewTopic(name, 1, 1) for name in [
                *TOPICS, "acl-new.fixed-kafka", "acl-new.fixed-proxy"]]).values():
            future.result(60)
        for future in admin.create_acls([kafka_binding(*acl) for acl in ACLS if acl[1] != "user"]).values():
            future.result(60)
        with socket.create_connection((cluster.host, cluster.port), timeout=30) as sock:  # librdkafka has no USER
            created = call(sock, Api.CREATE_ACLS, 3, creations=[
                acl_creation(name, principal=principal, operation=USER_OPERATIONS[operation], resource_type=7)
                for principal, kind, name, _, operation, _ in ACLS if kind == "user"])
            assert all(result.error_code == 0 for result in created.results), created  # type: ignore[attr-defined]
        with socket.create_connection((cluster.host, cluster.port), timeout=30) as sock:
            for key_type in (0, 1):  # the coordinators' topics made now, not by one side's first question
                wait_until(lambda: call(sock, Api.FIND_COORDINATOR, 4, key_type=key_type,  # noqa: B023
                                        coordinator_keys=["warm"]).coordinators[0].error_code == 0,  # type: ignore[attr-defined]
                           60, "a coordinator")
        users_file = directory / "users.toml"
        save_users(users_file, UserStore({name: {"PLAIN": plain_credential(PASSWORDS[name], 1000)}
                                          for name in USERS}))
        acl_file = directory / "acls.toml"
        acl_file.write_text(acl_file_text())
        config = directory / "proxy.toml"
        config.write_text(f'[authorizer]\nenabled = true\nsuper-users = ["User:{SUPER_USER}"]\n'
                          f'acl-file = "{acl_file}"\n')
        proxy = ProxyProcess(cluster.bootstrap, directory / "proxy.log", "--sasl-users", str(users_file),
                             "--config", str(config), node_ids=cluster.node_ids).start()
        try:
            host, _, port = kafka.sasl_bootstrap.rpartition(":")
            yield Setup(Side("kafka", kafka.sasl_bootstrap, (host, int(port))),
                        Side("proxy", proxy.bootstrap, (LOOPBACK, proxy.broker_port_base + cluster.node_ids[0])),
                        acl_file, proxy)
        finally:
            assert proxy.stop() == 0, proxy.log()


def topic_ids(side: Side) -> dict[uuid.UUID, str]:
    with side.connect(SUPER_USER) as sock:
        answer = call(sock, Api.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                      include_topic_authorized_operations=False)
    return {topic.topic_id: topic.name for topic in answer.topics}  # type: ignore[attr-defined]


def unsided(name: str | None, side: Side) -> str | None:
    """A name made for one side, as the other side's counterpart reads."""
    return None if name is None else name.removesuffix(f"-{side.name}")


def ours(name: str, side: Side) -> bool:
    """A topic of the tests, of both sides or of this side's alone."""
    return name in TOPICS or name.endswith(f"-{side.name}")


def metadata_of_all(sock: socket.socket, side: Side) -> Any:
    answer = call(sock, Api.METADATA, 10, topics=None, allow_auto_topic_creation=False,
                  include_cluster_authorized_operations=True, include_topic_authorized_operations=True)
    return (answer.authorized_operations,  # type: ignore[attr-defined]
            sorted((unsided(topic.name, side), topic.error_code, topic.authorized_operations)
                   for topic in answer.topics if ours(topic.name, side)))  # type: ignore[attr-defined]


def metadata_of_named(sock: socket.socket, side: Side) -> Any:
    """The topics named, two of them missing and asked to be created: alice may only describe the first, bob may
    create the second."""
    names = [*TOPICS, f"acl-missing-{side.name}", f"acl-new.alice-{side.name}", f"acl-new.bob-{side.name}"]
    answer = call(sock, Api.METADATA, 12, topics=[{"name": name, "topic_id": None} for name in names],
                  allow_auto_topic_creation=True, include_topic_authorized_operations=True)
    # v0-3 has no flag: a missing topic is created whenever the principal may
    old = call(sock, Api.METADATA, 3, topics=[{"name": f"acl-new.old-{side.name}"}])
    return sorted((unsided(topic.name, side), topic.error_code, topic.authorized_operations,
                   topic.topic_id == ZERO_ID, topic.is_internal)
                  for topic in answer.topics) + [  # type: ignore[attr-defined]
        (unsided(topic.name, side), topic.error_code) for topic in old.topics]  # type: ignore[attr-defined]


def metadata_by_id(sock: socket.socket, side: Side) -> Any:
    """Every topic by id; then one by id with a name beside it that the principal may describe (Kafka reads the ids
    alone)."""
    ids = topic_ids(side)
    answer = call(sock, Api.METADATA, 12, topics=[{"name": None, "topic_id": topic_id} for topic_id, name
                                                  in ids.items() if name in TOPICS],
                  allow_auto_topic_creation=False, include_topic_authorized_operations=True)
    hidden = next(topic_id for topic_id, name in ids.items() if name == "acl-hidden")
    named_too = call(sock, Api.METADATA, 12, topics=[{"name": "acl-public", "topic_id": hidden}],
                     allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return [sorted((ids[topic.topic_id], topic.name, topic.error_code, topic.authorized_operations)
                   for topic in answer.topics),  # type: ignore[attr-defined]
            [(ids.get(topic.topic_id), topic.name, topic.error_code, len(topic.partitions))
             for topic in named_too.topics]]  # type: ignore[attr-defined]


def described_topics(sock: socket.socket, side: Side) -> Any:
    """The fixed topics by name, and every topic; every topic from "acl-" on, a partition a page (Kafka's cursor
    names the next topic the principal may describe); the fixed topics from a cursor; requests Kafka refuses whole
    (a cursor naming a topic the list does not, a negative partition)."""
    named = call(sock, Api.DESCRIBE_TOPIC_PARTITIONS, 0, topics=[{"name": name} for name in TOPICS],
                 response_partition_limit=100, cursor=None)
    everyone = call(sock, Api.DESCRIBE_TOPIC_PARTITIONS, 0, topics=[], response_partition_limit=100, cursor=None)
    # the fixed topics alone: one the Metadata before has just created may not show yet
    answers: list[Any] = [sorted((topic.name, topic.error_code, topic.topic_authorized_operations)
                                 for topic in answer.topics if topic.name in TOPICS)
                          for answer in (named, everyone)]  # type: ignore[attr-defined]
    paged: list[tuple[Any, ...]] = []
    cursor = {"topic_name": "acl-", "partition_index": 0}
    for _ in range(100):
        page = call(sock, Api.DESCRIBE_TOPIC_PARTITIONS, 0, topics=[], response_partition_limit=1, cursor=cursor)
        paged += [(topic.name, topic.error_code, topic.topic_authorized_operations, len(topic.partitions))
                  for topic in page.topics if topic.name in TOPICS]  # type: ignore[attr-defined]
        following = page.next_cursor  # type: ignore[attr-defined]
        if following is None or not following.topic_name.startswith("acl-"):
            break
        if following.topic_name in TOPICS:
            paged.append(("next", following.topic_name, following.partition_index))
        cursor = {"topic_name": following.topic_name, "partition_index": following.partition_index}
    else:
        raise AssertionError(f"no end to the pages of {side.name}")
    from_cursor = call(sock, Api.DESCRIBE_TOPIC_PARTITIONS, 0, topics=[{"name": name} for name in TOPICS],
                       response_partition_limit=100, cursor={"topic_name": "acl-hidden", "partition_index": 0})
    refused_whole = [call(sock, Api.DESCRIBE_TOPIC_PARTITIONS, 0, topics=topics, response_partition_limit=100,
                          cursor=cursor) for topics, cursor in (
        ([{"name": name} for name in TOPICS], {"topic_name": "acl-nowhere", "partition_index": 0}),
        ([], {"topic_name": "acl-public", "partition_index": -1}))]
    return [*answers, paged, sorted((topic.name, topic.error_code) for topic in from_cursor.topics),  # type: ignore[attr-defined]
            [sorted((topic.name, topic.error_code) for topic in answer.topics)  # type: ignore[attr-defined]
             for answer in refused_whole]]


def produced(sock: socket.socket, side: Side) -> Any:
    batch = record_batch([b"one record"])
    answer = call(sock, Api.PRODUCE, 9, transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
        {"name": name, "partition_data": [{"index": 0, "records": batch}]} for name in TOPICS])
    return sorted((topic.name, partition.error_code) for topic in answer.responses  # type: ignore[attr-defined]
                  for partition in topic.partition_responses)


def produced_transactionally(sock: socket.socket, side: Side) -> Any:
    """A transactional batch under tx-a, which only alice may write (the cluster then refuses the batch itself: no
    producer ID was given to it)."""
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16, transactional=True,
                                   producer_id=4242, producer_epoch=0, base_sequence=0)
    builder.append(int(time.time() * 1000), None, b"in a transaction")
    builder.close()
    answer = call(sock, Api.PRODUCE, 9, transactional_id="tx-a", acks=-1, timeout_ms=30_000, topic_data=[
        {"name": "acl-a.one", "partition_data": [{"index": 0, "records": bytes(builder.buffer())}]}])
    return [(topic.name, partition.error_code) for topic in answer.responses  # type: ignore[attr-defined]
            for partition in topic.partition_responses]


def fetched(sock: socket.socket, side: Side) -> Any:
    by_name = call(sock, Api.FETCH, 12, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                   isolation_level=0, session_id=0, session_epoch=0, rack_id="", forgotten_topics_data=[],
                   topics=[{"topic": name, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                           "fetch_offset": 0, "last_fetched_epoch": -1,
                                                           "log_start_offset": -1, "partition_max_bytes": 1 << 16}]}
                           for name in TOPICS])
    ids = {name: topic_id for topic_id, name in topic_ids(side).items()}
    by_id = call(sock, Api.FETCH, 13, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                 isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                 topics=[{"topic_id": ids[name], "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                                 "fetch_offset": 0, "last_fetched_epoch": -1,
                                                                 "log_start_offset": -1,
                                                                 "partition_max_bytes": 1 << 16}]}
                         for name in TOPICS])
    names = {topic_id: name for name, topic_id in ids.items()}
    return [sorted((topic.topic, partition.error_code, bool(partition.records))
                   for topic in by_name.responses for partition in topic.partitions),  # type: ignore[attr-defined]
            sorted((names[topic.topic_id], partition.error_code, bool(partition.records))
                   for topic in by_id.responses for partition in topic.partitions)]  # type: ignore[attr-defined]


def fetched_as_a_follower(sock: socket.socket, side: Side) -> Any:
    """A fetch claiming to be broker 7's: only CLUSTER_ACTION may (the cluster's own error for a super user)."""
    answer = call(sock, Api.FETCH, 12, replica_id=7, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                  isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[], topics=[
                      {"topic": "acl-a.one", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                             "fetch_offset": 0, "last_fetched_epoch": -1,
                                                             "log_start_offset": -1, "partition_max_bytes": 1 << 16}]}])
    return (answer.error_code, [(topic.topic, partition.error_code)  # type: ignore[attr-defined]
                                for topic in answer.responses for partition in topic.partitions])  # type: ignore[attr-defined]


NULLS_GROUP = "alice-nulls"


def offsets_committed_to_the_nulls_group(setup: Setup) -> None:
    """The super user commits offsets of acl-a.one and acl-hidden in ``NULLS_GROUP`` (``negative_lengths``)."""
    with setup.kafka.connect(SUPER_USER) as sock:
        committed = call(sock, Api.OFFSET_COMMIT, 9, group_id=NULLS_GROUP, generation_id_or_member_epoch=-1,
                         member_id="", group_instance_id=None, topics=[
                             {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                            "committed_leader_epoch": -1, "committed_metadata": ""}]}
                             for name in ("acl-a.one", "acl-hidden")])
    assert {partition.error_code for topic in committed.topics  # type: ignore[attr-defined]
            for partition in topic.partitions} == {0}, committed


def negative_lengths(sock: socket.socket, side: Side) -> Any:
    """A Metadata (v1) and an OffsetFetch (v5) whose topic list's length is -2: null to Kafka's readers, so every
    topic the principal may describe, and every committed offset of ``NULLS_GROUP`` it may see."""
    metadata = call_with_body(sock, Api.METADATA, 1, b"\xff\xff\xff\xfe")
    group = NULLS_GROUP.encode()
    offsets = call_with_body(sock, Api.OFFSET_FETCH, 5, len(group).to_bytes(2, "big") + group + b"\xff\xff\xff\xfe")
    return [sorted((unsided(topic.name, side), topic.error_code)
                   for topic in metadata.topics if ours(topic.name, side)),
            (offsets.error_code, sorted((topic.name, partition.partition_index, partition.committed_offset,
                                         partition.error_code)
                                        for topic in offsets.topics for partition in topic.partitions))]


def listed_offsets(sock: socket.socket, side: Side) -> Any:
    answer = call(sock, Api.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=[
        {"name": name, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}
        for name in TOPICS])
    return sorted((topic.name, partition.error_code, partition.offset, partition.timestamp)
                  for topic in answer.topics for partition in topic.partitions)  # type: ignore[attr-defined]


def coordinators(sock: socket.socket, side: Side) -> Any:
    groups = call(sock, Api.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["alice-g", "shared-group", "other"])
    transactions = call(sock, Api.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=["tx-a", "tx-b"])
    one = call(sock, Api.FIND_COORDINATOR, 3, key="alice-g", key_type=0)
    return [[(coordinator.key, coordinator.error_code, coordinator.error_message, coordinator.node_id >= 0)
             for coordinator in answer.coordinators] for answer in (groups, transactions)] + [  # type: ignore[attr-defined]
        (one.error_code, one.error_message, one.node_id >= 0)]  # type: ignore[attr-defined]


def group_membership(sock: socket.socket, side: Side) -> Any:
    """Asking to join, and heartbeats of a member the groups do not have: the cluster's own errors where allowed."""
    answers = []
    for group in ("alice-g", "shared-group", "other"):
        joined = call(sock, Api.JOIN_GROUP, 9, group_id=group, session_timeout_ms=30_000,
                      rebalance_timeout_ms=30_000, member_id="", group_instance_id=None, protocol_type="consumer",
                      protocols=[{"name": "range", "metadata": b""}], reason=None)
        beat = call(sock, Api.HEARTBEAT, 4, group_id=group, generation_id=1, member_id="nobody",
                    group_instance_id=None)
        left = call(sock, Api.LEAVE_GROUP, 5, group_id=group, members=[
            {"member_id": "nobody", "group_instance_id": None, "reason": None}])
        answers.append((group, joined.error_code, joined.generation_id, joined.protocol_name,  # type: ignore[attr-defined]
                        beat.error_code, left.error_code))  # type: ignore[attr-defined]
    return answers


def group_offsets(sock: socket.socket, side: Side) -> Any:
    committed = call(sock, Api.OFFSET_COMMIT, 9, group_id="alice-g", generation_id_or_member_epoch=-1,
                     member_id="", group_instance_id=None, topics=[
                         {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}
                         for name in ("acl-a.one", "acl-hidden")])
    refused = call(sock, Api.OFFSET_COMMIT, 9, group_id="other", generation_id_or_member_epoch=-1, member_id="",
                   group_instance_id=None, topics=[{"name": "acl-a.one", "partitions": [
                       {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                        "committed_metadata": ""}]}])
    fetched_groups = call(sock, Api.OFFSET_FETCH, 8, require_stable=False, groups=[
        {"group_id": "alice-g", "topics": [{"name": name, "partition_indexes": [0]}
                                           for name in ("acl-a.one", "acl-hidden")]},
        {"group_id": "alice-g", "topics": None}, {"group_id": "other", "topics": None}])
    one_group = call(sock, Api.OFFSET_FETCH, 7, group_id="alice-g", topics=None, require_stable=False)
    deleted = [call(sock, Api.OFFSET_DELETE, 0, group_id=group, topics=[
        {"name": name, "partitions": [{"partition_index": 0}]} for name in ("acl-hidden", "acl-a.one", "acl-a.gone")])
        for group in ("alice-g", "nobodys-group")]
    return [[(answer.error_code, [(topic.name, [partition.error_code for partition in topic.partitions])
                                  for topic in answer.topics]) for answer in deleted],  # type: ignore[attr-defined]
            sorted((topic.name, partition.error_code) for answer in (committed, refused)
                   for topic in answer.topics for partition in topic.partitions),  # type: ignore[attr-defined]
            [(group.group_id, group.error_code, sorted((topic.name, partition.error_code, partition.committed_offset)
                                                       for topic in group.topics for partition in topic.partitions))
             for group in fetched_groups.groups],  # type: ignore[attr-defined]
            (one_group.error_code, sorted((topic.name, partition.committed_offset)  # type: ignore[attr-defined]
                                          for topic in one_group.topics for partition in topic.partitions))]  # type: ignore[attr-defined]


def topic_admin(sock: socket.socket, side: Side) -> Any:
    """Topics created (with their configs, where the principal may describe them), grown and deleted: alice may
    create, alter and delete acl-a.*, bob create acl-new.*, which both may describe."""
    created = call(sock, Api.CREATE_TOPICS, 7, timeout_ms=30_000, validate_only=False, topics=[
        {"name": f"{name}-{side.name}", "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []} for name in ("acl-a.new", "acl-new.alice-made", "acl-new.bob-made")])
    grown = call(sock, Api.CREATE_PARTITIONS, 3, timeout_ms=30_000, validate_only=False, topics=[
        {"name": f"{name}-{side.name}", "count": 2, "assignments": None} for name in ("acl-a.new", "acl-new.fixed")])
    deleted = call(sock, Api.DELETE_TOPICS, 6, timeout_ms=30_000, topics=[
        {"name": f"{name}-{side.name}", "topic_id": None} for name in ("acl-a.new", "acl-new.fixed")])
    return [sorted((unsided(topic.name, side), topic.error_code, topic.error_message and topic.error_message.replace(
                        f"-{side.name}", ""), topic.topic_config_error_code, topic.num_partitions,
                    topic.replication_factor, bool(topic.configs))
                   for topic in created.topics),  # type: ignore[attr-defined]
            sorted((unsided(topic.name, side), topic.error_code, topic.error_message)
                   for topic in grown.results),  # type: ignore[attr-defined]
            sorted((unsided(topic.name, side), topic.error_code, topic.error_message)
                   for topic in deleted.responses)]  # type: ignore[attr-defined]


RETRIED = {14, 15, 51}
"""COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS: asked again, as clients do."""


def producer_ids(sock: socket.socket, side: Side) -> Any:
    """An idempotent producer's, and a transactional one's of tx-a and tx-b (the cluster's own errors where
    allowed)."""
    answers = []
    for transactional_id in (None, "tx-a", "tx-b"):
        deadline = time.monotonic() + 30
        while True:
            answer = call(sock, Api.INIT_PRODUCER_ID, 5, transactional_id=transactional_id,
                          transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1)
            if answer.error_code not in RETRIED or time.monotonic() > deadline:  # type: ignore[attr-defined]
                break
            time.sleep(0.1)
        answers.append((transactional_id, answer.error_code, answer.producer_id >= 0))  # type: ignore[attr-defined]
    return answers


def acl_creation(name: str, pattern_type: int = 3, principal: str = "User:nobody", operation: int = 3,
                 resource_type: int = 2) -> dict[str, Any]:
    return {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern_type,
            "principal": principal, "host": "*", "operation": operation, "permission_type": 3}


USER_OPERATIONS = {"create-tokens": 13, "describe-tokens": 14}
"""The operations on a USER resource, by code (Kafka's ``AclOperation``)."""


def acl_filter(resource_type: int = 1, name: str | None = None, operation: int = 1) -> dict[str, Any]:
    return {"resource_type_filter": resource_type, "resource_name_filter": name, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": operation, "permission_type": 1}


def acl_requests(sock: socket.socket, side: Side) -> Any:
    """Every ACL described (a super user's right alone here), creations Kafka refuses one by one (an empty name, a
    principal without a type, a cluster of another name, an operation it does not know) or whole (a MATCH pattern
    beside a valid ACL), and DeleteAcls filters it does not know beside one matching nothing: none of them changes
    an ACL. A refusal's message is compared but for CLUSTER_AUTHORIZATION_FAILED's, which Kafka writes with the
    request's connection in it."""
    described = call(sock, Api.DESCRIBE_ACLS, 3, **acl_filter())
    one_by_one = call(sock, Api.CREATE_ACLS, 3, creations=[
        acl_creation(""), acl_creation("acl-none", principal="nobody"), acl_creation("acl-none", resource_type=4),
        acl_creation("acl-none", operation=99)])
    whole = call(sock, Api.CREATE_ACLS, 3, creations=[acl_creation("acl-none"), acl_creation("acl-none", 2)])
    deleted = call(sock, Api.DELETE_ACLS, 3, filters=[acl_filter(99), acl_filter(operation=99),
                                                      acl_filter(2, "acl-none")])

    def told(code: int, message: str | None) -> tuple[int, str | None]:
        return code, None if code == 31 else message

    return (told(described.error_code, described.error_message),  # type: ignore[attr-defined]
            sorted((r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                    a.permission_type) for r in described.resources for a in r.acls),  # type: ignore[attr-defined]
            [told(r.error_code, r.error_message) for r in one_by_one.results],  # type: ignore[attr-defined]
            [told(r.error_code, r.error_message) for r in whole.results],  # type: ignore[attr-defined]
            [(*told(r.error_code, r.error_message), len(r.matching_acls))
             for r in deleted.filter_results])  # type: ignore[attr-defined]


def delegation_tokens(sock: socket.socket, side: Side) -> Any:
    """Tokens created for oneself (v1, and v3), for bob (alice may create his: CREATE_TOKENS on User:bob), for carol
    (nobody may), with a renewer that is not a user (for oneself, and for bob) and for an owner of no type; one renewed
    and one expired by a made-up HMAC; every token described. Kafka's tokens are disabled here (it has no
    ``delegation.token.secret.key``), as the proxy's always are: the question is which refusal each gets, in the
    order Kafka judges."""
    def created(version: int, owner: tuple[str | None, str | None], renewers: tuple[str, ...] = ()) -> Any:
        owned = {} if version < 3 else {"owner_principal_type": owner[0], "owner_principal_name": owner[1]}
        answer = call(sock, Api.CREATE_DELEGATION_TOKEN, version, max_lifetime_ms=-1, **owned, renewers=[
            {"principal_type": kind, "principal_name": "someone"} for kind in renewers])
        return (answer.error_code, answer.principal_type, answer.principal_name,  # type: ignore[attr-defined]
                getattr(answer, "token_requester_principal_name", None), answer.issue_timestamp_ms,  # type: ignore[attr-defined]
                answer.expiry_timestamp_ms, answer.max_timestamp_ms, answer.token_id,  # type: ignore[attr-defined]
                bytes(answer.hmac))  # type: ignore[attr-defined]

    renewed = call(sock, Api.RENEW_DELEGATION_TOKEN, 2, hmac=b"made-up", renew_period_ms=1000)
    expired = call(sock, Api.EXPIRE_DELEGATION_TOKEN, 1, hmac=b"made-up", expiry_time_period_ms=-1)
    described = call(sock, Api.DESCRIBE_DELEGATION_TOKEN, 3, owners=None)
    return ([created(1, (None, None)), created(3, (None, None)), created(3, ("User", "bob")),
             created(3, ("User", "carol")), created(3, (None, None), ("Group",)),
             created(3, ("User", "bob"), ("User", "Group")), created(3, (None, "bob"))],
            (renewed.error_code, renewed.expiry_timestamp_ms),  # type: ignore[attr-defined]
            (expired.error_code, expired.expiry_timestamp_ms),  # type: ignore[attr-defined]
            (described.error_code, described.tokens))  # type: ignore[attr-defined]


def compared(answer: Any, *left_out: str) -> Any:
    """An answer's fields as Kafka's and the proxy's are compared: ``left_out`` dropped at any depth, with the throttle;
    the message of a CLUSTER_AUTHORIZATION_FAILED Kafka writes naming the request's connection replaced."""
    def walk(value: Any) -> Any:
        if isinstance(value, list):
            return [walk(item) for item in value]
        if not isinstance(value, dict):
            return value
        kept = {name: walk(item) for name, item in value.items() if name not in {*left_out, "throttle_time_ms"}}
        if kept.get("error_code") == 31 and kept.get("error_message") not in (None, "Cluster authorization failed."):
            kept["error_message"] = "(names the request)"
        return kept

    return walk(answer.to_dict())


def cluster_administration(sock: socket.socket, side: Side) -> Any:
    """The cluster's administration, each API needing one operation on the cluster (carol may alter it, which implies
    describing it; bob may describe its configs), by requests that change nothing where allowed: an unknown topic's
    log directories described, its replica moved to a directory that does not exist, its leaders elected and its
    reassignment cancelled and listed; credentials described, and unknown users' deleted; the quorum described; an
    unknown feature updated with validation alone; the brokers' config resources listed; an unknown broker
    unregistered, and an unknown voter added to and removed from the (static) quorum."""
    unknown = "acl-none"
    return [
        compared(call(sock, Api.DESCRIBE_LOG_DIRS, 4, topics=[{"topic": unknown, "partitions": [0]}]),
                 "total_bytes", "usable_bytes"),
        compared(call(sock, Api.ALTER_REPLICA_LOG_DIRS, 2, dirs=[
            {"path": "/no/such/dir", "topics": [{"name": unknown, "partitions": [0, 1]}]}])),
        compared(call(sock, Api.ELECT_LEADERS, 2, election_type=0, timeout_ms=5000,
                      topic_partitions=[{"topic": unknown, "partitions": [0, 1]}])),
        compared(call(sock, Api.ALTER_PARTITION_REASSIGNMENTS, 1, timeout_ms=5000,
                      allow_replication_factor_change=True,
                      topics=[{"name": unknown, "partitions": [{"partition_index": 0, "replicas": None}]}])),
        compared(call(sock, Api.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=5000,
                      topics=[{"name": unknown, "partition_indexes": [0]}])),
        compared(call(sock, Api.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=[{"name": "alice"}, {"name": "nobody"}])),
        compared(call(sock, Api.ALTER_USER_SCRAM_CREDENTIALS, 0, upsertions=[], deletions=[
            {"name": "nobody", "mechanism": 1}, {"name": "anybody", "mechanism": 2}])),
        compared(call(sock, Api.DESCRIBE_QUORUM, 2, topics=[
            {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]),
            "high_watermark", "current_voters", "observers"),
        compared(call(sock, Api.UPDATE_FEATURES, 1, timeout_ms=5000, validate_only=True, feature_updates=[
            {"feature": "no.such.feature", "max_version_level": 1, "upgrade_type": 1}])),
        compared(call(sock, Api.LIST_CONFIG_RESOURCES, 1, resource_types=[4])),
        compared(call(sock, Api.UNREGISTER_BROKER, 0, broker_id=999)),
        compared(call(sock, Api.ADD_RAFT_VOTER, 0, cluster_id=None, timeout_ms=5000, voter_id=999,
                      voter_directory_id=uuid.UUID(int=1), listeners=[
                          {"name": "CONTROLLER", "host": "localhost", "port": 1}])),
        compared(call(sock, Api.REMOVE_RAFT_VOTER, 0, cluster_id=None, voter_id=999,
                      voter_directory_id=uuid.UUID(int=1)))]


def groups(sock: socket.socket, side: Side) -> Any:
    """The groups listed (of those the matrix makes), and described: alice's, the shared one (alice may describe it,
    bob read it) and one that is nobody's, with their authorized operations; and groups that do not exist deleted
    (which changes nothing, where allowed)."""
    made = {"alice-g", "alice-consumer", "shared-group", "nobodys-group"}
    listed = call(sock, Api.LIST_GROUPS, 5, states_filter=[], types_filter=[])
    described = call(sock, Api.DESCRIBE_GROUPS, 5, groups=sorted(made), include_authorized_operations=True)
    deleted = call(sock, Api.DELETE_GROUPS, 2, groups_names=["nobodys-group", "alice-none", "nobodys-group"])
    return (listed.error_code, sorted(group.group_id for group in listed.groups  # type: ignore[attr-defined]
                                      if group.group_id in made),  # type: ignore[attr-defined]
            [(group.group_id, group.error_code, group.group_state, group.protocol_type, len(group.members),
              group.authorized_operations) for group in described.groups],  # type: ignore[attr-defined]
            [(result.group_id, result.error_code) for result in deleted.results])  # type: ignore[attr-defined]


def described_cluster(sock: socket.socket, side: Side) -> Any:
    """The cluster described, with the principal's authorized operations on it and without (its brokers by id: their
    addresses are each side's)."""
    answers = []
    for with_operations in (True, False):
        described = call(sock, Api.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=with_operations,
                         endpoint_type=1)
        answers.append((described.error_code, described.authorized_operations,  # type: ignore[attr-defined]
                        sorted(broker.broker_id for broker in described.brokers)))  # type: ignore[attr-defined]
    return answers


def transactions(sock: socket.socket, side: Side) -> Any:
    """A transaction's requests for tx-a (alice may write it) and tx-b (nobody), with a producer id the cluster
    never gave (so that nothing changes there: where allowed, its own refusal): partitions added (to acl-a.one,
    acl-hidden and an internal topic), offsets added and committed for alice's group and for one that is nobody's,
    and the transaction ended."""
    answers: list[Any] = []
    for transactional_id in ("tx-a", "tx-b"):
        for topics in (["acl-a.one"], ["acl-a.one", "acl-hidden"], ["acl-a.one", "__consumer_offsets"]):
            added = call(sock, Api.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=transactional_id,
                         v3_and_below_producer_id=4242, v3_and_below_producer_epoch=0,
                         v3_and_below_topics=[{"name": name, "partitions": [0]} for name in topics])
            answers.append(sorted((topic.name, partition.partition_error_code)
                                  for topic in added.results_by_topic_v3_and_below  # type: ignore[attr-defined]
                                  for partition in topic.results_by_partition))
        for group in ("alice-tx", "nobodys-group"):
            offsets = call(sock, Api.ADD_OFFSETS_TO_TXN, 4, transactional_id=transactional_id, producer_id=4242,
                           producer_epoch=0, group_id=group)
            committed = call(sock, Api.TXN_OFFSET_COMMIT, 5, transactional_id=transactional_id, group_id=group,
                             producer_id=4242, producer_epoch=0, generation_id=-1, member_id="",
                             group_instance_id=None, topics=[{"name": name, "partitions": [{
                                 "partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
                                 "committed_metadata": ""}]} for name in ("acl-a.one", "acl-hidden")])
            answers.append((offsets.error_code, sorted(  # type: ignore[attr-defined]
                (topic.name, partition.error_code) for topic in committed.topics  # type: ignore[attr-defined]
                for partition in topic.partitions)))
        ended = call(sock, Api.END_TXN, 5, transactional_id=transactional_id, producer_id=4242, producer_epoch=0,
                     committed=True)
        answers.append((ended.error_code, ended.producer_id, ended.producer_epoch))  # type: ignore[attr-defined]
    return answers


def transaction_left_open(setup: Setup) -> None:
    """The super user begins a transaction of ``OPEN_TRANSACTION`` adding partitions of acl-shared and acl-hidden, and
    leaves it open (``transactions_administered``)."""
    with setup.kafka.connect(SUPER_USER) as sock:
        producer = new_producer_id(sock, transactional_id=OPEN_TRANSACTION, transaction_timeout_ms=600_000)
        assert producer.error_code == 0, producer  # type: ignore[attr-defined]
        added = call(sock, Api.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=OPEN_TRANSACTION,
                     v3_and_below_producer_id=producer.producer_id,  # type: ignore[attr-defined]
                     v3_and_below_producer_epoch=producer.producer_epoch,  # type: ignore[attr-defined]
                     v3_and_below_topics=[{"name": name, "partitions": [0]} for name in ("acl-shared", "acl-hidden")])
    assert {partition.partition_error_code for topic in added.results_by_topic_v3_and_below  # type: ignore[attr-defined]
            for partition in topic.results_by_partition} == {0}, added


def transactions_administered(sock: socket.socket, side: Side) -> Any:
    """The transactions listed (those whose transactional id the principal may describe), and described: tx-a (alice
    may write it, bob describe it), the open one (bob may describe it, and of its topics acl-shared alone), twice,
    and one nobody has."""
    listed = call(sock, Api.LIST_TRANSACTIONS, 1, state_filters=[], producer_id_filters=[], duration_filter=-1)
    described = call(sock, Api.DESCRIBE_TRANSACTIONS, 0,
                     transactional_ids=["tx-a", OPEN_TRANSACTION, "tx-none", OPEN_TRANSACTION])
    return (sorted((state.transactional_id, state.transaction_state)
                   for state in listed.transaction_states),  # type: ignore[attr-defined]
            compared(described))


def configs(sock: socket.socket, side: Side) -> Any:
    """Configs described, and altered with validation alone (the sides share one cluster), of topics (one missing),
    groups, the broker and the cluster's defaults, the broker's loggers and a client-metrics subscription; and
    alterations the broker refuses before it judges them: a resource named twice, a config named twice, a null
    value."""
    node = str(call(sock, Api.METADATA, 12, topics=[], allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False).brokers[0].node_id)  # type: ignore[attr-defined]
    resources = [(2, "acl-a.one", "retention.ms", "86400000"), (2, "acl-shared", "retention.ms", "86400000"),
                 (2, "acl-hidden", "retention.ms", "86400000"), (2, "acl-a.missing", "retention.ms", "86400000"),
                 (32, "shared-group", "consumer.session.timeout.ms", "45000"),
                 (32, "alice-g", "consumer.session.timeout.ms", "45000"), (4, node, "num.io.threads", None),
                 (4, "", "message.max.bytes", "1048588"), (8, node, "root", "INFO"),
                 (16, "matrix-subscription", "interval.ms", "60000")]
    described = call(sock, Api.DESCRIBE_CONFIGS, 4, include_synonyms=False, include_documentation=False,
                     resources=[{"resource_type": kind, "resource_name": name, "configuration_keys": [key]}
                                for kind, name, key, _ in resources])

    def results(answer: Any) -> list[Any]:
        return [(result.resource_type, result.resource_name, result.error_code, result.error_message)
                for result in getattr(answer, "results", None) or answer.responses]

    def incremental(*altered: tuple[int, str, list[tuple[str, str | None]]]) -> list[Any]:
        return results(call(sock, Api.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=True, resources=[
            {"resource_type": kind, "resource_name": name, "configs": [
                {"name": key, "config_operation": 0, "value": value} for key, value in entries]}
            for kind, name, entries in altered]))

    altered = [(kind, name, [(key, value)]) for kind, name, key, value in resources if value is not None]
    legacy = call(sock, Api.ALTER_CONFIGS, 2, validate_only=True, resources=[
        {"resource_type": kind, "resource_name": name, "configs": [{"name": key, "value": value}]}
        for kind, name, key, value in resources if value is not None])
    return ([(*result, sorted((config.name, config.value) for config in configs.configs))
             for result, configs in zip(results(described), described.results, strict=True)],  # type: ignore[attr-defined]
            incremental(*altered), results(legacy),
            incremental((2, "acl-hidden", [("retention.ms", "1")]), (2, "acl-hidden", [("retention.ms", "2")]),
                        (2, "acl-public", [("retention.ms", "1"), ("retention.ms", "2")]),
                        (32, "nobodys-group", [("consumer.session.timeout.ms", None)])))


def client_quotas(sock: socket.socket, side: Side) -> Any:
    """Client quotas described (bob may: DESCRIBE_CONFIGS on the cluster), and altered with validation alone (the super
    user alone may): a key of the proxy's and one of the cluster's."""
    described = call(sock, Api.DESCRIBE_CLIENT_QUOTAS, 1, strict=False, components=[
        {"entity_type": "user", "match_type": 0, "match": "matrix-nobody"}])
    altered = call(sock, Api.ALTER_CLIENT_QUOTAS, 1, validate_only=True, entries=[
        {"entity": [{"entity_type": "user", "entity_name": "matrix-nobody"}],
         "ops": [{"key": key, "value": 1024.0, "remove": False}
                 for key in ("producer_byte_rate", "request_percentage")]}])
    return ((described.error_code, described.error_message, described.entries),  # type: ignore[attr-defined]
            [(entry.error_code, entry.error_message) for entry in altered.entries])  # type: ignore[attr-defined]


def joined_and_described(sock: socket.socket, apis: tuple[int, int], groups: tuple[str, str],
                         joining: Callable[[str, list[str]], dict[str, Any]]) -> list[Any]:
    """A member (``joining``: its heartbeat's fields, by group and topics) joins alice's group (the first of
    ``groups``) subscribed to a topic alice may describe and one she may not, then the other group, nobody's,
    then alice's subscribed to her topic alone; both groups described. ``apis``: the heartbeat's and the describe's."""
    heartbeat, describe = apis
    mine, nobodys = groups
    answers: list[Any] = []
    for group, topics in ((mine, ["acl-a.one", "acl-hidden"]), (nobodys, ["acl-public"]), (mine, ["acl-a.one"])):
        joined = call(sock, heartbeat, 1, **joining(group, topics))
        answers.append((group, joined.error_code, joined.error_message,  # type: ignore[attr-defined]
                        joined.member_epoch > 0))  # type: ignore[attr-defined]
    described = call(sock, describe, 1, group_ids=[mine, nobodys], include_authorized_operations=True)
    answers.append([(group.group_id, group.error_code, group.error_message, group.authorized_operations,
                     sorted(name for member in group.members for name in member.subscribed_topic_names))
                    for group in described.groups])  # type: ignore[attr-defined]
    return answers


def consumer_groups(sock: socket.socket, side: Side) -> Any:
    """KIP-848: a member joins alice's group subscribed by name to a topic alice may describe, then to one she may not
    as well, and one joins a group that is nobody's; alice's group described (with its member, where allowed), and
    the other; the members leave (the sides share the cluster's groups)."""
    member = str(uuid.uuid4())
    answers = joined_and_described(sock, (CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE),
                                   ("alice-848", "nobodys-group"), lambda group, topics: {
                                       "group_id": group, "member_id": member, "member_epoch": 0,
                                       "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30_000,
                                       "subscribed_topic_names": topics, "subscribed_topic_regex": None,
                                       "server_assignor": None, "topic_partitions": []})
    for group in sorted({group for group, error, *_ in answers[:3] if error == 0}):
        left = call(sock, CONSUMER_GROUP_HEARTBEAT, 1, group_id=group, member_id=member, member_epoch=-1,
                    instance_id=None, rack_id=None, rebalance_timeout_ms=-1, subscribed_topic_names=None,
                    subscribed_topic_regex=None, server_assignor=None, topic_partitions=None)
        answers.append((group, left.error_code))  # type: ignore[attr-defined]
    return answers


def share_groups(sock: socket.socket, side: Side) -> Any:
    """KIP-932: a member joins alice's share group subscribed to a topic alice may not describe, then one joins a
    group that is nobody's, then alice's subscribed to her topic alone; both groups described; the member fetches
    and acknowledges in both groups (her topic, and one she may not read); it leaves; then the groups' offsets
    described, altered and deleted (the sides share the cluster's groups)."""
    ids = {name: topic_id for topic_id, name in topic_ids(side).items()}
    member = str(uuid.uuid4())
    answers = joined_and_described(
        sock, (SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE), ("alice-share", "nobodys-share"),
        lambda group, topics: {"group_id": group, "member_id": member, "member_epoch": 0, "rack_id": None,
                               "subscribed_topic_names": topics})
    names = {topic_id: name for name, topic_id in ids.items()}
    for group in ("alice-share", "nobodys-share"):
        fetched = call(sock, SHARE_FETCH, 1, group_id=group, member_id=member, share_session_epoch=0, max_wait_ms=0,
                       min_bytes=0, max_bytes=1 << 20, max_records=100, batch_size=100, forgotten_topics_data=[],
                       topics=[{"topic_id": ids[name], "partitions": [{"partition_index": 0,
                                                                       "acknowledgement_batches": []}]}
                               for name in ("acl-a.one", "acl-hidden")])
        acknowledged = call(sock, SHARE_ACKNOWLEDGE, 1, group_id=group, member_id=member, share_session_epoch=1,
                            topics=[{"topic_id": ids["acl-hidden"], "partitions": [{"partition_index": 0,
                                     "acknowledgement_batches": [{"first_offset": 0, "last_offset": 0,
                                                                  "acknowledge_types": [1]}]}]}])
        # the partitions refused: the others answer as their share state allows, which the first side's fetch
        # starts to make (Kafka answers them empty until it is)
        answers.append([(answer.error_code, sorted(  # type: ignore[attr-defined]
            (names.get(topic.topic_id), partition.partition_index, partition.error_code)
            for topic in answer.responses for partition in topic.partitions  # type: ignore[attr-defined]
            if partition.error_code in (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED)))
            for answer in (fetched, acknowledged)])
    for group in sorted({group for group, error, *_ in answers[:3] if error == 0}):
        left = call(sock, SHARE_GROUP_HEARTBEAT, 1, group_id=group, member_id=member, member_epoch=-1, rack_id=None,
                    subscribed_topic_names=None)
        answers.append((group, left.error_code))  # type: ignore[attr-defined]
    offsets = call(sock, DESCRIBE_SHARE_GROUP_OFFSETS, 1, groups=[
        {"group_id": "alice-share", "topics": [{"topic_name": name, "partitions": [0]}
                                               for name in ("acl-a.one", "acl-hidden")]},
        {"group_id": "nobodys-share", "topics": None}, {"group_id": "alice-share", "topics": None}])
    # a group's offsets of all its topics are those with share state: acl-a.one's the first side's fetch may still be
    # writing
    answers.append([(group.group_id, group.error_code, sorted(
        (topic.topic_name, partition.error_code, partition.error_message) for topic in group.topics
        for partition in topic.partitions if topic.topic_name != "acl-a.one" or asked is not None))
        for group, asked in zip(offsets.groups, (["acl-a.one"], None, None), strict=True)])  # type: ignore[attr-defined]
    for group in ("alice-share", "nobodys-share"):
        altered = call(sock, ALTER_SHARE_GROUP_OFFSETS, 0, group_id=group, topics=[
            {"topic_name": name, "partitions": [{"partition_index": 0, "start_offset": 0}]}
            for name in ("acl-hidden", "acl-a.one")])
        deleted = call(sock, DELETE_SHARE_GROUP_OFFSETS, 0, group_id=group, topics=[
            {"topic_name": name} for name in ("acl-hidden", "acl-a.one")])
        answers.append([
            (altered.error_code, altered.error_message, [  # type: ignore[attr-defined]
                (topic.topic_name, [(partition.error_code, partition.error_message) for partition in topic.partitions])
                for topic in altered.responses]),  # type: ignore[attr-defined]
            (deleted.error_code, deleted.error_message, [  # type: ignore[attr-defined]
                (topic.topic_name, topic.error_code, topic.error_message)
                for topic in deleted.responses])])  # type: ignore[attr-defined]
    return answers


RAW_QUESTIONS: list[Callable[[socket.socket, Side], Any]] = [
    metadata_of_all, metadata_of_named, metadata_by_id, described_topics, produced, produced_transactionally,
    fetched, fetched_as_a_follower, listed_offsets, coordinators, group_membership, group_offsets, negative_lengths,
    producer_ids, topic_admin, acl_requests, delegation_tokens, cluster_administration, transactions,
    transactions_administered, groups,
    described_cluster, configs, client_quotas, consumer_groups, share_groups]


def librdkafka_deliveries(side: Side, user: str, idempotent: bool) -> list[tuple[str, str]]:
    """What librdkafka reports of one message to each topic (it looks the topics up first, with Metadata; an
    idempotent producer asks for its producer id first)."""
    reports: list[tuple[str, str]] = []
    producer = Producer({"bootstrap.servers": side.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user],
                         "message.timeout.ms": 20_000, "enable.idempotence": idempotent})
    for name in TOPICS:
        producer.produce(name, b"from librdkafka", on_delivery=lambda error, message: reports.append(
            (message.topic(), "delivered" if error is None else error.name())))
    try:
        assert producer.flush(60) == 0
    except KafkaException as fatal:  # an idempotent producer refused its producer id
        reports.append(("fatal", fatal.args[0].name()))
    return sorted(reports)


def librdkafka_administration(side: Side, user: str) -> list[str]:
    """What librdkafka's admin client makes of the cluster's administration: a preferred leader elected (not needed
    where allowed), each partition's error or the request's. (Its SCRAM credentials' calls corrupt the process's
    memory on a refusal, Kafka's as the proxy's: raw frames ask those.)"""
    admin = AdminClient({"bootstrap.servers": side.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user]})
    try:
        elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("acl-a.one", 0)]).result(30)
    except KafkaException as error:
        return [str(error.args[0].name())]
    return [f"{partition.topic}[{partition.partition}]: {'' if error is None else error.name()}"
            for partition, error in elected.items()]


def librdkafka_transaction(side: Side, user: str) -> str:
    """What a librdkafka transactional producer of tx-a makes of one record to acl-a.one, committed."""
    producer = Producer({"bootstrap.servers": side.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user],
                         "transactional.id": "tx-a", "transaction.timeout.ms": 60_000})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("acl-a.one", b"in a transaction")
        producer.commit_transaction(30)
    except KafkaException as error:
        return str(error.args[0].name())
    return "committed"


def librdkafka_consumed(side: Side, user: str, group_protocol: str = "classic") -> str:
    """What a librdkafka consumer of alice's group makes of acl-a.one: a record, or the error it reports; in a
    classic group or a KIP-848 consumer group (``group_protocol``)."""
    group = f"alice-consumers-{side.name}" if group_protocol == "classic" else f"alice-848-consumers-{side.name}"
    consumer = Consumer({"bootstrap.servers": side.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user],
                         "group.id": group, "group.protocol": group_protocol, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["acl-a.one"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error() is None:
                consumer.commit(message, asynchronous=False)
                return "consumed"
            if message.error().code() != KafkaError._PARTITION_EOF:
                return str(message.error().name())
        return "nothing after 60 s"
    finally:
        consumer.close()


def librdkafka_share_consumed(side: Side, user: str) -> str:
    """What a librdkafka share consumer (KIP-932) of alice's share group makes of acl-a.one, read from its start
    (``share_groups_read_from_the_start``): a record, or the error it reports."""
    group = f"alice-share-consumers-{side.name}"
    consumer = ShareConsumer({"bootstrap.servers": side.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                              "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user],
                              "group.id": group})
    try:
        consumer.subscribe(["acl-a.one"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for message in consumer.poll(1):
                if message.error() is None:
                    return "consumed"
                return str(message.error().name())
        return "nothing after 60 s"
    except KafkaException as error:
        return str(error.args[0].name())
    finally:
        consumer.close()


def share_groups_read_from_the_start(setup: Setup) -> None:
    """The librdkafka share consumers' groups read from each partition's start, set by the super user on Kafka (a
    share group reads only what comes after it joins, by default)."""
    with setup.kafka.connect(SUPER_USER) as sock:
        altered = call(sock, Api.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[
            {"resource_type": GROUP_RESOURCE, "resource_name": f"alice-share-consumers-{side.name}", "configs": [
                {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}
            for side in (setup.kafka, setup.proxy)])
    assert [result.error_code for result in altered.responses] == [0, 0], altered  # type: ignore[attr-defined]


def test_each_answer_is_kafkas(setup: Setup) -> None:
    """Each question asked of Kafka, then of the proxy, before the next: what one principal's requests change (a
    record written, a topic created) is the same for both when the next is asked."""
    sides = (setup.kafka, setup.proxy)
    share_groups_read_from_the_start(setup)
    offsets_committed_to_the_nulls_group(setup)
    transaction_left_open(setup)
    answers: dict[str, dict[tuple[str, str], Any]] = {side.name: {} for side in sides}
    for user in USERS:
        with setup.kafka.connect(user) as to_kafka, setup.proxy.connect(user) as to_proxy:
            for question in RAW_QUESTIONS:
                for side, sock in zip(sides, (to_kafka, to_proxy), strict=True):
                    answers[side.name][(user, question.__name__)] = question(sock, side)
        for idempotent in (False, True):
            for side in sides:
                answers[side.name][(user, f"librdkafka producer, idempotent: {idempotent}")] = \
                    librdkafka_deliveries(side, user, idempotent)
        for side in sides:
            answers[side.name][(user, "librdkafka consumer")] = librdkafka_consumed(side, user)
            answers[side.name][(user, "librdkafka KIP-848 consumer")] = librdkafka_consumed(side, user, "consumer")
            answers[side.name][(user, "librdkafka share consumer")] = librdkafka_share_consumed(side, user)
            answers[side.name][(user, "librdkafka transaction")] = librdkafka_transaction(side, user)
            answers[side.name][(user, "librdkafka administration")] = librdkafka_administration(side, user)
    kafka, proxy = answers["kafka"], answers["proxy"]
    differences = {question: (kafka[question], proxy[question]) for question in kafka if kafka[question] !=
                   proxy[question]}
    assert not differences, "\n".join(f"{question}:\n  Kafka: {kafka_answer}\n  proxy: {proxy_answer}"
                                      for question, (kafka_answer, proxy_answer) in differences.items())
    # the matrix says something: each principal is refused somewhere and allowed somewhere
    assert ("acl-a.locked", 29) in kafka[("alice", "produced")] and ("acl-a.one", 0) in kafka[("alice", "produced")]
    assert ("acl-shared", 0) in kafka[("bob", "produced")] and ("acl-hidden", 29) in kafka[("bob", "produced")]
    assert kafka[("bob", "produced_transactionally")] == [("acl-a.one", 53)]
    assert all(error == 29 for _, error in kafka[("carol", "produced")])
    assert kafka[("alice", "fetched_as_a_follower")] == (0, [("acl-a.one", 29)])
    assert kafka[(SUPER_USER, "fetched_as_a_follower")] != (0, [("acl-a.one", 29)])
    assert kafka[("alice", "librdkafka consumer")] == "consumed"
    assert kafka[("alice", "acl_requests")][0][0] == 31 and len(kafka[(SUPER_USER, "acl_requests")][1]) == len(ACLS)
    assert kafka[(SUPER_USER, "acl_requests")][3] == [(-1, None)] * 2
    assert [created[0] for created in kafka[("alice", "delegation_tokens")][0]] == [61, 61, 61, 65, 67, 67, -1]
    assert [created[0] for created in kafka[("carol", "delegation_tokens")][0]] == [61, 61, 65, 61, 67, 65, -1]
    administered = {user: [answer.get("error_code") for answer in kafka[(user, "cluster_administration")]]
                    for user in ("alice", "bob", "carol")}
    assert administered["alice"] == [31, None, 31, 31, 31, 31, None, 31, 31, 31, 31, 31, 31], administered
    assert administered["bob"][9] == 0 and administered["carol"][9] == 31, "DESCRIBE_CONFIGS; ALTER does not imply it"
    assert [kafka[(user, "librdkafka administration")] for user in ("alice", "carol")] == [
        ["CLUSTER_AUTHORIZATION_FAILED"], ["acl-a.one[0]: ELECTION_NOT_NEEDED"]]
    opened = [kafka[(user, "transactions_administered")][1]["transaction_states"][1] for user in ("alice", "bob")]
    assert [(state["error_code"], [topic["topic"] for topic in state["topics"]]) for state in opened] == [
        (53, []), (0, ["acl-shared"])], opened
    assert (OPEN_TRANSACTION, "Ongoing") in kafka[("bob", "transactions_administered")][0]
    assert not kafka[("carol", "transactions_administered")][0]
    carols = kafka[("carol", "cluster_administration")]
    assert 31 not in administered["carol"][:9] + administered["carol"][10:], carols
    assert "'error_code': 31" not in str(carols[1]), carols
    assert kafka[("alice", "librdkafka transaction")] == "committed"
    assert kafka[("bob", "librdkafka transaction")] == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    assert kafka[("alice", "transactions")][1] == [("acl-a.one", 55), ("acl-hidden", 29)]
    assert "alice-g" in kafka[("alice", "groups")][1] and "alice-g" not in kafka[("bob", "groups")][1]
    assert {error for _, error, *_ in kafka[("alice", "groups")][2]} == {0, 30}
    assert kafka[(SUPER_USER, "described_cluster")][0][1] != kafka[("alice", "described_cluster")][0][1]
    assert kafka[("bob", "librdkafka consumer")] == "GROUP_AUTHORIZATION_FAILED"
    assert kafka[("alice", "group_offsets")][0] == [
        (0, [("acl-hidden", [29]), ("acl-a.gone", [3]), ("acl-a.one", [0])]),
        (30, [])]
    assert {error for *_, error, _, _ in kafka[("alice", "configs")][0]} == {0, 3, 29, 30, 31}
    assert [kafka[(user, "client_quotas")][0][0] for user in ("alice", "bob")] == [31, 0]
    assert [error for _, error, *_ in kafka[("alice", "consumer_groups")][:3]] == [29, 30, 0]
    assert [error for _, error, *_ in kafka[("alice", "consumer_groups")][3]] == [30, 0]
    assert kafka[("alice", "librdkafka KIP-848 consumer")] == "consumed"
    assert kafka[("bob", "librdkafka KIP-848 consumer")] == "GROUP_AUTHORIZATION_FAILED"
    assert ("acl-a.one", 0) in kafka[("alice", "negative_lengths")][0]
    assert ("acl-hidden", 0) not in kafka[("alice", "negative_lengths")][0]
    assert kafka[("alice", "negative_lengths")][1] == (0, [("acl-a.one", 0, 5, 0)])
    paged = [kafka[(user, "described_topics")][2] for user in ("alice", SUPER_USER)]
    assert ("next", "acl-hidden", 0) in paged[1] and not any(entry[1] == "acl-hidden" for entry in paged[0])
    assert kafka[("alice", "described_topics")][3] == [("acl-hidden", 29), ("acl-public", 0), ("acl-shared", 0)]
    assert kafka[("alice", "described_topics")][4] == [[(name, 42) for name in sorted(TOPICS)], []]
    shared = kafka[("alice", "share_groups")]
    assert [error for _, error, *_ in shared[:3]] == [29, 30, 0] and [error for _, error, *_ in shared[3]] == [30, 0]
    assert shared[4] == [(0, [("acl-hidden", 0, 29)])] * 2 and shared[5] == [(30, [])] * 2
    assert [(error, [name for name, *_ in altered]) for error, _, altered in shared[8]] == [
        (0, ["acl-hidden", "acl-a.one"]), (0, ["acl-hidden", "acl-a.one"])]
    assert [error for error, *_ in shared[9]] == [30, 30]
    assert kafka[("alice", "librdkafka share consumer")] == "consumed"
    assert kafka[("bob", "librdkafka share consumer")] == "GROUP_AUTHORIZATION_FAILED"
    assert {error for error, _ in kafka[(SUPER_USER, "client_quotas")][1]} == {0}
    assert {error for *_, error, _ in kafka[("bob", "configs")][1]} >= {0, 29, 30, 31}
    assert {error for *_, error, _ in kafka[("alice", "configs")][3]} == {42}


def test_an_api_the_proxy_does_not_judge_yet_is_a_super_users_alone(setup: Setup) -> None:
    """StreamsGroupDescribe (which kafka-python has no schema for: written byte by byte)."""
    body = b"\x02\x02g" + b"\x00" + b"\x00"  # group ids ["g"], no authorized operations, no tagged fields
    request = (STREAMS_GROUP_DESCRIBE.to_bytes(2, "big") + bytes(2) + (7).to_bytes(4, "big") + (4).to_bytes(2, "big")
               + b"test" + b"\x00" + body)
    framed = len(request).to_bytes(4, "big") + request
    with setup.proxy.connect("alice") as sock:
        sock.sendall(framed)
        assert closed_by_peer(sock)
    with setup.proxy.connect(SUPER_USER) as sock:
        sock.sendall(framed)
        answer = read_frame(sock)
        assert answer[:4] == (7).to_bytes(4, "big"), answer  # the cluster's answer to it


def test_a_follower_fetch_in_a_tag_kafka_reads_otherwise_than_a_decoder_never_reaches_the_cluster(
        setup: Setup) -> None:
    """A v15 Fetch whose ReplicaState (tag 1: broker 1's) is tagged 2^32 + 1: Kafka cuts the varint to an int, so
    it is a follower's fetch, whose partitions it refuses alice (no CLUSTER_ACTION); a decoder reading the varint
    whole takes it for a consumer's, which the cluster would serve as a follower's to the proxy's login. Through the
    proxy its connection is closed, nothing forwarded."""
    topic_id = next(topic_id for topic_id, name in topic_ids(setup.kafka).items() if name == "acl-a.one")
    frame = encode_request(Api.FETCH, 15, correlation_id=3, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                           topics=[{"topic_id": topic_id, "partitions": [{
                               "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                               "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 16}]}])
    assert frame.endswith(b"\x00")  # no tagged field
    tag = (1 << 32) + 1
    varint = bytes([0x80 | (tag >> shift) & 0x7F for shift in range(0, 28, 7)]) + bytes([tag >> 28])
    replica_state = (1).to_bytes(4, "big") + (-1).to_bytes(8, "big", signed=True) + b"\x00"
    body = frame[4:-1] + b"\x01" + varint + bytes([len(replica_state)]) + replica_state
    refused_by_kafka_and_closed_by_the_proxy(setup, len(body).to_bytes(4, "big") + body, Api.FETCH, 15)


def test_a_version_the_proxy_does_not_offer_closes_its_connection(setup: Setup) -> None:
    """OffsetCommit v10 names its topics by id alone, which the proxy does not offer (it reads v9's names): alice
    commits her group's offset of acl-hidden, which she may not read, on Kafka refused (29); through the proxy her
    connection is closed, nothing committed."""
    topic_id = next(topic_id for topic_id, name in topic_ids(setup.kafka).items() if name == "acl-hidden")
    commit = encode_request(Api.OFFSET_COMMIT, 10, group_id="alice-g", generation_id_or_member_epoch=-1,
                            member_id="", group_instance_id=None, topics=[{"topic_id": topic_id, "partitions": [
                                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                 "committed_metadata": ""}]}])
    refused_by_kafka_and_closed_by_the_proxy(setup, commit, Api.OFFSET_COMMIT, 10)


def refused_by_kafka_and_closed_by_the_proxy(setup: Setup, request: bytes, api_key: int, version: int) -> None:
    """Alice's ``request`` (a whole frame naming one partition): Kafka refuses the partition (29), the proxy closes
    the connection without answering."""
    with setup.kafka.connect("alice") as sock:
        sock.sendall(request)
        answer = decoded_response(read_frame(sock), api_key, version)
    topics = answer.responses if api_key == Api.FETCH else answer.topics
    assert [partition.error_code for topic in topics for partition in topic.partitions] == [
        TOPIC_AUTHORIZATION_FAILED], answer
    with setup.proxy.connect("alice") as sock:
        sock.sendall(request)
        assert closed_by_peer(sock)


def hidden_fetch(sock: socket.socket, session_id: int, epoch: int, named: bool) -> Any:
    partitions = [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                   "log_start_offset": -1, "partition_max_bytes": 1 << 16}]
    return call(sock, Api.FETCH, 12, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                isolation_level=0, session_id=session_id, session_epoch=epoch, rack_id="", forgotten_topics_data=[],
                topics=[{"topic": "acl-hidden", "partitions": partitions}] if named else [])


def hidden_share_fetch(sock: socket.socket, hidden_id: uuid.UUID, member: str, epoch: int, named: bool) -> Any:
    """A ShareFetch of alice's share group, opening (0) or continuing a share session, naming acl-hidden or not."""
    return call(sock, SHARE_FETCH, 1, group_id="alice-share-revoked", member_id=member, share_session_epoch=epoch,
                max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, max_records=100, batch_size=100,
                forgotten_topics_data=[], topics=[{"topic_id": hidden_id, "partitions": [
                    {"partition_index": 0, "acknowledgement_batches": []}]}] if named else [])


def test_a_changed_acl_file_applies_to_the_next_request_and_a_bad_one_changes_nothing(setup: Setup) -> None:
    """And a fetch session, or a share session, opened while the ACLs allowed a topic does not go on serving it once
    they no longer do: Kafka authorizes a session's partitions at every fetch; through the proxy there are no fetch
    sessions, and a share session holding a topic now refused is ended."""
    def alices_write_to_hidden() -> int:
        with setup.proxy.connect("alice") as sock:
            return dict(produced(sock, setup.proxy))["acl-hidden"]  # type: ignore[no-any-return]

    original = setup.acl_file.read_text()
    assert alices_write_to_hidden() == 29
    with setup.proxy.connect(SUPER_USER) as sock:
        produced(sock, setup.proxy)  # acl-hidden has records
    try:
        setup.acl_file.write_text(original + '[[acl]]\nprincipal = "User:alice"\nresource-type = "topic"\n'
                                  'resource-name = "acl-hidden"\noperations = ["write", "read"]\n')
        wait_until(lambda: alices_write_to_hidden() == 0, 30, "the new ACLs applied")
        with setup.proxy.connect("alice") as sock:
            opened = hidden_fetch(sock, 0, 0, named=True)
            assert [bool(partition.records) for topic in opened.responses  # type: ignore[attr-defined]
                    for partition in topic.partitions] == [True]
            hidden_id = next(topic_id for topic_id, name in topic_ids(setup.proxy).items() if name == "acl-hidden")
            member = str(uuid.uuid4())
            joined = call(sock, SHARE_GROUP_HEARTBEAT, 1, group_id="alice-share-revoked", member_id=member,
                          member_epoch=0, rack_id=None, subscribed_topic_names=["acl-hidden"])
            assert joined.error_code == 0, joined  # type: ignore[attr-defined]
            shared = hidden_share_fetch(sock, hidden_id, member, 0, named=True)
            assert shared.error_code == 0 and all(  # type: ignore[attr-defined]
                partition.error_code == 0 for topic in shared.responses  # type: ignore[attr-defined]
                for partition in topic.partitions), shared
            assert hidden_share_fetch(sock, hidden_id, member, 1, named=False).error_code == 0  # type: ignore[attr-defined]
            setup.acl_file.write_text(original + '[[acl]]\nprincipal = "User:alice"\nresource-type = "topic"\n'
                                      'operations = ["write"]\npermission = "maybe"\n')
            setup.proxy_process.wait_for_log("keeping the ACLs in force", 30)
            assert f"[[acl]] entry {len(ACLS) + 1}" in setup.proxy_process.log() and alices_write_to_hidden() == 0
            setup.acl_file.write_text(original)
            wait_until(lambda: alices_write_to_hidden() == 29, 30, "the ACLs taken away")
            later = hidden_fetch(sock, opened.session_id, 1, named=False)  # type: ignore[attr-defined]
            assert later.error_code == FETCH_SESSION_ID_NOT_FOUND and not later.responses  # type: ignore[attr-defined]
            again = hidden_fetch(sock, 0, 0, named=True)
            assert [partition.error_code for topic in again.responses  # type: ignore[attr-defined]
                    for partition in topic.partitions] == [29]
            shared_later = hidden_share_fetch(sock, hidden_id, member, 2, named=False)
            assert (shared_later.error_code, shared_later.responses) == (  # type: ignore[attr-defined]
                SHARE_SESSION_NOT_FOUND, [])
            shared_again = hidden_share_fetch(sock, hidden_id, member, 0, named=True)
            assert [partition.error_code for topic in shared_again.responses  # type: ignore[attr-defined]
                    for partition in topic.partitions] == [29]
            call(sock, SHARE_GROUP_HEARTBEAT, 1, group_id="alice-share-revoked", member_id=member, member_epoch=-1,
                 rack_id=None, subscribed_topic_names=None)
    finally:
        setup.acl_file.write_text(original)
    wait_until(lambda: alices_write_to_hidden() == 29, 30, "the ACLs taken away")


def kafka_tool(main_class: str, side: Side, user: str, *args: str, succeeds: bool = True) -> str:
    """One of Kafka's own tools on the Java admin client, logged in as ``user``."""
    config = Path(tempfile.mkdtemp()) / "login.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka."
                      f'common.security.plain.PlainLoginModule required username="{user}" '
                      f'password="{PASSWORDS[user]}";\n')
    return java_tool(main_class, "--bootstrap-server", side.bootstrap, "--command-config", str(config), *args,
                     succeeds=succeeds)


def kafka_acls(side: Side, user: str, *args: str, succeeds: bool = True) -> str:
    """Kafka's own ``kafka-acls`` (``AclCommand``)."""
    return kafka_tool("org.apache.kafka.tools.AclCommand", side, user, *args, succeeds=succeeds)


def kafka_configs(side: Side, user: str, *args: str, succeeds: bool = True) -> str:
    """Kafka's own ``kafka-configs`` (``ConfigCommand``)."""
    return kafka_tool("kafka.admin.ConfigCommand", side, user, *args, succeeds=succeeds)


def test_kafka_configs_describes_and_alters_through_the_proxy_what_kafka_lets_it(setup: Setup) -> None:
    """Bob may describe acl-shared's configs and alter shared-group's, alice neither: ``kafka-configs`` prints the
    same through the proxy as on Kafka, and what bob alters through the proxy is what Kafka then describes."""
    sides = (setup.kafka, setup.proxy)
    topic = ("--entity-type", "topics", "--entity-name", "acl-shared")
    group = ("--entity-type", "groups", "--entity-name", "shared-group")
    described = [kafka_configs(side, "bob", "--describe", "--all", *topic) for side in sides]
    assert described[0] == described[1] and "retention.ms=" in described[0], described
    refused = [kafka_configs(side, "alice", "--describe", *topic, succeeds=False) for side in sides]
    assert all("TopicAuthorizationException" in printed for printed in refused), refused
    refused = [kafka_configs(side, "alice", "--alter", *group, "--add-config", "consumer.heartbeat.interval.ms=6000",
                             succeeds=False) for side in sides]
    assert all("GroupAuthorizationException" in printed for printed in refused), refused
    kafka_configs(setup.proxy, "bob", "--alter", *group, "--add-config", "consumer.heartbeat.interval.ms=6000")
    try:
        assert "consumer.heartbeat.interval.ms=6000" in kafka_configs(setup.kafka, "bob", "--describe", *group)
    finally:
        kafka_configs(setup.kafka, "bob", "--alter", *group, "--delete-config", "consumer.heartbeat.interval.ms")


def test_kafka_delegation_tokens_is_told_through_the_proxy_what_kafka_without_tokens_tells_it(setup: Setup) -> None:
    """Alice creates a token for bob (she may: CREATE_TOKENS on User:bob) and one for carol (she may not), and lists
    tokens: Kafka's ``kafka-delegation-tokens`` fails alike through the proxy and on Kafka, whose tokens are disabled
    here as the proxy's always are."""
    for args, error in (
            (("--create", "--max-life-time-period", "-1", "--owner-principal", "User:bob"),
             "DelegationTokenDisabledException"),
            (("--create", "--max-life-time-period", "-1", "--owner-principal", "User:carol"),
             "DelegationTokenAuthorizationException"),
            (("--describe",), "DelegationTokenDisabledException")):
        printed = [kafka_tool("org.apache.kafka.tools.DelegationTokenCommand", side, "alice", *args, succeeds=None)
                   for side in (setup.kafka, setup.proxy)]
        assert all(error in text for text in printed), printed


def test_the_java_admin_client_describes_through_the_proxy_the_topics_kafka_lets_it(setup: Setup) -> None:
    """Kafka's Java admin client describes topics with DescribeTopicPartitions (``tests/java/DescribeTopics.java``:
    a partition a page, so each page's cursor is followed): alice's topics are described through the proxy as on
    Kafka, each with the operations she may do, and those she may not describe are refused alike."""
    topics = [*TOPICS, "acl-new.fixed-kafka", "acl-nowhere"]
    printed = [java_tool(str(JAVA_SOURCES / "DescribeTopics.java"), side.bootstrap, "alice", PASSWORDS["alice"],
                         *topics) for side in (setup.kafka, setup.proxy)]
    assert printed[0] == printed[1], printed
    lines = dict(line.split(" ", 1) for line in printed[0].splitlines())
    assert lines["acl-hidden"] == "TopicAuthorizationException" and "[0]" in lines["acl-a.one"], lines


def test_kafka_acls_manages_the_proxys_acls_as_kafkas_and_they_outlive_a_restart(setup: Setup) -> None:
    """What ``kafka-acls`` adds through the proxy applies to the next request, as on Kafka, is listed as Kafka lists
    it, is still there after the proxy restarts, and is gone once removed; a principal without ALTER on the cluster
    may not add one, on either."""
    sides = (setup.kafka, setup.proxy)
    carols_grant = ("--allow-principal", "User:carol", "--operation", "Write", "--operation", "Describe",
                    "--topic", "acl-public")

    def carols_write(side: Side) -> int:
        with side.connect("carol") as sock:
            return dict(produced(sock, side))["acl-public"]  # type: ignore[no-any-return]

    def listed(side: Side) -> list[str]:
        return sorted(line.strip() for line in kafka_acls(side, SUPER_USER, "--list", "--topic", "acl-public")
                      .splitlines() if line.strip())

    assert [carols_write(side) for side in sides] == [29, 29]
    refused = [kafka_acls(side, "alice", "--add", *carols_grant, succeeds=False) for side in sides]
    assert all("ClusterAuthorizationException" in printed for printed in refused), refused
    try:
        for side in sides:
            kafka_acls(side, SUPER_USER, "--add", *carols_grant)
        wait_until(lambda: [carols_write(side) for side in sides] == [0, 0], 30, "carol's write allowed on both")
        assert listed(setup.kafka) == listed(setup.proxy)
        assert any("principal=User:carol" in line for line in listed(setup.proxy))
        assert setup.proxy_process.stop() == 0
        setup.proxy_process.start()
        assert carols_write(setup.proxy) == 0, "the ACL outlives the proxy's restart"
    finally:
        for side in sides:
            kafka_acls(side, SUPER_USER, "--remove", "--force", *carols_grant)
    wait_until(lambda: [carols_write(side) for side in sides] == [29, 29], 30, "carol's write refused on both")
    assert listed(setup.kafka) == listed(setup.proxy)


def test_pipelined_requests_answered_by_the_proxy_and_by_the_cluster_come_back_in_order_as_kafkas(
        setup: Setup) -> None:
    """Alice sends, without waiting, requests the proxy answers itself (refused whole; a delegation token for bob,
    whom she may create them for, answered as Kafka's tokens are disabled), forwards as they are, and forwards in part
    (the refused resources answered beside the cluster's, a transaction left out of a listing): each answer comes back
    in the order asked, and is Kafka's."""
    configs = [{"resource_type": 2, "resource_name": name, "configuration_keys": ["retention.ms"]}
               for name in ("acl-a.one", "acl-hidden")]
    altered = [{"resource_type": 2, "resource_name": name,
                "configs": [{"name": "retention.ms", "config_operation": 0, "value": "86400000"}]}
               for name in ("acl-hidden", "acl-a.one")]
    asked: list[tuple[int, int, dict[str, Any]]] = [
        (Api.DESCRIBE_CONFIGS, 4, {"include_synonyms": False, "include_documentation": False,
                                   "resources": configs[1:]}),
        (Api.PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 30_000, "topic_data": [
            {"name": "acl-a.one", "partition_data": [{"index": 0, "records": record_batch([b"pipelined"])}]}]}),
        (Api.OFFSET_DELETE, 0, {"group_id": "nobodys-group", "topics": []}),
        (Api.DESCRIBE_CONFIGS, 4, {"include_synonyms": False, "include_documentation": False, "resources": configs}),
        (CONSUMER_GROUP_HEARTBEAT, 1, {"group_id": "alice-848", "member_id": "pipelined", "member_epoch": 0,
                                       "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30_000,
                                       "subscribed_topic_names": ["acl-hidden"], "subscribed_topic_regex": None,
                                       "server_assignor": None, "topic_partitions": []}),
        (Api.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": True, "resources": altered}),
        (Api.METADATA, 12, {"topics": [{"name": "acl-a.one", "topic_id": None}], "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": False}),
        (SHARE_GROUP_HEARTBEAT, 1, {"group_id": "nobodys-share", "member_id": "pipelined", "member_epoch": 0,
                                    "rack_id": None, "subscribed_topic_names": ["acl-public"]}),
        (SHARE_GROUP_DESCRIBE, 1, {"group_ids": ["nobodys-share", "alice-share"],
                                   "include_authorized_operations": True}),
        (DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [
            {"group_id": "nobodys-share", "topics": None},
            {"group_id": "alice-share", "topics": [{"topic_name": "acl-hidden", "partitions": [0]}]},
            {"group_id": "alice-never", "topics": [{"topic_name": "acl-hidden", "partitions": [0]},
                                                   {"topic_name": "acl-a.one", "partitions": [0]}]}]}),
        (Api.DESCRIBE_LOG_DIRS, 4, {"topics": None}),
        (Api.CREATE_DELEGATION_TOKEN, 3, {"owner_principal_type": "User", "owner_principal_name": "bob",
                                          "renewers": [], "max_lifetime_ms": -1}),
        (Api.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx-b", "tx-a"]}),
        (Api.LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}),
        (Api.ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [{"path": "/no/such/dir", "topics": [
            {"name": "acl-a.one", "partitions": [0]}]}]}),
    ]

    def answers(side: Side) -> list[Any]:
        with side.connect("alice") as sock:
            sock.sendall(b"".join(encode_request(api_key, version, correlation_id=100 + index, **fields)
                                  for index, (api_key, version, fields) in enumerate(asked)))
            frames = [read_frame(sock) for _ in asked]
        return [(int.from_bytes(frame[:4], "big"), repr(decoded_response(frame, api_key, version)))
                for frame, (api_key, version, _) in zip(frames, asked, strict=True)]

    kafka, proxy = answers(setup.kafka), answers(setup.proxy)
    assert [correlation_id for correlation_id, _ in proxy] == list(range(100, 100 + len(asked)))
    assert [_without_throttle(answer) for _, answer in proxy] == [_without_throttle(answer) for _, answer in kafka]


def _without_throttle(answer: str) -> str:
    """An answer's text without what differs from side to side: its throttle time, the broker's address, where a
    record went."""
    return re.sub(r"throttle_time_ms=\d+|host='[^']*'|port=\d+|base_offset=\d+|log_append_time_ms=-?\d+", "", answer)
