"""Kafka's answers to the cluster's administration when its authorizer refuses it: the APIs that need one operation on
the cluster and nothing else, refused whole, shaped as each request class's ``getErrorResponse`` shapes them
(``KafkaApis`` and ``ControllerApis`` of Kafka 4.3).

The messages: ``AuthHelper.authorizeClusterOperation`` throws one naming the request, which becomes the answer's
(``refused_message``); a refusal with ``Errors.CLUSTER_AUTHORIZATION_FAILED.exception`` has none where the answer is
made through ``ApiError`` (which drops a default message), the code's default message where it is made of the code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocol.apis import Api
from protocol.codecs import decode_request, encode_response
from protocol.errors import CLUSTER_AUTHORIZATION_FAILED, ERROR_MESSAGES

_REFUSED = CLUSTER_AUTHORIZATION_FAILED
_DEFAULT_MESSAGE = ERROR_MESSAGES[CLUSTER_AUTHORIZATION_FAILED]
_FIRST_DESCRIBE_LOG_DIRS_WITH_ERROR = 3
_FIRST_ELECT_LEADERS_WITH_ERROR = 1


def _log_dirs_described(request: Any, version: int, message: str) -> dict[str, Any]:
    fields: dict[str, Any] = {"results": []}
    if version >= _FIRST_DESCRIBE_LOG_DIRS_WITH_ERROR:
        fields["error_code"] = _REFUSED
    return fields


def _log_dirs_altered(request: Any, version: int, message: str) -> dict[str, Any]:
    return {"results": [{"topic_name": topic.name, "partitions": [
        {"partition_index": partition, "error_code": _REFUSED} for partition in topic.partitions]}
        for directory in request.dirs for topic in directory.topics]}


def _leaders_elected(request: Any, version: int, message: str) -> dict[str, Any]:
    fields: dict[str, Any] = {"replica_election_results": [{"topic": topic.topic, "partition_result": [
        {"partition_id": partition, "error_code": _REFUSED, "error_message": message}
        for partition in topic.partitions]} for topic in request.topic_partitions or ()]}
    if version >= _FIRST_ELECT_LEADERS_WITH_ERROR:
        fields["error_code"] = _REFUSED
    return fields


def _reassignments_altered(request: Any, version: int, message: str) -> dict[str, Any]:
    return {"allow_replication_factor_change": True, "error_code": _REFUSED, "error_message": message,
            "responses": [{"name": topic.name, "partitions": [
                {"partition_index": partition.partition_index, "error_code": _REFUSED, "error_message": message}
                for partition in topic.partitions]} for topic in request.topics]}


def _reassignments_listed(request: Any, version: int, message: str) -> dict[str, Any]:
    return {"error_code": _REFUSED, "error_message": message, "topics": [{"name": topic.name, "partitions": [
        {"partition_index": partition, "replicas": [], "adding_replicas": [], "removing_replicas": []}
        for partition in topic.partition_indexes]} for topic in request.topics or ()]}


def _scram_credentials_described(request: Any, version: int, message: str) -> dict[str, Any] | None:
    if request.users is None:  # Kafka's error answer reads every user asked for, and fails on none
        return None
    return {"error_code": _REFUSED, "error_message": None, "results": [
        {"user": "", "error_code": _REFUSED, "error_message": None, "credential_infos": []} for _ in request.users]}


def _scram_credentials_altered(request: Any, version: int, message: str) -> dict[str, Any]:
    users = {change.name for change in (*request.deletions, *request.upsertions)}
    return {"results": [{"user": user, "error_code": _REFUSED, "error_message": message}
                        for user in sorted(users, key=_java_order)]}


def _quorum_described(request: Any, version: int, message: str) -> dict[str, Any]:
    return {"error_code": _REFUSED, "error_message": _DEFAULT_MESSAGE, "topics": [], "nodes": []}


def _features_updated(request: Any, version: int, message: str) -> dict[str, Any]:
    return {"error_code": _REFUSED, "error_message": message, "results": []}


def _config_resources_listed(request: Any, version: int, message: str) -> dict[str, Any]:
    return {"error_code": _REFUSED, "config_resources": []}


def _java_order(name: str) -> bytes:
    """Java's ``String.compareTo``: by UTF-16 code units."""
    return name.encode("utf-16-be")


_REFUSALS: dict[int, Callable[[Any, int, str], dict[str, Any] | None]] = {
    Api.DESCRIBE_LOG_DIRS: _log_dirs_described,
    Api.ALTER_REPLICA_LOG_DIRS: _log_dirs_altered,
    Api.ELECT_LEADERS: _leaders_elected,
    Api.ALTER_PARTITION_REASSIGNMENTS: _reassignments_altered,
    Api.LIST_PARTITION_REASSIGNMENTS: _reassignments_listed,
    Api.DESCRIBE_USER_SCRAM_CREDENTIALS: _scram_credentials_described,
    Api.ALTER_USER_SCRAM_CREDENTIALS: _scram_credentials_altered,
    Api.DESCRIBE_QUORUM: _quorum_described,
    Api.UPDATE_FEATURES: _features_updated,
    Api.LIST_CONFIG_RESOURCES: _config_resources_listed,
}
CLUSTER_ADMINISTRATION_APIS = frozenset(_REFUSALS)
FIRST_KAFKA_VERSIONS: dict[int, int] = {Api.DESCRIBE_LOG_DIRS: 1, Api.ALTER_REPLICA_LOG_DIRS: 1}
"""Kafka 4.3 removed their v0, which kafka-python still reads."""


def refused_message(principal: str, host: str) -> str:
    """What the proxy says where Kafka's ``authorizeClusterOperation`` says the request (its connection, session and
    listener) is not authorized."""
    return f"Request of {principal} from {host or 'an unknown address'} is not authorized."


def cluster_administration_refused(api_key: int, version: int, body: memoryview, message: str) -> bytes | None:
    """The answer to a request of ``CLUSTER_ADMINISTRATION_APIS`` refused, with ``message`` where Kafka names the
    request; None where Kafka's error answer itself fails (its connection is closed)."""
    fields = _REFUSALS[api_key](decode_request(api_key, version, body), version, message)
    if fields is None:
        return None
    if api_key != Api.DESCRIBE_QUORUM:  # a KRaft request's answer has no throttle
        fields["throttle_time_ms"] = 0
    return encode_response(api_key, version, fields)
