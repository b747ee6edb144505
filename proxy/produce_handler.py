"""Produce requests under the byte-rate and producer-ID quotas (SPEC §2, §3, §5).

The handler decides; the connection acts: forward or answer locally, then throttle and mute.
"""

from __future__ import annotations

from typing import NamedTuple

from protocol.apis import Api
from protocol.header import RequestHeader, parse_request_header, peek_request, response_header_for
from protocol.produce import FIRST_FLEXIBLE_PRODUCE_VERSION, produce_acks, scan_produce
from protocol.responses import THROTTLING_QUOTA_EXCEEDED, produce_error_response
from proxy.quota_service import QuotaService
from quotas.config import PidQuotaMode, QuotaType


class ProduceOutcome(NamedTuple):
    forward: bool
    expects_response: bool
    throttle_ms: int
    local_response: bytes | None = None
    """A whole frame (size prefix included) the proxy answers with instead of forwarding."""


class ProduceHandler:
    def __init__(self, quotas: QuotaService) -> None:
        self._quotas = quotas

    def scans_batches(self, user: str) -> bool:
        """A producer-ID quota applies: the request's batch headers must be read."""
        return self._quotas.config.resolve(QuotaType.PRODUCER_IDS_RATE, user, "") is not None

    def needs_whole_frame(self, user: str) -> bool:
        """Reject mode decides before anything is forwarded; throttle mode may stream the request
        and check its producer IDs once it is complete (``producer_id_throttle``)."""
        return self.scans_batches(user) and self._quotas.config.settings.producer_id_mode is PidQuotaMode.REJECT

    def handle(self, frame: memoryview, request_bytes: int, user: str, now_ms: int,
               whole: bool = True) -> ProduceOutcome:
        """``frame`` excludes the size prefix; it is only the start of the request when ``whole``
        is False (cut through: producer IDs are checked later). ``request_bytes`` is the whole
        request's size (Kafka's ``sizeInBytes``), charged to the byte-rate quota.

        Everything is parsed before anything is charged, so a request that turns out malformed
        (or whose start is too short to judge yet) costs no quota.
        """
        header = _header(frame)
        scan = scan_produce(frame, header) if whole and self.scans_batches(user) else None
        acks = scan.acks if scan is not None else produce_acks(frame, header)
        throttle_ms = self._quotas.produce.record(user, header.client_id or "", request_bytes, now_ms).throttle_ms
        if scan is None:
            return ProduceOutcome(True, acks != 0, throttle_ms)
        decision = self._quotas.producer_ids.check(user, scan.producer_ids(), now_ms)
        throttle_ms = max(throttle_ms, decision.throttle_ms)
        if decision.admitted:
            return ProduceOutcome(True, acks != 0, throttle_ms)
        if acks == 0:
            return ProduceOutcome(False, False, throttle_ms)
        body = produce_error_response(scan, header.api_version, THROTTLING_QUOTA_EXCEEDED, throttle_ms)
        response_header = response_header_for(Api.PRODUCE, header.flexible, header.correlation_id)
        size = len(response_header) + len(body)
        return ProduceOutcome(False, True, throttle_ms, b"".join((size.to_bytes(4, "big"), response_header, body)))

    def producer_id_throttle(self, frame: memoryview, user: str, now_ms: int) -> int:
        """Throttle mode, for a request forwarded while it arrived: check its producer IDs now."""
        scan = scan_produce(frame, _header(frame))
        return self._quotas.producer_ids.check(user, scan.producer_ids(), now_ms).throttle_ms


def _header(frame: memoryview) -> RequestHeader:
    version = peek_request(frame).api_version
    return parse_request_header(frame, version >= FIRST_FLEXIBLE_PRODUCE_VERSION)
