"""A client connection alone, over loopback sockets: a stand-in for the cluster that answers every request frame with
a frame of its correlation id, and stand-ins for the decisions (``RequestDecisions``) and the server that accepted the
connection (``ProxyContext``). It wires its objects together: what the client sends reaches the cluster, the answers
come back in order, a throttle holds the next request, a drain closes once the answers are out, and a client gone in
the middle of a frame closes the connection."""

from __future__ import annotations

import asyncio
import struct
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from protocol import framing
from protocol.apis import Api
from proxy import connection
from proxy.cluster.upstream import PLAINTEXT, ConnectTurns
from proxy.connection.client import ClientConnection
from proxy.connection.close_reason import CloseReason
from proxy.connection.context import Connection
from proxy.connection.reading import READ_BYTES
from proxy.decision.outcome import FORWARD, Decided, Forward, Outcome, Sender
from proxy.reporting.metrics import ProxyMetrics
from proxy.security.tls import PrincipalMapper
from proxy.settings.config import HostPort, ProxyConfig
from tests.unit.proxy.connection.test_paths import request_frame

TIMEOUT_S = 30.0


class Cluster:
    """Answers each request frame with a frame holding its correlation id, after ``delay_s``; remembers when each
    request arrived and when each answer was written (loop time: the proxy runs in the same loop)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.arrivals: list[tuple[int, float]] = []
        self.answered_at: list[float] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        loop = asyncio.get_running_loop()
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                correlation_id = struct.unpack_from(">i", frame, 4)[0]
                self.arrivals.append((correlation_id, loop.time()))
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                writer.write(answer(correlation_id))
                self.answered_at.append(loop.time())
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def answer(correlation_id: int) -> bytes:
    """A Metadata v3 answer: the correlation id, the throttle, no brokers."""
    body = struct.pack(">iii", correlation_id, 0, 0)
    return struct.pack(">i", len(body)) + body


class Decisions:
    def __init__(self) -> None:
        self.outcomes: dict[int, Outcome] = {}
        self.senders: list[Sender] = []

    def decide(self, frame: memoryview, api_key: int, api_version: int, sender: Sender, login: object,
               upstream_open: bool) -> Decided:
        self.senders.append(sender)
        return self.outcomes.get(struct.unpack_from(">i", frame, 4)[0], FORWARD)

    def start(self, *args: object) -> None:
        return None


class Server:
    """The ``ProxyContext`` of the connections it accepts."""

    def __init__(self, cluster_port: int) -> None:
        self.config = ProxyConfig(upstream=(HostPort("127.0.0.1", cluster_port),), listen=HostPort("127.0.0.1", 0),
                                  advertised_host="127.0.0.1", broker_port_base=0)
        self.metrics = ProxyMetrics(CollectorRegistry())
        self.client_upstream_access = PLAINTEXT
        self.upstream_connects = ConnectTurns(per_broker=4)
        self.principal_mapper = PrincipalMapper()
        self.read_buffer = memoryview(bytearray(READ_BYTES))
        self.requests = Decisions()
        self.opened: list[Connection] = []
        self.closed: list[Connection] = []
        self.closed_event = asyncio.Event()

    def admit_user(self, user: str) -> int:
        return 0

    def new_login(self, peer: str) -> None:
        return None

    def connection_opened(self, connection: Connection) -> None:
        self.opened.append(connection)

    def connection_closed(self, connection: Connection) -> None:
        self.closed.append(connection)
        self.closed_event.set()


Scenario = Callable[[Server, Cluster, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[Any]]


def through_a_connection(scenario: Scenario, cluster: Cluster | None = None) -> Any:
    """Run ``scenario`` with a client connected to a ``ClientConnection`` in front of ``cluster``."""
    async def run() -> Any:
        the_cluster = cluster or Cluster()
        cluster_server = await asyncio.start_server(the_cluster.serve, "127.0.0.1", 0)
        server = Server(cluster_server.sockets[0].getsockname()[1])
        target = server.config.upstream[0]

        async def resolve() -> HostPort:
            return target

        listener = await asyncio.get_running_loop().create_server(
            lambda: ClientConnection(server, resolve, "test"), "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.sockets[0].getsockname()[1])
        try:
            return await asyncio.wait_for(scenario(server, the_cluster, reader, writer), TIMEOUT_S)
        finally:
            writer.close()
            for connection in server.opened:
                connection.abort()
            for cluster_writer in the_cluster.writers:
                cluster_writer.close()
            listener.close()
            cluster_server.close()

    return asyncio.run(run())


async def read_answers(reader: asyncio.StreamReader, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        ids.append(struct.unpack_from(">i", await reader.readexactly(size))[0])
    return ids


def test_pipelined_requests_reach_the_cluster_and_their_answers_come_back_in_order() -> None:
    async def scenario(server: Server, cluster: Cluster, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        writer.write(b"".join(request_frame(i) for i in (1, 2, 3)))
        assert await read_answers(reader, 3) == [1, 2, 3]
        assert [correlation_id for correlation_id, _ in cluster.arrivals] == [1, 2, 3]
        assert server.requests.senders[0].user == "ANONYMOUS" and server.requests.senders[0].broker
        assert server.metrics.requests_by_api[Api.METADATA] == 3
        assert len(server.opened) == 1 and not server.closed

    through_a_connection(scenario)


def test_a_throttled_answer_holds_the_next_request_until_the_throttle_has_run_out() -> None:
    async def scenario(server: Server, cluster: Cluster, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        server.requests.outcomes[1] = Forward(throttle_ms=300)
        writer.write(request_frame(1) + request_frame(2))
        assert await read_answers(reader, 2) == [1, 2]
        (_, second_arrived_at) = cluster.arrivals[1]
        # request 2 was read while the cluster took its time over request 1, and held undecided: the mute starts
        # once the throttled answer is written (KIP-219), after the cluster wrote it, and request 2 waits it out
        assert second_arrived_at - cluster.answered_at[0] >= 0.299  # the timer may run a clock tick early

    through_a_connection(scenario, Cluster(delay_s=0.1))


def test_a_drained_connection_closes_once_its_answers_are_out() -> None:
    async def scenario(server: Server, cluster: Cluster, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        writer.write(request_frame(1))
        while not cluster.arrivals:
            await asyncio.sleep(0.01)
        server.opened[0].drain()
        assert not server.closed  # the answer is not out yet
        assert await read_answers(reader, 1) == [1]
        await server.closed_event.wait()
        assert await reader.read() == b""  # closed after it

    through_a_connection(scenario, Cluster(delay_s=0.2))


def test_a_client_gone_in_the_middle_of_a_frame_closes_its_connection_as_bad_input() -> None:
    async def scenario(server: Server, cluster: Cluster, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        writer.write(request_frame(1)[:6])
        await writer.drain()
        writer.write_eof()
        await server.closed_event.wait()
        assert server.metrics.closed_for_bad_input == 1
        assert not cluster.arrivals

    through_a_connection(scenario)


def test_a_closed_connection_keeps_none_of_the_requests_it_read_and_never_decided() -> None:
    """A closed connection lives on until the collector finds its cycles (a flood of connections closed one
    after another leaves hundreds): the requests it read behind a throttled one still at the cluster, and the start
    of a frame, go at the close."""
    def allocated_by_connections() -> int:
        """Bytes still allocated by the connection's code, its framing's included."""
        snapshot = tracemalloc.take_snapshot().filter_traces([
            tracemalloc.Filter(True, str(Path(connection.__file__).parent / "*"), all_frames=True),
            tracemalloc.Filter(True, framing.__file__, all_frames=True)])
        return sum(stat.size for stat in snapshot.statistics("filename"))

    async def scenario(server: Server, cluster: Cluster, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        server.requests.outcomes[1] = Forward(throttle_ms=60_000)
        held = b"".join(request_frame(i) for i in range(2, 1000))
        sent = request_frame(1) + held + struct.pack(">i", 10_000) + b"x" * 1000  # and the start of one more
        writer.write(sent)  # one write, read at once: the requests after the throttled one wait for its answer
        while server.metrics.bytes_in < len(sent):
            await asyncio.sleep(0.01)
        before_close = allocated_by_connections()
        server.opened[0].close(CloseReason.CLIENT_LEFT)
        assert server.closed == server.opened and not cluster.answered_at  # and the test still holds it
        freed = before_close - allocated_by_connections()
        assert freed >= len(held), f"{freed} bytes freed by the close of a connection that held {len(held)}"

    tracemalloc.start(25)
    try:
        through_a_connection(scenario, Cluster(delay_s=5.0))
    finally:
        tracemalloc.stop()
