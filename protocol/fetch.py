"""Fetch requests and responses as a consumer byte-rate quota sees them, without decoding either.

The request body starts with fixed fields: ``replica_id`` (v0-14; v15+ moved it into a tagged
field), ``max_wait_ms``, ``min_bytes``, from v3 ``max_bytes``, from v4 ``isolation_level`` and from v7
the fetch session's ``session_id`` and ``session_epoch`` (KIP-227). Kafka caps ``max_bytes`` (and
``min_bytes`` with it) to what the consumer's quota window allows (``KafkaApis.handleFetchRequest``),
charges a response ``4 + body size`` (``FetchResponse.sizeOf``), and answers a fetch it throttles with
no partitions at all (``FetchContext.getThrottledResponse``).
"""

from __future__ import annotations

from struct import Struct
from typing import NamedTuple

from protocol.apis import Api
from protocol.codecs import encode_response
from protocol.errors import ProtocolError
from protocol.header import RequestHeader, response_header_length

_INT32 = Struct(">i")
_THROTTLE_ERROR_SESSION = Struct(">ihi")
FIRST_MAX_BYTES_VERSION = 3
FIRST_SESSION_VERSION = 7
FIRST_VERSION_WITHOUT_REPLICA_ID = 15
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
