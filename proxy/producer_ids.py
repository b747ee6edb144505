"""Producer IDs handed out by the proxy (KIP-730) and the PID ledger, wired into the request path.

- AllocateProducerIds (api key 67) from the principals listed in ``[allocator] cluster_principals``
  is rate-limited per principal by a token bucket (throttle time plus muting), then, with
  ``[allocator] mode = "serve"``, served from the embedded block log or, with ``"forward"``, passed
  on to the controller quorum the proxy stands in front of. Other principals are refused
  (CLUSTER_AUTHORIZATION_FAILED). Blocks handed out are counted per broker id and principal.
- With ``[allocator] pid_source = "allocator"``, InitProducerId of idempotent producers (null
  transactional id) is answered by the proxy from blocks it gets from its own block log or from a
  remote allocator (``[allocator] bootstrap``), the way Kafka's ``RPCProducerIdManager`` does: the
  next block is requested at 90% use; while a needed block is pending the answer is
  COORDINATOR_LOAD_IN_PROGRESS; after a failed request it waits 50 ms before asking again.
  Transactional InitProducerId is always forwarded.
- The proxy asks for blocks as broker ``[allocator] broker_id`` (required: proxies behind one
  name must not share an id) with an epoch counted up at each start and kept in
  ``<state-dir>/allocator-epoch`` (never the clock: a clock stepped back would fence the proxy).
- Every PID issued here is recorded in the PID ledger (``proxy.pid_ledger``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from allocator.block_log import (
    DEFAULT_FIRST_ID,
    MAX_PRODUCER_ID,
    BlockLog,
    BlockLogFailed,
    ClaimsWentBack,
    ProducerIdBlock,
    ProducerIdsExhausted,
    StaleBrokerEpoch,
)
from allocator.durable import WriteErrors, write_durably
from protocol.apis import Api
from protocol.codecs import decode_request, decode_response, encode_response
from protocol.header import RequestHeader, read_request_header
from proxy.cluster_blocks import DEFAULT_BLOCKS_TOPIC, BlocksTopicChanged, ClusterBlockClaims
from proxy.config import ConfigError, HostPort, ProxyConfig, principal_list
from proxy.outcome import Caller, Decided, Outcome, local_answer
from proxy.pid_ledger import LedgerRecorder
from proxy.quota_service import QuotaService, now_ms
from proxy.upstream_client import UPSTREAM_ERRORS, UpstreamAccess, request_any
from proxy.usage_log import UsageLog
from quotas.config import Window
from quotas.rate import SampledRate
from quotas.token_bucket import TokenBucket, bucket_throttle_ms

log = logging.getLogger(__name__)

CLUSTER_AUTHORIZATION_FAILED = 31
STALE_BROKER_EPOCH = 77
COORDINATOR_LOAD_IN_PROGRESS = 14
UNKNOWN_SERVER_ERROR = -1
PREFETCH_AT_USED_FRACTION = 0.9
RETRY_BACKOFF_S = 0.05
EPOCH_FILE = "allocator-epoch"
PRODUCER_ID_EXPIRATION_MS = 86_400_000
"""Kafka's ``producer.id.expiration.ms`` default: ledger snapshots older than this are deleted."""
_RATE_WINDOW = Window(11, 1)
_HOUR_WINDOW = Window(60, 60)
"""The cluster-wide block rate: sixty one-minute samples."""
MAX_BROKER_SERIES = 1000
"""Broker ids with a metric series of their own; more are summed as "other" (ids come from requests)."""
PID_SOURCES = ("upstream", "allocator", "cluster")
MODES = ("serve", "forward")


