"""A listener's backlog is taken at once, not one connection a loop turn (uvloop's ``sock_accept``), and not without
end: loopback sockets on uvloop, the product's loop, counting the loop's turns rather than time."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter

import uvloop

from proxy.runtime.serving import TAKEN_IN_A_ROW, Backlog

LOOPBACK = "127.0.0.1"


def turns_to_take(waiting: int) -> list[int]:
    """With ``waiting`` connections in a listener's backlog, the loop turns gone by as each is taken."""

    async def take() -> list[int]:
        loop = asyncio.get_running_loop()
        turns = 0

        def count() -> None:
            nonlocal turns
            turns += 1
            loop.call_soon(count)

        with socket.create_server((LOOPBACK, 0), backlog=1024) as listener:
            listener.setblocking(False)
            clients = [socket.create_connection(listener.getsockname()) for _ in range(waiting)]
            backlog = Backlog(listener)
            loop.call_soon(count)
            turns_seen = []
            for client in clients:
                accepted, address = await backlog.next_connection()
                turns_seen.append(turns)
                assert not accepted.getblocking()
                assert address == client.getsockname()  # in the order they connected
                accepted.close()
                client.close()
            return turns_seen

    return uvloop.run(take())


def test_connections_waiting_are_taken_without_waiting_for_the_loop() -> None:
    assert turns_to_take(100) == [0] * 100


def test_a_long_backlog_gives_the_loop_a_turn_between_runs_of_connections() -> None:
    turns = turns_to_take(3 * TAKEN_IN_A_ROW)
    assert turns[:TAKEN_IN_A_ROW] == [0] * TAKEN_IN_A_ROW
    taken_in_each_turn = Counter(turns)
    assert len(taken_in_each_turn) == 3  # one waited for, then the rest of a run, each turn
    assert max(taken_in_each_turn.values()) <= TAKEN_IN_A_ROW + 1
