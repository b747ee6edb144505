from __future__ import annotations

import pytest

from protocol.errors import ProtocolError
from protocol.header import RequestHeader
from proxy.decision.footprint import OBJECT_BYTES, footprint
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

    read_once = ReadOnce(read, max_bytes=4096, body_bytes=8)
    for _ in range(3):
        assert read_once(*request(1, b"same")) == b"same"
    read_once(*request(2, b"same"))
    assert reads == [b"same", b"same"], "once for each version: the same bytes may say otherwise in another"
    kept = read_once.kept_bytes
    for _ in range(2):
        read_once(*request(1, b"nine byte"))
    assert reads[2:] == [b"nine byte"] * 2 and read_once.kept_bytes == kept


def test_the_readings_kept_take_so_many_bytes_at_most_and_what_fails_fails_each_time() -> None:
    read_once: ReadOnce[tuple[str, ...]] = ReadOnce(lambda frame, header: ("topic",) * len(frame), max_bytes=2048,
                                                    body_bytes=8)
    one = footprint((1, bytes(1))) + footprint(("topic",) * 11)
    for distinct in range(20):
        read_once(*request(1, bytes([distinct])))
        assert 0 < read_once.kept_bytes <= 2048
    assert read_once.kept_bytes < 20 * one, "forgotten when full"

    def unreadable(frame: memoryview, header: RequestHeader) -> int:
        raise ProtocolError("unreadable", api_key=header.api_key, api_version=header.api_version, offset=0)

    failing: ReadOnce[int] = ReadOnce(unreadable, max_bytes=2048, body_bytes=8)
    for _ in range(2):
        with pytest.raises(ProtocolError):
            failing(*request(1, b"bad"))
    assert failing.kept_bytes == 0


def test_a_readings_footprint_counts_each_object_and_its_characters() -> None:
    assert footprint(("ab", b"cd", 7, None)) == 5 * OBJECT_BYTES + 4 * 2 + 2
    assert footprint((("a",), True)) == OBJECT_BYTES + (2 * OBJECT_BYTES + 4) + OBJECT_BYTES
