"""kafka-python's schema classes, looked up by api key."""

from __future__ import annotations

import enum
from functools import cache, lru_cache
from typing import Any, NamedTuple

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer
import kafka.protocol.sasl  # noqa: F401  (registers SaslHandshake/SaslAuthenticate)
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage

import protocol.own_messages  # noqa: F401  (registers the messages kafka-python has no schema for)
from protocol.errors import ProtocolError

KNOWN_API_KEYS = frozenset(int(key) for key in ApiKey)


class Api(enum.IntEnum):
    """The api keys this project names in code."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    CREATE_PARTITIONS = 37
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    LIST_CONFIG_RESOURCES = 74
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


def _primary_classes(root: type) -> list[Any]:
    found: list[Any] = []
    cls: Any
    for cls in root.__subclasses__():
        if getattr(cls, "_class_version", None) is None and getattr(cls, "_json", None) is not None:
            found.append(cls)
        found.extend(_primary_classes(cls))
    return found


@cache
def _registry() -> dict[tuple[int, str], Any]:
    registry: dict[tuple[int, str], Any] = {}
    for cls in _primary_classes(ApiMessage):
        registry.setdefault((cls.API_KEY, cls.type), cls)
    return registry


def request_class(api_key: int) -> Any:
    return _registry()[(api_key, "request")]


def response_class(api_key: int) -> Any:
    return _registry()[(api_key, "response")]


class SchemalessApi(NamedTuple):
    """What the proxy needs of a client api kafka-python has no schema for (its frames are forwarded opaque)."""

    flexible_since: int
    """Its first flexible version: header v2 on the request, v1 on the response."""
    throttle_offset: int | None
    """Where throttle_time_ms sits in every version's response body; None: after a part of variable size."""


WITHOUT_SCHEMA: dict[int, SchemalessApi] = {
    # streams groups, telemetry: added after KIP-482, flexible and throttle first throughout
    **{api_key: SchemalessApi(0, 0) for api_key in (71, 72, 88, 89)},
}
"""From Kafka 4.3's ``clients/src/main/resources/common/message/*.json``."""


@lru_cache(maxsize=1024)
def is_flexible_request(api_key: int, api_version: int) -> bool:
    """Header v2 on the request, v1 on the response (the tagged fields KIP-482 added). Asked of every request and
    response: remembered, for as many api versions as clients use (bounded: a version is the client's to choose)."""
    if (api_key, "request") not in _registry():
        if api_key not in WITHOUT_SCHEMA:
            raise ProtocolError("no schema for this api", api_key=api_key, api_version=api_version)
        return api_version >= WITHOUT_SCHEMA[api_key].flexible_since
    return bool(request_class(api_key).flexible_version_q(api_version))


def is_flexible_response(api_key: int, api_version: int) -> bool:
    """Header v1 on the response to this request: a flexible request's, but ApiVersions' (always v0, for a client
    that does not know the versions yet)."""
    return api_key != Api.API_VERSIONS and is_flexible_request(api_key, api_version)
