"""Fetch requests and responses as a consumer byte-rate quota sees them, without decoding either.

The request body starts with fixed fields: ``replica_id`` (v0-14; v15+ moved it into a tagged
field), ``max_wait_ms``, ``min_bytes`` and, from v3, ``max_bytes``. Kafka caps ``max_bytes`` (and
``min_bytes`` with it) to what the consumer's quota window allows (``KafkaApis.handleFetchRequest``),
and charges a response ``4 + body size`` (``FetchResponse.sizeOf``).
"""

from __future__ import annotations

from struct import Struct

from protocol.errors import ProtocolError
from protocol.header import RequestHeader, response_header_length

_INT32 = Struct(">i")
FIRST_MAX_BYTES_VERSION = 3
FIRST_VERSION_WITHOUT_REPLICA_ID = 15


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


def _check_fixed_fields(frame: bytes | memoryview, header: RequestHeader) -> None:
    end = _min_bytes_offset(header) + (8 if header.api_version >= FIRST_MAX_BYTES_VERSION else 4)
    if len(frame) < end:
        raise ProtocolError("fetch request ends before its fixed fields", api_key=header.api_key,
                            api_version=header.api_version, offset=len(frame))


def fetch_response_size(start: bytes | memoryview, frame_bytes: int, flexible: bool) -> int:
    """What Kafka charges a consumer for a response of ``frame_bytes`` (header included, no size
    prefix), from its ``start`` (at least its header): the response may still be arriving."""
    return frame_bytes - response_header_length(start, flexible) + 4
