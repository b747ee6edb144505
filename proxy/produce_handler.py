"""Produce requests under the byte-rate and producer-ID quotas (SPEC §2, §3, §5).

The handler decides; the connection acts: forward or answer locally, then throttle and mute.
"""

from __future__ import annotations

from typing import NamedTuple

from protocol.header import parse_request_header, response_header_for
from protocol.produce import FIRST_FLEXIBLE_PRODUCE_VERSION, PRODUCE_KEY, produce_acks, scan_produce
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
        request's size (Kafka's ``sizeInBytes``), charged to the byte-rate quota."""
        version = frame[2] << 8 | frame[3]
        header = parse_request_header(frame, version >= FIRST_FLEXIBLE_PRODUCE_VERSION)
        client_id = header.client_id or ""
        throttle_ms = self._quotas.produce.record(user, client_id, request_bytes, now_ms).throttle_ms
        if not whole or not self.scans_batches(user):
            return ProduceOutcome(True, produce_acks(frame, header) != 0, throttle_ms)
        scan = scan_produce(frame, header)
        decision = self._quotas.producer_ids.check(user, scan.producer_ids(), now_ms)
        throttle_ms = max(throttle_ms, decision.throttle_ms)
        if decision.admitted:
            return ProduceOutcome(True, scan.acks != 0, throttle_ms)
        if scan.acks == 0:
            return ProduceOutcome(False, False, throttle_ms)
        body = produce_error_response(scan, version, THROTTLING_QUOTA_EXCEEDED, throttle_ms)
        response_header = response_header_for(PRODUCE_KEY, header.flexible, header.correlation_id)
        size = len(response_header) + len(body)
        return ProduceOutcome(False, True, throttle_ms, b"".join((size.to_bytes(4, "big"), response_header, body)))

    def producer_id_throttle(self, frame: memoryview, user: str, now_ms: int) -> int:
        """Throttle mode, for a request forwarded while it arrived: check its producer IDs now."""
        version = frame[2] << 8 | frame[3]
        header = parse_request_header(frame, version >= FIRST_FLEXIBLE_PRODUCE_VERSION)
        scan = scan_produce(frame, header)
        return self._quotas.producer_ids.check(user, scan.producer_ids(), now_ms).throttle_ms
