"""The rest of one frame passing from one side of a connection to the other as it arrives, never held whole.

A large request goes to the cluster as the client sends it, and a large Fetch response to the client as the cluster
sends it (``CUT_THROUGH_AFTER_BYTES``): once the frame's start has been decided on, its rest is passed on read by read
(to its sink, and to a reader that needs to see it go by, such as a quota's scan of a Produce request's batches), or
dropped when the other side was answered without it. Bytes moved inside the kernel (``splice``) count as gone by. The
passage says when the frame's last byte has gone; it knows neither sockets nor quotas.
"""

from __future__ import annotations

from collections.abc import Callable

Data = bytes | bytearray | memoryview
Take = Callable[[Data], object]


def _nothing() -> None:
    pass


class FramePassage:
    """One side's frame in passage: how much of it is still to come, where it goes, and what follows its end."""

    __slots__ = ("remaining", "_sink", "_reader", "_on_end")

    def __init__(self) -> None:
        self.remaining = 0
        """Bytes of the frame still to come; 0 when no frame is in passage."""
        self._sink: Take | None = None
        self._reader: Take | None = None
        self._on_end: Callable[[], None] = _nothing

    def begin(self, remaining: int, sink: Take | None, on_end: Callable[[], None], reader: Take | None = None) -> None:
        """A frame's start went on (or was answered), ``remaining`` bytes of it to come: each piece is given to
        ``reader`` and then, unless the reader raised, to ``sink`` (None: dropped); ``on_end`` once the last has
        gone."""
        assert remaining > 0 and not self.remaining, "one frame at a time, and only one still arriving"
        self.remaining = remaining
        self._sink = sink
        self._reader = reader
        self._on_end = on_end

    def take(self, data: bytes) -> bytes:
        """Pass on the part of ``data`` that belongs to the frame; the rest (the next frames) is returned."""
        taken = min(len(data), self.remaining)
        part: Data = data if taken == len(data) else memoryview(data)[:taken]
        # read before it goes: a reader refusing the frame's last piece (a Produce request whose end the scan finds
        # malformed) keeps the frame from ever being whole on the other side, which acts only on whole frames
        if self._reader is not None:
            self._reader(part)
        if self._sink is not None:
            self._sink(part)
        self.remaining -= taken
        if not self.remaining:
            self.finish()
        return data[taken:]

    def went_by(self, nbytes: int) -> None:
        """``nbytes`` of the frame went to the other side inside the kernel (its end is told by ``finish``, once
        the last of them has been written)."""
        self.remaining -= nbytes

    def finish(self) -> None:
        """The frame's last byte has gone."""
        assert not self.remaining, "the frame is not over"
        on_end, self._on_end = self._on_end, _nothing
        self._sink = self._reader = None
        on_end()
