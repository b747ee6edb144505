"""What a client connection needs from the server that accepted it, and what it is handed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from protocol.addresses import BrokerAddress
from protocol.api_versions import VersionRange
from proxy.cluster.upstream import UpstreamAccess
from proxy.decision.outcome import Caller, Decided
from proxy.reporting.metrics import ProxyMetrics
from proxy.security.sasl import SaslServer
from proxy.security.sasl_inspect import SaslInspector
from proxy.security.tls import PrincipalMapper
from proxy.settings.config import HostPort, ProxyConfig


class ProduceDecisions(Protocol):
    """What a connection asks of the Produce handler: the one handler that may decide on a request's
    start, while the rest of it is still arriving (cut through)."""

    def handle(self, frame: memoryview, request_bytes: int, caller: Caller, whole: bool = True) -> Decided:
        """``frame`` is the whole request (size prefix excluded) or, when not ``whole``, its start;
        ``request_bytes`` is the whole request's size."""

    def needs_whole_frame(self, user: str) -> bool:
        """The user's requests are decided only once whole (never cut through)."""

    def scans_batches(self, user: str) -> bool:
        """The user's batch headers are read: a request cut through is kept until complete and handed
        to ``producer_id_throttle``."""

    def producer_id_throttle(self, frame: memoryview, caller: Caller) -> int | Awaitable[int]:
        """The producer-ID throttle of a request forwarded while it arrived, now complete."""


class Connection(Protocol):
    """A client connection as the server that accepted it sees it: at shutdown, drained, then aborted."""

    def drain(self) -> None:
        """Stop taking requests; close once every forwarded request has its answer."""

    def abort(self) -> None:
        """Force-close without waiting for buffered writes."""


class ProxyContext(Protocol):
    """What a connection needs from the server that accepted it."""

    config: ProxyConfig
    metrics: ProxyMetrics
    api_version_ceilings: Mapping[int, int]
    served_api_versions: Mapping[int, VersionRange]
    client_upstream_access: UpstreamAccess
    principal_mapper: PrincipalMapper
    handlers: Mapping[int, RequestHandler]
    rewrites_addresses: bool
    """False in front of the controller quorum: brokers must reach the controllers' own endpoints."""

    @property
    def produce_handler(self) -> ProduceDecisions: ...

    def new_login(self, peer: str) -> SaslServer | SaslInspector | None:
        """The connection's SASL login, or None when the proxy takes no logins (every client ANONYMOUS)."""

    def api_versions_answer(self, frame: memoryview) -> Decided:
        """ApiVersions answered by the proxy from the cluster's list (before a login, when no upstream
        connection may be open yet)."""

    def advertise_broker(self, broker: BrokerAddress) -> tuple[str, int]: ...
    def connection_opened(self, connection: Connection) -> None: ...
    def connection_closed(self, connection: Connection) -> None: ...


UpstreamResolver = Callable[[], Awaitable[HostPort]]
RequestHandler = Callable[[memoryview, Caller], Decided]
"""Decides on one whole request (size prefix excluded) of the api key it is registered for."""

