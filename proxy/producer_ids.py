"""Producer IDs handed out by the proxy (KIP-730) and the PID ledger, wired into the request path.

- AllocateProducerIds (api key 67) is served from the embedded block log to the principals listed
  in ``[allocator] cluster_principals``; a principal's requests are rate-limited by a token bucket
  (throttle time plus muting).
- With ``[allocator] pid_source = "allocator"``, InitProducerId of idempotent producers (null
  transactional id) is answered by the proxy from blocks it gets from its own block log or from a
  remote allocator (``[allocator] bootstrap``), the way Kafka's ``RPCProducerIdManager`` does: the
  next block is requested at 90% use; while a needed block is pending the answer is
  COORDINATOR_LOAD_IN_PROGRESS; after a failed request it waits 50 ms before asking again.
  Transactional InitProducerId is always forwarded.
- Every PID issued here, and every PID seen in a Produce request whose batches are read, is
  recorded in the PID ledger, which the producer-ID quota consults so that a PID seen before a
  restart is not counted as new again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from allocator.block_log import (
    DEFAULT_FIRST_ID,
    MAX_PRODUCER_ID,
    BlockLog,
    BlockLogFailed,
    ProducerIdBlock,
    ProducerIdsExhausted,
    StaleBrokerEpoch,
)
from allocator.ledger import PidLedger, PidRecord
from protocol.apis import Api
from protocol.codecs import decode_request, encode_response
from protocol.header import RequestHeader, read_request_header
from proxy.config import ConfigError, HostPort, ProxyConfig, principal_list
from proxy.outcome import Caller, Decided, Outcome, local_answer
from proxy.quota_service import QuotaService
from proxy.upstream_client import UpstreamAccess, request_any
from quotas.bloom import BloomFilter
from quotas.config import Window
from quotas.token_bucket import TokenBucket, bucket_throttle_ms

log = logging.getLogger(__name__)

CLUSTER_AUTHORIZATION_FAILED = 31
STALE_BROKER_EPOCH = 77
COORDINATOR_LOAD_IN_PROGRESS = 14
UNKNOWN_SERVER_ERROR = -1
PREFETCH_AT_USED_FRACTION = 0.9
RETRY_BACKOFF_S = 0.05
LEDGER_TOUCH_INTERVAL_MS = 60_000
"""A PID's last-seen time in the ledger is refreshed at most this often (a write per refresh)."""
_RATE_WINDOW = Window(11, 1)


@dataclass(frozen=True)
class AllocatorSettings:
    """``[allocator]`` and ``[ledger]`` of the --config file."""

    cluster_principals: frozenset[str] = frozenset()
    pid_source: str = "upstream"
    bootstrap: HostPort | None = None
    first_id: int = DEFAULT_FIRST_ID
    end_id: int = MAX_PRODUCER_ID + 1
    broker_id: int | None = None
    allocations_per_second: float = 10.0
    ledger_capacity: int = 100_000
    ledger_cache: int = 100_000
    ledger_seal_interval_s: float = 3600.0
    scan_all_produce: bool = False

    @classmethod
    def from_config(cls, config: ProxyConfig) -> AllocatorSettings:
        allocator = dict(config.extra.get("allocator", {}))
        ledger = dict(config.extra.get("ledger", {}))
        try:
            settings = cls(
                cluster_principals=principal_list(allocator.pop("cluster_principals", []),
                                                  "[allocator] cluster_principals"),
                pid_source=str(allocator.pop("pid_source", "upstream")),
                bootstrap=_bootstrap(allocator.pop("bootstrap", None)),
                first_id=int(allocator.pop("first_id", DEFAULT_FIRST_ID)),
                end_id=int(allocator.pop("end_id", MAX_PRODUCER_ID + 1)),
                broker_id=_optional_int(allocator.pop("broker_id", None)),
                allocations_per_second=float(allocator.pop("allocations_per_second", 10.0)),
                ledger_capacity=int(ledger.pop("segment_capacity", 100_000)),
                ledger_cache=int(ledger.pop("cache_size", 100_000)),
                ledger_seal_interval_s=float(ledger.pop("seal_interval_seconds", 3600.0)),
                scan_all_produce=bool(ledger.pop("scan_all_produce", False)),
            )
        except (TypeError, ValueError) as error:
            raise ConfigError(f"[allocator]/[ledger]: {error}") from None
        for section, leftover in (("allocator", allocator), ("ledger", ledger)):
            if leftover:
                raise ConfigError(f"[{section}]: unknown key(s) {', '.join(sorted(leftover))}")
        if settings.pid_source not in ("upstream", "allocator"):
            raise ConfigError(f"[allocator] pid_source: \"upstream\" or \"allocator\", got {settings.pid_source!r}")
        if not 0 <= settings.first_id < settings.end_id <= MAX_PRODUCER_ID + 1:
            raise ConfigError("[allocator] first_id/end_id: need 0 <= first_id < end_id <= 2^63")
        if settings.allocations_per_second <= 0 or settings.ledger_capacity < 1 or settings.ledger_cache < 1:
            raise ConfigError("[allocator]/[ledger]: rates, capacities and sizes must be positive")
        return settings


