"""A frame's bytes moved socket to socket inside the kernel, alone: socket pairs stand for the client's and the
cluster's connections, their proxy-side ends real asyncio transports."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from proxy.connection.splice import SPLICE_AVAILABLE, FrameSplice, can_splice

pytestmark = pytest.mark.skipif(not SPLICE_AVAILABLE, reason="splice(2) is Linux's")

FRAME_REST = 300_000
NEXT_FRAME = b"the next frame"


class Kept(asyncio.Protocol):
    def __init__(self) -> None:
        self.received = bytearray()

    def data_received(self, data: bytes) -> None:
        self.received += data


class Reported:
    def __init__(self) -> None:
        self.read = 0
        self.done = asyncio.Event()
        self.failed: list[tuple[str, bool]] = []

    def on_read(self, nbytes: int) -> None:
        self.read += nbytes

    def on_done(self) -> None:
        self.done.set()

    def on_failed(self, reason: str, by_source: bool) -> None:
        self.failed.append((reason, by_source))
        self.done.set()


async def ends() -> tuple[socket.socket, Any, Kept, Any, socket.socket]:
    """The client's socket, the proxy's transport of it (reading paused, as the connection pauses it) and what it
    read, the proxy's transport to the cluster, and the cluster's socket."""
    loop = asyncio.get_running_loop()
    client, proxy_side = socket.socketpair()
    to_cluster, cluster = socket.socketpair()
    kept = Kept()
    source, _ = await loop.connect_accepted_socket(lambda: kept, proxy_side)
    source.pause_reading()
    sink, _ = await loop.connect_accepted_socket(asyncio.Protocol, to_cluster)
    for sock in (client, cluster):
        sock.setblocking(False)  # the loop's socket calls must never block it
    return client, source, kept, sink, cluster


async def read_exactly(sock: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    got = bytearray()
    while len(got) < size:
        got += await asyncio.wait_for(loop.sock_recv(sock, size - len(got)), 30)
    return bytes(got)


def test_the_frames_rest_reaches_the_sink_in_order_and_the_next_frame_stays_for_the_reader() -> None:
    async def scenario() -> dict[str, bool]:
        client, source, kept, sink, cluster = await ends()
        assert can_splice(source, sink)
        reported = Reported()
        splice = FrameSplice(asyncio.get_running_loop(), ("client", "cluster"), reported.on_read, reported.on_done,
                             reported.on_failed)
        sink.write(b"HEAD")  # written before the splice: it must reach the cluster first
        rest = bytes(range(256)) * (FRAME_REST // 256) + b"x" * (FRAME_REST % 256)
        splice.start(source, sink, FRAME_REST, 65536)
        assert splice.active
        await asyncio.get_running_loop().sock_sendall(client, rest + NEXT_FRAME)
        moved = await read_exactly(cluster, 4 + FRAME_REST)
        await asyncio.wait_for(reported.done.wait(), 30)
        source.resume_reading()  # the connection reads on after the frame
        for _ in range(100):
            if len(kept.received) >= len(NEXT_FRAME):
                break
            await asyncio.sleep(0.01)
        result = {"in order": moved == b"HEAD" + rest, "counted": reported.read == FRAME_REST,
                  "done": not reported.failed and not splice.active, "next frame read": kept.received == NEXT_FRAME}
        for transport in (source, sink):
            transport.close()
        client.close()
        cluster.close()
        await asyncio.sleep(0)
        return result

    assert asyncio.run(scenario()) == dict.fromkeys(("in order", "counted", "done", "next frame read"), True)


def test_a_source_gone_in_the_middle_of_the_frame_fails_it_as_the_sources() -> None:
    async def scenario() -> tuple[list[tuple[str, bool]], bool]:
        client, source, _, sink, cluster = await ends()
        reported = Reported()
        splice = FrameSplice(asyncio.get_running_loop(), ("client", "cluster"), reported.on_read, reported.on_done,
                             reported.on_failed)
        splice.start(source, sink, FRAME_REST, 65536)
        await asyncio.get_running_loop().sock_sendall(client, b"only part of it")
        client.close()
        await asyncio.wait_for(reported.done.wait(), 30)
        active = splice.active
        for transport in (source, sink):
            transport.close()
        cluster.close()
        await asyncio.sleep(0)
        return reported.failed, active

    failed, active = asyncio.run(scenario())
    assert failed == [("client closed in the middle of a frame", True)] and not active


def test_stopped_it_closes_what_it_opened_and_moves_nothing_more() -> None:
    async def scenario() -> tuple[bool, int]:
        client, source, _, sink, cluster = await ends()
        reported = Reported()
        splice = FrameSplice(asyncio.get_running_loop(), ("client", "cluster"), reported.on_read, reported.on_done,
                             reported.on_failed)
        splice.start(source, sink, FRAME_REST, 65536)
        splice.stop()
        await asyncio.get_running_loop().sock_sendall(client, b"after the stop")
        await asyncio.sleep(0.05)
        active = splice.active
        for transport in (source, sink):
            transport.close()
        client.close()
        cluster.close()
        await asyncio.sleep(0)
        return active, reported.read

    assert asyncio.run(scenario()) == (False, 0)
