"""Fetch requests under the consumer byte-rate quota (KIP-13, ``consumer_byte_rate``), as Kafka meters them.

Kafka caps a consumer's ``max_bytes`` to what the quota window allows, records the size of the response
it would send and, when that throttles, takes the bytes back and answers with no records at all, the
throttle time and (in an incremental fetch session) the session id; the connection is muted for the
throttle and the consumer fetches the same records again (``KafkaApis.handleFetchRequest``,
``FetchContext.getThrottledResponse``). The proxy learns the size when the cluster's response arrives:
over the quota, it sends the client Kafka's empty answer and drops the records (read, never copied).

One thing the proxy cannot undo: the cluster sent those records in the consumer's fetch session. A
throttled incremental fetch leaves the session at the consumer's offsets (the records come again), but
the cluster has already told it the partitions' high watermarks, so they reach the consumer with its next
records; a throttled full fetch opened a session the consumer never learns of, which the cluster's
session cache evicts (``FetchSessionCache``).
"""

from __future__ import annotations

from protocol.fetch import (
    capped_fetch_request,
    fetch_response_size,
    fetch_response_start,
    fetch_session_epoch,
    throttled_fetch_response_body,
)
from protocol.header import read_request_header, response_header_length
from proxy.decision.outcome import FORWARD, Caller, ChargedResponse, Outcome, frame
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
        incremental = fetch_session_epoch(request, header) > 0
        flexible, version = header.flexible, header.api_version
        usage = self._usage

        def charge(response_start: memoryview, response_bytes: int) -> ChargedResponse:
            size = fetch_response_size(response_start, response_bytes, flexible)
            decision = manager.record_unless_throttled(user, client_id, size, now_ms(), broker)
            usage.fetch(user, client_id, size if decision.admitted else 0, decision.throttle_ms)
            usage.observed(user, client_id, decision.observed_ms)
            if decision.admitted:
                return ChargedResponse(decision.throttle_ms)
            upstream = fetch_response_start(response_start[response_header_length(response_start, flexible):],
                                            version)
            # a full fetch's session is not opened, as Kafka opens none for a throttled one; a throttle of the
            # cluster's own is kept, as the proxy keeps it in any response
            return ChargedResponse(decision.throttle_ms, throttled_fetch_response_body(
                version, max(decision.throttle_ms, upstream.throttle_ms), upstream.session_id if incremental else 0))

        return Outcome(replacement=None if capped is None else frame(capped), charge_response=charge)
