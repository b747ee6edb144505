"""Fetch requests under the consumer byte-rate quota (KIP-13, ``consumer_byte_rate``).

Kafka records a Fetch response's size against the consumer's quota and, over the quota, sends an
empty response carrying the throttle time, un-records the bytes and mutes the connection (the
consumer fetches the same records again after the throttle). The proxy already holds the records
when it learns the size, so it forwards them with the throttle time and mutes the connection for
that time instead: the consumer's rate over time is the same, and no record is read twice. As
Kafka does, a consumer's ``max_bytes`` is first capped to what the quota window allows.
"""

from __future__ import annotations

from protocol.fetch import capped_fetch_request, fetch_response_size
from protocol.header import read_request_header
from proxy.decision.outcome import FORWARD, Caller, Outcome, frame
from proxy.reporting.usage_log import UsageLog
from proxy.state.quota_service import QuotaService, now_ms


class FetchHandler:
    def __init__(self, quotas: QuotaService, usage: UsageLog) -> None:
        self._quotas = quotas
        self._usage = usage

    def __call__(self, request: memoryview, caller: Caller) -> Outcome:
        manager = self._quotas.fetch
        header = read_request_header(request)
        client_id = header.client_id or ""
        user, _, broker = caller
        window_bytes = manager.max_value_in_window(user, client_id)
        if window_bytes is None:
            return FORWARD
        # a replica_id >= 0 is not believed: followers never come through a client listener, and
        # trusting the field would let any consumer fetch uncharged
        capped = capped_fetch_request(request, header, int(min(window_bytes, 2**31 - 1)))
        flexible = header.flexible
        usage = self._usage

        def charge(response_start: memoryview, response_bytes: int) -> int:
            size = fetch_response_size(response_start, response_bytes, flexible)
            throttle_ms = manager.record(user, client_id, size, now_ms(), broker).throttle_ms
            usage.fetch(user, client_id, size, throttle_ms)
            return throttle_ms

        return Outcome(replacement=None if capped is None else frame(capped), charge_response=charge)
