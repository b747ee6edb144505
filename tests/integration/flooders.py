"""Connections that send requests as fast as the proxy reads them and never read an answer, run in a process of their
own (``flooding``): a hundred sending threads in the test's process would hold its interpreter lock, and the
well-behaved client beside them would wait for the lock, not for the proxy. Standard library only, so that the
process starts at once."""

from __future__ import annotations

import multiprocessing
import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

LOOPBACK = "127.0.0.1"


def _flood(port: int, payload: bytes, stop: Any, reconnect: bool) -> None:
    """Send ``payload`` again and again as fast as the proxy reads it, never reading an answer; a connection the
    proxy closes is opened again when ``reconnect``."""
    while not stop.is_set():
        with socket.create_connection((LOOPBACK, port)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            view = memoryview(payload)
            sent = 0
            while not stop.is_set():
                if select.select([], [sock], [], 0.1)[1]:
                    try:
                        sent = (sent + sock.send(view[sent:])) % len(payload)
                    except BlockingIOError:
                        pass
                    except OSError:
                        break
        if not reconnect:
            return


def _flood_with_threads(port: int, payload: bytes, connections: int, reconnect: bool, started: Any,
                        stop: Any) -> None:
    threads = [threading.Thread(target=_flood, args=(port, payload, stop, reconnect)) for _ in range(connections)]
    for thread in threads:
        thread.start()
    started.set()
    for thread in threads:
        thread.join()


@contextmanager
def flooding(port: int, payload: bytes, connections: int, reconnect: bool = False) -> Iterator[None]:
    """``connections`` flooding connections to ``port`` while the block runs."""
    context = multiprocessing.get_context("spawn")
    started, stop = context.Event(), context.Event()
    process = context.Process(target=_flood_with_threads, args=(port, payload, connections, reconnect, started, stop),
                              daemon=True)
    process.start()
    try:
        if not started.wait(30):
            raise AssertionError("the flooding process did not start")
        yield
    finally:
        stop.set()
        process.join(30)
        if process.is_alive():
            process.kill()
