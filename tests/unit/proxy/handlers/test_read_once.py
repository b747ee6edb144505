from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import Api, request_class
from protocol.errors import ProtocolError
from protocol.fetch import FIRST_WALKED_VERSION, fetch_asked
from protocol.header import RequestHeader
from protocol.refused_topics import metadata_named
from proxy.decision.footprint import OBJECT_BYTES, footprint
from proxy.handlers.read_once import BYTES_PER_BODY_BYTE, ENTRY_BYTES, ReadOnce
from tests.unit.protocol.schema_strategies import message_strategy


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
    reads: list[bytes] = []

    def read(frame: memoryview, header: RequestHeader) -> int:
        reads.append(bytes(frame[header.length:]))
        return len(frame)

    read_once = ReadOnce(read, max_bytes=4 * ENTRY_BYTES, body_bytes=8)
    for distinct in range(20):
        read_once(*request(1, bytes([distinct])))
        assert 0 < read_once.kept_bytes <= 4 * ENTRY_BYTES
    read_once(*request(1, bytes([19])))
    read_once(*request(1, bytes([0])))
    assert len(reads) == 21 and reads[-1] == bytes([0]), "the last kept, the first forgotten"

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


@settings(max_examples=300, deadline=None)
@given(data=st.data(), api_key=st.sampled_from([Api.FETCH, Api.METADATA]), version=st.integers(0, 15))
def test_a_fetchs_and_a_metadatas_reading_take_no_more_than_read_once_counts(data: st.DataObject, api_key: int,
                                                                               version: int) -> None:
    """The handlers' readings keep to ``ReadOnce``'s count (``BYTES_PER_BODY_BYTE``), which is not weighed each
    time: many empty names are the most a body can make them take."""
    if api_key == Api.FETCH:
        version = max(version, FIRST_WALKED_VERSION)
    elif version > 13:
        return
    message = data.draw(message_strategy(request_class(api_key), version))
    if data.draw(st.booleans()) and getattr(message, "topics", None):
        # many topics of the smallest names, or of the widest characters
        setattr(message.topics[0], "topic" if api_key == Api.FETCH else "name", data.draw(st.sampled_from(
            ["", "\U0001F600"])))
        message.topics = [message.topics[0]] * data.draw(st.integers(1, 60))
    body = bytes(message.encode(version=version))
    header = RequestHeader(api_key=api_key, api_version=version, correlation_id=1, client_id="c", length=0,
                           flexible=False)
    try:
        reading = fetch_asked(memoryview(body), header) if api_key == Api.FETCH else metadata_named(
            memoryview(body), version)
    except ProtocolError:
        return
    assert footprint((version, body)) + footprint(reading) <= ENTRY_BYTES + BYTES_PER_BODY_BYTE * len(body)
