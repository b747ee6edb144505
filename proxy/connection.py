"""One client connection and its dedicated upstream connection.

Requests flow client -> upstream as their original bytes; responses flow back, rewritten only
where they name brokers (addresses) or list api versions (capped). Kafka answers requests on one
connection in order, so a deque of in-flight requests pairs each response with its request.

Requests are decided (and charged) as they are read, so an unthrottled client keeps pipelining.
Once a request is given a throttle, the requests behind it are held unread and undecided until its
response has been sent and the throttle has run out, as a Kafka broker reads nothing from a muted
channel (``SocketServer``): a client that pipelines gets no more than one that waits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple, Protocol, TypeVar, cast

from protocol.addresses import BrokerAddress, carries_addresses, rewrite_broker_addresses
from protocol.api_versions import VersionRange, adapt_api_versions
from protocol.apis import KNOWN_API_KEYS, Api, is_flexible_request
from protocol.codecs import max_version
from protocol.errors import ProtocolError
from protocol.framing import SIZE_PREFIX_BYTES, FrameSplitter
from protocol.header import (
    REQUEST_PREFIX_BYTES,
    peek_request,
    response_correlation_id,
    response_header_length,
)
from protocol.throttle import raise_throttle
from proxy.config import HostPort, ProxyConfig
from proxy.flow import PauseReason, ReadGate
from proxy.metrics import ProxyMetrics
from proxy.outcome import FORWARD, Caller, Decided, Outcome, ResponseCharge, ResponseFinisher
from proxy.produce_handler import ProduceHandler
from proxy.quota_service import now_ms
from proxy.sasl import SaslServer
from proxy.sasl_inspect import SaslInspector
from proxy.tls import PrincipalMapper, peer_principal_name
from proxy.upstream_client import UPSTREAM_ERRORS, UpstreamAccess, open_upstream
from quotas.token_bucket import remaining_throttle_ms

log = logging.getLogger(__name__)
_T = TypeVar("_T")

ANONYMOUS = "ANONYMOUS"
"""The principal of a connection with neither a login nor a client certificate."""

_MIN_RESPONSE_FRAME_BYTES = 4  # correlation id
NEWEST_API_VERSIONS = max_version(Api.API_VERSIONS)
_SASL_APIS = (Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE)
CUT_THROUGH_AFTER_BYTES = 64 * 1024
"""A request frame still incomplete after this many bytes is forwarded as it arrives: holding a
megabyte-sized produce request until its last byte adds a loopback transfer to every request. The
same holds for a Fetch response, the one large response whose only rewrite (its throttle) is at its
start."""


class InFlight(NamedTuple):
    correlation_id: int
    api_key: int
    api_version: int
    throttle_ms: int = 0
    """The proxy's throttle for this request: raised into the response, then the client is muted."""
    local_response: bytes | None = None
    """The proxy's own answer (a whole frame), sent in turn instead of an upstream response."""
    finish: ResponseFinisher | None = None
    close_after_response: bool = False
    read_at: float = 0.0
    """``perf_counter`` when the request was read, for the latency histogram (uvloop's loop time
    moves in whole milliseconds, coarser than most requests take)."""
    throttle_since_ms: int | None = None
    """See ``Outcome.throttle_since_ms``."""
    charge_response: ResponseCharge | None = None

    @property
    def holds_later_requests(self) -> bool:
        """Later requests wait for this one's response (and the mute it brings): it has a throttle, or
        its cost, hence its throttle, is known only from its response (a metered Fetch)."""
        return bool(self.throttle_ms) or self.charge_response is not None


class ProxyContext(Protocol):
    """What a connection needs from the server that accepted it."""

    config: ProxyConfig
    metrics: ProxyMetrics
    api_version_ceilings: Mapping[int, int]
    served_api_versions: Mapping[int, VersionRange]
    client_upstream_access: UpstreamAccess
    principal_mapper: PrincipalMapper
    produce_handler: ProduceHandler
    handlers: Mapping[int, RequestHandler]
    rewrites_addresses: bool
    """False in front of the controller quorum: brokers must reach the controllers' own endpoints."""

    def new_login(self, peer: str) -> SaslServer | SaslInspector | None:
        """The connection's SASL login, or None when the proxy takes no logins (every client ANONYMOUS)."""

    def api_versions_answer(self, frame: memoryview) -> Decided:
        """ApiVersions answered by the proxy from the cluster's list (before a login, when no upstream
        connection may be open yet)."""

    def advertise_broker(self, broker: BrokerAddress) -> tuple[str, int]: ...
    def connection_opened(self, connection: ClientConnection) -> None: ...
    def connection_closed(self, connection: ClientConnection) -> None: ...


UpstreamResolver = Callable[[], Awaitable[HostPort]]
RequestHandler = Callable[[memoryview, Caller], Decided]
"""Decides on one whole request (size prefix excluded) of the api key it is registered for."""


