"""Kafka's answers to the cluster's administration when its authorizer refuses it: the APIs that need one operation on
the cluster and nothing else, refused whole, shaped as each request class's ``getErrorResponse`` shapes them
(``KafkaApis`` and ``ControllerApis`` of Kafka 4.3).

The messages: ``AuthHelper.authorizeClusterOperation`` throws one naming the request, which becomes the answer's
(``refused_message``); a refusal with ``Errors.CLUSTER_AUTHORIZATION_FAILED.exception`` has none where the answer is
made through ``ApiError`` (which drops a default message), the code's default message where it is made of the code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

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
    users = request.users
    if users is None:  # Kafka's error answer reads every user asked for, and fails on none
        return None
    return {"error_code": _REFUSED, "error_message": None, "results": [
        {"user": "", "error_code": _REFUSED, "error_message": None, "credential_infos": []} for _ in users]}


def _scram_credentials_altered(request: Any, version: int, message: str) -> dict[str, Any]:
    return {"results": [{"user": user, "error_code": _REFUSED, "error_message": message}
                        for user in sorted(scram_credentials_altered(request), key=_java_order)]}


def scram_credentials_altered(request: Any) -> set[str]:
    """The users an AlterUserScramCredentials request (decoded) changes the credentials of."""
    return {change.name for change in (*request.deletions, *request.upsertions)}


def _quorum_described(request: Any, version: int, message: str) -> dict[str, Any]:
    return {"error_code": _REFUSED, "error_message": _DEFAULT_MESSAGE, "topics": [], "nodes": []}


def _features_updated(request: Any, version: int, message: str) -> dict[str, Any]:
    return {"error_code": _REFUSED, "error_message": message, "results": []}


def _config_resources_listed(request: Any, version: int, message: str) -> dict[str, Any]:
    return {"error_code": _REFUSED, "config_resources": []}


def _broker_unregistered(request: Any, version: int, message: str) -> dict[str, Any]:
    return {"error_code": _REFUSED, "error_message": message}


def _raft_voters_changed(request: Any, version: int, message: str) -> dict[str, Any]:
    return {"error_code": _REFUSED, "error_message": _DEFAULT_MESSAGE}


def _java_order(name: str) -> bytes:
    """Java's ``String.compareTo``: by UTF-16 code units."""
    return name.encode("utf-16-be")


class _Refusal(NamedTuple):
    operation: str
    """The operation on the cluster the API needs, as Kafka's ``AclOperation`` names it."""
    answer: Callable[[Any, int, str], dict[str, Any] | None]
    """The refusal's fields, of the request (decoded: one Kafka could not parse closes its connection, as there),
    its version and the message naming the request; None where Kafka's error answer itself fails."""


_REFUSALS: dict[int, _Refusal] = {
    Api.DESCRIBE_LOG_DIRS: _Refusal("DESCRIBE", _log_dirs_described),
    Api.ALTER_REPLICA_LOG_DIRS: _Refusal("ALTER", _log_dirs_altered),
    Api.ELECT_LEADERS: _Refusal("ALTER", _leaders_elected),
    Api.ALTER_PARTITION_REASSIGNMENTS: _Refusal("ALTER", _reassignments_altered),
    Api.LIST_PARTITION_REASSIGNMENTS: _Refusal("DESCRIBE", _reassignments_listed),
    Api.DESCRIBE_USER_SCRAM_CREDENTIALS: _Refusal("DESCRIBE", _scram_credentials_described),
    Api.ALTER_USER_SCRAM_CREDENTIALS: _Refusal("ALTER", _scram_credentials_altered),
    Api.DESCRIBE_QUORUM: _Refusal("DESCRIBE", _quorum_described),
    Api.UPDATE_FEATURES: _Refusal("ALTER", _features_updated),
    Api.UNREGISTER_BROKER: _Refusal("ALTER", _broker_unregistered),
    Api.LIST_CONFIG_RESOURCES: _Refusal("DESCRIBE_CONFIGS", _config_resources_listed),
    Api.ADD_RAFT_VOTER: _Refusal("ALTER", _raft_voters_changed),
    Api.REMOVE_RAFT_VOTER: _Refusal("ALTER", _raft_voters_changed),
}
CLUSTER_OPERATION_NAMES = {api_key: refusal.operation for api_key, refusal in _REFUSALS.items()}
"""The cluster's administration: the operation on the cluster each API needs (``KafkaApis``, ``ControllerApis``)."""
FIRST_KAFKA_VERSIONS: dict[int, int] = {Api.DESCRIBE_LOG_DIRS: 1, Api.ALTER_REPLICA_LOG_DIRS: 1}
"""Kafka 4.3 removed their v0, which kafka-python still reads."""


def refused_message(principal: str, host: str, api_key: int) -> str:
    """What the proxy says where Kafka's ``authorizeClusterOperation`` says the request (its connection, session and
    listener) needs the API's operation."""
    return f"Request of {principal} from {host or 'an unknown address'} needs {CLUSTER_OPERATION_NAMES[api_key]} " \
           "permission."


def cluster_administration_refused(api_key: int, version: int, body: memoryview, message: str) -> bytes | None:
    """The answer to a request of ``CLUSTER_OPERATION_NAMES`` refused, with ``message`` where Kafka names the
    request; None where Kafka's error answer itself fails (its connection is closed)."""
    fields = _REFUSALS[api_key].answer(decode_request(api_key, version, body), version, message)
    if fields is None:
        return None
    if api_key != Api.DESCRIBE_QUORUM:  # its answer has no throttle
        fields["throttle_time_ms"] = 0
    return encode_response(api_key, version, fields)
