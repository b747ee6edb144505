"""The request side of a client connection: reading frames, deciding each before its bytes go
upstream, holding back the ones behind a throttle or a pending decision, cutting large ones through.

Requests are decided (and charged) as they are read, so an unthrottled client keeps pipelining.
Once a request is given a throttle, the requests behind it are held unread and undecided until its
response has been sent and the throttle has run out, as a Kafka broker reads nothing from a muted
channel (``SocketServer``): a client that pipelines gets no more than one that waits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

from protocol.apis import KNOWN_API_KEYS
from protocol.errors import ProtocolError
from protocol.framing import SIZE_PREFIX_BYTES, FrameEnds
from protocol.header import peek_request
from proxy.connection.close_reason import CloseReason
from proxy.connection.flow import PauseReason
from proxy.connection.in_flight import InFlight
from proxy.connection.outbox import Outbox
from proxy.connection.splice import FrameSplice, can_splice
from proxy.connection.state import CUT_THROUGH_AFTER_BYTES, SPLICE_AFTER_BYTES, ConnectionState
from proxy.decision.outcome import Decided, Outcome, Sender

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class RequestSide(ConnectionState):
    """Bytes from the client: framed, decided in order, forwarded, held back or cut through."""

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._last_activity = self._loop.time()
        self._batch_header_next = False
        if self._link.opening:
            # uvloop reads once connection_made has returned, whatever was paused in it: what the socket
            # had queued by then arrives here, one read at a time until the pause is asserted again
            self._before_upstream += data
            self.gate.reassert()
            if len(self._before_upstream) > self._config.max_frame_bytes:
                self.close(CloseReason.TOO_MUCH_BEFORE_UPSTREAM)
            return
        self._metrics.bytes_in += len(data)
        try:
            if self._request_passage.remaining:
                data = self._cut_through(data)
                if not data:
                    return
            chunk, ends = self._requests.feed(data)
            if self._holding():
                self._held.hold(chunk, ends)
                self._pause_if_holding()  # one read more at most: whatever holds may not have paused reading
                return
            if ends:
                self._route_requests(chunk, ends)
            self._maybe_cut_through()
        except Exception as error:
            self._fail_on_requests(error)

    def _fail_on_requests(self, error: Exception) -> None:
        if isinstance(error, ProtocolError):
            self._context.metrics.closed_for_bad_input += 1
            self.close(CloseReason.BAD_REQUEST, str(error))
        else:
            log.exception("unexpected error handling requests from %s", self._peer, exc_info=error)
            self.close(CloseReason.INTERNAL_ERROR, "handling requests")

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
                if decided.forward and decided.replacement is not None:
                    upstream.write(decided.replacement)
                forward_from = end
            start = end
            if self._holding():
                self._held.hold(chunk, ends, index + 1)
                self._pause_if_holding()
                break
        if forward_from == 0 and start == len(chunk):
            upstream.write(chunk)
        elif forward_from < start:
            upstream.write(view[forward_from:start])
        self._send_local_responses_in_turn()
        self._close_if_answered()
        if self._held and not self._holding():  # held only for the answers' size, which are sent now
            self._loop.call_soon(self._release_held)

    def _release_held(self) -> None:
        """Decide the requests that waited, in order, now that nothing holds them (they may hold again)."""
        if self._closed or self._draining:
            return
        if self._holding() or (self._splice is not None and self._splice.active):
            # reading stops until then: the responses that end the hold release them (``_after_responses``
            # looks for this pause), the end of a frame being spliced too
            self._pause_if_holding()
            return
        self.gate.resume(PauseReason.HOLDING)  # paused while holding, whatever held
        try:
            for chunk, ends, first in self._held.take():
                if self._held or self._holding():
                    self._held.hold(chunk, ends, first)  # behind the ones held again
                else:
                    self._route_requests(chunk, ends, first)
            self._maybe_cut_through()
            self._send_local_responses_in_turn()
        except Exception as error:
            self._fail_on_requests(error)
        self._after_responses()

    def _decide(self, frame: memoryview) -> Decided:
        """What to do with one whole request (size prefix excluded), decided before its bytes go upstream."""
        api_key, api_version, _ = _known_request(frame)
        self._metrics.requests_by_api[api_key] += 1
        login = self._login
        if login is not None:
            login.request_read()
        return self._context.requests.decide(frame, api_key, api_version, self._sender(),
                                             None if login is None else login.login, self._link.transport is not None)

    def _sender(self) -> Sender:
        return Sender(self._user, self._link.broker)

    def _carry_out(self, outcome: Outcome, frame: memoryview) -> bool:
        """Queue the response ``outcome`` expects; True when the client's bytes go upstream as they are."""
        if outcome.expects_response:
            api_key, api_version, correlation_id = peek_request(frame)
            request = InFlight(correlation_id, api_key, api_version, outcome.throttle_ms, outcome.local_response,
                               outcome.finish, outcome.close_after_response, time.perf_counter(),
                               outcome.charge_response, whole_response=outcome.whole_response)
            self._await_response(request)
            if request.holds_later_requests:
                self._mute.throttled(outcome.throttle_ms, expects_response=True)
        else:
            if outcome.close_after_response:
                self._mute.close_when_answered()
            if outcome.throttle_ms:
                self._mute.throttled(outcome.throttle_ms, expects_response=False)
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
            self.close(CloseReason.UNDECIDABLE)
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
        upstream = cast(Outbox, self._link.outbox)  # only None before a login, when nothing is forwarded
        if self._carry_out(outcome, memoryview(frame)[SIZE_PREFIX_BYTES:]):
            upstream.write(frame)
        elif outcome.forward and outcome.replacement is not None:
            upstream.write(outcome.replacement)
        self._send_local_responses_in_turn()
        self._close_if_answered()

    def _await_response(self, request: InFlight) -> None:
        self._in_flight.expect(request)
        if request.local_response is None and self._request_timer is None:
            self._request_timer = self._loop.call_later(self._config.request_timeout_s, self._check_request_timeout)

    def _maybe_cut_through(self) -> None:
        if self._requests.buffered_bytes < CUT_THROUGH_AFTER_BYTES or self._holding():
            return
        if self._login is not None and self._login.in_progress:
            return
        partial = self._requests.partial_frame(CUT_THROUGH_AFTER_BYTES)
        assert partial is not None
        prefix, frame_bytes = partial
        frame = memoryview(prefix)[SIZE_PREFIX_BYTES:]
        try:
            api_key, api_version, correlation_id = _known_request(frame)
            started = self._context.requests.start(frame, api_key, api_version, frame_bytes - SIZE_PREFIX_BYTES,
                                                   self._sender())
        except ProtocolError:
            return  # the header does not fit yet, or is wrong: the frame is judged once it is whole
        if started is None:
            return
        self._metrics.requests_by_api[api_key] += 1
        outcome, stream = started
        taken = self._requests.take_partial_frame()
        if stream is not None:
            self._cut_through_scan = stream
            self._cut_through_correlation_id = correlation_id
            stream.feed(memoryview(taken)[SIZE_PREFIX_BYTES:])
        upstream = self._link.outbox
        assert upstream is not None
        self._request_passage.begin(frame_bytes - len(taken), upstream.write, self._request_passed,
                                    None if stream is None else stream.feed)
        self._carry_out(outcome, frame)
        upstream.write(taken)
        self._splice_unread_bytes()

    def _splice_unread_bytes(self) -> None:
        """The frame's next bytes that nothing reads (the rest of the frame, or the records a producer-ID
        check passes over) go upstream inside the kernel: the client's reading pauses until the last of them
        has gone (what else holds reading still holds it then)."""
        scan = self._cut_through_scan
        unread = self._request_passage.remaining if scan is None else scan.records_ahead
        client, cluster = self._transport, self._link.transport
        assert client is not None and cluster is not None
        if unread < SPLICE_AFTER_BYTES or not (self._config.splice and can_splice(client, cluster)):
            return
        if self._splice is None:
            self._splice = FrameSplice(self._loop, ("client", "cluster"), self._spliced_read, self._splice_done,
                                       self._splice_failed)
        assert self._link.outbox is not None
        self._link.outbox.hand_over()  # the spliced bytes follow what the cluster was sent before them
        try:
            self._splice.start(client, cluster, unread, self._read_bytes)
        except OSError as error:  # they are cut through as they are read
            log.warning("cannot splice a request from %s (%s): reading it instead", self._peer, error)
            return
        self.gate.pause(PauseReason.SPLICING)

    def _spliced_read(self, nbytes: int) -> None:
        self._last_activity = self._loop.time()
        self._metrics.bytes_in += nbytes
        self._metrics.bytes_spliced += nbytes
        self._request_passage.went_by(nbytes)
        if self._cut_through_scan is not None:
            try:
                self._cut_through_scan.skipped(nbytes)
            except ProtocolError as error:  # what follows the records cannot fit the frame
                self._fail_on_requests(error)

    def _splice_done(self) -> None:
        if self._closed:
            return
        self.gate.resume(PauseReason.SPLICING)
        if self._request_passage.remaining:
            # the rest of the frame is read, and what of it nothing reads spliced again
            self._batch_header_next = self._cut_through_scan is not None
            return
        try:
            self._request_passage.finish()
        except Exception as error:
            self._fail_on_requests(error)
            return
        if self._held and not self._holding():
            self._loop.call_soon(self._release_held)

    def _splice_failed(self, reason: str, by_client: bool) -> None:
        """A client gone in the middle of a frame closes as a truncated frame does; the cluster gone, as
        an upstream connection lost."""
        if by_client:
            self._context.metrics.closed_for_bad_input += 1
            self.close(CloseReason.TRUNCATED_FRAME, reason)
        else:
            self.close(CloseReason.UPSTREAM_LOST, reason, warn=True)

    def _cut_through(self, data: bytes) -> bytes:
        """Forward the part of ``data`` that belongs to the frame being cut through; return the rest."""
        rest = self._request_passage.take(data)
        if self._request_passage.remaining:  # all of ``data`` was the frame's
            self._splice_unread_bytes()
        return rest

    def _request_passed(self) -> None:
        """The last byte of the request cut through went upstream: what read it judges it, and reading stops if
        something holds it (it went on while the frame was incomplete: the cluster answers only whole frames)."""
        if self._cut_through_scan is not None:
            self._judge_completed_cut_through()
        self._pause_if_holding()

    def _judge_completed_cut_through(self) -> None:
        scan, self._cut_through_scan = self._cut_through_scan, None
        assert scan is not None
        correlation_id = self._cut_through_correlation_id
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
        self._request_timer = None
        oldest = self._in_flight.oldest
        if self._closed or oldest is None or oldest.local_response is not None:
            return
        timeout_s = self._config.request_timeout_s
        waited_s = time.perf_counter() - max(oldest.read_at, self._link.heard_at)
        awaiting_verdict = self._link.gate is not None and self._link.gate.paused_for(
            PauseReason.AWAITING_VERDICT)
        not_the_clusters = self._to_client.behind or self._request_passage.remaining or awaiting_verdict
        if waited_s >= timeout_s and not not_the_clusters:
            self._metrics.upstream_request_timeouts += 1
            self.close(CloseReason.REQUEST_TIMEOUT, f"request {oldest.correlation_id} (api {oldest.api_key}) waited "
                       f"{waited_s:.1f} s (request-timeout-seconds {timeout_s:g})")
            return
        self._request_timer = self._loop.call_later(max(timeout_s - waited_s, 0.1), self._check_request_timeout)


def _known_request(frame: memoryview) -> tuple[int, int, int]:
    """The request's api key, version and correlation id; an api key Kafka does not have is a bad frame."""
    api_key, api_version, correlation_id = peek_request(frame)
    if api_key not in KNOWN_API_KEYS:
        raise ProtocolError("unknown api key", api_key=api_key, api_version=api_version, offset=0)
    return api_key, api_version, correlation_id
