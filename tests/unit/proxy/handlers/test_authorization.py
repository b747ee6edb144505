from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from protocol.apis import Api, is_flexible_response
from protocol.codecs import decode_response, encode_response
from protocol.header import read_request_header, response_header_length
from protocol.refused_topics import SHARE_APIS
from proxy.decision.outcome import CLOSE, FORWARD, Caller, Forward
from proxy.handlers.authorization import (
    AUTHORIZED_APIS,
    GROUP_FIRST_APIS,
    JUDGED_BY_THEIR_HANDLERS,
    Coordinators,
    GroupFirst,
    SuperUsersOnly,
    TransactionalIdFirst,
    judged_by_acls,
)
from proxy.handlers.refused_topics import TopicsWithoutRefused
from proxy.security.access import Access, requester_of
from proxy.security.acls import AclAuthorizer, AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from tests.support import encode_request
from tests.unit.proxy.outcomes import answered, finish_of, handled

FIND_COORDINATOR = memoryview(encode_request(Api.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["g"]))[4:]
THROTTLED = Forward(throttle_ms=5)
STREAMS_GROUP_DESCRIBE = 89


class Throttling:
    def on_request(self, header: object, frame: memoryview, caller: Caller) -> Forward:
        return THROTTLED


def test_a_super_user_goes_on_to_the_apis_handler_and_anyone_else_is_closed_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    authorizer = AclAuthorizer(super_users=["User:admin"])
    header = read_request_header(FIND_COORDINATOR)
    logged: set[tuple[str, int]] = set()
    assert SuperUsersOnly(authorizer, Throttling(), logged).on_request(
        header, FIND_COORDINATOR, Caller("admin", 0)) is THROTTLED
    assert SuperUsersOnly(authorizer, None, logged).on_request(header, FIND_COORDINATOR, Caller("admin", 0)) is FORWARD
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert SuperUsersOnly(authorizer, Throttling(), logged).on_request(
                header, FIND_COORDINATOR, Caller("alice", 0, host="10.0.0.1")) is CLOSE
    assert [record.getMessage() for record in caplog.records] == [
        "closing a connection of User:alice from 10.0.0.1: the authorizer does not judge requests of api key 10 yet, "
        "so only super users may send them"]


def test_no_api_a_client_needs_before_it_can_ask_anything_is_kept_from_it() -> None:
    assert {Api.API_VERSIONS, Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE, Api.METADATA} <= AUTHORIZED_APIS


def test_with_the_authorizer_each_api_is_judged_as_kafka_judges_it_or_kept_for_super_users() -> None:
    authorizer = AclAuthorizer(super_users=["User:admin"])
    access = Access(authorizer=authorizer)
    topics = Throttling()
    with pytest.raises(AssertionError, match="no handler to judge them"):
        judged_by_acls({Api.OFFSET_COMMIT: topics}, access)
    judged, otherwise = judged_by_acls({**dict.fromkeys(JUDGED_BY_THEIR_HANDLERS | SHARE_APIS, topics),
                                        Api.OFFSET_COMMIT: topics, Api.TXN_OFFSET_COMMIT: topics,
                                        STREAMS_GROUP_DESCRIBE: topics}, access)
    assert set(judged) >= AUTHORIZED_APIS
    alice = Caller("alice", 0)
    assert judged[Api.PRODUCE] is topics and isinstance(judged[Api.OFFSET_COMMIT], GroupFirst)
    assert isinstance(judged[Api.FIND_COORDINATOR], Coordinators)
    versions = memoryview(encode_request(Api.API_VERSIONS, 3, client_software_name="t", client_software_version="1"))
    assert handled(judged[Api.API_VERSIONS], versions[4:], alice) is FORWARD, "Kafka authorizes no ApiVersions"
    assert handled(judged[STREAMS_GROUP_DESCRIBE], FIND_COORDINATOR, alice) is CLOSE
    assert handled(judged[STREAMS_GROUP_DESCRIBE], FIND_COORDINATOR, Caller("admin", 0)) is THROTTLED
    assert handled(otherwise, FIND_COORDINATOR, alice) is CLOSE
    fetch_by_id = memoryview(encode_request(Api.OFFSET_FETCH, 10, require_stable=False, groups=[]))[4:]
    assert handled(judged[Api.OFFSET_FETCH], fetch_by_id, alice) is CLOSE, "v10 names topics by id: not offered"


