from __future__ import annotations

import pytest

from protocol.errors import ProtocolError
from protocol.header import RequestHeader
from proxy.handlers.read_once import ReadOnce


def request(version: int, body: bytes) -> tuple[memoryview, RequestHeader]:
    header = RequestHeader(api_key=3, api_version=version, correlation_id=1, client_id="c", length=10,
                           flexible=False)
    return memoryview(bytes(10) + body), header


def test_a_body_is_read_once_per_version_and_a_large_one_each_time() -> None:
    reads: list[bytes] = []

    def read(frame: memoryview, header: RequestHeader) -> bytes:
        reads.append(bytes(frame[header.length:]))
        return bytes(frame[header.length:])

    read_once = ReadOnce(read, bodies=4, body_bytes=8)
    for _ in range(3):
        assert read_once(*request(1, b"same")) == b"same"
    read_once(*request(2, b"same"))
    assert reads == [b"same", b"same"], "once for each version: the same bytes may say otherwise in another"
    for _ in range(2):
        read_once(*request(1, b"nine bytes"[:9]))
    assert reads[2:] == [b"nine byte"] * 2 and len(read_once) == 2


def test_at_most_so_many_bodies_are_remembered_and_what_fails_fails_each_time() -> None:
    read_once: ReadOnce[int] = ReadOnce(lambda frame, header: len(frame), bodies=3, body_bytes=8)
    for distinct in range(10):
        read_once(*request(1, bytes([distinct])))
        assert len(read_once) <= 3

    def unreadable(frame: memoryview, header: RequestHeader) -> int:
        raise ProtocolError("unreadable", api_key=header.api_key, api_version=header.api_version, offset=0)

    failing: ReadOnce[int] = ReadOnce(unreadable, bodies=3, body_bytes=8)
    for _ in range(2):
        with pytest.raises(ProtocolError):
            failing(*request(1, b"bad"))
    assert len(failing) == 0
