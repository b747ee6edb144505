"""What a small request says, read once per body: clients send the same requests again and again (an idle consumer
its fetch, every client its Metadata), and reading each again would find the same."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from protocol.header import RequestHeader
from proxy.decision.footprint import OBJECT_BYTES

Reading = TypeVar("Reading")

ENTRY_BYTES = 8 * OBJECT_BYTES
"""What a body kept and its reading take besides ``BYTES_PER_BODY_BYTE``: the key's objects (a tuple, the version,
the body's bytes object) and a reading's own fields."""
BYTES_PER_BODY_BYTE = OBJECT_BYTES // 2 + 4 + 1
"""What a body kept and its reading take for each byte of the body, at most (``footprint``): each further object of
a reading comes from two of the body's bytes or more (a name's length and what follows it), each of its characters
(up to 4 bytes) from one, and the body is kept itself. Counted so, a reading is never walked to be weighed: a fetch
read once for each new offset costs no more than reading it."""


class ReadOnce(Generic[Reading]):
    """``read`` of a request, remembered by its version and body when the body is at most ``body_bytes``, and
    forgotten all at once when the bodies and readings kept would take more than ``max_bytes`` (counted as
    ``ENTRY_BYTES`` and ``BYTES_PER_BODY_BYTE``): a client sending ever new ones just has each read. ``read`` must
    depend on nothing else, its readings must not change (each is handed to every request of the same body) and
    must hold no more than those bytes count; what it raises is raised each time."""

    __slots__ = ("_read", "_max_bytes", "_body_bytes", "_bytes", "_readings")

    def __init__(self, read: Callable[[memoryview, RequestHeader], Reading], max_bytes: int, body_bytes: int) -> None:
        self._read = read
        self._max_bytes = max_bytes
        self._body_bytes = body_bytes
        self._bytes = 0
        self._readings: dict[tuple[int, bytes], Reading] = {}

    def __call__(self, frame: memoryview, header: RequestHeader) -> Reading:
        if len(frame) - header.length > self._body_bytes:
            return self._read(frame, header)
        key = (header.api_version, bytes(frame[header.length:]))
        readings = self._readings
        try:
            return readings[key]
        except KeyError:
            pass
        reading = self._read(frame, header)
        size = ENTRY_BYTES + BYTES_PER_BODY_BYTE * len(key[1])
        if self._bytes + size > self._max_bytes:
            readings.clear()
            self._bytes = 0
        readings[key] = reading
        self._bytes += size
        return reading

    @property
    def kept_bytes(self) -> int:
        """What the bodies and readings kept take, at most (as ``ENTRY_BYTES`` and ``BYTES_PER_BODY_BYTE`` count)."""
        return self._bytes