@dataclass(frozen=True)
class AllocatorSettings:
    """``[allocator]`` and ``[ledger]`` of the --config file."""

    cluster_principals: frozenset[str] = frozenset()
    mode: str = "serve"
    """AllocateProducerIds served from this proxy's block log, or forwarded to the controller quorum."""
    pid_source: str = "upstream"
    bootstrap: HostPort | None = None
    first_id: int = DEFAULT_FIRST_ID
    end_id: int = MAX_PRODUCER_ID + 1
    broker_id: int | None = None
    allocations_per_second: float = 10.0
    blocks_topic: str = DEFAULT_BLOCKS_TOPIC
    blocks_topic_id: str | None = None
    """An operator's confirmation that the blocks topic was recreated (its new id): see ``proxy.cluster_blocks``."""
    ledger_capacity: int = 100_000
    ledger_cache: int = 100_000
    ledger_seal_interval_s: float = 3600.0
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS
    scan_all_produce: bool = False

    @classmethod
    def from_config(cls, config: ProxyConfig) -> AllocatorSettings:
        allocator = dict(config.extra.get("allocator", {}))
        ledger = dict(config.extra.get("ledger", {}))
        try:
            settings = cls(
                cluster_principals=principal_list(allocator.pop("cluster_principals", []),
                                                  "[allocator] cluster_principals"),
                mode=str(allocator.pop("mode", "serve")),
                pid_source=str(allocator.pop("pid_source", "upstream")),
                bootstrap=_bootstrap(allocator.pop("bootstrap", None)),
                first_id=int(allocator.pop("first_id", DEFAULT_FIRST_ID)),
                end_id=int(allocator.pop("end_id", MAX_PRODUCER_ID + 1)),
                broker_id=_optional_int(allocator.pop("broker_id", None)),
                allocations_per_second=float(allocator.pop("allocations_per_second", 10.0)),
                blocks_topic=str(allocator.pop("blocks_topic", DEFAULT_BLOCKS_TOPIC)),
                blocks_topic_id=_optional_topic_id(allocator.pop("blocks_topic_id", None)),
                ledger_capacity=int(ledger.pop("segment_capacity", 100_000)),
                ledger_cache=int(ledger.pop("cache_size", 100_000)),
                ledger_seal_interval_s=float(ledger.pop("seal_interval_seconds", 3600.0)),
                producer_id_expiration_ms=int(ledger.pop("producer_id_expiration_ms", PRODUCER_ID_EXPIRATION_MS)),
                scan_all_produce=bool(ledger.pop("scan_all_produce", False)),
            )
        except (TypeError, ValueError) as error:
            raise ConfigError(f"[allocator]/[ledger]: {error}") from None
        for section, leftover in (("allocator", allocator), ("ledger", ledger)):
            if leftover:
                raise ConfigError(f"[{section}]: unknown key(s) {', '.join(sorted(leftover))}")
        if settings.mode not in MODES:
            raise ConfigError(f"[allocator] mode: one of {', '.join(MODES)}, got {settings.mode!r}")
        if settings.mode == "forward" and settings.pid_source != "upstream":
            raise ConfigError("[allocator] mode = \"forward\" puts the proxy in front of the controller quorum, "
                              f"where no client asks for producer IDs: pid_source must be \"upstream\", got "
                              f"{settings.pid_source!r}")
        if settings.pid_source not in PID_SOURCES:
            raise ConfigError(f"[allocator] pid_source: one of {', '.join(PID_SOURCES)}, got {settings.pid_source!r}")
        if not 0 <= settings.first_id < settings.end_id <= MAX_PRODUCER_ID + 1:
            raise ConfigError("[allocator] first_id/end_id: need 0 <= first_id < end_id <= 2^63")
        if (settings.allocations_per_second <= 0 or settings.ledger_capacity < 1 or settings.ledger_cache < 1
                or settings.producer_id_expiration_ms < 1 or settings.ledger_seal_interval_s <= 0):
            raise ConfigError("[allocator]/[ledger]: rates, capacities, sizes and times must be positive")
        if settings.pid_source == "allocator" and settings.broker_id is None:
            raise ConfigError("[allocator] broker_id: required with pid_source = \"allocator\" (the id this proxy "
                              "asks for producer-ID blocks as; give each proxy its own)")
        if settings.broker_id is not None and not 0 <= settings.broker_id <= 0x7FFFFFFF:
            raise ConfigError(f"[allocator] broker_id: 0..2^31-1, got {settings.broker_id}")
        return settings


