"""The ``request_rate`` quota: every request a client sends counts one (ApiVersions and SASL's excepted,
as they come before a client is known or are the proxy's own answers).

Charged as the request is read, with the byte rates' Rate math, windows and scope; the throttle goes into
the response beside any other quota's (the largest wins, as Kafka answers with the largest of its quotas'
throttles) and the client is muted for it. Kafka's ``request_percentage`` measures the broker's thread
time and stays the cluster's: it is forwarded, never replaced.
"""

from __future__ import annotations

from protocol.header import RequestHeader, peek_client_id
from proxy.decision.outcome import Caller
from proxy.handlers.charges import CHARGES, Charge
from proxy.reporting.usage_log import UsageLog
from proxy.state.quota_service import QuotaService
from quotas.config import QuotaType
from quotas.decisions import Requester

_UNCHARGED_APIS = frozenset(api_key for api_key, charge in CHARGES.items() if charge is Charge.TO_CONNECT)
"""What a client needs to connect and log in, whatever its rate."""


class RequestRateHandler:
    def __init__(self, quotas: QuotaService, usage: UsageLog, charges: bool = True) -> None:
        """``charges`` False: nothing is charged (in front of the controller quorum, where brokers talk)."""
        self._quotas = quotas
        self._usage = usage
        self._charges = charges

    def throttle_ms(self, frame: memoryview, api_key: int, header: RequestHeader | None, caller: Caller) -> int:
        """Charge one request (size prefix excluded; ``api_key`` read from it already; ``header`` when it was read
        too) to its entity's request rate; its throttle."""
        manager = self._quotas.requests
        if not (self._charges and manager.config.configures(QuotaType.REQUEST_RATE)):
            return 0  # the common case: not even the client id is read
        if api_key in _UNCHARGED_APIS:
            return 0
        # without a schema for its api, a request's client id is still read: it comes before the tagged fields
        client_id = peek_client_id(frame) if header is None else header.client_id or ""
        decision = manager.record(Requester(caller.user, client_id, caller.broker), 1, caller.now_ms)
        self._usage.observed(caller.user, client_id, decision.observed_ms)
        return decision.throttle_ms