def transaction_request(api_key: int, version: int, **fields: object) -> memoryview:
    return memoryview(encode_request(api_key, version, **fields))[4:]


def add_partitions(transactional_id: str, *topics: str, version: int = 3) -> memoryview:
    return transaction_request(Api.ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id=transactional_id,
                               v3_and_below_producer_id=7, v3_and_below_producer_epoch=0,
                               v3_and_below_topics=[{"name": name, "partitions": [0, 1]} for name in topics])


def answer_of(decided: object, api_key: int, version: int) -> Any:
    frame = answered(decided).response[4:]  # type: ignore[arg-type]
    flexible = is_flexible_response(api_key, version)
    return decode_response(api_key, version, frame[response_header_length(frame, flexible=flexible):])


def alice_allowed(*allowed: tuple[ResourceType, str, AclOperation]) -> AclAuthorizer:
    """Alice allowed each operation on each resource (by its literal name); User:admin a super user."""
    return AclAuthorizer([AclBinding(resource_type, name, PatternType.LITERAL, "User:alice", "*", operation,
                                     AclPermission.ALLOW) for resource_type, name, operation in allowed],
                         super_users=["User:admin"])


def test_a_transaction_needs_write_on_its_id_its_groups_read_and_write_on_its_topics() -> None:
    authorizer = alice_allowed((ResourceType.TRANSACTIONAL_ID, "tx", AclOperation.WRITE),
                               (ResourceType.GROUP, "g", AclOperation.READ),
                               (ResourceType.TOPIC, "mine", AclOperation.WRITE),
                               (ResourceType.TOPIC, "__consumer_offsets", AclOperation.WRITE))
    judge = TransactionalIdFirst(Access(authorizer=authorizer))
    alice = Caller("alice", 0)
    assert handled(judge, add_partitions("tx", "mine"), alice) is FORWARD
    refused = answer_of(handled(judge, add_partitions("tx", "mine", "theirs"), alice), Api.ADD_PARTITIONS_TO_TXN, 3)
    assert sorted((topic.name, partition.partition_error_code) for topic in refused.results_by_topic_v3_and_below
                  for partition in topic.results_by_partition) == [
        ("mine", 55), ("mine", 55), ("theirs", 29), ("theirs", 29)]
    internal = answer_of(handled(judge, add_partitions("tx", "__consumer_offsets"), alice),
                         Api.ADD_PARTITIONS_TO_TXN, 3)
    assert {partition.partition_error_code for topic in internal.results_by_topic_v3_and_below
            for partition in topic.results_by_partition} == {29}, "an internal topic, whatever the ACLs"
    other_id = answer_of(handled(judge, add_partitions("tx-b", "mine"), alice), Api.ADD_PARTITIONS_TO_TXN, 3)
    assert {partition.partition_error_code for topic in other_id.results_by_topic_v3_and_below
            for partition in topic.results_by_partition} == {53}
    assert handled(judge, add_partitions("tx", "mine", version=4), alice) is CLOSE, "a broker's: not offered"
    ended = answer_of(handled(judge, transaction_request(Api.END_TXN, 5, transactional_id="tx-b", producer_id=7,
                                                         producer_epoch=0, committed=True), alice), Api.END_TXN, 5)
    assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (53, -1, -1)
    for group, error in (("g", None), ("other", 30)):
        offsets = transaction_request(Api.ADD_OFFSETS_TO_TXN, 4, transactional_id="tx", producer_id=7,
                                      producer_epoch=0, group_id=group)
        decided = handled(judge, offsets, alice)
        assert decided is FORWARD if error is None else answer_of(decided, Api.ADD_OFFSETS_TO_TXN, 4).error_code == 30
    commit = transaction_request(Api.TXN_OFFSET_COMMIT, 5, transactional_id="tx-b", group_id="g", producer_id=7,
                                 producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None,
                                 topics=[{"name": "mine", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                          "committed_leader_epoch": -1,
                                                                          "committed_metadata": ""}]}])
    refused_commit = answer_of(handled(GroupFirst(Access(authorizer=authorizer), Throttling()), commit, alice),
                               Api.TXN_OFFSET_COMMIT, 5)
    assert [partition.error_code for topic in refused_commit.topics for partition in topic.partitions] == [53]


