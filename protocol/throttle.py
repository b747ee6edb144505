"""Raising ``throttle_time_ms`` in a response without re-encoding it.

Where the field sits comes from each response's schema (kafka-python's copies of Kafka's message JSON):
first in the body for most apis, after fixed-size fields for a few (OffsetDelete), after the ``responses``
array in Produce (v1+), which is walked (never decoded) to find it. A response whose field sits after a
variable-size part other than Produce's (ApiVersions, a few admin apis), or whose version has none, is not
patched: the client is muted all the same, as Kafka mutes a client too old to read the field (KIP-219).
Kafka's counterpart is each response's ``maybeSetThrottleTimeMs`` (``AbstractResponse``), a no-op where the
version has no field.
"""

from __future__ import annotations

from functools import cache
from struct import Struct

from protocol.apis import WITHOUT_SCHEMA, Api, is_flexible_request, response_class
from protocol.errors import ProtocolError
from protocol.framing import SIZE_PREFIX_BYTES
from protocol.header import read_uvarint, response_header_length, skip_tagged_fields

_INT16 = Struct(">h")
_INT32 = Struct(">i")
_THROTTLE_FIELD = "ThrottleTimeMs"
_FIXED_SIZES = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1, "uuid": 16, "float64": 8}
_WALKED = -1
"""Offset marker: the field follows a part that is walked (Produce's ``responses``)."""

@cache
def _throttle_place(api_key: int) -> tuple[int, int] | None:
    """(first version whose response has throttle_time_ms, its offset in the body or ``_WALKED``), or None."""
    if api_key in WITHOUT_SCHEMA:
        offset = WITHOUT_SCHEMA[api_key].throttle_offset
        return None if offset is None else (0, offset)
    try:
        fields = response_class(api_key).json["fields"]
    except KeyError:
        return None
    offset = 0
    for field in fields:
        if field["name"] == _THROTTLE_FIELD:
            return int(field["versions"].rstrip("+").split("-")[0]), offset
        size = _FIXED_SIZES.get(field["type"])
        if api_key == Api.PRODUCE:
            offset = _WALKED
        elif size is None or "-" in field["versions"] or field.get("taggedVersions"):
            return None  # after a part of variable size (or present in some versions only)
        else:
            offset += size
    return None


def may_stream_response(api_key: int) -> bool:
    """The API's responses may be forwarded as they arrive: a Fetch response, the one large answer whose throttle (the
    only thing the proxy may change in it, besides broker addresses) comes first in its body."""
    return api_key == Api.FETCH


def carries_throttle(api_key: int, api_version: int) -> bool:
    """That version's response has a throttle_time_ms the proxy can find."""
    place = _throttle_place(api_key)
    return place is not None and api_version >= place[0]


def raise_throttle_in_frame(api_key: int, api_version: int, frame: bytes, throttle_ms: int) -> bytes:
    """A whole response frame (size prefix included) with throttle_time_ms = max(current, ``throttle_ms``)."""
    if not carries_throttle(api_key, api_version):
        return frame
    header_length = SIZE_PREFIX_BYTES + response_header_length(memoryview(frame)[SIZE_PREFIX_BYTES:],
                                                                is_flexible_request(api_key, api_version))
    body = raise_throttle(api_key, api_version, memoryview(frame)[header_length:], throttle_ms)
    return frame if body is None else frame[:header_length] + body


def throttle_offset(api_key: int, api_version: int, body: bytes | memoryview) -> int | None:
    """Offset of throttle_time_ms in a response body, or None when that response has none the proxy can find."""
    place = _throttle_place(api_key)
    if place is None or api_version < place[0]:
        return None
    offset = place[1]
    if offset == _WALKED:
        try:
            offset = _ProduceResponseWalker(body, api_version).throttle_offset()
        except ProtocolError as error:
            raise ProtocolError(error.reason, api_key=api_key, api_version=api_version, offset=error.offset) from None
    if offset + 4 > len(body):
        raise ProtocolError("response ends before throttle_time_ms", api_key=api_key, api_version=api_version,
                            offset=offset)
    return offset


def raise_throttle(api_key: int, api_version: int, body: bytes | memoryview, throttle_ms: int) -> bytes | None:
    """The body with throttle_time_ms = max(current, ``throttle_ms``); None when nothing changes."""
    offset = throttle_offset(api_key, api_version, body)
    if offset is None:
        return None
    (current,) = _INT32.unpack_from(body, offset)
    if current >= throttle_ms:
        return None
    patched = bytearray(body)
    _INT32.pack_into(patched, offset, throttle_ms)
    return bytes(patched)


class _ProduceResponseWalker:
    """Skips over a Produce response's ``responses`` array (v1-v13), field by field."""

    __slots__ = ("buf", "pos", "version", "flexible")

    def __init__(self, buf: bytes | memoryview, version: int) -> None:
        self.buf, self.pos, self.version = buf, 0, version
        self.flexible = version >= 9

    def fail(self, reason: str) -> ProtocolError:
        return ProtocolError(reason, api_key=Api.PRODUCE, api_version=self.version, offset=self.pos)

    def skip(self, size: int) -> None:
        self.pos += size
        if self.pos > len(self.buf):
            raise self.fail("response truncated")

    def length(self, classic: Struct) -> int:
        if self.flexible:
            value, self.pos = read_uvarint(self.buf, self.pos)
            return value - 1
        self.skip(classic.size)
        return int(classic.unpack_from(self.buf, self.pos - classic.size)[0])

    def skip_string(self) -> None:
        self.skip(max(self.length(_INT16), 0))

    def skip_tagged(self) -> None:
        if self.flexible:
            self.pos = skip_tagged_fields(self.buf, self.pos)

    def throttle_offset(self) -> int:
        version = self.version
        for _ in range(max(self.length(_INT32), 0)):
            if version >= 13:
                self.skip(16)  # topic_id
            else:
                self.skip_string()
            for _ in range(max(self.length(_INT32), 0)):
                # index, error_code, base_offset, log_append_time_ms (v2+), log_start_offset (v5+)
                self.skip(4 + 2 + 8 + (8 if version >= 2 else 0) + (8 if version >= 5 else 0))
                if version >= 8:
                    for _ in range(max(self.length(_INT32), 0)):  # record_errors
                        self.skip(4)
                        self.skip_string()
                        self.skip_tagged()
                    self.skip_string()  # error_message
                self.skip_tagged()
            self.skip_tagged()
        return self.pos
