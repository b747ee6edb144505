from __future__ import annotations

import struct
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import ProtocolError
from protocol.framing import FrameSplitter
from tests.fuzz.targets import read_as_a_connection


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@given(payloads=st.lists(st.binary(min_size=8, max_size=300), max_size=20),
       cuts=st.lists(st.integers(min_value=0, max_value=7000), max_size=30))
def test_frames_survive_any_chunking(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frame(p) for p in payloads)
    points = sorted({c for c in cuts if c < len(stream)} | {0, len(stream)})
    splitter = FrameSplitter(max_frame_bytes=1000, min_frame_bytes=8)
    received: list[bytes] = []
    for start, end in zip(points, points[1:], strict=False):
        chunk, ends = splitter.feed(stream[start:end])
        begin = 0
        for frame_end in ends:
            received.append(chunk[begin + 4:frame_end])
            begin = frame_end
        assert begin == len(chunk)
    assert received == payloads
    assert splitter.buffered_bytes == 0


def test_whole_chunk_is_passed_through_without_copy() -> None:
    data = frame(b"a" * 10) + frame(b"b" * 12)
    chunk, ends = FrameSplitter(100, 8).feed(data)
    assert chunk is data
    assert list(ends) == [14, 30]


@pytest.mark.parametrize("size", [-1, -(2**31), 7, 101, 2**31 - 1])
def test_sizes_outside_the_bounds_are_rejected(size: int) -> None:
    with pytest.raises(ProtocolError, match="frame size"):
        FrameSplitter(100, 8).feed(struct.pack(">i", size) + b"x" * 8)


def test_partial_frame_is_kept_until_complete() -> None:
    splitter = FrameSplitter(100, 8)
    data = frame(b"0123456789")
    chunk, ends = splitter.feed(data[:5])
    assert (chunk, list(ends)) == (b"", [])
    assert splitter.buffered_bytes == 5
    chunk, ends = splitter.feed(data[5:])
    assert (chunk, list(ends)) == (data, [len(data)])


def test_partial_frame_can_be_handed_over() -> None:
    splitter = FrameSplitter(1 << 20, 8)
    data = frame(b"h" * 1000)
    assert splitter.partial_frame(100) is None
    splitter.feed(data[:300])
    assert splitter.partial_frame(100) == (data[:100], len(data))
    splitter.feed(data[300:310])  # the copy pins nothing: the buffer can still grow
    assert splitter.take_partial_frame() == data[:310]
    assert splitter.buffered_bytes == 0


@pytest.mark.parametrize("read_whole", [False, True])
def test_a_discarded_partial_frame_is_gone(read_whole: bool) -> None:
    splitter = FrameSplitter(1 << 20, 8)
    splitter.feed(frame(b"h" * 1000)[:300])
    if read_whole:
        splitter.read_whole()
    splitter.discard()
    assert splitter.buffered_bytes == 0 and splitter.frame_space() is None and splitter.partial_frame(4) is None


def read_into_frame(splitter: FrameSplitter, data: bytes, read_size: int) -> list[tuple[bytes | bytearray, list[int]]]:
    """``data`` read as a BufferedProtocol reads it (``read_as_a_connection``): the reads that completed frames."""
    return [(chunk, list(ends)) for _, chunk, ends in read_as_a_connection(splitter, data, read_size) if len(ends)]


def test_a_frame_read_whole_is_read_into_one_buffer_of_its_size() -> None:
    splitter = FrameSplitter(1 << 20, 8)
    big, small = frame(bytes(range(256)) * 40), frame(b"s" * 9)
    splitter.feed(big[:100])
    splitter.read_whole()
    space = splitter.frame_space()
    assert space is not None and len(space) == len(big) - 100  # no further than the frame's end
    assert splitter.partial_frame(50) is None  # it is no longer cut through
    assert read_into_frame(splitter, big[100:] + small, 1000) == [(bytearray(big), [len(big)]), (small, [len(small)])]
    assert splitter.frame_space() is None and splitter.buffered_bytes == 0


@given(payloads=st.lists(st.binary(min_size=8, max_size=3000), min_size=1, max_size=8),
       whole_at=st.integers(min_value=0, max_value=20000), read_size=st.integers(min_value=1, max_value=5000),
       fed=st.booleans())
def test_frames_read_whole_survive_any_reads(payloads: list[bytes], whole_at: int, read_size: int,
                                             fed: bool) -> None:
    """Whenever an incomplete frame is read whole, and whether its rest is read into its buffer or fed (a
    transport that reads into buffers of its own), every frame comes out once, in order."""
    stream = b"".join(frame(p) for p in payloads)
    splitter = FrameSplitter(max_frame_bytes=5000, min_frame_bytes=8)
    whole_at = min(whole_at, len(stream))
    chunks = [splitter.feed(stream[:whole_at])]
    splitter.read_whole()
    if fed:
        chunks += [splitter.feed(stream[at:at + read_size]) for at in range(whole_at, len(stream), read_size)]
    else:
        chunks += [(chunk, array("q", ends)) for chunk, ends in read_into_frame(splitter, stream[whole_at:], read_size)]
    received = []
    for chunk, ends in chunks:
        begin = 0
        for end in ends:
            received.append(bytes(chunk[begin + 4:end]))
            begin = end
        assert begin == len(chunk)
    assert received == payloads
    assert splitter.buffered_bytes == 0 and splitter.frame_space() is None
