"""Full decode and encode of the messages the proxy intercepts, on kafka-python's schema classes.

Every failure, whatever kafka-python raised, becomes a ``ProtocolError`` naming api key, version
and the byte offset reached; a body must be consumed exactly (no overrun, no trailing bytes), and a field its
schema does not let be null must not be (kafka-python reads a length of -1 as None wherever it is; Kafka's own
parser refuses the message, "non-nullable field ... was serialized as null").
"""

from __future__ import annotations

import re
from typing import Any

from kafka.protocol.schemas.fields import struct as kafka_struct_fields
from kafka.protocol.schemas.fields.codecs import EncodeBufferPool
from kafka.protocol.schemas.fields.codegen import CodegenContext

from protocol.apis import Api, request_class, response_class
from protocol.errors import ProtocolError
from protocol.produce import NEWEST_SCANNED_PRODUCE_VERSION

TESTED_VERSIONS: dict[int, int] = {
    Api.PRODUCE: NEWEST_SCANNED_PRODUCE_VERSION, Api.FETCH: 18,
    Api.CREATE_TOPICS: 7, Api.DELETE_TOPICS: 6, Api.CREATE_PARTITIONS: 3, Api.INIT_PRODUCER_ID: 6,
    Api.ALTER_CLIENT_QUOTAS: 1, Api.DESCRIBE_CLIENT_QUOTAS: 1, Api.SASL_HANDSHAKE: 1, Api.SASL_AUTHENTICATE: 2,
    Api.API_VERSIONS: 4, Api.METADATA: 13, Api.FIND_COORDINATOR: 6, Api.DESCRIBE_CLUSTER: 2, Api.DESCRIBE_CONFIGS: 4,
    Api.ALLOCATE_PRODUCER_IDS: 0, Api.DESCRIBE_ACLS: 3, Api.CREATE_ACLS: 3, Api.DELETE_ACLS: 3,
    # the APIs naming topics the proxy keeps from clients (``protocol.refused_topics``); OffsetCommit v10 names
    # topics by id, which that check does not resolve
    Api.LIST_OFFSETS: 11, Api.OFFSET_COMMIT: 9, Api.DELETE_RECORDS: 2, Api.OFFSET_FOR_LEADER_EPOCH: 4,
    Api.TXN_OFFSET_COMMIT: 5, Api.OFFSET_DELETE: 0, Api.DESCRIBE_PRODUCERS: 0, Api.ALTER_CONFIGS: 2,
    Api.INCREMENTAL_ALTER_CONFIGS: 1, Api.DESCRIBE_TOPIC_PARTITIONS: 0, Api.ELECT_LEADERS: 2,
    Api.ALTER_PARTITION_REASSIGNMENTS: 1,
    # answered where the cluster sees the proxy's own login (``proxy.handlers.own_login``); protocol/schemas
    Api.CREATE_DELEGATION_TOKEN: 3, Api.RENEW_DELEGATION_TOKEN: 2, Api.EXPIRE_DELEGATION_TOKEN: 2,
    Api.DESCRIBE_DELEGATION_TOKEN: 3,
    # the cluster's administration, judged by the authorizer (``protocol.cluster_refusals``)
    Api.ALTER_REPLICA_LOG_DIRS: 2, Api.DESCRIBE_LOG_DIRS: 5, Api.LIST_PARTITION_REASSIGNMENTS: 0,
    Api.DESCRIBE_USER_SCRAM_CREDENTIALS: 0, Api.ALTER_USER_SCRAM_CREDENTIALS: 0, Api.DESCRIBE_QUORUM: 2,
    Api.UPDATE_FEATURES: 2, Api.LIST_CONFIG_RESOURCES: 1, Api.DESCRIBE_TRANSACTIONS: 0, Api.LIST_TRANSACTIONS: 2,
    Api.UNREGISTER_BROKER: 0, Api.ADD_RAFT_VOTER: 1, Api.REMOVE_RAFT_VOTER: 0,  # protocol/schemas
    # the authorizer's (``proxy.handlers.authorization``); OffsetFetch v10 names topics by id, which it does not
    # resolve
    Api.JOIN_GROUP: 9, Api.SYNC_GROUP: 5, Api.HEARTBEAT: 4, Api.LEAVE_GROUP: 5, Api.OFFSET_FETCH: 9,
    Api.ADD_PARTITIONS_TO_TXN: 3, Api.ADD_OFFSETS_TO_TXN: 4, Api.END_TXN: 5,  # AddPartitionsToTxn v4+: brokers'
    Api.LIST_GROUPS: 5, Api.DESCRIBE_GROUPS: 6, Api.DELETE_GROUPS: 2,
    Api.CONSUMER_GROUP_HEARTBEAT: 1, Api.CONSUMER_GROUP_DESCRIBE: 1, Api.SHARE_GROUP_HEARTBEAT: 1,  # protocol/schemas
    Api.SHARE_GROUP_DESCRIBE: 1,
    Api.SHARE_FETCH: 2, Api.SHARE_ACKNOWLEDGE: 2,  # protocol/schemas: their NodeEndpoints name brokers
    Api.DESCRIBE_SHARE_GROUP_OFFSETS: 1, Api.ALTER_SHARE_GROUP_OFFSETS: 0, Api.DELETE_SHARE_GROUP_OFFSETS: 0,
}
"""The newest version of each API whose messages the proxy walks that it is tested with (kafka-python 3.0's
schemas, Apache Kafka 4.3). A newer kafka-python's schema does not raise it: the proxy would offer clients a
version whose fields it has never been shown to handle (a new topic-naming field it does not check, say)."""

