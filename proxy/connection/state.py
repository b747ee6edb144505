"""What one client connection knows, shared by the modules that make up its behaviour.

A client connection is one object (``ClientConnection``, in ``client``) written in sides: the request side
(``requests``) and the response side (``responses``). Its link to the cluster (``upstream_link``), its login gate
(``login``), its mute (``mute``), the requests awaiting answers (``in_flight``) and the frames passing through as they
arrive (``passage``) are objects of their own. The sides share the state declared here, and call one another only
through the methods this class declares (the ones below ``TYPE_CHECKING`` are written in the other sides).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

from protocol.framing import FrameEnds, FrameSplitter
from protocol.header import REQUEST_PREFIX_BYTES
from proxy.connection.close_reason import CloseReason
from proxy.connection.context import ProxyContext, UpstreamResolver
from proxy.connection.flow import PauseReason, ReadGate
from proxy.connection.in_flight import InFlightRequests
from proxy.connection.login import LoginGate
from proxy.connection.mute import ChannelMute
from proxy.connection.outbox import Outbox
from proxy.connection.passage import FramePassage
from proxy.connection.splice import FrameSplice
from proxy.connection.upstream_link import UpstreamLink
from proxy.decision.interception import RequestStream
from quotas.config import ANONYMOUS

"""The principal of a connection with neither a login nor a client certificate."""

_MIN_RESPONSE_FRAME_BYTES = 4  # correlation id
CUT_THROUGH_AFTER_BYTES = 64 * 1024
"""A request frame still incomplete after this many bytes is forwarded as it arrives: holding a
megabyte-sized produce request until its last byte adds a loopback transfer to every request. The
same holds for a Fetch response, the one large response whose only rewrite (its throttle) is at its
start."""


SPLICE_AFTER_BYTES = 64 * 1024
"""The rest of a frame cut through (a request, or a Fetch response) is spliced (``splice``) when at least
this much is still to come: starting a splice costs a pipe and two duplicated descriptors."""

READ_AFTER_SPLICED_RECORDS_BYTES = 1024
"""What a read takes right after a request's records were spliced: the structure up to the next batch's
header (a partition's index and size, a topic's name) fits."""

READ_BYTES = 256 * 1024
"""The most one read takes from a client (uvloop's own read size)."""


def read_bytes_for(buffer_high: int) -> int:
    """What one read takes at most for a connection whose sides may each hold ``buffer_high`` bytes: a
    read is held whole while its frames wait, so it must stay small beside the share."""
    return max(4096, min(READ_BYTES, buffer_high // 4))


class HeldFrames:
    """Whole request frames read but not yet decided, in order, kept as they were read: each as its
    chunk, the chunk's frame ends and the first of them still held. A chunk is never copied or split
    again however many times its frames are held and released (tens of thousands of small frames
    arrive in one read)."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: deque[tuple[bytes | bytearray, FrameEnds, int]] = deque()

    def __bool__(self) -> bool:
        return bool(self._parts)

    def hold(self, chunk: bytes | bytearray, ends: FrameEnds, first: int = 0) -> None:
        """Hold the frames of ``chunk`` from ``ends[first]`` on, after the ones held already."""
        if first < len(ends):
            self._parts.append((chunk, ends, first))

    def take(self) -> deque[tuple[bytes | bytearray, FrameEnds, int]]:
        parts, self._parts = self._parts, deque()
        return parts


class ConnectionState:
    """One client connection, its upstream connection, and the requests between them."""

    def __init__(self, context: ProxyContext, resolve_upstream: UpstreamResolver, listener: str) -> None:
        self._context = context
        self._config = context.config
        self._metrics = context.metrics
        self._listener = listener
        self._requests = FrameSplitter(self._config.max_frame_bytes, REQUEST_PREFIX_BYTES)
        self._responses = FrameSplitter(self._config.max_frame_bytes, _MIN_RESPONSE_FRAME_BYTES)
        self._in_flight = InFlightRequests()
        self._transport: asyncio.Transport | None = None
        self._link = UpstreamLink(resolve_upstream, context.upstream_connects, context.client_upstream_access,
                                  self._config.connect_timeout_s, self._config.max_frame_bytes)
        """The connection's own connection to the cluster."""
        self.gate: ReadGate
        self._to_client: Outbox
        """Everything the client is sent goes through it (``outbox``)."""
        self._peer = "?"
        self._closed = False
        self._draining = False
        self._last_activity = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._request_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop
        self._before_upstream = bytearray()
        self._user = ANONYMOUS
        self._mute: ChannelMute
        """The throttle, the login step and a close asked for: when requests read wait undecided."""
        self._request_passage = FramePassage()
        """The rest of a large request frame, going upstream as it arrives."""
        self._cut_through_scan: RequestStream | None = None
        """What reads the request being cut through as its bytes go by (a quota's scan of its batches)."""
        self._cut_through_correlation_id = 0
        """The correlation id of that request, whose answer carries the throttle its reading ends in."""
        self._batch_header_next = False
        """The client's next read is the structure after spliced records (``READ_AFTER_SPLICED_RECORDS_BYTES``)."""
        self._splice: FrameSplice | None = None
        """Moves the rest of large request frames socket to socket (made for the first)."""
        self._response_splice: FrameSplice | None = None
        """Moves the rest of large Fetch responses socket to socket (made for the first)."""
        self._response_passage = FramePassage()
        """The rest of a large Fetch response, going to the client as it arrives (or dropped)."""
        self._upstream_reads_into_frame = False
        """The cluster's connection's last read buffer was the rest of a response frame read whole."""
        self._held = HeldFrames()
        """Requests that wait behind a request whose handler asks the cluster first, a throttle, a backlog
        or too many requests in flight (``_holding``)."""
        self._buffer_high = self._config.write_buffer_high_bytes
        """Either side stops being read while the other has this much unsent: ``write_buffer_high_bytes`` or
        the connection's share of ``max_buffered_bytes``, whichever is smaller (``set_buffer_share``)."""
        self._read_bytes = read_bytes_for(self._buffer_high)
        self._settling: asyncio.Task[None] | None = None
        self._login: LoginGate | None = None
        """The login, when the proxy takes logins, from the first request to the user it names."""
        self._close_after_write = False

    def _holding(self) -> bool:
        """Later requests wait: for a handler asking the cluster, for a throttled response and its mute, for
        the client to read its answers, or for the cluster to answer some of the requests out."""
        return (self._mute.holds or self._settling is not None
                or self._link.opening or self._to_client.behind
                or self._in_flight.local_answer_bytes >= self._buffer_high  # a client reading nothing must not
                # make the proxy hold its own answers without bound
                or len(self._in_flight) >= self._config.max_in_flight_requests)

    def _awaiting_responses(self) -> bool:
        return bool(self._in_flight) or self._response_passage.remaining > 0

    def _close_if_answered(self) -> None:
        if self._mute.closing and not self._awaiting_responses():
            self.close(CloseReason.ACKS0_PARTITION_ERROR)

    def _pause_if_holding(self) -> None:
        """Stop reading while requests are held, but not before the frame being cut through is whole:
        the cluster answers it only once it has its last byte."""
        if self._holding() and not self._request_passage.remaining:
            self.gate.pause(PauseReason.HOLDING)

    def _login_step_answered(self) -> None:
        """Answers were sent: once every request read before the login completed has its answer, the login gate
        lets the next be read (``LoginGate.step_answered``)."""
        if self._login is not None and not self._awaiting_responses() and not self._closed:
            self._login.step_answered()

    if TYPE_CHECKING:  # written in the sides that make up ``ClientConnection``
        def close(self, reason: CloseReason, detail: str = "", warn: bool | None = None) -> None: ...
        def _start_upstream(self) -> None: ...
        def _release_held(self) -> None: ...
        def _send_local_responses_in_turn(self) -> None: ...
        def _after_responses(self) -> None: ...
