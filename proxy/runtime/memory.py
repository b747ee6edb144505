"""Memory the proxy has freed, handed back to the system.

glibc keeps what a program frees for its next allocations, returning only the free space at the top of its heap: a
burst of buffered answers, freed once the clients catch up or leave, would stay in the proxy's resident memory for as
long as one buffer allocated after them lives above it. ``malloc_trim`` gives back the free pages inside the heap too,
cheaply enough to call once a second. Without it, the memory of connections reading nothing stayed resident after
they had gone, and a flood coming next added its own on top (`tests/integration/test_bounded_memory.py`; figures in
docs/deploying.md, "Bounded memory", and docs/benchmarks.md). Other C libraries (musl) have no such
call and return what they can themselves.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

TRIM_INTERVAL_S = 1.0
SOON_AFTER_CLOSE_S = 0.1
"""Connections closing together (a burst of clients leaving) are trimmed for once."""


def _malloc_trim() -> Callable[[], None] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class FreedMemory:
    """Hands the free pages of the C heap back to the system once a second, and soon after a connection closes (its
    buffers were freed): a burst of connections that leave must not stay resident behind the ones that come next."""

    def __init__(self) -> None:
        self._trim = _malloc_trim()
        self._soon: asyncio.TimerHandle | None = None
        if self._trim is None:
            log.debug("no malloc_trim in this C library: freed memory is returned as it decides")

    def connection_closed(self) -> None:
        if self._trim is not None and self._soon is None:
            self._soon = asyncio.get_running_loop().call_later(SOON_AFTER_CLOSE_S, self._trim_now)

    def _trim_now(self) -> None:
        self._soon = None
        assert self._trim is not None
        self._trim()

    async def return_periodically(self, interval_s: float = TRIM_INTERVAL_S) -> None:
        if self._trim is None:
            return
        while True:
            await asyncio.sleep(interval_s)
            self._trim()
