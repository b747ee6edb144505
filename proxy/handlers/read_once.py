"""What a small request says, read once per body: clients send the same requests again and again (an idle consumer
its fetch, every client its Metadata), and reading each again would find the same."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from protocol.header import RequestHeader

Reading = TypeVar("Reading")


class ReadOnce(Generic[Reading]):
    """``read`` of a request, remembered by its version and body when the body is at most ``body_bytes``: at most
    ``bodies`` of them, forgotten all at once when full (a client sending ever new ones just has each read). ``read``
    must depend on nothing else; what it raises is raised each time."""

    __slots__ = ("_read", "_bodies", "_body_bytes", "_readings")

    def __init__(self, read: Callable[[memoryview, RequestHeader], Reading], bodies: int, body_bytes: int) -> None:
        self._read = read
        self._bodies = bodies
        self._body_bytes = body_bytes
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
        if len(readings) >= self._bodies:
            readings.clear()
        reading = readings[key] = self._read(frame, header)
        return reading

    def __len__(self) -> int:
        """How many readings are remembered."""
        return len(self._readings)
