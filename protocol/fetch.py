"""Fetch requests and responses as a consumer byte-rate quota sees them, without decoding either.

The request body starts with fixed fields: ``replica_id`` (v0-14; v15+ moved it into a tagged
field), ``max_wait_ms``, ``min_bytes``, from v3 ``max_bytes``, from v4 ``isolation_level`` and from v7
the fetch session's ``session_id`` and ``session_epoch`` (KIP-227). Kafka caps ``max_bytes`` (and
``min_bytes`` with it) to what the consumer's quota window allows (``KafkaApis.handleFetchRequest``),
charges a response ``4 + body size`` (``FetchResponse.sizeOf``), and answers a fetch it throttles with
no partitions at all (``FetchContext.getThrottledResponse``).
"""

from __future__ import annotations

import uuid
from struct import Struct
from typing import NamedTuple

from protocol.apis import Api
from protocol.body_reader import BodyReader
from protocol.codecs import decode_request, encode_response
from protocol.errors import ProtocolError
from protocol.header import RequestHeader, response_header_length

_INT16 = Struct(">h")
_INT32 = Struct(">i")
_THROTTLE_ERROR_SESSION = Struct(">ihi")
FIRST_MAX_BYTES_VERSION = 3
FIRST_SESSION_VERSION = 7
FIRST_VERSION_WITHOUT_REPLICA_ID = 15
FIRST_FLEXIBLE_FETCH_VERSION = 12
FIRST_TOPIC_ID_FETCH_VERSION = 13
TOPIC_ID_BYTES = 16
_SESSION_EPOCH_AFTER_MIN_BYTES = 4 + 4 + 1 + 4  # min_bytes, max_bytes, isolation_level, session_id
NO_SESSION_EPOCH = -1
"""``FetchMetadata.FINAL_EPOCH``: a full fetch outside any session (and every fetch before v7)."""


def _min_bytes_offset(header: RequestHeader) -> int:
    """Where ``min_bytes`` is: after replica_id (until v14) and max_wait_ms."""
    fields_before = 2 if header.api_version < FIRST_VERSION_WITHOUT_REPLICA_ID else 1
    return header.length + 4 * fields_before


def capped_fetch_request(frame: bytes | memoryview, header: RequestHeader, limit: int) -> bytes | None:
    """The request (no size prefix) with ``max_bytes`` lowered to ``limit`` and ``min_bytes`` to at
    most the new ``max_bytes``; None when nothing changes (within the limit, or before v3)."""
    if header.api_version < FIRST_MAX_BYTES_VERSION:
        return None
    _check_fixed_fields(frame, header)
    min_offset = _min_bytes_offset(header)
    (min_bytes,) = _INT32.unpack_from(frame, min_offset)
    (max_bytes,) = _INT32.unpack_from(frame, min_offset + 4)
    capped = min(max_bytes, limit)
    if capped == max_bytes:
        return None
    patched = bytearray(frame)
    _INT32.pack_into(patched, min_offset, min(min_bytes, capped))
    _INT32.pack_into(patched, min_offset + 4, capped)
    return bytes(patched)


def sessionless_fetch_request(frame: bytes | memoryview, header: RequestHeader) -> bytes | None:
    """The request (no size prefix) as a full fetch outside any session (``session_id`` 0, ``session_epoch``
    ``NO_SESSION_EPOCH``: the cluster opens none); None when it is one already (or before v7, which has none)."""
    if header.api_version < FIRST_SESSION_VERSION:
        return None
    epoch_offset = _min_bytes_offset(header) + _SESSION_EPOCH_AFTER_MIN_BYTES
    _check_length(frame, header, epoch_offset + 4)
    if _INT32.unpack_from(frame, epoch_offset - 4) == (0,) and _INT32.unpack_from(frame, epoch_offset) == (
            NO_SESSION_EPOCH,):
        return None
    patched = bytearray(frame)
    _INT32.pack_into(patched, epoch_offset - 4, 0)
    _INT32.pack_into(patched, epoch_offset, NO_SESSION_EPOCH)
    return bytes(patched)


def fetch_replica_id(frame: bytes | memoryview, header: RequestHeader) -> int:
    """Who the fetch says it is (Kafka's ``FetchRequest.replicaId``): a follower's broker id (0 or more), or a
    consumer's -1 (-2 for a debugging one); from v15 in the tagged ``replica_state``, read by decoding."""
    if header.api_version < FIRST_VERSION_WITHOUT_REPLICA_ID:
        _check_length(frame, header, header.length + 4)
        (replica_id,) = _INT32.unpack_from(frame, header.length)
        return int(replica_id)
    state = decode_request(Api.FETCH, header.api_version, frame[header.length:]).replica_state
    return -1 if state is None else int(state.replica_id)


def fetch_session_epoch(frame: bytes | memoryview, header: RequestHeader) -> int:
    """The request's ``session_epoch``: above 0 for an incremental fetch in an existing session, 0 for a
    full fetch opening one, ``NO_SESSION_EPOCH`` outside sessions (or -1 closing one)."""
    if header.api_version < FIRST_SESSION_VERSION:
        return NO_SESSION_EPOCH
    offset = _min_bytes_offset(header) + _SESSION_EPOCH_AFTER_MIN_BYTES
    _check_length(frame, header, offset + 4)
    (epoch,) = _INT32.unpack_from(frame, offset)
    return int(epoch)


def _check_fixed_fields(frame: bytes | memoryview, header: RequestHeader) -> None:
    fixed_bytes = 8 if header.api_version >= FIRST_MAX_BYTES_VERSION else 4  # min_bytes and max_bytes
    _check_length(frame, header, _min_bytes_offset(header) + fixed_bytes)