def _bootstrap(value: Any) -> HostPort | None:
    return None if value is None else HostPort.parse(str(value), "[allocator] bootstrap")


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _optional_topic_id(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ConfigError(f"[allocator] blocks_topic_id: a topic id (UUID), got {value!r}") from None


# ---- AllocateProducerIds ------------------------------------------------------------------------

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


class BlockAllocations(Collector):
    """The blocks handed out (served here or granted by the controller through this proxy): counted per
    requesting broker id and principal, as a cluster-wide rate, and in the usage log."""

    def __init__(self, registry: CollectorRegistry, usage: UsageLog) -> None:
        self._usage = usage
        self._blocks: dict[tuple[str, str], int] = {}
        """(broker id, principal) -> blocks; broker ids beyond MAX_BROKER_SERIES are counted as "other"."""
        self._broker_ids: set[int] = set()
        self._block_rate = SampledRate()
        self._id_rate = SampledRate()
        registry.register(self)

    def allocated(self, caller: Caller, client_id: str, broker_id: int, block: ProducerIdBlock) -> None:
        if broker_id in self._broker_ids or len(self._broker_ids) < MAX_BROKER_SERIES:
            self._broker_ids.add(broker_id)
            broker = str(broker_id)
        else:
            broker = "other"
        key = (broker, caller.principal)
        self._blocks[key] = self._blocks.get(key, 0) + 1
        self._block_rate.record(1, caller.now_ms, _HOUR_WINDOW)
        self._id_rate.record(block.size, caller.now_ms, _HOUR_WINDOW)
        self._usage.blocks(caller.user, client_id, broker_id, block.size)

    def collect(self) -> Iterator[Metric]:
        blocks = CounterMetricFamily("kafka_quota_proxy_producer_id_blocks",
                                     "Producer-ID blocks handed out, by requesting broker id and principal",
                                     labels=["broker_id", "principal"])
        for (broker, principal), count in sorted(self._blocks.items()):
            blocks.add_metric([broker, principal], count)
        yield blocks
        now = now_ms()
        yield GaugeMetricFamily("kafka_quota_proxy_producer_id_blocks_per_hour",
                                "Producer-ID blocks handed out over the last hour, all brokers together",
                                value=self._block_rate.measure(now, _HOUR_WINDOW) * 3600)
        yield GaugeMetricFamily("kafka_quota_proxy_producer_ids_allocated_per_hour",
                                "Producer IDs in the blocks handed out over the last hour (blocks x their size): "
                                "the rate at which the cluster issues new producer IDs",
                                value=self._id_rate.measure(now, _HOUR_WINDOW) * 3600)


class AllocationRate:
    """``allocations_per_second`` per principal: a token bucket with Kafka's burst of 11 one-second samples."""

    def __init__(self, settings: AllocatorSettings) -> None:
        self._rate = settings.allocations_per_second
        self._buckets: dict[str, TokenBucket] = {}
        """Only the principals of ``cluster_principals`` are charged: bounded by the configuration."""

    def charge(self, caller: Caller) -> int:
        """The throttle (ms) of one more request."""
        bucket = self._buckets.get(caller.principal)
        if bucket is None:
            bucket = self._buckets[caller.principal] = TokenBucket(self._rate, _RATE_WINDOW, caller.now_ms)
        bucket.record(1, self._rate, _RATE_WINDOW, caller.now_ms)
        tokens = bucket.measure(self._rate, _RATE_WINDOW, caller.now_ms)
        return bucket_throttle_ms(tokens, self._rate) if tokens < 0 else 0


class AllocateProducerIdsHandler:
    """``mode = "serve"``: blocks from this proxy's block log (or claimed through the cluster)."""

    def __init__(self, allocator: Allocator, settings: AllocatorSettings, allocations: BlockAllocations) -> None:
        self._allocator = allocator
        self._principals = settings.cluster_principals
        self._rate = AllocationRate(settings)
        self._allocations = allocations

    def __call__(self, frame: memoryview, caller: Caller) -> Decided:
        header = read_request_header(frame)
        request = decode_request(Api.ALLOCATE_PRODUCER_IDS, header.api_version, frame[header.length:])
        if caller.principal not in self._principals:
            return _allocation_answer(header, CLUSTER_AUTHORIZATION_FAILED, None, 0)
        return self._allocate(header, caller, request.broker_id, request.broker_epoch, self._rate.charge(caller))

    async def _allocate(self, header: RequestHeader, caller: Caller, broker_id: int, broker_epoch: int,
                        throttle_ms: int) -> Outcome:
        try:
            block = await self._allocator.allocate(broker_id, broker_epoch)
        except StaleBrokerEpoch as error:
            log.warning("AllocateProducerIds: %s", error)
            return _allocation_answer(header, STALE_BROKER_EPOCH, None, throttle_ms)
        except ProducerIdsExhausted as error:
            log.error("AllocateProducerIds: %s", error)
            return _allocation_answer(header, UNKNOWN_SERVER_ERROR, None, throttle_ms)
        except BlockLogFailed:  # logged as a write error of the block log
            return _allocation_answer(header, UNKNOWN_SERVER_ERROR, None, throttle_ms)
        except (*UPSTREAM_ERRORS, BlocksTopicChanged, ClaimsWentBack) as error:
            log.error("AllocateProducerIds: cannot claim a block through the cluster: %s",
                      error or type(error).__name__)
            return _allocation_answer(header, UNKNOWN_SERVER_ERROR, None, throttle_ms)
        self._allocations.allocated(caller._replace(now_ms=now_ms()), header.client_id or "", broker_id, block)
        return _allocation_answer(header, 0, block, throttle_ms)


class AllocateProducerIdsForwarder:
    """``mode = "forward"``: the proxy stands between the brokers and the controller quorum. A request of a
    principal in ``cluster_principals`` is charged, then passed on; the controller's answer goes back with
    the throttle raised into it (the connection muted for it, later requests held), and a block it granted
    is counted. Others are refused here and never reach the controller."""

    def __init__(self, settings: AllocatorSettings, allocations: BlockAllocations) -> None:
        self._principals = settings.cluster_principals
        self._rate = AllocationRate(settings)
        self._allocations = allocations

    def __call__(self, frame: memoryview, caller: Caller) -> Decided:
        header = read_request_header(frame)
        request = decode_request(Api.ALLOCATE_PRODUCER_IDS, header.api_version, frame[header.length:])
        if caller.principal not in self._principals:
            return _allocation_answer(header, CLUSTER_AUTHORIZATION_FAILED, None, 0)
        client_id = header.client_id or ""

        def count_granted(body: memoryview) -> bytes:
            response = decode_response(Api.ALLOCATE_PRODUCER_IDS, header.api_version, body)
            # the controller checked the broker id and epoch against its registrations before granting
            if response.error_code == 0 and response.producer_id_start >= 0 and response.producer_id_len > 0:
                block = ProducerIdBlock(response.producer_id_start, response.producer_id_len)
                self._allocations.allocated(caller._replace(now_ms=now_ms()), client_id, request.broker_id, block)
            return bytes(body)

        return Outcome(throttle_ms=self._rate.charge(caller), finish=count_granted)


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