CODEC_APIS = frozenset(TESTED_VERSIONS) - {Api.PRODUCE, Api.FETCH}
"""The APIs with a full codec here; Produce has its zero-copy scanner instead (``protocol.produce``), Fetch its
own reader (``protocol.fetch``)."""


def max_version(api_key: int) -> int:
    """The newest version the proxy parses in both directions: kafka-python's, up to the tested one (for the APIs
    of ``TESTED_VERSIONS``)."""
    newest = min(request_class(api_key).max_version, response_class(api_key).max_version)
    return int(min(newest, TESTED_VERSIONS.get(api_key, newest)))


class _KafkasNulls(CodegenContext):  # type: ignore[misc]
    """kafka-python's generated decoders reading a null as Kafka's generated readers do: an array of int32 length
    is null when its length is negative, and a nullable struct when its marker byte is (``readByte() < 0``), where
    kafka-python took -1 and 0xff alone for null. Before, a Metadata whose topics' length was -2 asked Kafka for every
    topic and the proxy for none, so its answer went to the client unfiltered: every topic, the proxy's own and those
    the ACLs hide; an OffsetFetch so written got every committed offset of its group."""

    def emit(self, indent: str, line: str) -> None:
        if line == _KAFKA_PYTHONS_NULL_STRUCT:
            line = _KAFKAS_NULL_STRUCT
        super().emit(indent, _KAFKA_PYTHONS_NULL_ARRAY.sub(r"if \1 < 0:", line))


_KAFKA_PYTHONS_NULL_ARRAY = re.compile(r"^if (_n\d+) == -1:$")
_KAFKA_PYTHONS_NULL_STRUCT, _KAFKAS_NULL_STRUCT = "if data[pos] == 0xff:", "if data[pos] >= 0x80:"
kafka_struct_fields.CodegenContext = _KafkasNulls  # the decoders are generated on first use, after this

_MAY_READ_AS_NULL = frozenset({"string", "bytes", "records"})
"""Besides arrays and structs, the types kafka-python reads as None when their length is -1."""

NullCheck = tuple[str, bool, bool, bool, tuple[Any, ...]]
"""A field's name; whether it must not be null; whether its elements (strings or bytes) must not be; whether it is
an array of structs; the checks of its struct's fields."""
_null_checks_cache: dict[tuple[int, int], tuple[Any, tuple[NullCheck, ...]]] = {}


def _null_checks(struct: Any, version: int) -> tuple[NullCheck, ...]:
    """What ``_null_field`` looks at in a ``struct`` of ``version``: the fields that may read as null, and the structs
    holding such fields (made once a struct and version; kafka-python's fields are not hashable)."""
    key = (id(struct), version)
    cached = _null_checks_cache.get(key)
    if cached is None:
        checks = []
        fields = struct.fields or {}
        for field in fields.values() if isinstance(fields, dict) else fields:  # a struct's by name
            if not field.for_version_q(version) or field.tagged_field_q(version):
                continue
            forbidden = (field.is_array() or field.is_struct() or field.type_str in _MAY_READ_AS_NULL) \
                and not field.nullable_for_version_q(version)
            # Kafka's arrays of strings or bytes ([]string) never hold a null
            elements = field.is_array() and not field.is_struct_array() and field.array_of.type_str in _MAY_READ_AS_NULL
            inner = _null_checks(field, version) if field.is_struct() or field.is_struct_array() else ()
            if forbidden or elements or inner:
                checks.append((field.name, forbidden, elements, field.is_struct_array(), inner))
        cached = _null_checks_cache[key] = (struct, tuple(checks))  # the struct kept: its id stays its own
    return cached[1]


