"""The one interface between the connection engine and what decides on its requests.

The engine reads a request, hands it to ``RequestDecisions`` with who sent it (``Sender``) and carries out the
``Outcome`` it gets (``Forward``, ``Respond`` or ``Close``, with a throttle); it knows no API, no quota and no quota
time (the chain reads its clock once for a request and hands it down in ``Caller``, whose ``later`` reads it again for
a decision taken after the request waited). A request still arriving may be decided on its start (``start``), its rest
then read as it goes by (``RequestStream``).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol, runtime_checkable

from protocol.header import RequestHeader
from proxy.decision.outcome import Caller, Decided, Outcome, Sender


class RequestHandler(Protocol):
    """Decides on the requests of the api keys it is registered for."""

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        """One whole request (``frame``: size prefix excluded, header included; its body starts at
        ``header.length``)."""


class Login(Protocol):
    """A connection's login as the decisions see it (the proxy's own SASL server, or its reading of the client's
    login to the cluster)."""

    @property
    def done(self) -> bool: ...

    @property
    def needs_upstream_before_login(self) -> bool: ...

    def handle(self, frame: memoryview) -> Decided: ...


class RequestStream(Protocol):
    """A request forwarded while it arrives, read as it goes by."""

    @property
    def records_ahead(self) -> int:
        """Bytes coming next that nothing reads (they may go upstream unread)."""

    def feed(self, data: bytes | bytearray | memoryview) -> None: ...

    def skipped(self, nbytes: int) -> None:
        """``nbytes`` of the bytes ahead went upstream unread."""

    def completed(self) -> int | Awaitable[int]:
        """The request is complete: its throttle (charged now, or once what it names is known)."""


@runtime_checkable
class StreamingRequestHandler(RequestHandler, Protocol):
    """A handler that can also decide on a request from its start, while the rest still arrives (a Produce request
    megabytes long): the connection forwards the rest as it comes."""

    def on_request_start(self, header: RequestHeader, frame_start: memoryview, request_bytes: int, caller: Caller
                         ) -> tuple[Decided, RequestStream | None] | None:
        """A decision on the request from its start (``request_bytes``: the whole request's size), and the stream to
        hand its bytes to if the rest must be read; None: it is judged once whole (``on_request``)."""


class RequestDecisions(Protocol):
    def decide(self, frame: memoryview, api_key: int, api_version: int, sender: Sender, login: Login | None,
               upstream_open: bool) -> Decided:
        """One whole request (size prefix excluded). ``login``: the connection's, if it takes one;
        ``upstream_open``: the cluster can be asked on this connection."""

    def start(self, frame_start: memoryview, api_key: int, api_version: int, request_bytes: int,
              sender: Sender) -> tuple[Outcome, RequestStream | None] | None:
        """A request whose start is here and whose rest (``request_bytes`` in all) is still to come, on a connection
        logged in: a decision now, and what to hand its bytes to; None when it is judged once whole (a login's
        requests and ApiVersions always are). Raises ``ProtocolError`` when the start is too short to judge yet."""
