"""Splitting a byte stream into size-prefixed Kafka frames."""

from __future__ import annotations

from array import array
from struct import Struct
from typing import TypeAlias

from protocol.errors import ProtocolError

_SIZE = Struct(">i")
SIZE_PREFIX_BYTES = 4
FrameEnds: TypeAlias = "array[int]"
"""The end offsets of the frames in a chunk, 8 bytes each: a read of small requests holds tens of thousands
of them, for as long as its requests wait (a list of ints takes 36 bytes an end, more than a Metadata request)."""


class FrameSplitter:
    """Accumulates stream bytes and hands out complete frames (size prefix included).

    ``feed`` returns one immutable chunk holding zero or more whole frames back to back, plus the
    end offset of each frame inside it (``FrameEnds``), so a caller forwarding frames untouched can write the chunk
    as it is. Only an incomplete trailing frame is kept, bounded by ``max_frame_bytes``.

    A large frame its caller reads whole can instead be read straight into one buffer of its size
    (``read_whole``, ``frame_space``, ``frame_filled``): its bytes are copied once, from the socket, rather than
    gathered read by read and copied out again when whole.
    """

    __slots__ = ("_pending", "max_frame_bytes", "_min_frame_bytes", "_frame", "_filled")

    def __init__(self, max_frame_bytes: int, min_frame_bytes: int) -> None:
        self._pending = bytearray()
        self.max_frame_bytes = max_frame_bytes
        """Frames announcing more are refused (it may change between frames, e.g. at a login)."""
        self._min_frame_bytes = min_frame_bytes
        self._frame: bytearray | None = None
        """The incomplete frame being read whole (``read_whole``), its first ``_filled`` bytes read."""
        self._filled = 0

    @property
    def buffered_bytes(self) -> int:
        return len(self._pending) if self._frame is None else self._filled

    def read_whole(self) -> None:
        """The incomplete frame at hand (its size known) is read into a buffer of its own size from now on: the
        caller reads into ``frame_space`` and reports with ``frame_filled`` (``feed`` fills it too)."""
        if self._frame is not None or len(self._pending) < SIZE_PREFIX_BYTES:
            return
        (size,) = _SIZE.unpack_from(self._pending, 0)  # checked against the bounds by ``feed``
        self._frame = bytearray(SIZE_PREFIX_BYTES + size)
        self._filled = len(self._pending)
        self._frame[:self._filled] = self._pending
        self._pending = bytearray()  # a cleared bytearray keeps its allocation

    def frame_space(self) -> memoryview | None:
        """The rest of the frame being read whole, to read into (no further than its end); None when none is."""
        return None if self._frame is None else memoryview(self._frame)[self._filled:]

    def frame_filled(self, nbytes: int) -> tuple[bytearray, FrameEnds] | None:
        """``nbytes`` more of ``frame_space`` were read into; the frame and its end once it is whole."""
        frame = self._frame
        assert frame is not None and 0 < nbytes <= len(frame) - self._filled
        self._filled += nbytes
        if self._filled < len(frame):
            return None
        self._frame = None
        return frame, array("q", (len(frame),))

    def feed(self, data: bytes | bytearray) -> tuple[bytes | bytearray, FrameEnds]:
        if self._frame is not None:  # bytes that were not read into ``frame_space`` (a transport of its own)
            taken = min(len(data), len(self._frame) - self._filled)
            self._frame[self._filled:self._filled + taken] = memoryview(data)[:taken]
            whole = self.frame_filled(taken) if taken else None
            if whole is None or taken == len(data):
                return whole or (b"", array("q"))
            data = whole[0] + memoryview(data)[taken:]  # frames behind the whole one: split as usual
        if self._pending:
            self._pending += data
            chunk_source: bytes | bytearray = self._pending
        else:
            chunk_source = data
        ends = self._frame_ends(chunk_source)
        complete = ends[-1] if ends else 0
        if chunk_source is data:
            if complete < len(data):
                self._pending += memoryview(data)[complete:]
            chunk = data if complete == len(data) else data[:complete]
        else:
            chunk = bytes(memoryview(self._pending)[:complete]) if complete else b""
            del self._pending[:complete]
        return chunk, ends

    def discard(self) -> None:
        """Forget the incomplete frame (its connection is closed), its allocation with it."""
        self._pending = bytearray()
        self._frame = None
        self._filled = 0

    def partial_frame(self, prefix_bytes: int) -> tuple[bytes, int] | None:
        """A copy of up to ``prefix_bytes`` of the incomplete frame (size prefix included) and the
        frame's full length; a copy, so no view pins the buffer while it keeps growing. None before its size
        is known, or once it is read whole."""
        if self._frame is not None or len(self._pending) < SIZE_PREFIX_BYTES:
            return None
        (size,) = _SIZE.unpack_from(self._pending, 0)
        return bytes(self._pending[:prefix_bytes]), SIZE_PREFIX_BYTES + size

    def take_partial_frame(self) -> bytes:
        """Hand over the buffered start of the incomplete frame; its rest bypasses the splitter."""
        taken = bytes(self._pending)
        self._pending.clear()
        return taken

    def _frame_ends(self, buf: bytes | bytearray) -> FrameEnds:
        ends = array("q")
        pos = 0
        available = len(buf)
        while available - pos >= SIZE_PREFIX_BYTES:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < self._min_frame_bytes or size > self.max_frame_bytes:
                raise ProtocolError(
                    f"frame size {size} outside [{self._min_frame_bytes}, {self.max_frame_bytes}]",
                    offset=pos)
            end = pos + SIZE_PREFIX_BYTES + size
            if end > available:
                break
            ends.append(end)
            pos = end
        return ends
