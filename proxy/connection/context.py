"""What a client connection needs from the server that accepted it, and what it is handed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from protocol.produce import StreamedProduceScan
from proxy.cluster.upstream import ConnectTurns, UpstreamAccess
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

    def needs_whole_frame(self, user: str, frame_start: memoryview) -> bool:
        """The request starting with ``frame_start`` (size prefix excluded) is decided only once whole (never cut
        through)."""

    def scans_batches(self, user: str) -> bool:
        """The user's batch headers are read: a request cut through is scanned as it goes by
        (``stream_scan``) and, complete, handed to ``completed_throttle``."""

    def stream_scan(self, frame_start: memoryview, frame_bytes: int) -> StreamedProduceScan:
        """A scan to feed a request cut through as it goes by; ``frame_start`` holds its header."""

    def completed_throttle(self, streamed: StreamedProduceScan, caller: Caller) -> int | Awaitable[int]:
        """The producer-ID and topic throttle of a request forwarded while it arrived, now complete."""


class RequestRateDecisions(Protocol):
    def throttle_ms(self, frame: memoryview, api_key: int, caller: Caller) -> int:
        """Charge one request (size prefix excluded) to the ``request_rate`` quota; its throttle."""


class Connection(Protocol):
    """A client connection as the server that accepted it sees it: at shutdown, drained, then aborted."""

    def drain(self) -> None:
        """Stop taking requests; close once every forwarded request has its answer."""

    def abort(self) -> None:
        """Force-close without waiting for buffered writes."""

    def set_buffer_share(self, high_bytes: int) -> None:
        """Stop reading either side while the other has ``high_bytes`` unsent (its share of the total)."""


class ProxyContext(Protocol):
    """What a connection needs from the server that accepted it."""

    config: ProxyConfig
    metrics: ProxyMetrics
    client_upstream_access: UpstreamAccess
    upstream_connects: ConnectTurns
    principal_mapper: PrincipalMapper
    handlers: Mapping[int, RequestHandler]
    read_buffer: memoryview
    """Where every client read lands (``READ_BYTES``), copied out at once: reads happen one at a time."""
    rewrites_addresses: bool
    """False in front of the controller quorum: brokers must reach the controllers' own endpoints."""

    @property
    def produce_handler(self) -> ProduceDecisions: ...

    @property
    def request_rate(self) -> RequestRateDecisions: ...

    def admit_user(self, user: str) -> int:
        """Charge a connection to the ``connection_creation_rate`` of the user a login or certificate named:
        0, or the delay after which to close it unserved."""

    def new_login(self, peer: str) -> SaslServer | SaslInspector | None:
        """The connection's SASL login, or None when the proxy takes no logins (every client ANONYMOUS)."""

    def api_versions_answer(self, frame: memoryview) -> Decided:
        """ApiVersions answered by the proxy from the cluster's list (before a login, when no upstream
        connection may be open yet)."""

    def adapt_api_versions(self, body: memoryview, api_version: int) -> bytes | None:
        """The cluster's ApiVersions answer body as the client gets it, or None when it stands as it is."""

    def rewrite_addresses(self, api_key: int, api_version: int, body: bytes | memoryview) -> bytes | None:
        """A response body naming brokers, rewritten to name the proxy's listeners (None: unchanged)."""

    def connection_opened(self, connection: Connection) -> None: ...
    def connection_closed(self, connection: Connection) -> None: ...


UpstreamResolver = Callable[[], Awaitable[HostPort]]
RequestHandler = Callable[[memoryview, Caller], Decided]
"""Decides on one whole request (size prefix excluded) of the api key it is registered for."""