def every_api_judged(access: Access) -> dict[int, Any]:
    judged, _ = judged_by_acls({**dict.fromkeys(JUDGED_BY_THEIR_HANDLERS | GROUP_FIRST_APIS | SHARE_APIS,
                                                Throttling())}, access)
    return judged


def heartbeat(group: str, topics: list[str] | None, regex: str | None = None) -> memoryview:
    return transaction_request(Api.CONSUMER_GROUP_HEARTBEAT, 1, group_id=group, member_id="m", member_epoch=0,
                               instance_id=None, rack_id=None, rebalance_timeout_ms=30_000,
                               subscribed_topic_names=topics, subscribed_topic_regex=regex, server_assignor=None,
                               topic_partitions=[])


def test_a_consumer_group_needs_read_on_it_describe_on_its_topics_and_a_regex_is_a_super_users() -> None:
    """``handleConsumerGroupHeartbeat``, ``handleConsumerGroupDescribe``; the coordinator would resolve a regular
    expression with the proxy's own login."""
    authorizer = alice_allowed((ResourceType.GROUP, "g", AclOperation.READ),
                               (ResourceType.GROUP, "g2", AclOperation.DESCRIBE),
                               (ResourceType.TOPIC, "mine", AclOperation.READ))
    access = Access(authorizer=authorizer)
    judged = every_api_judged(access)
    judge = judged[Api.CONSUMER_GROUP_HEARTBEAT]
    alice = Caller("alice", 0)
    assert handled(judge, heartbeat("g", ["mine"]), alice) is FORWARD
    assert handled(judge, heartbeat("g", None), alice) is FORWARD, "an unchanged subscription"
    for group, topics, error in (("h", ["mine"], 30), ("g", ["mine", "theirs"], 29)):
        refused = answer_of(handled(judge, heartbeat(group, topics), alice), Api.CONSUMER_GROUP_HEARTBEAT, 1)
        assert (refused.error_code, refused.member_id, refused.assignment) == (error, None, None)
    assert handled(judge, heartbeat("g", None, "mi.*"), alice) is CLOSE
    assert handled(judge, heartbeat("g", None, "mi.*"), Caller("admin", 0)) is FORWARD
    describe = judged[Api.CONSUMER_GROUP_DESCRIBE]
    decided = handled(describe, transaction_request(Api.CONSUMER_GROUP_DESCRIBE, 1, group_ids=["g", "h", "g2"],
                                                    include_authorized_operations=True), alice)
    assert isinstance(decided, Forward) and decided.replacement is not None

    def member(topic: str) -> dict[str, Any]:
        assignment = {"topic_partitions": [{"topic_id": uuid.uuid4(), "topic_name": topic, "partitions": [0]}]}
        return {"member_id": "m", "instance_id": None, "rack_id": None, "member_epoch": 1, "client_id": "c",
                "client_host": "h", "subscribed_topic_names": [topic], "subscribed_topic_regex": None,
                "assignment": assignment, "target_assignment": assignment, "member_type": 1}

    cluster = encode_response(Api.CONSUMER_GROUP_DESCRIBE, 1, {"throttle_time_ms": 0, "groups": [
        {"error_code": 0, "error_message": None, "group_id": group, "group_state": "Stable", "group_epoch": 1,
         "assignment_epoch": 1, "assignor_name": "uniform", "members": [member(topic)],
         "authorized_operations": 0} for group, topic in (("g", "mine"), ("g2", "theirs"))]})
    answer = finish_of(decided)(memoryview(cluster))
    assert answer is not None
    groups = decode_response(Api.CONSUMER_GROUP_DESCRIBE, 1, answer).groups
    assert [(group.group_id, group.error_code, len(group.members), group.authorized_operations)
            for group in groups] == [("h", 30, 0, -2147483648), ("g", 0, 1, authorizer.authorized_operations(
                requester_of(alice), ResourceType.GROUP, "g")), ("g2", 29, 0, -2147483648)]


