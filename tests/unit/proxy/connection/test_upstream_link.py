"""A connection's link to the cluster alone, against a listener on loopback: opened in its turn, the turn given back
once the broker answers (or it fails, or closes), and told how the opening went."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.cluster.upstream import PLAINTEXT, ConnectTurns
from proxy.connection.outbox import Outbox
from proxy.connection.upstream_link import UpstreamLink
from proxy.settings.config import HostPort


class Reader(asyncio.Protocol):
    def __init__(self) -> None:
        self.received = b""

    def data_received(self, data: bytes) -> None:
        self.received += data


class Outcome:
    def __init__(self) -> None:
        self.opened: list[HostPort] = []
        self.failed: list[str] = []
        self.done = asyncio.Event()

    def open(self, target: HostPort) -> None:
        self.opened.append(target)
        self.done.set()

    def fail(self, why: str) -> None:
        self.failed.append(why)
        self.done.set()


def outbox(transport: asyncio.Transport) -> Outbox:
    return Outbox(transport, 1 << 20, lambda: None, lambda: None)


async def resolving(target: HostPort) -> HostPort:
    return target


def link_to(target: HostPort, turns: ConnectTurns, timeout_s: float = 30) -> UpstreamLink:
    return UpstreamLink(lambda: resolving(target), turns, PLAINTEXT, timeout_s, 1 << 20)


class SilentBroker:
    """Accepts connections and never answers; closes them all at the end."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []

    def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)

    async def close(self, server: asyncio.Server) -> None:
        for writer in self.writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def turn_free(turns: ConnectTurns, target: HostPort, within_s: float) -> bool:
    try:
        give_back = await asyncio.wait_for(turns.take(target), within_s)
    except TimeoutError:
        return False
    give_back()
    return True


def test_it_opens_in_its_turn_and_gives_the_turn_back_once_the_broker_answers() -> None:
    async def scenario() -> dict[str, Any]:
        answered = asyncio.Event()

        async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"hello")
            await answered.wait()
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        target = HostPort("127.0.0.1", server.sockets[0].getsockname()[1])
        turns = ConnectTurns(per_broker=1)
        link, outcome, reader = link_to(target, turns), Outcome(), Reader()
        assert not link.started
        link.open(reader, outbox, outcome.open, outcome.fail)
        assert link.started and link.opening
        await asyncio.wait_for(outcome.done.wait(), 30)
        held_while_unanswered = not await turn_free(turns, target, 0.01)
        link.heard()
        free_once_heard = await turn_free(turns, target, 30)
        result = {"opened": outcome.opened == [target], "open": not link.opening and link.transport is not None,
                  "outbox": link.outbox is not None, "broker": link.broker == f"127.0.0.1:{target.port}",
                  "held": held_while_unanswered, "freed": free_once_heard, "heard_at": link.heard_at > 0}
        answered.set()
        link.close()
        server.close()
        await server.wait_closed()
        return result

    assert all(asyncio.run(scenario()).values())


def test_a_connection_the_broker_never_answers_gives_its_turn_back_all_the_same() -> None:
    async def scenario() -> bool:
        silent = SilentBroker()
        server = await asyncio.start_server(silent.accept, "127.0.0.1", 0)
        target = HostPort("127.0.0.1", server.sockets[0].getsockname()[1])
        turns = ConnectTurns(per_broker=1)
        link, outcome = link_to(target, turns), Outcome()
        link.open(Reader(), outbox, outcome.open, outcome.fail)
        await asyncio.wait_for(outcome.done.wait(), 30)
        freed = await turn_free(turns, target, 30)  # after UNANSWERED_TURN_S
        link.close()
        await silent.close(server)
        return freed

    assert asyncio.run(scenario())


def test_an_unreachable_broker_fails_the_opening_and_frees_the_turn() -> None:
    async def scenario() -> tuple[list[HostPort], list[str], bool]:
        server = await asyncio.start_server(SilentBroker().accept, "127.0.0.1", 0)
        target = HostPort("127.0.0.1", server.sockets[0].getsockname()[1])
        server.close()
        await server.wait_closed()  # nothing listens there now
        turns = ConnectTurns(per_broker=1)
        link, outcome = link_to(target, turns), Outcome()
        link.open(Reader(), outbox, outcome.open, outcome.fail)
        await asyncio.wait_for(outcome.done.wait(), 30)
        return outcome.opened, outcome.failed, await turn_free(turns, target, 30)

    opened, failed, freed = asyncio.run(scenario())
    assert opened == [] and len(failed) == 1 and failed[0] and freed


def test_closed_while_it_waits_for_its_turn_it_never_opens() -> None:
    async def scenario() -> tuple[bool, bool]:
        target = HostPort("127.0.0.1", 9)
        turns = ConnectTurns(per_broker=1)
        give_back = await turns.take(target)  # another connection's turn
        link, outcome = link_to(target, turns), Outcome()
        link.open(Reader(), outbox, outcome.open, outcome.fail)
        await asyncio.sleep(0.01)
        link.close()
        give_back()
        await asyncio.sleep(0.01)
        return outcome.done.is_set(), await turn_free(turns, target, 30)

    told, freed = asyncio.run(scenario())
    assert not told and freed
