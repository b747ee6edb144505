"""Turns to open connections to a broker: a few at once per broker, the rest in the order they asked, each given back
once however often its holder gives it back."""

from __future__ import annotations

import asyncio

from proxy.cluster.upstream import ConnectTurns
from proxy.settings.config import HostPort

BROKER = HostPort("kafka-1", 9092)
OTHER_BROKER = HostPort("kafka-2", 9092)


def test_a_broker_has_its_turns_and_the_next_connection_waits_for_one_given_back() -> None:
    async def scenario() -> list[str]:
        turns = ConnectTurns(per_broker=2)
        first = await turns.take(BROKER)
        await turns.take(BROKER)
        await asyncio.wait_for(turns.take(OTHER_BROKER), 30)  # each broker its own
        order: list[str] = []

        async def waiter(name: str) -> None:
            give_back = await turns.take(BROKER)
            order.append(name)
            give_back()

        waiting = [asyncio.create_task(waiter(name)) for name in ("third", "fourth")]
        await asyncio.sleep(0.01)
        assert order == []
        first()
        first()  # given back once only: the fourth still waits for the third's
        await asyncio.wait_for(asyncio.gather(*waiting), 30)
        return order

    assert asyncio.run(scenario()) == ["third", "fourth"]


def test_a_turn_given_back_twice_counts_once() -> None:
    async def scenario() -> bool:
        turns = ConnectTurns(per_broker=1)
        give_back = await turns.take(BROKER)
        give_back()
        give_back()
        await turns.take(BROKER)
        try:
            await asyncio.wait_for(turns.take(BROKER), 0.05)
        except TimeoutError:
            return True
        return False

    assert asyncio.run(scenario()), "a second give-back made a turn out of nothing"