def test_a_share_group_needs_read_on_it_describe_on_its_topics_and_read_on_the_group_to_fetch() -> None:
    """``handleShareGroupHeartbeat``, ``handleShareGroupDescribe``, ``handleShareFetchRequest`` and
    ``handleShareAcknowledgeRequest``: the group first, whole; a member id Kafka refuses before the topics, the
    cluster's to refuse."""
    authorizer = alice_allowed((ResourceType.GROUP, "g", AclOperation.READ),
                               (ResourceType.GROUP, "g2", AclOperation.DESCRIBE),
                               (ResourceType.TOPIC, "mine", AclOperation.READ))
    judged = every_api_judged(Access(authorizer=authorizer))
    alice = Caller("alice", 0)

    def share_heartbeat(group: str, topics: list[str] | None, member_id: str = "m") -> memoryview:
        return transaction_request(Api.SHARE_GROUP_HEARTBEAT, 1, group_id=group, member_id=member_id, member_epoch=0,
                                   rack_id=None, subscribed_topic_names=topics)

    judge = judged[Api.SHARE_GROUP_HEARTBEAT]
    assert handled(judge, share_heartbeat("g", ["mine"]), alice) is FORWARD
    assert handled(judge, share_heartbeat("g", ["theirs"], member_id=""), alice) is FORWARD, "INVALID_REQUEST first"
    for group, topics, error in (("h", ["mine"], 30), ("g", ["mine", "theirs"], 29)):
        refused = answer_of(handled(judge, share_heartbeat(group, topics), alice), Api.SHARE_GROUP_HEARTBEAT, 1)
        assert (refused.error_code, refused.member_id, refused.assignment) == (error, None, None)

    decided = handled(judged[Api.SHARE_GROUP_DESCRIBE], transaction_request(
        Api.SHARE_GROUP_DESCRIBE, 1, group_ids=["g", "h", "g2"], include_authorized_operations=False), alice)
    assert isinstance(decided, Forward) and decided.replacement is not None

    def member(topic: str) -> dict[str, Any]:
        return {"member_id": "m", "rack_id": None, "member_epoch": 1, "client_id": "c", "client_host": "h",
                "subscribed_topic_names": [topic], "assignment": {"topic_partitions": [
                    {"topic_id": uuid.uuid4(), "topic_name": topic, "partitions": [0]}]}}

    cluster = encode_response(Api.SHARE_GROUP_DESCRIBE, 1, {"throttle_time_ms": 0, "groups": [
        {"error_code": 0, "error_message": None, "group_id": group, "group_state": "Stable", "group_epoch": 1,
         "assignment_epoch": 1, "assignor_name": "simple", "members": [member(topic)],
         "authorized_operations": -2147483648} for group, topic in (("g", "mine"), ("g2", "theirs"))]})
    answer = finish_of(decided)(memoryview(cluster))
    assert answer is not None
    assert [(group.group_id, group.error_code, len(group.members), group.error_message) for group in decode_response(
        Api.SHARE_GROUP_DESCRIBE, 1, answer).groups] == [
        ("h", 30, 0, None), ("g", 0, 1, None),
        ("g2", 29, 0, "The group has described topic(s) that the client is not authorized to describe.")]

    for api_key, extra in ((Api.SHARE_FETCH, {"max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20,
                                              "max_records": 500, "batch_size": 500, "forgotten_topics_data": []}),
                           (Api.SHARE_ACKNOWLEDGE, {})):
        def asked(group: str | None, member_id: str = "m", api_key: int = api_key,
                  extra: dict[str, object] = extra) -> memoryview:
            return transaction_request(api_key, 1, group_id=group, member_id=member_id, share_session_epoch=0,
                                       topics=[], **extra)

        assert handled(judged[api_key], asked("g"), alice) is THROTTLED, "on to the topics' judge"
        assert handled(judged[api_key], asked(None), alice) is FORWARD, "no group: INVALID_REQUEST from the cluster"
        assert handled(judged[api_key], asked("g", member_id="x" * 37), alice) is FORWARD, "INVALID_REQUEST first"
        refused = answer_of(handled(judged[api_key], asked("h"), alice), api_key, 1)
        assert (refused.error_code, refused.error_message, refused.responses) == (30, None, []), api_key


