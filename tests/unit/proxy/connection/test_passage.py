"""A frame's rest in passage: passed on read by read to its sink and its reader, or dropped, its end told once."""

from __future__ import annotations

import pytest

from proxy.connection.passage import Data, FramePassage


class Recorder:
    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.ends = 0

    def take(self, piece: Data) -> None:
        self.pieces.append(bytes(piece))

    def end(self) -> None:
        self.ends += 1


def test_the_frames_bytes_go_on_and_the_next_frames_come_back() -> None:
    sink, reader, ended = Recorder(), Recorder(), Recorder()
    passage = FramePassage()
    passage.begin(10, sink.take, ended.end, reader.take)
    assert passage.take(b"abcd") == b""
    assert passage.remaining == 6 and ended.ends == 0
    assert passage.take(b"efghij" + b"NEXT") == b"NEXT"
    assert sink.pieces == reader.pieces == [b"abcd", b"efghij"]
    assert passage.remaining == 0 and ended.ends == 1


def test_a_dropped_frame_reaches_no_sink_but_ends_all_the_same() -> None:
    reader, ended = Recorder(), Recorder()
    passage = FramePassage()
    passage.begin(5, None, ended.end, reader.take)
    assert passage.take(b"12345") == b""
    assert reader.pieces == [b"12345"] and ended.ends == 1


def test_bytes_moved_in_the_kernel_count_and_the_end_is_told_when_the_last_has_gone() -> None:
    sink, ended = Recorder(), Recorder()
    passage = FramePassage()
    passage.begin(100, sink.take, ended.end)
    passage.take(b"x" * 10)
    passage.went_by(90)
    assert passage.remaining == 0 and ended.ends == 0, "the kernel may not have written the last bytes yet"
    passage.finish()
    assert ended.ends == 1 and sink.pieces == [b"x" * 10]


def test_one_frame_at_a_time_and_each_end_told_once() -> None:
    ended = Recorder()
    passage = FramePassage()
    passage.begin(3, None, ended.end)
    with pytest.raises(AssertionError):
        passage.begin(3, None, ended.end)
    with pytest.raises(AssertionError):
        passage.finish()  # 3 bytes still to come
    passage.take(b"abc")
    passage.begin(1, None, ended.end)  # the next frame
    passage.take(b"d")
    assert ended.ends == 2


def test_a_piece_its_reader_refuses_never_goes_on() -> None:
    """A Produce request cut through whose last piece the scan finds malformed (bytes Kafka ignores after it, say)
    must not reach the cluster whole: it would append the records the quotas never charged."""
    sink, ended = Recorder(), Recorder()

    def refusing_the_end(piece: Data) -> None:
        if bytes(piece).endswith(b"!"):
            raise ValueError("malformed")

    passage = FramePassage()
    passage.begin(8, sink.take, ended.end, refusing_the_end)
    passage.take(b"abcd")
    with pytest.raises(ValueError):
        passage.take(b"efg!")
    assert sink.pieces == [b"abcd"] and ended.ends == 0
