"""Walking a message body field by field without decoding it: lengths, counts and tagged fields (compact in
flexible versions), the rest passed over. For the answers the proxy reads a few fields of on every request (a Fetch
response's record sizes per topic, whether a Produce answer names brokers); the common one-byte lengths and empty
tagged fields are read in place."""

from __future__ import annotations

from struct import Struct

from protocol.header import read_uvarint, skip_tagged_fields


class BodyReader:
    """Where a walk over ``buf`` stands (``at``). Reading past the end raises ValueError or IndexError (the
    caller names the message), a truncated varint or tagged field ProtocolError."""

    __slots__ = ("buf", "at", "flexible")

    def __init__(self, buf: bytes | memoryview, flexible: bool) -> None:
        self.buf = buf
        self.at = 0
        self.flexible = flexible

    def skip(self, size: int) -> None:
        if size < 0 or self.at + size > len(self.buf):
            raise ValueError(f"a field of {size} bytes runs past the end")
        self.at += size

    def uvarint(self) -> int:
        byte = self.buf[self.at]
        if byte < 0x80:
            self.at += 1
            return int(byte)
        value, self.at = read_uvarint(self.buf, self.at)
        return value

    def length(self, classic: Struct) -> int:
        """A string, bytes or array length, -1 for null."""
        if self.flexible:
            return self.uvarint() - 1
        if self.at + classic.size > len(self.buf):
            raise ValueError("a length runs past the end")
        (value,) = classic.unpack_from(self.buf, self.at)
        self.at += classic.size
        return int(value)

    def count(self, classic: Struct) -> int:
        """An array's length, 0 for null."""
        count = self.length(classic)
        if count < -1:
            raise ValueError(f"an array of length {count}")
        return max(count, 0)

    def skip_string(self, classic: Struct) -> None:
        """Past a (nullable) string or bytes field."""
        self.skip(max(self.length(classic), 0))

    def tagged_fields(self) -> None:
        if not self.flexible:
            return
        if self.buf[self.at] == 0:
            self.at += 1
        else:
            self.at = skip_tagged_fields(self.buf, self.at)
