"""The request path of a client connection: reading frames, deciding each before its bytes go
upstream, holding back the ones behind a throttle or a pending decision, cutting large ones through.

Requests are decided (and charged) as they are read, so an unthrottled client keeps pipelining.
Once a request is given a throttle, the requests behind it are held unread and undecided until its
response has been sent and the throttle has run out, as a Kafka broker reads nothing from a muted
channel (``SocketServer``): a client that pipelines gets no more than one that waits.

It owns the framing of the client's bytes, the requests held, the request frame in passage and a decision being
awaited; whether anything holds the connection's requests is the connection's to say (``RequestOwner.holding``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar, cast

from protocol.apis import KNOWN_API_KEYS
from protocol.errors import ProtocolError
from protocol.framing import SIZE_PREFIX_BYTES, FrameEnds, FrameSplitter
from protocol.header import REQUEST_PREFIX_BYTES, peek_request
from proxy.connection.close_reason import CloseReason
from proxy.connection.context import ProxyContext
from proxy.connection.flow import PauseReason, ReadGate
from proxy.connection.in_flight import InFlight, InFlightRequests
from proxy.connection.login import LoginGate
from proxy.connection.mute import ChannelMute
from proxy.connection.outbox import Outbox
from proxy.connection.passage import FramePassage
from proxy.connection.reading import CUT_THROUGH_AFTER_BYTES, SPLICE_AFTER_BYTES
from proxy.connection.responses import ResponsePath
from proxy.connection.splice import FrameSplice, can_splice
from proxy.connection.upstream_link import UpstreamLink
from proxy.decision.interception import RequestStream
from proxy.decision.outcome import Close, Decided, Forward, OnResponse, Outcome, Respond, Sender

log = logging.getLogger(__name__)
_T = TypeVar("_T")
NO_HOOK = OnResponse()


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

    def clear(self) -> None:
        self._parts.clear()


class RequestOwner(Protocol):
    """What the request path asks of the connection it belongs to."""

    @property
    def closed(self) -> bool: ...

    @property
    def draining(self) -> bool:
        """Shutting down: no request is decided any more."""

    @property
    def read_bytes(self) -> int:
        """The most one read of the connection takes (its buffer share's)."""

    def close(self, reason: CloseReason, detail: str = "", warn: bool | None = None) -> None: ...

    def touched(self) -> None:
        """Bytes moved: the connection is not idle."""

    def holding(self) -> bool:
        """Something holds the requests read: they wait, undecided (``ClientConnection.holding``)."""

    def sender(self) -> Sender:
        """Who sends the requests (the principal, as far as it is known) and the broker they reach."""

    def close_if_answered(self) -> None:
        """Close now, when a request asked for it and every request has its answer."""

    def after_responses(self) -> None:
        """Answers were sent: a close, a drain or the requests held may follow."""


class RequestPath:
    """Bytes from the client: framed, decided in order, forwarded, held back or cut through."""

    def __init__(self, owner: RequestOwner, context: ProxyContext, loop: asyncio.AbstractEventLoop,
                 client: asyncio.Transport, gate: ReadGate, to_client: Outbox, link: UpstreamLink,
                 in_flight: InFlightRequests, mute: ChannelMute, responses: ResponsePath, peer: str) -> None:
        self._owner = owner
        self._context = context
        self._config = context.config
        self._metrics = context.metrics
        self._loop = loop
        self._client = client
        self._gate = gate
        self._to_client = to_client
        self._link = link
        self._in_flight = in_flight
        self._mute = mute
        self._responses = responses
        self._peer = peer
        self.login: LoginGate | None = None
        """The login, when the proxy takes logins, from the first request to the user it names (set by the connection
        as it starts it; stopped with the path)."""
        self._frames = FrameSplitter(self._config.max_frame_bytes, REQUEST_PREFIX_BYTES)
        self._held = HeldFrames()
        """Requests that wait behind a request whose handler asks the cluster first, a throttle, a backlog
        or too many requests in flight (``RequestOwner.holding``)."""
        self._before_upstream = bytearray()
        """What the client sent before its connection to the cluster was open."""
        self._passage = FramePassage()
        """The rest of a large request frame, going upstream as it arrives."""
        self._scan: RequestStream | None = None
        """What reads the request being cut through as its bytes go by (a quota's scan of its batches)."""
        self._scan_correlation_id = 0
        """The correlation id of that request, whose answer carries the throttle its reading ends in."""
        self.batch_header_next = False
        """The client's next read is the structure after spliced records (``READ_AFTER_SPLICED_RECORDS_BYTES``)."""
        self._splice: FrameSplice | None = None
        """Moves the rest of large request frames socket to socket (made for the first)."""
        self._settling: asyncio.Task[None] | None = None
        """A decision being awaited (a handler asking the cluster or the ledger first)."""
        self._timer: asyncio.TimerHandle | None = None
        """The check that the cluster answers the oldest request in time."""

    @property
    def settling(self) -> bool:
        """A decision is being awaited: the requests behind it wait."""
        return self._settling is not None

    @property
    def mid_frame(self) -> bool:
        """Part of a request frame has been read and its rest has not."""
        return bool(self._frames.buffered_bytes or self._before_upstream or self._passage.remaining)

    def limit_frames(self, max_frame_bytes: int) -> None:
        """Refuse request frames larger than ``max_frame_bytes`` from now on (a login's own limit, until it
        completes)."""
        self._frames.max_frame_bytes = max_frame_bytes

    def pause_if_holding(self) -> None:
        """Stop reading while requests are held, but not before the frame being cut through is whole:
        the cluster answers it only once it has its last byte."""
        if self._owner.holding() and not self._passage.remaining:
            self._gate.pause(PauseReason.HOLDING)

    def link_opened(self) -> None:
        """The connection to the cluster is open: what the client sent before it is decided now."""
        if self._before_upstream and not self._owner.closed:
            early, self._before_upstream = bytes(self._before_upstream), bytearray()
            self.data_received(early)

    def stop(self) -> None:
        if self.login is not None:
            self.login.stop()
        if self._timer is not None:
            self._timer.cancel()
        if self._settling is not None and not self._settling.done():
            self._settling.cancel()
        if self._splice is not None:
            self._splice.stop()
        # what was read and never decided goes now, not when the collector finds the connection's cycles: a
        # flood of connections closed at once would otherwise hold every one's reads far past the total
        self._held.clear()
        self._frames.discard()
        self._before_upstream = bytearray()

    def data_received(self, data: bytes) -> None:
        if self._owner.closed:
            return
        self._owner.touched()
        self.batch_header_next = False
        if self._link.opening:
            # uvloop reads once connection_made has returned, whatever was paused in it: what the socket
            # had queued by then arrives here, one read at a time until the pause is asserted again
            self._before_upstream += data
            self._gate.reassert()
            if len(self._before_upstream) > self._config.max_frame_bytes:
                self._owner.close(CloseReason.TOO_MUCH_BEFORE_UPSTREAM)
            return
        self._metrics.bytes_in += len(data)
        try:
            if self._passage.remaining:
                data = self._cut_through(data)
                if not data:
                    return
            chunk, ends = self._frames.feed(data)
            if self._owner.holding():
                self._held.hold(chunk, ends)
                self.pause_if_holding()  # one read more at most: whatever holds may not have paused reading
                return
            if ends:
                self._route_requests(chunk, ends)
            self._maybe_cut_through()
        except Exception as error:
            self._fail_on_requests(error)

    def _fail_on_requests(self, error: Exception) -> None:
        if isinstance(error, ProtocolError):
            self._metrics.closed_for_bad_input += 1
            self._owner.close(CloseReason.BAD_REQUEST, str(error))
        else:
            log.exception("unexpected error handling requests from %s", self._peer, exc_info=error)
            self._owner.close(CloseReason.INTERNAL_ERROR, "handling requests")

    def _route_requests(self, chunk: bytes | bytearray, ends: FrameEnds, first: int = 0) -> None:
        """Decide and forward the whole frames of ``chunk`` from ``ends[first]`` on, in order, until one makes
        the rest wait (``_holding``)."""
        view = memoryview(chunk)
        start = forward_from = ends[first - 1] if first else 0
        upstream = cast(Outbox, self._link.outbox)  # only None before a login, when nothing is forwarded
        for index in range(first, len(ends)):
            end = ends[index]
            frame = view[start + SIZE_PREFIX_BYTES:end]
            decided = self._decide(frame)
            if not isinstance(decided, Outcome):
                if forward_from < start:
                    upstream.write(view[forward_from:start])
                self._await_decision(decided, bytes(view[start:end]))
                self._held.hold(chunk, ends, index + 1)
                return
            if not self._carry_out(decided, frame):
                if forward_from < start:
                    upstream.write(view[forward_from:start])
                if isinstance(decided, Forward) and decided.replacement is not None:
                    upstream.write(decided.replacement)
                forward_from = end
            start = end
            if self._owner.holding():
                self._held.hold(chunk, ends, index + 1)
                self.pause_if_holding()
                break
        if forward_from == 0 and start == len(chunk):
            upstream.write(chunk)
        elif forward_from < start:
            upstream.write(view[forward_from:start])
        self._responses.send_local_answers_in_turn()
        self._owner.close_if_answered()
        if self._held and not self._owner.holding():  # held only for the answers' size, which are sent now
            self._loop.call_soon(self.release_held)

    def release_held(self) -> None:
        """Decide the requests that waited, in order, now that nothing holds them (they may hold again)."""
        if self._owner.closed or self._owner.draining:
            return
        if self._owner.holding() or (self._splice is not None and self._splice.active):
            # reading stops until then: the responses that end the hold release them (``after_responses``
            # looks for this pause), the end of a frame being spliced too
            self.pause_if_holding()
            return
        self._gate.resume(PauseReason.HOLDING)  # paused while holding, whatever held
        try:
            for chunk, ends, first in self._held.take():
                if self._held or self._owner.holding():
                    self._held.hold(chunk, ends, first)  # behind the ones held again
                else:
                    self._route_requests(chunk, ends, first)
            self._maybe_cut_through()
            self._responses.send_local_answers_in_turn()
        except Exception as error:
            self._fail_on_requests(error)
        self._owner.after_responses()

    def _decide(self, frame: memoryview) -> Decided:
        """What to do with one whole request (size prefix excluded), decided before its bytes go upstream."""
        api_key, api_version, _ = _known_request(frame)
        self._metrics.requests_by_api[api_key] += 1
        login = self.login
        if login is not None:
            login.request_read()
        return self._context.requests.decide(frame, api_key, api_version, self._owner.sender(),
                                             None if login is None else login.login, self._link.transport is not None)

    def _carry_out(self, outcome: Outcome, frame: memoryview) -> bool:
        """Queue the response ``outcome`` expects; True when the client's bytes go upstream as they are (a
        replacement, when forwarded, is written by the caller after what came before it)."""
        if isinstance(outcome, Close):
            self._mute.close_when_answered()
            return False
        if isinstance(outcome, Forward) and not outcome.expects_response:
            if outcome.close_after_response:
                self._mute.close_when_answered()
            if outcome.throttle_ms:
                self._mute.throttled(outcome.throttle_ms, expects_response=False)
            return outcome.replacement is None
        api_key, api_version, correlation_id = peek_request(frame)
        if isinstance(outcome, Respond):
            request = InFlight(correlation_id, api_key, api_version, outcome.throttle_ms, outcome.response,
                               close_after_response=outcome.close_after_response, read_at=time.perf_counter())
        else:
            hook = outcome.on_response or NO_HOOK
            request = InFlight(correlation_id, api_key, api_version, outcome.throttle_ms, None, hook.finish,
                               outcome.close_after_response, time.perf_counter(), hook.charge,
                               whole_response=hook.read_whole)
        self._await_response(request)
        if request.holds_later_requests:
            self._mute.throttled(request.throttle_ms, expects_response=True)
        return isinstance(outcome, Forward) and outcome.replacement is None

    def _await_decision(self, decided: Awaitable[Outcome], frame: bytes) -> None:
        """Wait for a handler that asks the cluster (or the ledger) first; later requests wait behind it."""
        self._hold_until(decided, lambda outcome: self._carry_out_decided(outcome, frame))

    def _hold_until(self, pending: Awaitable[_T], carry_on: Callable[[_T], None]) -> None:
        """Hold later requests, unread and undecided, until ``pending`` is done and ``carry_on`` has
        acted on its result."""
        self._gate.pause(PauseReason.AWAITING_CLUSTER)
        self._settling = self._loop.create_task(self._settle(pending, carry_on))

    async def _settle(self, pending: Awaitable[_T], carry_on: Callable[[_T], None]) -> None:
        try:
            result = await pending
        except Exception as error:
            log.warning("cannot decide on a request from %s: %s", self._peer, error)
            self._owner.close(CloseReason.UNDECIDABLE)
            return
        if self._owner.closed:
            return
        self._settling = None
        self._gate.resume(PauseReason.AWAITING_CLUSTER)
        try:
            carry_on(result)
        except Exception as error:
            self._fail_on_requests(error)
            return
        self.release_held()

    def _carry_out_decided(self, outcome: Outcome, frame: bytes) -> None:
        upstream = cast(Outbox, self._link.outbox)  # only None before a login, when nothing is forwarded
        if self._carry_out(outcome, memoryview(frame)[SIZE_PREFIX_BYTES:]):
            upstream.write(frame)
        elif isinstance(outcome, Forward) and outcome.replacement is not None:
            upstream.write(outcome.replacement)
        self._responses.send_local_answers_in_turn()
        self._owner.close_if_answered()

    def _await_response(self, request: InFlight) -> None:
        self._in_flight.expect(request)
        if request.local_response is None and self._timer is None:
            self._timer = self._loop.call_later(self._config.request_timeout_s, self._check_request_timeout)

    def _maybe_cut_through(self) -> None:
        if self._frames.buffered_bytes < CUT_THROUGH_AFTER_BYTES or self._owner.holding():
            return
        if self.login is not None and self.login.in_progress:
            return
        partial = self._frames.partial_frame(CUT_THROUGH_AFTER_BYTES)
        assert partial is not None
        prefix, frame_bytes = partial
        frame = memoryview(prefix)[SIZE_PREFIX_BYTES:]
        try:
            api_key, api_version, correlation_id = _known_request(frame)
            started = self._context.requests.start(frame, api_key, api_version, frame_bytes - SIZE_PREFIX_BYTES,
                                                   self._owner.sender())
        except ProtocolError:
            return  # the header does not fit yet, or is wrong: the frame is judged once it is whole
        if started is None:
            return
        self._metrics.requests_by_api[api_key] += 1
        outcome, stream = started
        taken = self._frames.take_partial_frame()
        if stream is not None:
            self._scan = stream
            self._scan_correlation_id = correlation_id
            stream.feed(memoryview(taken)[SIZE_PREFIX_BYTES:])
        upstream = self._link.outbox
        assert upstream is not None
        self._passage.begin(frame_bytes - len(taken), upstream.write, self._request_passed,
                                    None if stream is None else stream.feed)
        self._carry_out(outcome, frame)
        upstream.write(taken)
        self._splice_unread_bytes()

    def _splice_unread_bytes(self) -> None:
        """The frame's next bytes that nothing reads (the rest of the frame, or the records a producer-ID
        check passes over) go upstream inside the kernel: the client's reading pauses until the last of them
        has gone (what else holds reading still holds it then)."""
        scan = self._scan
        unread = self._passage.remaining if scan is None else scan.records_ahead
        client, cluster = self._client, self._link.transport
        assert client is not None and cluster is not None
        if unread < SPLICE_AFTER_BYTES or not (self._config.splice and can_splice(client, cluster)):
            return
        if self._splice is None:
            self._splice = FrameSplice(self._loop, ("client", "cluster"), self._spliced_read, self._splice_done,
                                       self._splice_failed)
        assert self._link.outbox is not None
        self._link.outbox.hand_over()  # the spliced bytes follow what the cluster was sent before them
        try:
            self._splice.start(client, cluster, unread, self._owner.read_bytes)
        except OSError as error:  # they are cut through as they are read
            log.warning("cannot splice a request from %s (%s): reading it instead", self._peer, error)
            return
        self._gate.pause(PauseReason.SPLICING)

    def _spliced_read(self, nbytes: int) -> None:
        self._owner.touched()
        self._metrics.bytes_in += nbytes
        self._metrics.bytes_spliced += nbytes
        self._passage.went_by(nbytes)
        if self._scan is not None:
            try:
                self._scan.skipped(nbytes)
            except ProtocolError as error:  # what follows the records cannot fit the frame
                self._fail_on_requests(error)

    def _splice_done(self) -> None:
        if self._owner.closed:
            return
        self._gate.resume(PauseReason.SPLICING)
        if self._passage.remaining:
            # the rest of the frame is read, and what of it nothing reads spliced again
            self.batch_header_next = self._scan is not None
            return
        try:
            self._passage.finish()
        except Exception as error:
            self._fail_on_requests(error)
            return
        if self._held and not self._owner.holding():
            self._loop.call_soon(self.release_held)

    def _splice_failed(self, reason: str, by_client: bool) -> None:
        """A client gone in the middle of a frame closes as a truncated frame does; the cluster gone, as
        an upstream connection lost."""
        if by_client:
            self._metrics.closed_for_bad_input += 1
            self._owner.close(CloseReason.TRUNCATED_FRAME, reason)
        else:
            self._owner.close(CloseReason.UPSTREAM_LOST, reason, warn=True)

    def _cut_through(self, data: bytes) -> bytes:
        """Forward the part of ``data`` that belongs to the frame being cut through; return the rest."""
        rest = self._passage.take(data)
        if self._passage.remaining:  # all of ``data`` was the frame's
            self._splice_unread_bytes()
        return rest

    def _request_passed(self) -> None:
        """The last byte of the request cut through went upstream: what read it judges it, and reading stops if
        something holds it (it went on while the frame was incomplete: the cluster answers only whole frames)."""
        if self._scan is not None:
            self._judge_completed_cut_through()
        self.pause_if_holding()

    def _judge_completed_cut_through(self) -> None:
        scan, self._scan = self._scan, None
        assert scan is not None
        correlation_id = self._scan_correlation_id
        throttle = scan.completed()
        if isinstance(throttle, int):
            self._throttle_cut_through(correlation_id, throttle)
            return
        # the ledger reads a PID from disk first: later requests wait for the verdict, and so does the cluster's
        # answer, in the kernel: the request is upstream already, and its answer must carry the throttle
        upstream_gate = self._link.gate
        assert upstream_gate is not None
        upstream_gate.pause(PauseReason.AWAITING_VERDICT)

        def carry_out_verdict(throttle_ms: int) -> None:
            self._throttle_cut_through(correlation_id, throttle_ms)
            upstream_gate.resume(PauseReason.AWAITING_VERDICT)

        self._hold_until(throttle, carry_out_verdict)

    def _throttle_cut_through(self, correlation_id: int, throttle_ms: int) -> None:
        if not throttle_ms:
            return
        self._mute.throttled(throttle_ms, self._in_flight.throttle_newest(correlation_id, throttle_ms))

    def _check_request_timeout(self) -> None:
        """Close the connection when the cluster has sent nothing for the request at the head of the
        queue for ``request-timeout-seconds`` (as the client would, by its ``request.timeout.ms``): a
        lost request would otherwise hold its connection, and every request behind it, for ever. Time
        the client spends not reading its responses, or still sending a request, is not the cluster's, nor
        is the time its answers wait unread for a verdict."""
        self._timer = None
        oldest = self._in_flight.oldest
        if self._owner.closed or oldest is None or oldest.local_response is not None:
            return
        timeout_s = self._config.request_timeout_s
        waited_s = time.perf_counter() - max(oldest.read_at, self._link.heard_at)
        awaiting_verdict = self._link.gate is not None and self._link.gate.paused_for(
            PauseReason.AWAITING_VERDICT)
        not_the_clusters = self._to_client.behind or self._passage.remaining or awaiting_verdict
        if waited_s >= timeout_s and not not_the_clusters:
            self._metrics.upstream_request_timeouts += 1
            self._owner.close(CloseReason.REQUEST_TIMEOUT, f"request {oldest.correlation_id} (api {oldest.api_key}) "
                              f"waited {waited_s:.1f} s (request-timeout-seconds {timeout_s:g})")
            return
        self._timer = self._loop.call_later(max(timeout_s - waited_s, 0.1), self._check_request_timeout)


def _known_request(frame: memoryview) -> tuple[int, int, int]:
    """The request's api key, version and correlation id; an api key Kafka does not have is a bad frame."""
    api_key, api_version, correlation_id = peek_request(frame)
    if api_key not in KNOWN_API_KEYS:
        raise ProtocolError("unknown api key", api_key=api_key, api_version=api_version, offset=0)
    return api_key, api_version, correlation_id
