"""Fetch requests and responses as a consumer byte-rate quota sees them, without decoding either.

The request body starts with fixed fields: ``replica_id`` (v0-14; v15+ moved it into a tagged
field), ``max_wait_ms``, ``min_bytes``, from v3 ``max_bytes``, from v4 ``isolation_level`` and from v7
the fetch session's ``session_id`` and ``session_epoch`` (KIP-227). Kafka caps ``max_bytes`` (and
``min_bytes`` with it) to what the consumer's quota window allows (``KafkaApis.handleFetchRequest``),
charges a response ``4 + body size`` (``FetchResponse.sizeOf``), and answers a fetch it throttles with
no partitions at all (``FetchContext.getThrottledResponse``).
"""

from __future__ import annotations

import struct
from struct import Struct
from typing import NamedTuple

from protocol.apis import Api
from protocol.body_reader import BodyReader
from protocol.codecs import encode_response
from protocol.errors import ProtocolError
from protocol.header import RequestHeader, read_uvarint, response_header_length

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


def sessionless_fetch_request(frame: bytes | memoryview, header: RequestHeader) -> bytes:
    """The request (v7+, no size prefix) as a full fetch outside any session (``session_id`` 0, ``session_epoch``
    ``NO_SESSION_EPOCH``: the cluster opens none)."""
    if header.api_version < FIRST_SESSION_VERSION:
        raise ValueError(f"a fetch v{header.api_version} has no session")
    epoch_offset = _min_bytes_offset(header) + _SESSION_EPOCH_AFTER_MIN_BYTES
    _check_length(frame, header, epoch_offset + 4)
    patched = bytearray(frame)
    _INT32.pack_into(patched, epoch_offset - 4, 0)
    _INT32.pack_into(patched, epoch_offset, NO_SESSION_EPOCH)
    return bytes(patched)


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


TopicRef = str | bytes
"""A topic as a Fetch names it: its name (until v12) or its 16-byte id (v13 on)."""


class FetchAsked(NamedTuple):
    """Who a Fetch request says it is, and what it asks for."""

    replica_id: int
    """Kafka's ``FetchRequest.replicaId``: a follower's broker id (0 or more), or a consumer's -1 (-2 for a
    debugging one); from v15 in the tagged ``ReplicaState``."""
    topics: tuple[TopicRef, ...]
    """In the request's order (a fetch session's incremental request may name none: the session holds them)."""
    session_id: int
    """Its fetch session's (KIP-227, v7+): 0 outside any, and before v7."""
    session_epoch: int
    """Above 0 for an incremental fetch in a session, 0 for a full fetch opening one, ``NO_SESSION_EPOCH`` outside
    sessions (or closing one), and before v7."""

    @property
    def outside_any_session(self) -> bool:
        """A full fetch opening no session, which the cluster answers for its named partitions alone."""
        return self.session_id == 0 and self.session_epoch == NO_SESSION_EPOCH


def fetch_asked(frame: bytes | memoryview, header: RequestHeader) -> FetchAsked:
    """What a Fetch request says of itself, read from its bytes as Kafka reads them (``_walked_fetch``); raises
    ``ProtocolError`` for one that does not read as Kafka lays it out, or of a version the proxy does not offer:
    Kafka may read such a request otherwise than a decoder would (kafka-python reads a varint past 2^31 whole, where
    Kafka cuts it to an int: a tag 2^32 + 1 is a ReplicaState to Kafka), and no client writes one."""
    version = header.api_version
    body = frame[header.length:]
    walked = _walked_fetch(body if isinstance(body, memoryview) else memoryview(body), version)
    if walked is None:
        raise ProtocolError("fetch request unreadable as Kafka reads it", api_key=Api.FETCH, api_version=version,
                            offset=header.length)
    return walked


