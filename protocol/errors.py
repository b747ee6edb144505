"""The one exception type for malformed Kafka input, and the error codes the proxy answers with
(named as in Kafka's ``Errors.java``)."""

from __future__ import annotations


class ProtocolError(ValueError):
    """Malformed or unsupported bytes; the message names api key, version and byte offset."""

    def __init__(self, reason: str, *, api_key: int | None = None, api_version: int | None = None,
                 offset: int | None = None) -> None:
        self.reason = reason
        self.api_key = api_key
        self.api_version = api_version
        self.offset = offset
        where = []
        if api_key is not None:
            where.append(f"api_key={api_key}")
        if api_version is not None:
            where.append(f"version={api_version}")
        if offset is not None:
            where.append(f"offset={offset}")
        super().__init__(f"{reason} ({', '.join(where)})" if where else reason)


UNKNOWN_SERVER_ERROR = -1
UNKNOWN_TOPIC_OR_PARTITION = 3
REQUEST_TIMED_OUT = 7
COORDINATOR_LOAD_IN_PROGRESS = 14
INVALID_TOPIC_EXCEPTION = 17
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_REQUEST = 42
OPERATION_NOT_ATTEMPTED = 55
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
POLICY_VIOLATION = 44
SASL_AUTHENTICATION_FAILED = 58
DELEGATION_TOKEN_AUTH_DISABLED = 61
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
INVALID_PRINCIPAL_TYPE = 67
FETCH_SESSION_ID_NOT_FOUND = 70
SHARE_SESSION_NOT_FOUND = 122
UNSUPPORTED_COMPRESSION_TYPE = 76
STALE_BROKER_EPOCH = 77
INVALID_RECORD = 87
THROTTLING_QUOTA_EXCEEDED = 89

ERROR_MESSAGES = {
    UNKNOWN_SERVER_ERROR: "The server experienced an unexpected error when processing the request.",
    TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
}
"""``Errors.message()`` of the codes the proxy answers with Kafka's default message."""
