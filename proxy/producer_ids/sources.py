"""Where the proxy's producer-ID blocks come from (KIP-730), and how it hands out their IDs.

- ``Allocator``: the embedded block log (``allocator/``), each allocation an fsync on a worker thread;
  with ``pid_source = "cluster"`` each block is first claimed through the cluster (``cluster_claims``).
- ``ProducerIdSource``: the IDs of the current block, the next block asked for at 90% use, the way
  Kafka's ``RPCProducerIdManager`` does; after a failed request it waits 50 ms before asking again.
  Its blocks come from the embedded allocator or from a remote one (``[allocator] bootstrap``).
- The proxy asks for blocks as broker ``[allocator] broker_id`` (required: proxies behind one
  name must not share an id) with an epoch counted up at each start and kept in
  ``<state-dir>/allocator-epoch`` (never the clock: a clock stepped back would fence the proxy).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from allocator.block_log import BlockLog, BlockLogFailed, ProducerIdBlock
from allocator.durable import WriteErrors, write_durably
from protocol.apis import Api
from proxy.cluster.upstream import UpstreamAccess, request_any
from proxy.producer_ids.cluster_claims import ClusterBlockClaims
from proxy.settings.config import ConfigError, HostPort, ProxyConfig

log = logging.getLogger(__name__)

PREFETCH_AT_USED_FRACTION = 0.9
RETRY_BACKOFF_S = 0.05
EPOCH_FILE = "allocator-epoch"
BLOCK_LOG_STORE = "block-log"


class Allocator:
    """The block log as the proxy uses it: each allocation (an fsync) on a worker thread, its write
    failures counted and logged as the block log's. With ``claims`` (``pid_source = "cluster"``) each
    block is claimed through the cluster first and the block log only records it."""

    def __init__(self, blocks: BlockLog, errors: WriteErrors, claims: ClusterBlockClaims | None = None) -> None:
        self._blocks = blocks
        self._errors = errors
        self._claims = claims

    async def allocate(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        loop = asyncio.get_running_loop()
        if self._claims is None:
            return await loop.run_in_executor(None, self._written, self._blocks.allocate, broker_id, broker_epoch)
        first_id = await self._claims.claim()
        return await loop.run_in_executor(None, self._written, partial(self._blocks.record_claimed, first_id),
                                          broker_id, broker_epoch)

    def _written(self, write: Callable[[int, int], ProducerIdBlock], broker_id: int,
                 broker_epoch: int) -> ProducerIdBlock:
        try:
            block = write(broker_id, broker_epoch)
        except BlockLogFailed as error:
            self._errors.failed(BLOCK_LOG_STORE, error)
            raise
        self._errors.succeeded(BLOCK_LOG_STORE)
        return block


BlockFetcher = Callable[[], Awaitable[ProducerIdBlock]]


class ProducerIdSource:
    """Kafka's ``RPCProducerIdManager``: hands out IDs from the current block, fetching the next early."""

    def __init__(self, fetch_block: BlockFetcher, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch_block = fetch_block
        self._clock = clock
        self._current: ProducerIdBlock | None = None
        self._next_id = 0
        self._prefetched: ProducerIdBlock | None = None
        self._fetching: asyncio.Task[None] | None = None
        self._retry_at = 0.0
        self.fetch_failures = 0
        self._failures_in_a_row = 0

    def start(self) -> None:
        """Ask for the first block now, so the first InitProducerId need not wait for it."""
        self._start_fetch()

    def next_id(self) -> int | None:
        """The next producer ID, or None while the block it needs is still pending."""
        current = self._current
        if current is None or self._next_id > current.last_id:
            if self._prefetched is None:
                self._start_fetch()
                return None
            current = self._current = self._prefetched
            self._prefetched = None
            self._next_id = current.first_id
        issued = self._next_id
        self._next_id += 1
        if (self._next_id - current.first_id) >= PREFETCH_AT_USED_FRACTION * current.size:
            self._start_fetch()
        return issued

    def _start_fetch(self) -> None:
        if self._prefetched is not None or (self._fetching is not None and not self._fetching.done()):
            return
        if self._clock() < self._retry_at:
            return
        self._fetching = asyncio.get_running_loop().create_task(self._fetch())

    async def _fetch(self) -> None:
        try:
            self._prefetched = await self._fetch_block()
        except Exception as error:  # a failed fetch is retried after the back-off, never fatal
            self._failures_in_a_row += 1
            self.fetch_failures += 1
            self._retry_at = self._clock() + RETRY_BACKOFF_S
            # retried 20 times a second: the first failure of a run is worth a warning, the rest are not
            (log.warning if self._failures_in_a_row == 1 else log.debug)(
                "cannot get a producer-ID block: %s", error or type(error).__name__)
            return
        if self._failures_in_a_row:
            log.warning("got a producer-ID block after %d failed attempts", self._failures_in_a_row)
            self._failures_in_a_row = 0

    def stop(self) -> None:
        if self._fetching is not None:
            self._fetching.cancel()


def embedded_fetcher(allocator: Allocator, broker_id: int, broker_epoch: int) -> BlockFetcher:
    async def fetch() -> ProducerIdBlock:
        return await allocator.allocate(broker_id, broker_epoch)
    return fetch


def remote_fetcher(config: ProxyConfig, access: UpstreamAccess, bootstrap: HostPort, broker_id: int,
                   broker_epoch: int) -> BlockFetcher:
    async def fetch() -> ProducerIdBlock:
        response = await request_any((bootstrap,), Api.ALLOCATE_PRODUCER_IDS, 0,
                                     {"broker_id": broker_id, "broker_epoch": broker_epoch},
                                     config.connect_timeout_s, config.max_frame_bytes, access)
        if response.error_code:
            raise OSError(f"the allocator at {bootstrap} answered error {response.error_code}")
        return ProducerIdBlock(response.producer_id_start, response.producer_id_len)
    return fetch


def next_broker_epoch(state_dir: Path) -> int:
    """This start's broker epoch: one more than the last start's, kept durably before it is used, so a
    restarted proxy fences its previous incarnation whatever the clock says."""
    path = state_dir / EPOCH_FILE
    try:
        last = int(path.read_text(encoding="ascii"))
    except FileNotFoundError:
        last = 0
    except ValueError as error:
        raise ConfigError(f"{path}: not an epoch counter ({error}); remove it only if no allocator knows this "
                          "proxy's broker id") from None
    epoch = last + 1
    write_durably(path, str(epoch).encode("ascii"))
    return epoch