_LAST_WALKED_VERSION = 15
"""Fetch v16+ is not offered (``FETCH_VERSION_CEILING``); Kafka 4.3 reads no version before v4."""
_MAX_STRING_BYTES = 0x7FFF
"""Kafka's generated readers refuse a longer string."""
_CLUSTER_ID_TAG, _REPLICA_STATE_TAG = 0, 1
_PARTITION_TAGS_OF_LATER_VERSIONS = frozenset({0, 1})
"""A partition's ReplicaDirectoryId (v17+) and HighWatermark (v18+): Kafka refuses an earlier request with them."""
_REPLICA_STATE = Struct(">iq")
_SESSION = Struct(">ii")
"""``session_id`` and ``session_epoch``, just before the topics."""
_INT32_MAX = 0x7FFFFFFF


def _walked_fetch(body: memoryview, version: int) -> FetchAsked | None:
    """Who a Fetch request (v4-15) says it is, the topics it asks for and its session, read from its bytes without
    decoding it; None for one that does not read as Kafka's ``FetchRequestData`` lays it out (cut short, bytes after
    it, a null where Kafka refuses one, a string Kafka refuses, a varint past an int32, a tag Kafka refuses at this
    version), or where Kafka would read it otherwise than its sizes say. Kafka reads the tagged fields it knows
    (ClusterId, ReplicaState) by their type, not by the size they declare: a walk skipping them by their size could
    see another replica id, or other topics, than the broker parses; one whose size disagrees with its type is not
    read."""
    layout = _WALK_LAYOUTS.get(version)
    if layout is None:
        return None
    flexible, by_id, partition_bytes, pos = layout
    try:
        replica_id = -1
        if version < FIRST_VERSION_WITHOUT_REPLICA_ID:
            (replica_id,) = _INT32.unpack_from(body, 0)
        session_id, session_epoch = _SESSION.unpack_from(body, pos - _SESSION.size) if (
            version >= FIRST_SESSION_VERSION) else (0, NO_SESSION_EPOCH)
        topics: list[TopicRef] = []
        count, pos = _array_length(body, pos, flexible)
        for _ in range(count):
            topic, pos = _topic_id(body, pos) if by_id else _string(body, pos, flexible)
            topics.append(topic)
            partitions, pos = _array_length(body, pos, flexible)
            if not flexible:
                pos += partitions * partition_bytes
                continue
            for _ in range(partitions):
                pos = _past_unknown_tags(body, pos + partition_bytes, _PARTITION_TAGS_OF_LATER_VERSIONS)
            pos = _past_unknown_tags(body, pos)
        if version >= FIRST_SESSION_VERSION:  # forgotten_topics_data
            count, pos = _array_length(body, pos, flexible)
            for _ in range(count):
                _, pos = _topic_id(body, pos) if by_id else _string(body, pos, flexible)
                partitions, pos = _array_length(body, pos, flexible)
                pos += 4 * partitions
                if flexible:
                    pos = _past_unknown_tags(body, pos)
        if version >= _FIRST_RACK_ID_VERSION:
            _, pos = _string(body, pos, flexible)
        if flexible:
            replica_state_id, pos = _past_request_tags(body, pos, version)
            if replica_state_id is not None:
                replica_id = replica_state_id
    except (IndexError, ValueError, UnicodeDecodeError, ProtocolError, struct.error, _Unwalkable):
        return None
    return FetchAsked(int(replica_id), tuple(topics), session_id, session_epoch) if pos == len(body) else None


FIRST_WALKED_VERSION = 4


def _walk_layout(version: int) -> tuple[bool, bool, int, int]:
    """Whether the version is flexible, whether it names topics by id, a partition's bytes (partition,
    current_leader_epoch (v9+), fetch_offset, last_fetched_epoch (v12+), log_start_offset (v5+), partition_max_bytes),
    and where the topics start (after replica_id (until v14), max_wait_ms, min_bytes, max_bytes, isolation_level, and
    session_id and session_epoch (v7+))."""
    flexible = version >= FIRST_FLEXIBLE_FETCH_VERSION
    partition_bytes = 4 + (4 if version >= 9 else 0) + 8 + (4 if flexible else 0) + (8 if version >= 5 else 0) + 4
    topics_at = (4 if version < FIRST_VERSION_WITHOUT_REPLICA_ID else 0) + 13 + (
        8 if version >= FIRST_SESSION_VERSION else 0)
    return flexible, version >= FIRST_TOPIC_ID_FETCH_VERSION, partition_bytes, topics_at


