from __future__ import annotations

import asyncio

from allocator.block_log import ProducerIdBlock
from proxy.producer_ids.sources import RETRY_BACKOFF_S, ProducerIdSource


class Blocks:
    """Hands out blocks of 10 when released; fails when told to."""

    def __init__(self) -> None:
        self.next_first = 1000
        self.requests = 0
        self.fail = False
        self.release = asyncio.Event()

    async def fetch(self) -> ProducerIdBlock:
        self.requests += 1
        await self.release.wait()
        if self.fail:
            raise OSError("allocator down")
        block = ProducerIdBlock(self.next_first, 10)
        self.next_first += 10
        return block


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_ids_come_in_order_and_the_next_block_is_asked_for_at_90_percent() -> None:
    async def scenario() -> None:
        blocks = Blocks()
        source = ProducerIdSource(blocks.fetch)
        assert source.next_id() is None  # the first block is pending: COORDINATOR_LOAD_IN_PROGRESS
        blocks.release.set()
        await settle()
        issued = [source.next_id() for _ in range(9)]
        assert issued == list(range(1000, 1009))
        await settle()
        assert blocks.requests == 2  # asked at the 9th of 10
        issued += [source.next_id() for _ in range(11)]
        assert issued == list(range(1000, 1020))
        assert len(set(issued)) == 20
    asyncio.run(scenario())


def test_a_failed_fetch_backs_off_50_ms_then_retries() -> None:
    async def scenario() -> None:
        clock = [0.0]
        blocks = Blocks()
        blocks.fail = True
        blocks.release.set()
        source = ProducerIdSource(blocks.fetch, clock=lambda: clock[0])
        assert source.next_id() is None
        await settle()
        assert source.fetch_failures == 1
        assert source.next_id() is None
        await settle()
        assert blocks.requests == 1  # within the back-off: not asked again
        clock[0] += RETRY_BACKOFF_S
        blocks.fail = False
        assert source.next_id() is None
        await settle()
        assert blocks.requests == 2 and source.next_id() == 1000
    asyncio.run(scenario())