def _bootstrap(value: Any) -> HostPort | None:
    return None if value is None else HostPort.parse(str(value), "[allocator] bootstrap")


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


class LedgerFilters:
    """The ledger's Bloom filters: the quota engines' MurmurHash3 filter, 1% false positives."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity

    def new(self) -> BloomFilter:
        return BloomFilter.for_capacity(self._capacity, 0.01)

    def load(self, data: bytes) -> BloomFilter:
        return BloomFilter.from_bytes(data)


# ---- AllocateProducerIds ------------------------------------------------------------------------

class AllocateProducerIdsHandler:
    def __init__(self, blocks: BlockLog, settings: AllocatorSettings) -> None:
        self._blocks = blocks
        self._principals = settings.cluster_principals
        self._rate = settings.allocations_per_second
        self._buckets: dict[str, TokenBucket] = {}

    def __call__(self, frame: memoryview, caller: Caller) -> Decided:
        header = read_request_header(frame)
        request = decode_request(Api.ALLOCATE_PRODUCER_IDS, header.api_version, frame[header.length:])
        principal = caller.principal
        if principal not in self._principals:
            return _allocation_answer(header, CLUSTER_AUTHORIZATION_FAILED, None, 0)
        bucket = self._buckets.get(principal)
        if bucket is None:
            bucket = self._buckets[principal] = TokenBucket(self._rate, _RATE_WINDOW, caller.now_ms)
        bucket.record(1, self._rate, _RATE_WINDOW, caller.now_ms)
        tokens = bucket.measure(self._rate, _RATE_WINDOW, caller.now_ms)
        throttle_ms = bucket_throttle_ms(tokens, self._rate) if tokens < 0 else 0
        return self._allocate(header, request.broker_id, request.broker_epoch, throttle_ms)

    async def _allocate(self, header: RequestHeader, broker_id: int, broker_epoch: int, throttle_ms: int) -> Outcome:
        loop = asyncio.get_running_loop()
        try:  # the fsync runs on a thread: the event loop keeps serving other connections
            block = await loop.run_in_executor(None, self._blocks.allocate, broker_id, broker_epoch)
        except StaleBrokerEpoch as error:
            log.warning("AllocateProducerIds: %s", error)
            return _allocation_answer(header, STALE_BROKER_EPOCH, None, throttle_ms)
        except (ProducerIdsExhausted, BlockLogFailed) as error:
            log.error("AllocateProducerIds: %s", error)
            return _allocation_answer(header, UNKNOWN_SERVER_ERROR, None, throttle_ms)
        return _allocation_answer(header, 0, block, throttle_ms)


def _allocation_answer(header: RequestHeader, error_code: int, block: ProducerIdBlock | None,
                       throttle_ms: int) -> Outcome:
    body = encode_response(Api.ALLOCATE_PRODUCER_IDS, header.api_version, {
        "throttle_time_ms": throttle_ms, "error_code": error_code,
        "producer_id_start": -1 if block is None else block.first_id,
        "producer_id_len": 0 if block is None else block.size})
    return local_answer(header, body, throttle_ms)


# ---- producer IDs for local InitProducerId ------------------------------------------------------

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
            self.fetch_failures += 1
            self._retry_at = self._clock() + RETRY_BACKOFF_S
            log.warning("cannot get a producer-ID block: %s", error or type(error).__name__)

    def stop(self) -> None:
        if self._fetching is not None:
            self._fetching.cancel()


def embedded_fetcher(blocks: BlockLog, broker_id: int, broker_epoch: int) -> BlockFetcher:
    async def fetch() -> ProducerIdBlock:
        return await asyncio.get_running_loop().run_in_executor(None, blocks.allocate, broker_id, broker_epoch)
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


def default_broker_id(config: ProxyConfig) -> int:
    """Stable per proxy address, so proxies sharing one allocator use distinct broker ids."""
    return zlib.crc32(f"{config.advertised_host}:{config.listen.port}".encode()) & 0x7FFFFFFF


# ---- InitProducerId -----------------------------------------------------------------------------

class InitProducerIdHandler:
    """Forwarded (transactional, or ``pid_source = "upstream"``) or answered from a local block.

    Either way, while the user's producer-ID bucket is below zero the answer carries the time until
    it is back at zero, so the producer backs off before its new PID meets the quota.
    """

    def __init__(self, quotas: QuotaService, source: ProducerIdSource | None, ledger: LedgerRecorder) -> None:
        self._quotas = quotas
        self._source = source
        self._ledger = ledger

    def __call__(self, frame: memoryview, caller: Caller) -> Outcome:
        throttle_ms = self._quotas.producer_ids.pending_throttle_ms(caller.user, caller.now_ms)
        if self._source is None:
            return Outcome(throttle_ms=throttle_ms)
        header = read_request_header(frame)
        request = decode_request(Api.INIT_PRODUCER_ID, header.api_version, frame[header.length:])
        if request.transactional_id is not None:
            return Outcome(throttle_ms=throttle_ms)  # transactions belong to the cluster's coordinator
        pid = self._source.next_id()
        if pid is None:
            return self._answer(header, COORDINATOR_LOAD_IN_PROGRESS, -1, -1, throttle_ms)
        self._ledger.issued(pid, caller.user, header.client_id or "", 0)
        return self._answer(header, 0, pid, 0, throttle_ms)

    @staticmethod
    def _answer(header: RequestHeader, error_code: int, pid: int, epoch: int, throttle_ms: int) -> Outcome:
        body = encode_response(Api.INIT_PRODUCER_ID, header.api_version, {
            "throttle_time_ms": throttle_ms, "error_code": error_code, "producer_id": pid, "producer_epoch": epoch,
            "ongoing_txn_producer_id": -1, "ongoing_txn_producer_epoch": -1})
        return local_answer(header, body, throttle_ms)


# ---- the ledger in the request path -------------------------------------------------------------

class LedgerRecorder:
    """Records issued and seen PIDs; answers the producer-ID quota's "seen before?"."""

    def __init__(self, ledger: PidLedger) -> None:
        self._ledger = ledger

    def issued(self, pid: int, user: str, client_id: str, epoch: int) -> None:
        now = _wall_ms()
        self._ledger.update(PidRecord(pid, user, client_id, epoch, now, now))

    def seen(self, pids: Iterable[int], user: str, client_id: str) -> None:
        now = _wall_ms()
        for pid in pids:
            known = self._ledger.read(pid)
            if known is None:
                self._ledger.update(PidRecord(pid, user, client_id, 0, now, now))
            elif now - known.last_seen_ms >= LEDGER_TOUCH_INTERVAL_MS:
                self._ledger.update(known._replace(last_seen_ms=now))

    def seen_within(self, window_ms: int) -> Callable[[int], bool]:
        def seen_recently(pid: int) -> bool:
            known = self._ledger.read(pid)
            return known is not None and _wall_ms() - known.last_seen_ms < window_ms
        return seen_recently


def _wall_ms() -> int:
    """Ledger times are wall-clock: they must mean the same after a restart."""
    return int(time.time() * 1000)


def open_ledger(state_dir: Path, settings: AllocatorSettings) -> PidLedger:
    return PidLedger(state_dir / "pid-ledger", LedgerFilters(settings.ledger_capacity), settings.ledger_capacity,
                     settings.ledger_cache, seal_when_full=False)


async def seal_ledger(ledger: PidLedger) -> None:
    """Seal the active segment with the snapshot written on a worker thread, not on the event loop."""
    sealing = ledger.begin_seal()
    if sealing is None:
        return
    snapshot = await asyncio.get_running_loop().run_in_executor(None, sealing.write_snapshot)
    ledger.finish_seal(sealing, snapshot)

