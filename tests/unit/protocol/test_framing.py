from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import ProtocolError
from protocol.framing import FrameSplitter


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
