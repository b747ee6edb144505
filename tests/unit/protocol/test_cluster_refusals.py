"""The cluster's administration refused as Kafka 4.3 refuses it (each request class's ``getErrorResponse``), and
ListConfigResources' listing without the proxy's own topics."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from protocol.apis import Api
from protocol.cluster_refusals import (
    CLUSTER_OPERATION_NAMES,
    FIRST_KAFKA_VERSIONS,
    cluster_administration_refused,
)
from protocol.codecs import decode_response, encode_response, max_version
from protocol.config_resources import config_resources_listed_without
from protocol.header import read_request_header
from tests.support import encode_request

ASKED: dict[int, dict[str, Any]] = {
    Api.DESCRIBE_LOG_DIRS: {"topics": [{"topic": "t", "partitions": [0]}]},
    Api.ALTER_REPLICA_LOG_DIRS: {"dirs": [{"path": "/a", "topics": [{"name": "t", "partitions": [0, 1]}]},
                                          {"path": "/b", "topics": [{"name": "t", "partitions": [2]}]}]},
    Api.ELECT_LEADERS: {"election_type": 0, "timeout_ms": 1, "topic_partitions": [{"topic": "t", "partitions": [0]}]},
    Api.ALTER_PARTITION_REASSIGNMENTS: {"timeout_ms": 1, "allow_replication_factor_change": True, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "replicas": [1, 2]}]}]},
    Api.LIST_PARTITION_REASSIGNMENTS: {"timeout_ms": 1, "topics": [{"name": "t", "partition_indexes": [0, 3]}]},
    Api.DESCRIBE_USER_SCRAM_CREDENTIALS: {"users": [{"name": "alice"}, {"name": "bob"}]},
    Api.ALTER_USER_SCRAM_CREDENTIALS: {"deletions": [{"name": "\u00e9ve", "mechanism": 1},
                                                     {"name": "bob", "mechanism": 2}],
                                       "upsertions": [{"name": "bob", "mechanism": 1, "iterations": 4096,
                                                       "salt": b"s", "salted_password": b"p"}]},
    Api.DESCRIBE_QUORUM: {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
    Api.UPDATE_FEATURES: {"timeout_ms": 1, "validate_only": True, "feature_updates": [
        {"feature": "f", "max_version_level": 1, "allow_downgrade": False, "upgrade_type": 1}]},
    Api.LIST_CONFIG_RESOURCES: {"resource_types": [2]},
    Api.UNREGISTER_BROKER: {"broker_id": 7},
    Api.ADD_RAFT_VOTER: {"cluster_id": None, "timeout_ms": 1, "voter_id": 7, "voter_directory_id": uuid.UUID(int=1),
                         "listeners": [{"name": "CONTROLLER", "host": "h", "port": 9093}], "ack_when_committed": True},
    Api.REMOVE_RAFT_VOTER: {"cluster_id": "c", "voter_id": 7, "voter_directory_id": uuid.UUID(int=1)},
}


def refused(api_key: int, version: int, **fields: Any) -> Any:
    frame = memoryview(encode_request(api_key, version, **fields))[4:]
    answer = cluster_administration_refused(api_key, version, frame[read_request_header(frame).length:],
                                            "not authorized")
    assert answer is not None
    return decode_response(api_key, version, answer)


@pytest.mark.parametrize(("api_key", "version"), [
    (api_key, version) for api_key in sorted(CLUSTER_OPERATION_NAMES)
    for version in range(FIRST_KAFKA_VERSIONS.get(api_key, 0), max_version(api_key) + 1)])
def test_every_version_of_every_api_is_answered(api_key: int, version: int) -> None:
    answer = refused(api_key, version, **ASKED[api_key]).to_dict()
    errors = [value for name, value in _fields(answer) if name == "error_code"]
    if api_key == Api.DESCRIBE_LOG_DIRS and version < 3:  # no error to give: no log directories
        assert answer["results"] == []
    else:
        assert errors and set(errors) == {31}, answer


def _fields(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, list):
        return [field for item in value for field in _fields(item)]
    if isinstance(value, dict):
        return [*value.items(), *(field for item in value.values() for field in _fields(item))]
    return []


def test_each_partition_asked_is_refused_under_its_topic_as_kafka_lists_them() -> None:
    moved = refused(Api.ALTER_REPLICA_LOG_DIRS, 2, **ASKED[Api.ALTER_REPLICA_LOG_DIRS])
    assert [(topic.topic_name, [partition.partition_index for partition in topic.partitions])
            for topic in moved.results] == [("t", [0, 1]), ("t", [2])], "a topic once per directory"
    listed = refused(Api.LIST_PARTITION_REASSIGNMENTS, 0, **ASKED[Api.LIST_PARTITION_REASSIGNMENTS])
    assert (listed.error_message, [(partition.partition_index, partition.replicas)
                                   for partition in listed.topics[0].partitions]) == (
        "not authorized", [(0, []), (3, [])])
    altered = refused(Api.ALTER_USER_SCRAM_CREDENTIALS, 0, **ASKED[Api.ALTER_USER_SCRAM_CREDENTIALS])
    assert [(result.user, result.error_message) for result in altered.results] == [
        ("bob", "not authorized"), ("\u00e9ve", "not authorized")], "each user once, in Java's order"


def test_a_refusal_kafka_makes_of_the_codes_exception_has_its_message_only_where_made_of_the_code() -> None:
    described = refused(Api.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, **ASKED[Api.DESCRIBE_USER_SCRAM_CREDENTIALS])
    assert (described.error_message, [(result.user, result.error_message) for result in described.results]) == (
        None, [("", None)] * 2), "ApiError drops the default message"
    quorum = refused(Api.DESCRIBE_QUORUM, 2, **ASKED[Api.DESCRIBE_QUORUM])
    assert (quorum.error_message, quorum.topics) == ("Cluster authorization failed.", [])


def test_no_users_asked_of_describe_user_scram_credentials_gets_no_answer_as_kafkas_error_answer_fails() -> None:
    frame = memoryview(encode_request(Api.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=None))[4:]
    assert cluster_administration_refused(Api.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                                          frame[read_request_header(frame).length:], "m") is None


def test_the_hidden_topics_are_left_out_of_a_config_resources_listing_and_nothing_else() -> None:
    listed = {"throttle_time_ms": 0, "error_code": 0, "config_resources": [
        {"resource_name": "quotas", "resource_type": 2}, {"resource_name": "t", "resource_type": 2},
        {"resource_name": "quotas", "resource_type": 32}, {"resource_name": "1", "resource_type": 4}]}
    body = memoryview(encode_response(Api.LIST_CONFIG_RESOURCES, 1, listed))
    kept = config_resources_listed_without(1, body, frozenset({"quotas"}))
    assert kept is not None
    assert [(resource.resource_name, resource.resource_type) for resource in decode_response(
        Api.LIST_CONFIG_RESOURCES, 1, kept).config_resources] == [("t", 2), ("quotas", 32), ("1", 4)], \
        "a group of the same name is not the topic"
    assert config_resources_listed_without(1, body, frozenset({"other"})) is None


def test_the_raft_voters_refusal_has_the_codes_message_and_unregister_brokers_the_requests() -> None:
    voter = refused(Api.ADD_RAFT_VOTER, 1, **ASKED[Api.ADD_RAFT_VOTER])
    assert (voter.error_code, voter.error_message) == (31, "Cluster authorization failed.")
    unregistered = refused(Api.UNREGISTER_BROKER, 0, **ASKED[Api.UNREGISTER_BROKER])
    assert (unregistered.error_code, unregistered.error_message) == (31, "not authorized")