class UpstreamProtocol(asyncio.Protocol):
    """The proxy's side of the broker connection; everything is delegated to the client side."""

    def __init__(self, client: ClientConnection) -> None:
        self._client = client

    def data_received(self, data: bytes) -> None:
        self._client.upstream_data_received(data)

    def pause_writing(self) -> None:
        self._client.gate.pause(PauseReason.PEER_BACKPRESSURE)

    def resume_writing(self) -> None:
        self._client.gate.resume(PauseReason.PEER_BACKPRESSURE)

    def connection_lost(self, exc: Exception | None) -> None:
        self._client.upstream_lost(exc)


class ClientConnection(asyncio.Protocol):
    def __init__(self, context: ProxyContext, resolve_upstream: UpstreamResolver, listener: str) -> None:
        self._context = context
        self._config = context.config
        self._metrics = context.metrics
        self._resolve_upstream = resolve_upstream
        self._listener = listener
        self._requests = FrameSplitter(self._config.max_frame_bytes, REQUEST_PREFIX_BYTES)
        self._responses = FrameSplitter(self._config.max_frame_bytes, _MIN_RESPONSE_FRAME_BYTES)
        self._in_flight: deque[InFlight] = deque()
        self._transport: asyncio.Transport | None = None
        self._upstream: asyncio.Transport | None = None
        self._upstream_gate: ReadGate | None = None
        self.gate: ReadGate
        self._peer = "?"
        self._closed = False
        self._draining = False
        self._last_activity = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._request_timer: asyncio.TimerHandle | None = None
        self._upstream_heard_at = 0.0
        """``perf_counter`` when the cluster last sent something on this connection."""
        self._connect_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop
        self._before_upstream = bytearray()
        self._user = ANONYMOUS
        self._mute_timer: asyncio.TimerHandle | None = None
        self._muted_until = 0.0
        self._cut_through_remaining = 0
        """Bytes of a request frame still to come that go upstream without buffering."""
        self._cut_through_copy: bytearray | None = None
        self._response_cut_through_remaining = 0
        """Bytes of a response frame still to come that go to the client without buffering."""
        self._mute_after_cut_through_ms: int | None = None
        self._held = bytearray()
        """Whole request frames read but not yet decided: they wait behind a request whose handler
        asks the cluster first, or behind a throttle (``_holding``)."""
        self._client_backlogged = False
        """The client's write buffer is above its high-water mark (``pause_writing``)."""
        self._local_answer_bytes = 0
        """Bytes of the proxy's own answers waiting their turn: beyond the high-water mark, later requests
        wait too (a client reading nothing must not make the proxy hold answers without bound)."""
        self._throttled_response_pending = False
        """A request holding later ones (``InFlight.holds_later_requests``) has not had its response sent
        yet: the mute starts then."""
        self._close_when_answered = False
        """A request without a response (acks=0) asked to close the connection: Kafka handles requests
        one at a time, so the ones before it are answered first and the ones after it never read."""
        self._settling: asyncio.Task[None] | None = None
        self._sasl: SaslServer | SaslInspector | None = None
        self._login_step_pending = False
        """Before a login completes, one request at a time: the next waits unread until this one's answer
        is sent (no pipelined password guesses)."""
        self._login_timer: asyncio.TimerHandle | None = None
        self._close_after_write = False
        self._login_writer: asyncio.StreamWriter | None = None
        self._upstream_broker = ""
        """The broker reached upstream, as ``ip:port`` of the peer: a bootstrap connection and a broker
        listener's connection reaching the same broker share its per-broker budgets."""

    # ---- client transport callbacks -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        transport.set_write_buffer_limits(high=self._config.write_buffer_high_bytes)
        self.gate = ReadGate(transport)
        self._context.connection_opened(self)
        self._loop = loop = asyncio.get_running_loop()
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            name, subject = peer_principal_name(ssl_object, self._context.principal_mapper)
            if subject is not None and name is None:
                log.info("closing connection from %s on %s: no principal mapping rule applies to %s",
                         self._peer, self._listener, subject)
                self.close("no principal for its certificate")
                return
            self._user = name or ANONYMOUS  # SASL, when on, names the principal once the client logs in
        self._last_activity = loop.time()
        self._idle_timer = loop.call_later(self._config.idle_timeout_s, self._check_idle)
        self._sasl = self._context.new_login(self._peer)
        if self._sasl is not None:
            settings = self._config.login
            self._requests.max_frame_bytes = min(self._config.max_frame_bytes, settings.max_receive_bytes)
            self._login_timer = loop.call_later(settings.timeout_s, self._login_too_slow)
        if self._sasl is None or self._sasl.needs_upstream_before_login:
            self._start_upstream()
        # when the proxy terminates SASL, the upstream connection opens once the client has logged in: a
        # client that cannot log in (or a flood of connections) never costs the cluster a connection

    def _start_upstream(self) -> None:
        """Open the upstream connection; requests read meanwhile wait for it, in order."""
        self.gate.pause(PauseReason.CONNECTING)
        self._connect_task = self._loop.create_task(self._connect_upstream())

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._last_activity = self._loop.time()
        if self._connect_task is not None and self._upstream is None:
            # uvloop may deliver bytes that were already read when reading was paused for the connect
            self._before_upstream += data
            if len(self._before_upstream) > self._config.max_frame_bytes:
                self.close("sent more than a frame before the upstream connection opened", warn=True)
            return
        self._metrics.bytes_in += len(data)
        try:
            if self._cut_through_remaining:
                data = self._cut_through(data)
                if not data:
                    return
            chunk, ends = self._requests.feed(data)
            if self._holding():
                self._held += chunk
                return
            if ends:
                self._route_requests(chunk, ends)
            self._maybe_cut_through()
        except Exception as error:
            self._fail_on_requests(error)

    def _fail_on_requests(self, error: Exception) -> None:
        if isinstance(error, ProtocolError):
            self._context.metrics.closed_for_bad_input += 1
            self.close(f"bad request frame: {error}", warn=True)
        else:
            log.exception("unexpected error handling requests from %s", self._peer, exc_info=error)
            self.close("internal error handling requests", warn=True)

    def eof_received(self) -> bool | None:
        if self._requests.buffered_bytes or self._before_upstream or self._cut_through_remaining:
            self._context.metrics.closed_for_bad_input += 1
            self.close("truncated frame: client closed in the middle of a frame", warn=True)
        return None

    def pause_writing(self) -> None:
        """The client reads less than it is sent: nothing more is read from the cluster for it, and
        none of its requests is read or decided, whoever would answer it (the proxy's own answers
        included), until it catches up."""
        self._client_backlogged = True
        self.gate.pause(PauseReason.CLIENT_BACKLOG)
        if self._upstream_gate is not None:
            self._upstream_gate.pause(PauseReason.PEER_BACKPRESSURE)

    def resume_writing(self) -> None:
        self._client_backlogged = False
        self.gate.resume(PauseReason.CLIENT_BACKLOG)
        if self._upstream_gate is not None:
            self._upstream_gate.resume(PauseReason.PEER_BACKPRESSURE)
        self._release_held()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close("client disconnected" if exc is None else f"client connection lost: {exc}")

    # ---- requests ------------------------------------------------------------------------------

    def _route_requests(self, chunk: bytes | bytearray, ends: list[int]) -> None:
        """Decide and forward whole frames in order until one makes the rest wait (``_holding``)."""
        view = memoryview(chunk)
        start = 0
        forward_from = 0
        upstream = cast(asyncio.Transport, self._upstream)  # only None before a login, when nothing is forwarded
        for end in ends:
            frame = view[start + SIZE_PREFIX_BYTES:end]
            decided = self._decide(frame, end - start - SIZE_PREFIX_BYTES)
            if not isinstance(decided, Outcome):
                if forward_from < start:
                    upstream.write(view[forward_from:start])
                self._await_decision(decided, bytes(view[start:end]))
                self._held += view[end:]
                return
            if not self._carry_out(decided, frame):
                if forward_from < start:
                    upstream.write(view[forward_from:start])
                if decided.forward and decided.replacement is not None:
                    upstream.write(decided.replacement)
                forward_from = end
            start = end
            if self._holding():
                self._held += view[end:]
                break
        if forward_from == 0 and start == len(chunk):
            upstream.write(chunk)
        elif forward_from < start:
            upstream.write(view[forward_from:start])
        self._send_local_responses_in_turn()
        self._close_if_answered()
        if self._held and not self._holding():  # held only for the answers' size, which are sent now
            self._loop.call_soon(self._release_held)

    def _close_if_answered(self) -> None:
        if self._close_when_answered and not self._awaiting_responses():
            self.close("closed after an acks=0 request with a partition error (as Kafka does)", warn=True)

    def _awaiting_responses(self) -> bool:
        return bool(self._in_flight) or self._response_cut_through_remaining > 0

    def _holding(self) -> bool:
        """Later requests wait: for a handler asking the cluster, or for a throttled response and its mute."""
        return (self._settling is not None or self._throttled_response_pending or self._mute_timer is not None
                or self._close_when_answered or (self._connect_task is not None and self._upstream is None)
                or self._login_step_pending or self._client_backlogged
                or self._local_answer_bytes >= self._config.write_buffer_high_bytes)

    def _release_held(self) -> None:
        """Decide the requests that waited, in order, now that nothing holds them (they may hold again)."""
        if self._closed or self._draining or self._holding():
            return
        self.gate.resume(PauseReason.THROTTLED)  # paused while holding, whatever held
        held, self._held = self._held, bytearray()
        try:
            if held:
                self._route_requests(held, _frame_ends(held))
            self._maybe_cut_through()
            self._send_local_responses_in_turn()
        except Exception as error:
            self._fail_on_requests(error)
        self._after_responses()

    def _decide(self, frame: memoryview, request_bytes: int, whole: bool = True) -> Decided:
        """What to do with one request, decided before its bytes go upstream.

        ``frame`` may be only the start of a request being cut through; ``request_bytes`` is
        the whole request's size.
        """
        api_key, api_version, _ = peek_request(frame)
        if api_key not in KNOWN_API_KEYS:
            raise ProtocolError("unknown api key", api_key=api_key, api_version=api_version, offset=0)
        self._metrics.requests_by_api[api_key] += 1
        if self._sasl is not None and not self._sasl.done:
            self._login_step_pending = True  # every request before a login has an answer
            self.gate.pause(PauseReason.LOGGING_IN)
        if api_key == Api.API_VERSIONS and (self._upstream is None or api_version > NEWEST_API_VERSIONS):
            # a client's first ApiVersions may be newer than the proxy parses (KIP-511: it is answered in v0
            # with the versions served); before a login no upstream connection may be open yet
            return self._context.api_versions_answer(frame)
        sasl = self._sasl
        if sasl is not None and (api_key in _SASL_APIS or not (sasl.done or sasl.needs_upstream_before_login)):
            return sasl.handle(frame)
        # inspected, a request before a login goes the usual way, charged to ANONYMOUS: a cluster listener
        # that does not ask for a login must not open a way around the quotas
        caller = Caller(self._user, now_ms(), self._upstream_broker)
        if api_key == Api.PRODUCE:
            return self._context.produce_handler.handle(frame, request_bytes, caller, whole)
        handler = self._context.handlers.get(api_key)
        if handler is None:
            return FORWARD
        return handler(frame, caller)

    def _carry_out(self, outcome: Outcome, frame: memoryview) -> bool:
        """Queue the response ``outcome`` expects; True when the client's bytes go upstream as they are."""
        if outcome.expects_response:
            api_key, api_version, correlation_id = peek_request(frame)
            request = InFlight(correlation_id, api_key, api_version, outcome.throttle_ms, outcome.local_response,
                               outcome.finish, outcome.close_after_response, time.perf_counter(),
                               outcome.throttle_since_ms, outcome.charge_response)
            self._await_response(request)
            if request.holds_later_requests:
                self._throttled(outcome.throttle_ms, expects_response=True)
        else:
            if outcome.close_after_response:
                self._close_when_answered = True
                self._pause_if_holding()
            if outcome.throttle_ms:
                self._throttled(outcome.throttle_ms, expects_response=False)
        return outcome.forward and outcome.replacement is None

    def _await_decision(self, decided: Awaitable[Outcome], frame: bytes) -> None:
        """Wait for a handler that asks the cluster (or the ledger) first; later requests wait behind it."""
        self._hold_until(decided, lambda outcome: self._carry_out_decided(outcome, frame))

    def _hold_until(self, pending: Awaitable[_T], carry_on: Callable[[_T], None]) -> None:
        """Hold later requests, unread and undecided, until ``pending`` is done and ``carry_on`` has
        acted on its result."""
        self.gate.pause(PauseReason.AWAITING_CLUSTER)
        self._settling = self._loop.create_task(self._settle(pending, carry_on))

    async def _settle(self, pending: Awaitable[_T], carry_on: Callable[[_T], None]) -> None:
        try:
            result = await pending
        except Exception as error:
            log.warning("cannot decide on a request from %s: %s", self._peer, error)
            self.close("could not decide on a request", warn=True)
            return
        if self._closed:
            return
        self._settling = None
        self.gate.resume(PauseReason.AWAITING_CLUSTER)
        try:
            carry_on(result)
        except Exception as error:
            self._fail_on_requests(error)
            return
        self._release_held()

    def _carry_out_decided(self, outcome: Outcome, frame: bytes) -> None:
        upstream = cast(asyncio.Transport, self._upstream)  # only None before a login, when nothing is forwarded
        if self._carry_out(outcome, memoryview(frame)[SIZE_PREFIX_BYTES:]):
            upstream.write(frame)
        elif outcome.forward and outcome.replacement is not None:
            upstream.write(outcome.replacement)
        self._send_local_responses_in_turn()
        self._close_if_answered()

    def _await_response(self, request: InFlight) -> None:
        self._in_flight.append(request)
        if request.local_response is not None:
            self._local_answer_bytes += len(request.local_response)
        elif self._request_timer is None:
            self._request_timer = self._loop.call_later(self._config.request_timeout_s, self._check_request_timeout)
        if len(self._in_flight) >= self._config.max_in_flight_requests:
            self.gate.pause(PauseReason.TOO_MANY_IN_FLIGHT)

    def _maybe_cut_through(self) -> None:
        if self._requests.buffered_bytes < CUT_THROUGH_AFTER_BYTES or self._holding():
            return
        if self._sasl is not None and not self._sasl.done:
            return
        partial = self._requests.partial_frame(CUT_THROUGH_AFTER_BYTES)
        assert partial is not None
        prefix, frame_bytes = partial
        frame = memoryview(prefix)[SIZE_PREFIX_BYTES:]
        handler = self._context.produce_handler
        api_key = peek_request(frame).api_key
        produce = api_key == Api.PRODUCE
        if produce and handler.needs_whole_frame(self._user):
            return
        if api_key in self._context.handlers:
            return  # handlers other than Produce judge whole requests
        try:
            outcome = self._decide(frame, frame_bytes - SIZE_PREFIX_BYTES, whole=False)
        except ProtocolError:
            return  # the header does not fit yet: judge the frame once it is whole
        assert isinstance(outcome, Outcome)
        taken = self._requests.take_partial_frame()
        self._cut_through_remaining = frame_bytes - len(taken)
        self._carry_out(outcome, frame)
        assert self._upstream is not None
        self._upstream.write(taken)
        # a producer-ID quota in throttle mode reads the batches once the request is complete
        self._cut_through_copy = bytearray(taken) if produce and handler.scans_batches(self._user) else None

    def _cut_through(self, data: bytes) -> bytes:
        """Forward the part of ``data`` that belongs to the frame being cut through; return the rest."""
        assert self._upstream is not None
        taken = min(len(data), self._cut_through_remaining)
        part = data if taken == len(data) else memoryview(data)[:taken]
        self._upstream.write(part)
        self._cut_through_remaining -= taken
        if self._cut_through_copy is not None:
            self._cut_through_copy += part
            if not self._cut_through_remaining:
                self._check_cut_through_producer_ids()
        if not self._cut_through_remaining:
            self._pause_if_holding()
        return data[taken:]

    def _check_cut_through_producer_ids(self) -> None:
        assert self._cut_through_copy is not None
        frame, self._cut_through_copy = self._cut_through_copy, None  # complete: it grows no more
        throttle = self._context.produce_handler.producer_id_throttle(
            memoryview(frame)[SIZE_PREFIX_BYTES:], Caller(self._user, now_ms(), self._upstream_broker))
        if isinstance(throttle, int):
            self._throttle_cut_through(frame, throttle)
        else:  # the ledger reads a PID from disk first: later requests wait for the verdict
            self._hold_until(throttle, lambda throttle_ms: self._throttle_cut_through(frame, throttle_ms))

    def _throttle_cut_through(self, frame: bytearray, throttle_ms: int) -> None:
        if not throttle_ms:
            return
        request = self._in_flight[-1] if self._in_flight else None
        expects_response = (request is not None and
                            request.correlation_id == peek_request(frame, SIZE_PREFIX_BYTES).correlation_id)
        if request is not None and expects_response:
            self._in_flight[-1] = request._replace(throttle_ms=max(request.throttle_ms, throttle_ms))
        self._throttled(throttle_ms, expects_response)

    def _check_request_timeout(self) -> None:
        """Close the connection when the cluster has sent nothing for the request at the head of the
        queue for ``request-timeout-seconds`` (as the client would, by its ``request.timeout.ms``): a
        lost request would otherwise hold its connection, and every request behind it, for ever. Time
        the client spends not reading its responses, or still sending a request, is not the cluster's."""
        self._request_timer = None
        if self._closed or not self._in_flight or self._in_flight[0].local_response is not None:
            return
        timeout_s = self._config.request_timeout_s
        waited_s = time.perf_counter() - max(self._in_flight[0].read_at, self._upstream_heard_at)
        if waited_s >= timeout_s and not (self._client_backlogged or self._cut_through_remaining):
            self._metrics.upstream_request_timeouts += 1
            request = self._in_flight[0]
            self.close(f"the cluster sent nothing for request {request.correlation_id} (api {request.api_key}) "
                       f"in {waited_s:.1f} s (request-timeout-seconds {timeout_s:g})", warn=True)
            return
        self._request_timer = self._loop.call_later(max(timeout_s - waited_s, 0.1), self._check_request_timeout)

    # ---- responses -----------------------------------------------------------------------------

    def upstream_data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._last_activity = self._loop.time()
        self._upstream_heard_at = time.perf_counter()
        self._metrics.bytes_out += len(data)
        try:
            if self._response_cut_through_remaining:
                data = self._cut_through_response(data)
            if data and not self._closed:
                chunk, ends = self._responses.feed(data)
                if ends:
                    self._route_responses(chunk, ends)
                self._maybe_cut_through_response()
        except ProtocolError as error:
            self.close(f"bad response from upstream: {error}", warn=True)
            return
        except Exception:
            log.exception("unexpected error handling responses for %s", self._peer)
            self.close("internal error handling responses", warn=True)
            return
        self._after_responses()

    def _after_responses(self) -> None:
        self._close_if_answered()
        if len(self._in_flight) <= self._config.max_in_flight_requests // 2:
            self.gate.resume(PauseReason.TOO_MANY_IN_FLIGHT)
        if self._draining and not self._awaiting_responses() and self._settling is None:
            self.close("drained for shutdown")  # requests still held were never forwarded: the client retries

    def _route_responses(self, chunk: bytes, ends: list[int]) -> None:
        view = memoryview(chunk)
        pieces: list[bytes | memoryview] = []
        untouched_from = 0
        start = 0
        mute_ms: int | None = None
        for end in ends:
            local = self._local_responses_due()
            if local:
                if untouched_from < start:
                    pieces.append(view[untouched_from:start])
                pieces.extend(local)
                untouched_from = start
            request = self._answered_request(view[start + SIZE_PREFIX_BYTES:end], end - start - SIZE_PREFIX_BYTES,
                                             start)
            if request.holds_later_requests:
                mute_ms = max(mute_ms or 0, request.throttle_ms)
            replacement = self._rewrite_response(request, view[start + SIZE_PREFIX_BYTES:end])
            if replacement is not None:
                if untouched_from < start:
                    pieces.append(view[untouched_from:start])
                pieces.append(replacement)
                untouched_from = end
            start = end
        assert self._transport is not None
        if not pieces:
            self._transport.write(chunk)
        else:
            if untouched_from < len(chunk):
                pieces.append(view[untouched_from:])
            self._transport.writelines(pieces)
        self._responses_sent(mute_ms)

    def _answered_request(self, frame: memoryview, frame_bytes: int, offset: int) -> InFlight:
        """Take the request the response ``frame`` answers (the whole frame or, cut through, its
        start; ``frame_bytes`` long without its size prefix), its throttle settled."""
        if not self._in_flight:
            raise ProtocolError("response without a request", offset=offset)
        request = self._in_flight.popleft()
        self._metrics.observe_latency(request.api_key, time.perf_counter() - request.read_at)
        if request.charge_response is not None:
            charged_ms = request.charge_response(frame, frame_bytes)
            if charged_ms > request.throttle_ms:
                request = request._replace(throttle_ms=charged_ms)
        if request.throttle_ms and request.throttle_since_ms is not None:
            request = request._replace(throttle_ms=remaining_throttle_ms(
                request.throttle_ms, request.throttle_since_ms, now_ms()))
        self._close_after_write |= request.close_after_response
        correlation_id = response_correlation_id(frame, 0)
        if correlation_id != request.correlation_id:
            raise ProtocolError(
                f"correlation id {correlation_id} does not match request {request.correlation_id}",
                api_key=request.api_key, api_version=request.api_version, offset=offset)
        return request

    def _responses_sent(self, mute_ms: int | None) -> None:
        """Whole responses were written: the proxy's own answers queued behind them follow, then the
        close or the mute they asked for (after the response is written, as a Kafka broker does)."""
        self._send_local_responses_in_turn()
        if self._close_after_write:
            self.close("closed after its last response")
        elif mute_ms is not None:
            self._mute(mute_ms)
        self._login_step_answered()

    def _maybe_cut_through_response(self) -> None:
        """Start forwarding a large Fetch response as it arrives, once its start is here: it is
        charged by its size prefix, and its throttle field comes first in its body."""
        if self._responses.buffered_bytes < CUT_THROUGH_AFTER_BYTES or self._closed or not self._in_flight:
            return
        request = self._in_flight[0]
        if (request.api_key != Api.FETCH or request.local_response is not None or request.finish is not None
                or self._names_brokers(request.api_key, request.api_version)):
            return
        partial = self._responses.partial_frame(CUT_THROUGH_AFTER_BYTES)
        assert partial is not None
        prefix, frame_bytes = partial
        frame = memoryview(prefix)[SIZE_PREFIX_BYTES:]
        request = self._answered_request(frame, frame_bytes - SIZE_PREFIX_BYTES, 0)
        taken = self._responses.take_partial_frame()
        head = memoryview(taken)[:len(prefix)]
        if request.throttle_ms:
            header_length = response_header_length(frame, is_flexible_request(request.api_key, request.api_version))
            body = raise_throttle(request.api_key, request.api_version, frame[header_length:], request.throttle_ms)
            if body is not None:
                head = memoryview(b"".join((prefix[:SIZE_PREFIX_BYTES + header_length], body)))
        assert self._transport is not None
        self._transport.writelines((head, memoryview(taken)[len(prefix):]))
        self._response_cut_through_remaining = frame_bytes - len(taken)
        self._mute_after_cut_through_ms = request.throttle_ms if request.holds_later_requests else None

    def _cut_through_response(self, data: bytes) -> bytes:
        """Send the client the part of ``data`` that belongs to the response being cut through;
        return the rest."""
        assert self._transport is not None
        taken = min(len(data), self._response_cut_through_remaining)
        self._transport.write(data if taken == len(data) else memoryview(data)[:taken])
        self._response_cut_through_remaining -= taken
        if not self._response_cut_through_remaining:
            self._responses_sent(self._mute_after_cut_through_ms)
        return data[taken:]

    def _local_responses_due(self) -> list[bytes]:
        """The proxy's own answers at the head of the queue: no earlier request is still out."""
        due: list[bytes] = []
        if self._response_cut_through_remaining:
            return due  # they follow the response being cut through
        now = time.perf_counter()
        while self._in_flight and self._in_flight[0].local_response is not None:
            request = self._in_flight.popleft()
            self._metrics.observe_latency(request.api_key, now - request.read_at)
            assert request.local_response is not None
            due.append(request.local_response)
            self._local_answer_bytes -= len(request.local_response)
            if request.throttle_ms:
                self._loop.call_soon(self._mute, request.throttle_ms)  # once this answer has been written
            self._close_after_write |= request.close_after_response
        return due

    def _send_local_responses_in_turn(self) -> None:
        due = self._local_responses_due()
        if due:
            assert self._transport is not None
            self._transport.writelines(due)
            if self._close_after_write:
                self.close("closed after its last response")
                return
            self._login_step_answered()
            self._after_responses()

    def _names_brokers(self, api_key: int, api_version: int) -> bool:
        """The response names brokers the client must reach through the proxy."""
        return self._context.rewrites_addresses and carries_addresses(api_key, api_version)

    def _rewrite_response(self, request: InFlight, frame: memoryview) -> bytes | None:
        """A whole replacement frame (size prefix included), or None to forward it untouched."""
        api_key, api_version = request.api_key, request.api_version
        if api_key == Api.API_VERSIONS:
            header_length = response_header_length(frame, flexible=False)
            body = adapt_api_versions(frame[header_length:], api_version, self._context.api_version_ceilings,
                                      self._context.served_api_versions)
        else:
            names_brokers = self._names_brokers(api_key, api_version)
            if not request.throttle_ms and not names_brokers and request.finish is None:
                return None
            header_length = response_header_length(frame, is_flexible_request(api_key, api_version))
            body = None
            if request.finish is not None:
                body = request.finish(frame[header_length:])
            if request.throttle_ms:
                body = raise_throttle(api_key, api_version, frame[header_length:] if body is None else memoryview(body),
                                      request.throttle_ms) or body
            if names_brokers:
                body = rewrite_broker_addresses(api_key, api_version, frame[header_length:] if body is None else body,
                                                self._context.advertise_broker) or body
        if body is None:
            return None
        size = header_length + len(body)
        return b"".join((size.to_bytes(4, "big"), frame[:header_length], body))

    # ---- login ---------------------------------------------------------------------------------------

    def _login_step_answered(self) -> None:
        """A request made before the login completed has its answer: the next one may be read, and once
        the login has completed its user is the principal of every later request."""
        if not self._login_step_pending or self._awaiting_responses() or self._closed:
            return
        self._login_step_pending = False
        assert self._sasl is not None
        if self._sasl.refused:
            self.close("its login was refused")
            return
        if self._sasl.user is not None:
            self._logged_in(self._sasl.user)
        self.gate.resume(PauseReason.LOGGING_IN)
        self._loop.call_soon(self._release_held)  # not from here: a long pipeline would recurse

    def _logged_in(self, user: str) -> None:
        self._user = user
        if self._login_timer is not None:
            self._login_timer.cancel()
            self._login_timer = None
        self._requests.max_frame_bytes = self._config.max_frame_bytes
        if self._connect_task is None:
            self._start_upstream()

    def _login_too_slow(self) -> None:
        self._login_timer = None
        if self._sasl is not None and not self._sasl.done:
            log.info("closing connection from %s on %s: no SASL login within %g s", self._peer, self._listener,
                     self._config.login.timeout_s)
            self.close("no login in time")

    # ---- muting ----------------------------------------------------------------------------------

    def _throttled(self, throttle_ms: int, expects_response: bool) -> None:
        """A request was given ``throttle_ms``: nothing more is read or decided until its response
        has been sent (then the mute starts) or, with no response (acks=0), for the throttle."""
        if expects_response:
            self._throttled_response_pending = True
            self._pause_if_holding()
        else:
            self._mute(throttle_ms)

    def _pause_if_holding(self) -> None:
        """Stop reading while requests are held, but not before the frame being cut through is whole:
        the cluster answers it only once it has its last byte."""
        if self._holding() and not self._cut_through_remaining:
            self.gate.pause(PauseReason.THROTTLED)

    def _mute(self, throttle_ms: int) -> None:
        """Stop reading this client for ``throttle_ms`` (KIP-219); other connections are untouched."""
        if self._closed:
            return
        self._throttled_response_pending = False
        until = self._loop.time() + throttle_ms / 1000
        if throttle_ms <= 0 or until <= self._muted_until:
            if self._mute_timer is None:
                self._unmute()
            return
        if self._mute_timer is None:
            self._metrics.muted_connections += 1
        else:
            self._mute_timer.cancel()
        self._muted_until = until
        self._mute_timer = self._loop.call_at(until, self._end_mute)
        self._pause_if_holding()

    def _end_mute(self) -> None:
        self._mute_timer = None
        self._metrics.muted_connections -= 1
        self._unmute()

    def _unmute(self) -> None:
        if self._throttled_response_pending or self._close_when_answered:
            return
        self.gate.resume(PauseReason.THROTTLED)
        self._release_held()

    # ---- upstream lifecycle --------------------------------------------------------------------

    async def _connect_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            target = await self._resolve_upstream()
            async with asyncio.timeout(self._config.connect_timeout_s):
                access = self._context.client_upstream_access
                if access.sasl is None:
                    transport, _ = await loop.create_connection(
                        lambda: UpstreamProtocol(self), target.host, target.port, **access.tls_arguments(target))
                else:
                    _, writer = await open_upstream(target, access, self._config.max_frame_bytes)
                    self._login_writer = writer  # a collected StreamWriter closes its transport
                    transport = cast(asyncio.Transport, writer.transport)
                    transport.set_protocol(UpstreamProtocol(self))  # logged in: from now on, bytes only
        except (*UPSTREAM_ERRORS, LookupError) as error:
            self._context.metrics.upstream_connect_failures += 1
            self.close(f"upstream unreachable for {self._listener}: {error or type(error).__name__}",
                       warn=True)
            return
        transport = cast(asyncio.Transport, transport)
        if self._closed:
            transport.close()
            return
        transport.set_write_buffer_limits(high=self._config.write_buffer_high_bytes)
        peer = transport.get_extra_info("peername")
        self._upstream_broker = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(target)
        self._upstream = transport
        self._upstream_gate = ReadGate(transport)
        log.debug("client %s on %s connected upstream to %s", self._peer, self._listener, target)
        self.gate.resume(PauseReason.CONNECTING)
        self._release_held()
        if self._before_upstream and not self._closed:
            early, self._before_upstream = bytes(self._before_upstream), bytearray()
            self.data_received(early)

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self._closed:
            self.close("upstream closed the connection" if exc is None else f"upstream lost: {exc}",
                       warn=self._awaiting_responses())

    # ---- lifetime ------------------------------------------------------------------------------

    def drain(self) -> None:
        """Stop taking requests; close once every forwarded request has its answer."""
        self._draining = True
        if not self._closed:
            self.gate.pause(PauseReason.DRAINING)
            if not self._awaiting_responses() and self._settling is None:
                self.close("closed for shutdown")

    def _check_idle(self) -> None:
        loop = self._loop
        idle_for = loop.time() - self._last_activity
        if idle_for >= self._config.idle_timeout_s:
            self.close(f"idle for {idle_for:.0f} s", warn=False)
        else:
            self._idle_timer = loop.call_later(self._config.idle_timeout_s - idle_for, self._check_idle)

    def close(self, reason: str, warn: bool = False) -> None:
        if self._closed:
            return
        self._closed = True
        (log.warning if warn else log.debug)("closing connection from %s on %s: %s",
                                             self._peer, self._listener, reason)
        for timer in (self._idle_timer, self._login_timer, self._request_timer):
            if timer is not None:
                timer.cancel()
        if self._mute_timer is not None:
            self._mute_timer.cancel()
            self._mute_timer = None
            self._metrics.muted_connections -= 1
        for task in (self._connect_task, self._settling):
            if task is not None and not task.done():
                task.cancel()
        if self._transport is not None:
            self._transport.close()
        if self._upstream is not None:
            self._upstream.close()
        self._in_flight.clear()
        self._context.connection_closed(self)

    def abort(self) -> None:
        """Force-close without waiting for buffered writes (shutdown past its grace period)."""
        for transport in (self._transport, self._upstream):
            if transport is not None:
                transport.abort()
        self.close("aborted at shutdown deadline", warn=bool(self._in_flight))


def _frame_ends(frames: bytes | bytearray) -> list[int]:
    """End offsets of the whole frames (size prefix included) that ``frames`` holds back to back."""
    ends = []
    position = 0
    while position < len(frames):
        position += SIZE_PREFIX_BYTES + int.from_bytes(frames[position:position + SIZE_PREFIX_BYTES], "big")
        ends.append(position)
    return ends
