"""Producer-ID requests (KIP-730): AllocateProducerIds from the brokers, InitProducerId from producers.

- AllocateProducerIds (api key 67) from the principals listed in ``[allocator] cluster_principals``
  is rate-limited per principal by a token bucket (throttle time plus muting), then, with
  ``[allocator] mode = "serve"``, served from the embedded block log or, with ``"forward"``, passed
  on to the controller quorum the proxy stands in front of. Other principals are refused
  (CLUSTER_AUTHORIZATION_FAILED). Blocks handed out are counted per broker id and principal.
- With ``[allocator] pid_source = "allocator"`` or ``"cluster"``, InitProducerId of idempotent
  producers (null transactional id) is answered by the proxy from its own blocks
  (``proxy.producer_ids.sources``); while a needed block is pending the answer is
  COORDINATOR_LOAD_IN_PROGRESS. Transactional InitProducerId is always forwarded.
- Every PID issued here is recorded in the PID ledger (``proxy.state.pid_ledger``).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod

from allocator.block_log import BlockLogFailed, ClaimsWentBack, ProducerIdBlock, ProducerIdsExhausted, StaleBrokerEpoch
from protocol.apis import Api
from protocol.codecs import decode_request, decode_response, encode_response
from protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    COORDINATOR_LOAD_IN_PROGRESS,
    STALE_BROKER_EPOCH,
    UNKNOWN_SERVER_ERROR,
)
from protocol.header import RequestHeader
from proxy.cluster.upstream import UPSTREAM_ERRORS
from proxy.decision.outcome import Caller, Decided, Forward, OnResponse, Outcome, local_answer
from proxy.producer_ids.allocations import BlockAllocations
from proxy.producer_ids.cluster_claims import BlocksTopicChanged
from proxy.producer_ids.settings import AllocatorSettings
from proxy.producer_ids.sources import Allocator, ProducerIdSource
from proxy.reporting.usage_log import UsageLog
from proxy.state.pid_ledger import LedgerRecorder
from proxy.state.quota_service import QuotaService
from quotas.config import Window
from quotas.token_bucket import TokenBucket, bucket_throttle_ms

log = logging.getLogger(__name__)

_RATE_WINDOW = Window(11, 1)


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


class _AllocateProducerIds(ABC):
    """What both modes share: only the principals of ``cluster_principals`` may ask (the others are
    refused, unthrottled), each at its ``allocations_per_second``."""

    def __init__(self, settings: AllocatorSettings, allocations: BlockAllocations) -> None:
        self._principals = settings.cluster_principals
        self._rate = AllocationRate(settings)
        self._allocations = allocations

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        request = decode_request(Api.ALLOCATE_PRODUCER_IDS, header.api_version, frame[header.length:])
        if caller.principal not in self._principals:
            return _allocation_answer(header, CLUSTER_AUTHORIZATION_FAILED, None, 0)
        return self._admitted(header, request.broker_id, request.broker_epoch, caller, self._rate.charge(caller))

    @abstractmethod
    def _admitted(self, header: RequestHeader, broker_id: int, broker_epoch: int, caller: Caller,
                  throttle_ms: int) -> Decided:
        """The decision on a request of a cluster principal, charged ``throttle_ms``."""


class AllocateProducerIdsHandler(_AllocateProducerIds):
    """``mode = "serve"``: blocks from this proxy's block log (or claimed through the cluster)."""

    def __init__(self, allocator: Allocator, settings: AllocatorSettings, allocations: BlockAllocations) -> None:
        super().__init__(settings, allocations)
        self._allocator = allocator

    async def _admitted(self, header: RequestHeader, broker_id: int, broker_epoch: int, caller: Caller,
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
        self._allocations.allocated(caller.later(), header.client_id or "", broker_id, block)
        return _allocation_answer(header, 0, block, throttle_ms)


class AllocateProducerIdsForwarder(_AllocateProducerIds):
    """``mode = "forward"``: the proxy stands between the brokers and the controller quorum. A request of a
    principal in ``cluster_principals`` is charged, then passed on; the controller's answer goes back with
    the throttle raised into it (the connection muted for it, later requests held), and a block it granted
    is counted. Others are refused here and never reach the controller."""

    def _admitted(self, header: RequestHeader, broker_id: int, broker_epoch: int, caller: Caller,
                  throttle_ms: int) -> Decided:
        client_id = header.client_id or ""

        def count_granted(body: memoryview) -> bytes:
            response = decode_response(Api.ALLOCATE_PRODUCER_IDS, header.api_version, body)
            # the controller checked the broker id and epoch against its registrations before granting
            if response.error_code == 0 and response.producer_id_start >= 0 and response.producer_id_len > 0:
                block = ProducerIdBlock(response.producer_id_start, response.producer_id_len)
                self._allocations.allocated(caller.later(), client_id, broker_id, block)
            return bytes(body)

        return Forward(throttle_ms, on_response=OnResponse(finish=count_granted))


def _allocation_answer(header: RequestHeader, error_code: int, block: ProducerIdBlock | None,
                       throttle_ms: int) -> Outcome:
    body = encode_response(Api.ALLOCATE_PRODUCER_IDS, header.api_version, {
        "throttle_time_ms": throttle_ms, "error_code": error_code,
        "producer_id_start": -1 if block is None else block.first_id,
        "producer_id_len": 0 if block is None else block.size})
    return local_answer(header, body, throttle_ms)


class InitProducerIdHandler:
    """Forwarded (transactional, or ``pid_source = "upstream"``) or answered from a local block.

    Either way, while the user's producer-ID bucket is below zero the answer carries the time until
    it is back at zero, so the producer backs off before its new PID meets the quota.
    """

    def __init__(self, quotas: QuotaService, source: ProducerIdSource | None, ledger: LedgerRecorder,
                 usage: UsageLog) -> None:
        self._quotas = quotas
        self._source = source
        self._ledger = ledger
        self._usage = usage

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Outcome:
        throttle_ms = self._quotas.producer_ids.pending_throttle_ms(caller.user, caller.now_ms)
        if throttle_ms:
            self._usage.producer_ids(caller.user, header.client_id or "", 0, throttle_ms)
        if self._source is None:
            return Forward(throttle_ms)
        request = decode_request(Api.INIT_PRODUCER_ID, header.api_version, frame[header.length:])
        if request.transactional_id is not None:
            return Forward(throttle_ms)  # transactions belong to the cluster's coordinator
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