def _null_field(message: Any, checks: tuple[NullCheck, ...]) -> str | None:
    """The path of the first field of ``message`` that is null where its schema does not allow it, or None."""
    for name, forbidden, elements, many, inner in checks:
        value = getattr(message, name, None)
        if value is None:
            if forbidden:
                return name
            continue
        if elements and any(element is None for element in value):
            return f"{name} element"
        for item in value if many else (value,) if inner else ():
            found = _null_field(item, inner)
            if found is not None:
                return f"{name}.{found}"
    return None


def _decode(cls: Any, api_key: int, version: int, body: bytes | memoryview) -> Any:
    if not 0 <= version <= cls.max_version:
        raise ProtocolError(f"version not supported (newest parsed: {cls.max_version})", api_key=api_key,
                            api_version=version, offset=0)
    flexible = cls.flexible_version_q(version)
    decode_from = cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls)
    view = body if isinstance(body, memoryview) else memoryview(body)
    try:
        message, end = decode_from(view, 0)
    except Exception as error:  # kafka-python raises struct, index, value and unicode errors
        raise ProtocolError(f"undecodable {cls.__name__}: {type(error).__name__}: {error}", api_key=api_key,
                            api_version=version, offset=_offset_hint(error)) from error
    if end != len(view):
        what = "ends past the frame" if end > len(view) else f"{len(view) - end} trailing bytes"
        raise ProtocolError(f"{cls.__name__} {what}", api_key=api_key, api_version=version, offset=min(end, len(view)))
    null = _null_field(message, _null_checks(cls._struct, version))
    if null is not None:
        raise ProtocolError(f"{cls.__name__} has a null {null}, which is not nullable", api_key=api_key,
                            api_version=version)
    return message


def _offset_hint(error: Exception) -> int | None:
    return getattr(error, "offset", None)


def decode_request(api_key: int, version: int, body: bytes | memoryview) -> Any:
    """The request body (after the header) as a kafka-python message object."""
    return _decode(request_class(api_key), api_key, version, body)


def decode_response(api_key: int, version: int, body: bytes | memoryview) -> Any:
    """The response body (after the header); ApiVersions errors come in v0 format, as brokers send them."""
    cls = response_class(api_key)
    if api_key == Api.API_VERSIONS and len(body) >= 2 and body[0:2] != b"\x00\x00":
        version = 0
    return _decode(cls, api_key, version, body)


def encode_request(api_key: int, version: int, message: Any) -> bytes:
    return _encode(request_class(api_key), api_key, version, message)


def encode_response(api_key: int, version: int, message: Any) -> bytes:
    return _encode(response_class(api_key), api_key, version, message)


def build(cls: Any, fields: dict[str, Any], version: int | None = None) -> Any:
    """A kafka-python message (or nested struct) from plain dicts and lists, nested structs included."""
    values = {}
    for name, value in fields.items():
        field = cls.fields.get(name)
        if field is not None and field.is_struct_array() and value is not None:
            value = [build(field.data_class, item) if isinstance(item, dict) else item for item in value]
        elif field is not None and field.is_struct() and isinstance(value, dict):
            value = build(field.data_class, value)
        values[name] = value
    return cls(**values) if version is None else cls(version=version, **values)


def _encode(cls: Any, api_key: int, version: int, message: Any) -> bytes:
    # kafka-python's ``encode(version=...)`` fails on decoded objects (no ``_header``), so this
    # drives its compiled encoder directly, as its own ``encode`` does.
    if isinstance(message, dict):
        message = build(cls, message, version)
    flexible = cls.flexible_version_q(version)
    try:
        encode_into = cls._struct.compiled_encode_into(version, compact=flexible, tagged=flexible)
        with EncodeBufferPool.acquire() as out:
            encode_into(message, out)
            return bytes(out.result())
    except Exception as error:
        raise ProtocolError(f"cannot encode {cls.__name__}: {error}", api_key=api_key, api_version=version) from error
