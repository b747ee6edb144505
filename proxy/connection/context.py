"""What a client connection needs from the server that accepted it, and what it is handed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from proxy.cluster.upstream import ConnectTurns, UpstreamAccess
from proxy.decision.interception import RequestDecisions
from proxy.reporting.metrics import ProxyMetrics
from proxy.security.sasl import SaslServer
from proxy.security.sasl_inspect import SaslInspector
from proxy.security.tls import PrincipalMapper
from proxy.settings.config import HostPort, ProxyConfig


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
    read_buffer: memoryview
    """Where every client read lands (``READ_BYTES``), copied out at once: reads happen one at a time."""

    @property
    def requests(self) -> RequestDecisions:
        """What decides on each request (``proxy.handlers.chain``), and what becomes of its answer: the connection
        only carries decisions out."""

    def admit_user(self, user: str) -> int:
        """Charge a connection to the ``connection_creation_rate`` of the user a login or certificate named:
        0, or the delay after which to close it unserved."""

    def new_login(self, peer: str) -> SaslServer | SaslInspector | None:
        """The connection's SASL login, or None when the proxy takes no logins (every client ANONYMOUS)."""

    def connection_opened(self, connection: Connection) -> None: ...
    def connection_closed(self, connection: Connection) -> None: ...


UpstreamResolver = Callable[[], Awaitable[HostPort]]