def _check_length(frame: bytes | memoryview, header: RequestHeader, end: int) -> None:
    if len(frame) < end:
        raise ProtocolError("fetch request ends before its fixed fields", api_key=header.api_key,
                            api_version=header.api_version, offset=len(frame))


def fetch_response_size(start: bytes | memoryview, frame_bytes: int, flexible: bool) -> int:
    """What Kafka charges a consumer for a response of ``frame_bytes`` (header included, no size
    prefix), from its ``start`` (at least its header): the response may still be arriving."""
    return frame_bytes - response_header_length(start, flexible) + 4


class FetchResponseStart(NamedTuple):
    throttle_ms: int
    """0 before v1."""
    session_id: int
    """0 before v7."""


def fetch_response_start(body: bytes | memoryview, version: int) -> FetchResponseStart:
    """The fields that open a response body: ``throttle_time_ms`` (v1+), ``error_code`` and ``session_id`` (v7+)."""
    if version < 1:
        return FetchResponseStart(0, 0)
    needed = _THROTTLE_ERROR_SESSION.size if version >= FIRST_SESSION_VERSION else _INT32.size
    if len(body) < needed:
        raise ProtocolError("fetch response ends before its first fields", api_key=Api.FETCH, api_version=version,
                            offset=len(body))
    if version < FIRST_SESSION_VERSION:
        return FetchResponseStart(int(_INT32.unpack_from(body)[0]), 0)
    throttle_ms, _, session_id = _THROTTLE_ERROR_SESSION.unpack_from(body)
    return FetchResponseStart(int(throttle_ms), int(session_id))


def throttled_fetch_response_body(version: int, throttle_ms: int, session_id: int) -> bytes:
    """Kafka's answer to a fetch it throttles: ``throttle_ms``, no error, ``session_id`` (v7+) and no
    partitions (``FetchResponse.of(Errors.NONE, throttleTimeMs, sessionId, emptyMap)``)."""
    return encode_response(Api.FETCH, version, {"throttle_time_ms": throttle_ms, "error_code": 0,
                                                "session_id": session_id, "responses": []})


_ZERO_TOPIC_ID = uuid.UUID(int=0)
"""Kafka's ``Uuid.ZERO_UUID``: no topic has it, so the cluster answers UNKNOWN_TOPIC_ID."""
TopicRef = str | bytes
"""A topic as a Fetch names it: its name (until v12) or its 16-byte id (v13 on)."""


def fetch_request_topics(frame: bytes | memoryview, header: RequestHeader) -> list[TopicRef]:
    """The topics a Fetch request asks for, in its order (a fetch session's incremental request may name
    none: the session holds them)."""
    request = decode_request(Api.FETCH, header.api_version, frame[header.length:])
    if header.api_version >= FIRST_TOPIC_ID_FETCH_VERSION:  # kafka-python reads Kafka's zero id as None
        return [(topic.topic_id or _ZERO_TOPIC_ID).bytes for topic in request.topics]
    return [topic.topic for topic in request.topics]


_ABORTED_TRANSACTION_BYTES = 16  # producer_id, first_offset


def fetch_response_topic_bytes(body: bytes | memoryview, version: int) -> dict[TopicRef, int]:
    """The record bytes of each topic of a Fetch response ``body`` (header excluded), read without decoding
    the records: the sum of its partitions' ``records`` sizes (Fetch v0-v17, Kafka's ``FetchResponse.json``)."""
    reader = BodyReader(body, version >= FIRST_FLEXIBLE_FETCH_VERSION)
    try:
        return _topic_bytes(reader, version)
    except (IndexError, ValueError) as error:
        raise ProtocolError(f"fetch response unreadable: {error}", api_key=Api.FETCH, api_version=version,
                            offset=reader.at) from None


def _topic_bytes(reader: BodyReader, version: int) -> dict[TopicRef, int]:
    reader.skip((4 if version >= 1 else 0) + (6 if version >= FIRST_SESSION_VERSION else 0))
    # a partition's fields before its aborted transactions: index, error, high watermark, then from v4 the
    # last stable offset and from v5 the log start offset
    partition_fixed_bytes = 4 + 2 + 8 + (8 if version >= 4 else 0) + (8 if version >= 5 else 0)
    found: dict[TopicRef, int] = {}
    for _ in range(reader.count(_INT32)):
        topic: TopicRef
        start = reader.at
        if version >= FIRST_TOPIC_ID_FETCH_VERSION:
            reader.skip(TOPIC_ID_BYTES)
            topic = bytes(reader.buf[start:reader.at])
        else:
            size = reader.length(_INT16)
            start = reader.at
            reader.skip(size)
            topic = bytes(reader.buf[start:reader.at]).decode("utf-8")
        records = 0
        for _ in range(reader.count(_INT32)):
            reader.skip(partition_fixed_bytes)
            if version >= 4:
                for _ in range(reader.count(_INT32)):
                    reader.skip(_ABORTED_TRANSACTION_BYTES)
                    reader.tagged_fields()
            if version >= 11:
                reader.skip(4)  # preferred_read_replica
            size = reader.length(_INT32)
            if size < -1:
                raise ValueError(f"records of length {size}")
            reader.skip(max(size, 0))
            records += max(size, 0)
            reader.tagged_fields()
        reader.tagged_fields()
        found[topic] = found.get(topic, 0) + records
    reader.tagged_fields()
    if reader.at != len(reader.buf):
        raise ValueError(f"{len(reader.buf) - reader.at} trailing bytes")
    return found
