"""Raising ``throttle_time_ms`` in a response without re-encoding it.

The field is the first of the body for Fetch (v1+), CreateTopics (v2+), DeleteTopics (v1+), CreatePartitions,
InitProducerId and AllocateProducerIds; in Produce (v1+) it follows the ``responses`` array, which
is walked (never decoded) to find it. SPEC §1.
"""

from __future__ import annotations

from struct import Struct

from protocol.apis import Api
from protocol.errors import ProtocolError
from protocol.header import read_uvarint, skip_tagged_fields

_INT16 = Struct(">h")
_INT32 = Struct(">i")

# api key -> first version whose response body starts with throttle_time_ms
_LEADING_THROTTLE: dict[int, int] = {Api.FETCH: 1, Api.CREATE_TOPICS: 2, Api.DELETE_TOPICS: 1,
                                     Api.CREATE_PARTITIONS: 0, Api.INIT_PRODUCER_ID: 0, Api.ALLOCATE_PRODUCER_IDS: 0}
_FIRST_PRODUCE_THROTTLE_VERSION = 1


def throttle_offset(api_key: int, api_version: int, body: bytes | memoryview) -> int | None:
    """Offset of throttle_time_ms in a response body, or None when that version has none."""
    first = _LEADING_THROTTLE.get(api_key)
    if first is not None:
        if api_version < first:
            return None
        offset = 0
    elif api_key == Api.PRODUCE:
        if api_version < _FIRST_PRODUCE_THROTTLE_VERSION:
            return None
        try:
            offset = _ProduceResponseWalker(body, api_version).throttle_offset()
        except ProtocolError as error:
            raise ProtocolError(error.reason, api_key=api_key, api_version=api_version, offset=error.offset) from None
    else:
        raise ProtocolError("no throttle patching for this api", api_key=api_key, api_version=api_version)
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