def test_the_proxys_own_topics_are_never_in_a_transaction_whatever_the_acls() -> None:
    """Alice may write and read every topic, and the transaction and group are hers: a reserved topic is refused
    (29) in AddPartitionsToTxn and TxnOffsetCommit, nothing of the request reaching the cluster."""
    reserved = "__kafka_quota_proxy_quotas"
    authorizer = alice_allowed((ResourceType.TRANSACTIONAL_ID, "tx", AclOperation.WRITE),
                               (ResourceType.GROUP, "g", AclOperation.READ),
                               (ResourceType.TOPIC, "*", AclOperation.ALL))
    access = Access(frozenset({reserved}), authorizer)
    judged, _ = judged_by_acls({**dict.fromkeys(JUDGED_BY_THEIR_HANDLERS | SHARE_APIS, Throttling()),
                                **dict.fromkeys(GROUP_FIRST_APIS, TopicsWithoutRefused(access))}, access)
    alice = Caller("alice", 0)
    added = answer_of(handled(judged[Api.ADD_PARTITIONS_TO_TXN], add_partitions("tx", "mine", reserved), alice),
                      Api.ADD_PARTITIONS_TO_TXN, 3)
    assert sorted((topic.name, partition.partition_error_code) for topic in added.results_by_topic_v3_and_below
                  for partition in topic.results_by_partition) == [
        (reserved, 29), (reserved, 29), ("mine", 55), ("mine", 55)]
    commit = transaction_request(Api.TXN_OFFSET_COMMIT, 5, transactional_id="tx", group_id="g", producer_id=7,
                                 producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None,
                                 topics=[{"name": reserved, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                            "committed_leader_epoch": -1,
                                                                            "committed_metadata": ""}]}])
    committed = answer_of(handled(judged[Api.TXN_OFFSET_COMMIT], commit, alice), Api.TXN_OFFSET_COMMIT, 5)
    assert [(topic.name, [partition.error_code for partition in topic.partitions])
            for topic in committed.topics] == [(reserved, [29])]


def elect_leaders(version: int, topics: list[tuple[str, list[int]]] | None) -> memoryview:
    return memoryview(encode_request(Api.ELECT_LEADERS, version, election_type=0, timeout_ms=1000, topic_partitions=None
                                     if topics is None else [{"topic": topic, "partitions": partitions}
                                                             for topic, partitions in topics]))[4:]


def test_the_clusters_administration_needs_its_operation_on_the_cluster_else_is_refused_whole_as_kafka_refuses_it(
        ) -> None:
    access = Access(authorizer=alice_allowed((ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALTER)))
    judged, _ = judged_by_acls({**dict.fromkeys(JUDGED_BY_THEIR_HANDLERS | GROUP_FIRST_APIS | SHARE_APIS, Throttling()),
                                Api.ELECT_LEADERS: Throttling()}, access)
    request = elect_leaders(2, [("t", [0, 1]), ("u", [2])])
    assert handled(judged[Api.ELECT_LEADERS], request, Caller("alice", 0)) is THROTTLED, "on to its handler"
    assert handled(judged[Api.ELECT_LEADERS], request, Caller("admin", 0)) is THROTTLED
    refused = answer_of(handled(judged[Api.ELECT_LEADERS], request, Caller("bob", 0, host="10.0.0.2")),
                        Api.ELECT_LEADERS, 2)
    message = "Request of User:bob from 10.0.0.2 needs ALTER permission."
    assert refused.error_code == 31 and [(result.topic, [(partition.partition_id, partition.error_code,
                                                           partition.error_message)
                                                          for partition in result.partition_result])
                                         for result in refused.replica_election_results] == [
        ("t", [(0, 31, message), (1, 31, message)]), ("u", [(2, 31, message)])]
    assert answer_of(handled(judged[Api.ELECT_LEADERS], elect_leaders(2, None), Caller("bob", 0)), Api.ELECT_LEADERS,
                     2).replica_election_results == [], "every partition asked: none answered"
    log_dirs = memoryview(encode_request(Api.DESCRIBE_LOG_DIRS, 4, topics=None))[4:]
    assert handled(judged[Api.DESCRIBE_LOG_DIRS], log_dirs, Caller("alice", 0)) is FORWARD, "ALTER implies DESCRIBE"
    described = answer_of(handled(judged[Api.DESCRIBE_LOG_DIRS], log_dirs, Caller("bob", 0)), Api.DESCRIBE_LOG_DIRS, 4)
    assert (described.error_code, described.results) == (31, [])
    version_0 = bytearray(log_dirs)
    version_0[2:4] = b"\x00\x00"
    assert handled(judged[Api.DESCRIBE_LOG_DIRS], memoryview(bytes(version_0)), Caller("bob", 0)) is CLOSE, \
        "Kafka 4.3 reads no v0"
    everyone = memoryview(encode_request(Api.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=None))[4:]
    assert handled(judged[Api.DESCRIBE_USER_SCRAM_CREDENTIALS], everyone, Caller("bob", 0)) is CLOSE, \
        "Kafka's error answer fails on no users: it answers nothing"
