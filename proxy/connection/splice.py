"""Bytes of a large frame moved from one socket to the other inside the kernel (``splice(2)`` through a
pipe): the rest of a Produce request (or the records between the batch headers a producer-ID quota reads)
from the client's to the cluster's, the rest of a Fetch response the other way. Bytes the proxy does not read
never become Python objects.

A bare relay (``bench/relay_floor.py``) spends far less CPU per MB splicing than copying through user
space (docs/benchmarks.md, "The floor"). Only plaintext sockets can be spliced (TLS records are decrypted in
user space), and only once a frame's header has been decided and nothing else needs its bytes.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Callable

SPLICE_AVAILABLE = hasattr(os, "splice")
"""Linux, Python 3.10 and later."""

_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)


def can_splice(*transports: asyncio.BaseTransport) -> bool:
    """Every transport is a plain socket: no TLS in between."""
    return SPLICE_AVAILABLE and all(transport.get_extra_info("ssl_object") is None
                                    and transport.get_extra_info("socket") is not None for transport in transports)


class FrameSplice:
    """Moves a given number of bytes from ``source``'s socket to ``sink``'s, one connection's.

    The caller pauses ``source``'s reading once ``start`` has returned; its descriptor is read here through
    a duplicate (uvloop refuses readers on a transport's own). What ``sink``'s transport still buffers goes
    out before anything spliced; then each time the source is readable one read of at most ``chunk`` bytes
    moves into a pipe and out to the sink, and a sink that takes no more stops the reading until it drains:
    nothing is held in user space, and the kernel holds at most the pipe's ``chunk``. The pipe and the
    duplicates live only while a frame moves.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, names: tuple[str, str], on_read: Callable[[int], None],
                 on_done: Callable[[], None], on_failed: Callable[[str, bool], None]) -> None:
        self._loop = loop
        self._source_name, self._sink_name = names
        """Who is at each end, for the reasons given to ``on_failed`` (with True when the source failed)."""
        self._on_read, self._on_done, self._on_failed = on_read, on_done, on_failed
        self._descriptors: list[int] = []
        self._source = self._sink = self._pipe_out = self._pipe_in = -1
        self._sink_transport: asyncio.BaseTransport | None = None
        self._chunk = self._to_read = self._in_pipe = 0

    @property
    def active(self) -> bool:
        return bool(self._descriptors)

    def start(self, source: asyncio.BaseTransport, sink: asyncio.BaseTransport, size: int, chunk: int) -> None:
        """Move ``size`` bytes, ``chunk`` at most at a time; ``on_done`` once the sink has taken the last of
        them. Raises ``OSError`` (out of descriptors, say) having started nothing."""
        assert not self.active and size > 0
        try:
            self._pipe_out, self._pipe_in = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self._descriptors += (self._pipe_out, self._pipe_in)
            self._source = os.dup(source.get_extra_info("socket").fileno())
            self._descriptors.append(self._source)
            self._sink = os.dup(sink.get_extra_info("socket").fileno())
            self._descriptors.append(self._sink)
        except OSError:
            self._close_descriptors()
            raise
        try:
            self._chunk = fcntl.fcntl(self._pipe_in, fcntl.F_SETPIPE_SZ, chunk)
        except OSError:  # over the user's pipe pages (fs.pipe-user-pages-soft): the default pipe still moves
            self._chunk = min(chunk, 65536)
        self._sink_transport = sink
        self._to_read = size
        self._in_pipe = 0
        self._loop.add_writer(self._sink, self._sink_flushed)

    def _sink_flushed(self) -> None:
        """Writable; spliced bytes may go once the sink's transport has sent what it buffered before them."""
        assert self._sink_transport is not None
        if self._sink_transport.get_write_buffer_size():  # type: ignore[attr-defined]
            return  # uvloop sends it on the same readiness; asked again next turn
        self._loop.remove_writer(self._sink)
        self._loop.add_reader(self._source, self._move)

    def _move(self) -> None:
        try:
            read = os.splice(self._source, self._pipe_in, min(self._to_read, self._chunk), flags=_FLAGS)
        except BlockingIOError:
            return
        except OSError as error:
            self._fail(f"reading a frame from the {self._source_name}: {error}", by_source=True)
            return
        if read == 0:
            self._fail(f"{self._source_name} closed in the middle of a frame", by_source=True)
            return
        self._to_read -= read
        self._in_pipe += read
        self._on_read(read)
        if self.active:  # unless what was read closed the connection
            self._drain_pipe()

    def _drain_pipe(self) -> None:
        while self._in_pipe:
            try:
                self._in_pipe -= os.splice(self._pipe_out, self._sink, self._in_pipe, flags=_FLAGS)
            except BlockingIOError:  # the sink takes no more for now: read nothing until it does
                self._loop.remove_reader(self._source)
                self._loop.add_writer(self._sink, self._sink_drained)
                return
            except OSError as error:
                self._fail(f"writing a frame to the {self._sink_name}: {error}", by_source=False)
                return
        if not self._to_read:
            self.stop()
            self._on_done()

    def _sink_drained(self) -> None:
        self._loop.remove_writer(self._sink)
        self._loop.add_reader(self._source, self._move)
        self._drain_pipe()

    def _fail(self, reason: str, by_source: bool) -> None:
        self.stop()
        self._on_failed(reason, by_source)

    def stop(self) -> None:
        """Stop moving (done, or the connection is closing) and close the pipe and the duplicates."""
        if not self.active:
            return
        self._loop.remove_reader(self._source)
        self._loop.remove_writer(self._sink)
        self._close_descriptors()
        self._sink_transport = None

    def _close_descriptors(self) -> None:
        for descriptor in self._descriptors:
            os.close(descriptor)
        self._descriptors.clear()
        self._source = self._sink = self._pipe_out = self._pipe_in = -1