_WALK_LAYOUTS = {version: _walk_layout(version) for version in range(FIRST_WALKED_VERSION, _LAST_WALKED_VERSION + 1)}
_FIRST_RACK_ID_VERSION = 11


class _Unwalkable(Exception):
    """A request the walk does not read (``fetch_asked`` refuses it)."""


def _uvarint(body: memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint as Kafka reads it into an int: past 2^31 - 1 it would be negative (or cut to 32 bits)."""
    byte = body[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, pos = read_uvarint(body, pos)
    if value > _INT32_MAX:
        raise _Unwalkable
    return value, pos


def _length(body: memoryview, pos: int, flexible: bool, classic: Struct) -> tuple[int, int]:
    """A string's or an array's length (compact in flexible versions), -1 for null."""
    if flexible:
        length, pos = _uvarint(body, pos)
        return length - 1, pos
    (length,) = classic.unpack_from(body, pos)
    return length, pos + classic.size


def _array_length(body: memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """A non-nullable array's length (Kafka refuses a null one)."""
    length, pos = _length(body, pos, flexible, _INT32)
    if length < 0:
        raise _Unwalkable
    return length, pos


def _string(body: memoryview, pos: int, flexible: bool) -> tuple[str, int]:
    """A non-nullable string, as Kafka reads it."""
    length, pos = _length(body, pos, flexible, _INT16)
    end = pos + length
    if not 0 <= length <= _MAX_STRING_BYTES or end > len(body):
        raise _Unwalkable
    return str(body[pos:end], "utf-8"), end


def _topic_id(body: memoryview, pos: int) -> tuple[bytes, int]:
    end = pos + TOPIC_ID_BYTES
    if end > len(body):
        raise _Unwalkable
    return bytes(body[pos:end]), end


def _past_unknown_tags(body: memoryview, pos: int, refused_tags: frozenset[int] = frozenset()) -> int:
    """Past a struct's tagged fields, none of which Kafka reads by its type at this version; ``refused_tags``: those
    Kafka refuses at it."""
    count, pos = _uvarint(body, pos)
    for _ in range(count):
        tag, pos = _uvarint(body, pos)
        if tag in refused_tags:
            raise _Unwalkable
        size, pos = _uvarint(body, pos)
        pos += size
    return pos


def _past_request_tags(body: memoryview, pos: int, version: int) -> tuple[int | None, int]:
    """Past the request's tagged fields: the replica id of its last ReplicaState (Kafka keeps the last), None
    without one. A field Kafka reads by its type that disagrees with its size, or a ReplicaState before v15 (which
    Kafka refuses), is not read."""
    replica_id = None
    count, pos = _uvarint(body, pos)
    for _ in range(count):
        tag, pos = _uvarint(body, pos)
        size, start = _uvarint(body, pos)
        if tag == _CLUSTER_ID_TAG:  # a nullable string
            length, pos = _uvarint(body, start)
            if length - 1 > _MAX_STRING_BYTES:
                raise _Unwalkable
            pos += max(length - 1, 0)
        elif tag == _REPLICA_STATE_TAG:
            if version < FIRST_VERSION_WITHOUT_REPLICA_ID:
                raise _Unwalkable
            replica_id = int(_REPLICA_STATE.unpack_from(body, start)[0])
            pos = _past_unknown_tags(body, start + _REPLICA_STATE.size)
        else:
            pos = start + size
        if pos - start != size:
            raise _Unwalkable
    return replica_id, pos


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
