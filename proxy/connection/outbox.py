"""What one side of a connection is sent, written through its transport in few, large pieces.

A transport keeps every piece it could not send yet as an object of its own: a client that stops reading while the
cluster answers it one small response at a time (Kafka answers a connection's requests one by one) would have the
loop hold a hundred thousand objects for 4 MiB of answers, several times the bytes counted (measured in
docs/deploying.md, "Bounded memory"). So once the transport holds anything
unsent, small pieces are gathered into one buffer, handed to it when the buffer reaches ``GATHER_BELOW_BYTES`` or
the transport has sent everything; larger pieces go as they are, after what was gathered.

The transport is told to pause its protocol as soon as it holds anything and to resume it once empty (high and low
marks of 1 and 0): that is what ``busy`` and ``drained`` follow. Whether the other side is read is this class's own
mark, ``high_bytes``, over what the transport holds and what is gathered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

GATHER_BELOW_BYTES = 16 * 1024
"""Pieces smaller than this are copied into the gathering buffer while the transport is busy: an object the loop keeps
costs a few hundred bytes (the object, its buffer view, libuv's entry), a few percent of a piece this size."""

Data = bytes | bytearray | memoryview


def _nothing() -> None:
    pass


class Outbox:
    """Writes to one transport, gathering small pieces while it is busy; ``fell_behind`` once it and the gathering
    buffer hold ``high_bytes`` or more, ``caught_up`` once they hold a quarter of it or less (asyncio's low mark)."""

    __slots__ = ("_transport", "_gathered", "_busy", "_behind", "high_bytes", "_fell_behind", "_caught_up")

    def __init__(self, transport: asyncio.Transport, high_bytes: int, fell_behind: Callable[[], None],
                 caught_up: Callable[[], None]) -> None:
        self._transport = transport
        self._gathered = bytearray()
        self._busy = False
        self._behind = False
        self.high_bytes = high_bytes
        self._fell_behind, self._caught_up = fell_behind, caught_up
        transport.set_write_buffer_limits(high=1, low=0)

    @property
    def behind(self) -> bool:
        return self._behind

    def queued_bytes(self) -> int:
        return int(self._transport.get_write_buffer_size()) + len(self._gathered)

    def write(self, data: Data) -> None:
        if not self._busy:
            self._transport.write(data)  # may make it busy at once (``busy`` is called from inside)
        elif len(data) >= GATHER_BELOW_BYTES:
            self.hand_over()
            self._transport.write(data)
        else:
            self._gathered += data
            if len(self._gathered) >= GATHER_BELOW_BYTES:
                self.hand_over()
        self._check_behind()

    def writelines(self, pieces: Iterable[Data]) -> None:
        if not self._busy:
            self._transport.writelines(pieces)  # one system call for them all
            self._check_behind()
            return
        for piece in pieces:
            self.write(piece)

    def hand_over(self) -> None:
        """Give the transport what was gathered: before it is closed, or before bytes go to its socket by another way
        (``splice``)."""
        if self._gathered and not self._transport.is_closing():
            gathered, self._gathered = self._gathered, bytearray()
            self._transport.write(gathered)  # kept as it is by the transport: never written to again here

    def close(self) -> None:
        """The transport is about to be closed, after sending what it holds: what was gathered goes too. The
        callbacks are forgotten: they hold the connection, which holds this."""
        self.hand_over()
        self._fell_behind = self._caught_up = _nothing

    def busy(self) -> None:
        """The transport holds bytes it could not send (its protocol's ``pause_writing``)."""
        self._busy = True

    def drained(self) -> None:
        """The transport has sent everything it held (its protocol's ``resume_writing``)."""
        self._busy = False
        self.hand_over()
        if self._behind and self.queued_bytes() <= self.high_bytes // 4:
            self._behind = False
            self._caught_up()

    def _check_behind(self) -> None:
        # a transport that is not busy sent everything at once, and nothing is gathered: nothing to count
        if self._busy and not self._behind and self.queued_bytes() >= self.high_bytes:
            self._behind = True
            self._fell_behind()
