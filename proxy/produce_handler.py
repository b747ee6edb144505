"""Produce requests under the byte-rate and producer-ID quotas (SPEC §2, §3, §5).

The handler decides; the connection acts: forward or answer locally, then throttle and mute.
"""

from __future__ import annotations

from typing import NamedTuple

from protocol.header import parse_request_header, response_header_for
from protocol.produce import FIRST_FLEXIBLE_PRODUCE_VERSION, PRODUCE_KEY, produce_acks, scan_produce
from protocol.responses import THROTTLING_QUOTA_EXCEEDED, produce_error_response
from proxy.quota_service import QuotaService
from quotas.config import QuotaType


class ProduceOutcome(NamedTuple):
    forward: bool
    expects_response: bool
    throttle_ms: int
    local_response: bytes | None = None
    """A whole frame (size prefix included) the proxy answers with instead of forwarding."""


class ProduceHandler:
    def __init__(self, quotas: QuotaService) -> None:
        self._quotas = quotas

    def needs_whole_frame(self, user: str) -> bool:
        """A producer-ID quota reads every batch header before anything is forwarded."""
        return self._quotas.config.resolve(QuotaType.PRODUCER_IDS_RATE, user, "") is not None

    def handle(self, frame: memoryview, request_bytes: int, user: str, now_ms: int) -> ProduceOutcome:
        """``frame`` excludes the size prefix and may be only the start of the request when no
        producer-ID quota applies; ``request_bytes`` is the whole request's size (Kafka's
        ``sizeInBytes``), charged to the byte-rate quota."""
        version = frame[2] << 8 | frame[3]
        header = parse_request_header(frame, version >= FIRST_FLEXIBLE_PRODUCE_VERSION)
        client_id = header.client_id or ""
        throttle_ms = self._quotas.produce.record(user, client_id, request_bytes, now_ms).throttle_ms
        if not self.needs_whole_frame(user):
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
