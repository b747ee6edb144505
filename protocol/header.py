"""Request and response headers, read from a frame without copying its body."""

from __future__ import annotations

from struct import Struct
from typing import NamedTuple

from protocol.apis import Api, is_flexible_request
from protocol.errors import ProtocolError

_REQUEST_PREFIX = Struct(">hhi")
_API_KEY_AND_VERSION = Struct(">hh")
_REQUEST_START = Struct(">hhih")
"""The prefix and the client id's length."""
_INT32 = Struct(">i")
REQUEST_PREFIX_BYTES = _REQUEST_PREFIX.size


class RequestPrefix(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    length: int
    """Header bytes, so the body starts at this offset of the frame (size prefix excluded)."""
    flexible: bool


def peek_request(frame: bytes | bytearray | memoryview, offset: int = 0) -> RequestPrefix:
    """The fixed first eight bytes of a request: enough to route an opaque frame."""
    return RequestPrefix._make(_REQUEST_PREFIX.unpack_from(frame, offset))


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ProtocolError("truncated varint", offset=pos)
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("varint longer than 5 bytes", offset=pos)


def skip_tagged_fields(buf: bytes | memoryview, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ProtocolError("tagged field runs past the end", offset=pos)
    return pos


def parse_request_header(frame: bytes | memoryview, flexible: bool) -> RequestHeader:
    """Parse a request header (v1, or v2 when ``flexible``); ``frame`` excludes the size prefix."""
    if len(frame) < _REQUEST_START.size:
        raise ProtocolError("request header truncated", offset=len(frame))
    # client_id stays a classic int16-length string even in header v2
    api_key, api_version, correlation_id, client_id_length = _REQUEST_START.unpack_from(frame, 0)
    pos = _REQUEST_START.size
    client_id = None
    if client_id_length >= 0:
        end = pos + client_id_length
        if end > len(frame):
            raise ProtocolError("client_id runs past the end", api_key=api_key, api_version=api_version,
                                offset=pos)
        client_id = str(frame[pos:end], "utf-8", "replace")
        pos = end
    elif client_id_length != -1:
        raise ProtocolError(f"negative client_id length {client_id_length}", api_key=api_key,
                            api_version=api_version, offset=pos - 2)
    if flexible:
        if pos < len(frame) and frame[pos] == 0:
            pos += 1  # no tagged field: every client's header
        else:
            try:
                pos = skip_tagged_fields(frame, pos)
            except ProtocolError as error:
                raise ProtocolError(error.reason, api_key=api_key, api_version=api_version,
                                    offset=error.offset) from None
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos, flexible)


def peek_client_id(frame: bytes | memoryview) -> str:
    """A request's client id ("" when null), whatever its api: it comes before the tagged fields in every
    header version, so no schema is needed."""
    return parse_request_header(frame, flexible=False).client_id or ""


def read_request_header(frame: bytes | memoryview) -> RequestHeader:
    """Parse the header of a request whose api key and version have a known schema."""
    return parse_request_header(frame, is_flexible_request(*_API_KEY_AND_VERSION.unpack_from(frame, 0)))


def response_header_length(frame: bytes | memoryview, flexible: bool) -> int:
    """Bytes of a response header (v0: correlation id; v1 adds tagged fields)."""
    if len(frame) < 4:
        raise ProtocolError("response header truncated", offset=len(frame))
    return skip_tagged_fields(frame, 4) if flexible else 4


def response_correlation_id(frame: bytes | memoryview, offset: int = 0) -> int:
    return int(_INT32.unpack_from(frame, offset)[0])


def response_header_for(api_key: int, request_flexible: bool, correlation_id: int) -> bytes:
    """The header a broker puts on the response to a request (ApiVersions: always v0)."""
    return encode_response_header(correlation_id, request_flexible and api_key != Api.API_VERSIONS)


def encode_response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0, or v1 with an empty tagged-field section (ApiVersions is always v0)."""
    header = _INT32.pack(correlation_id)
    return header + b"\x00" if flexible else header
