"""The response side of a client connection: pairing each response with its request (Kafka answers
in order), the proxy's own answers sent in turn, throttles raised into responses, broker addresses
and api versions rewritten, large Fetch responses cut through after their throttle field.
"""

from __future__ import annotations

import logging
import time

from protocol.addresses import carries_addresses
from protocol.apis import Api, is_flexible_request
from protocol.errors import ProtocolError
from protocol.framing import SIZE_PREFIX_BYTES, FrameEnds
from protocol.header import response_header_length
from protocol.throttle import carries_throttle, may_stream_response, raise_throttle
from proxy.connection.close_reason import CloseReason
from proxy.connection.flow import PauseReason
from proxy.connection.in_flight import InFlight
from proxy.connection.splice import FrameSplice, can_splice
from proxy.connection.state import CUT_THROUGH_AFTER_BYTES, SPLICE_AFTER_BYTES, ConnectionState

log = logging.getLogger(__name__)


class ResponseSide(ConnectionState):
    """Bytes from the cluster: framed, paired with their requests, rewritten where needed, sent in turn
    with the proxy's own answers."""

    def upstream_data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._heard_from_upstream(len(data))
        try:
            if self._response_passage.remaining:
                data = self._response_passage.take(data)  # the rest of the response being cut through
            if data and not self._closed:
                chunk, ends = self._responses.feed(data)
                if ends:
                    self._route_responses(chunk, ends)
                self._maybe_cut_through_response()
        except Exception as error:
            self._fail_on_responses(error)
            return
        self._after_responses()

    def upstream_frame_read(self, nbytes: int) -> None:
        """``nbytes`` more of the response frame read whole (``FrameSplitter.read_whole``) were read into it."""
        if self._closed:
            return
        self._heard_from_upstream(nbytes)
        try:
            whole = self._responses.frame_filled(nbytes)
            if whole is None:
                return
            self._route_responses(*whole)
        except Exception as error:
            self._fail_on_responses(error)
            return
        self._after_responses()

    def _heard_from_upstream(self, nbytes: int) -> None:
        self._last_activity = self._loop.time()
        self._link.heard()
        self._metrics.bytes_out += nbytes

    def _fail_on_responses(self, error: Exception) -> None:
        if isinstance(error, ProtocolError):
            self.close(CloseReason.BAD_RESPONSE, str(error))
        else:
            log.exception("unexpected error handling responses for %s", self._peer, exc_info=error)
            self.close(CloseReason.INTERNAL_ERROR, "handling responses")

    def _after_responses(self) -> None:
        self._close_if_answered()
        if self.gate.paused_for(PauseReason.HOLDING) and not self._holding():
            self._release_held()  # held for the requests in flight (reading paused, maybe nothing held yet)
        if self._draining and not self._awaiting_responses() and self._settling is None:
            self.close(CloseReason.SHUTDOWN, "drained")  # requests still held were never forwarded: the client retries

    def _route_responses(self, chunk: bytes | bytearray, ends: FrameEnds) -> None:
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
                pieces.extend(replacement)
                untouched_from = end
            start = end
        if not pieces:
            self._to_client.write(chunk)
        else:
            if untouched_from < len(chunk):
                pieces.append(view[untouched_from:])
            self._to_client.writelines(pieces)
        self._responses_sent(mute_ms)

    def _answered_request(self, frame: memoryview, frame_bytes: int, offset: int) -> InFlight:
        """Take the request the response ``frame`` answers (``InFlightRequests.answered_by``)."""
        request = self._in_flight.answered_by(frame, frame_bytes, offset)
        self._metrics.observe_latency(request.api_key, time.perf_counter() - request.read_at)
        self._close_after_write |= request.close_after_response
        return request

    def _responses_sent(self, mute_ms: int | None) -> None:
        """Whole responses were written: the proxy's own answers queued behind them follow, then the
        close or the mute they asked for (after the response is written, as a Kafka broker does)."""
        self._send_local_responses_in_turn()
        if self._close_after_write:
            self.close(CloseReason.CLOSE_AFTER_RESPONSE)
        elif mute_ms is not None:
            self._mute.response_sent(mute_ms)
        self._login_step_answered()

    def _maybe_cut_through_response(self) -> None:
        """Start forwarding a large Fetch response as it arrives, once its start is here: it is
        charged by its size prefix, and its throttle field comes first in its body."""
        request = self._in_flight.oldest
        if self._responses.buffered_bytes < CUT_THROUGH_AFTER_BYTES or self._closed or request is None:
            return
        if (not may_stream_response(request.api_key) or request.local_response is not None or request.finish is not None
                or request.whole_response or self._names_brokers(request.api_key, request.api_version)):
            self._responses.read_whole()  # its rest is read straight into a buffer of its size
            return
        partial = self._responses.partial_frame(CUT_THROUGH_AFTER_BYTES)
        if partial is None:
            return  # read whole already
        prefix, frame_bytes = partial
        frame = memoryview(prefix)[SIZE_PREFIX_BYTES:]
        request = self._answered_request(frame, frame_bytes - SIZE_PREFIX_BYTES, 0)
        taken = self._responses.take_partial_frame()
        remaining = frame_bytes - len(taken)
        if request.answer_body is not None:
            header_length = response_header_length(frame, is_flexible_request(request.api_key, request.api_version))
            self._to_client.writelines(frame_pieces(frame, header_length, request.answer_body))
            # the rest is read and dropped before anything behind it is answered (begun before the mute's release
            # may decide the requests held)
            self._response_passage.begin(remaining, None, lambda: self._responses_sent(None))
            # the client has its answer: its mute starts now, not once the dropped rest has arrived
            self._mute.response_sent(request.throttle_ms)
            return
        head = memoryview(taken)[:len(prefix)]
        if request.throttle_ms:
            header_length = response_header_length(frame, is_flexible_request(request.api_key, request.api_version))
            body = raise_throttle(request.api_key, request.api_version, frame[header_length:], request.throttle_ms)
            if body is not None:
                head = memoryview(b"".join((prefix[:SIZE_PREFIX_BYTES + header_length], body)))
        self._to_client.writelines((head, memoryview(taken)[len(prefix):]))
        mute_ms = request.throttle_ms if request.holds_later_requests else None
        self._response_passage.begin(remaining, self._to_client.write, lambda: self._responses_sent(mute_ms))
        if remaining >= SPLICE_AFTER_BYTES:
            self._splice_rest_of_response()

    def _splice_rest_of_response(self) -> None:
        """The rest of the Fetch response goes to the client inside the kernel, unread: the cluster's
        connection is read no further until its last byte has gone."""
        transport, upstream, gate = self._transport, self._link.transport, self._link.gate
        assert transport is not None and upstream is not None and gate is not None
        if not (self._config.splice and can_splice(upstream, transport)):
            return
        if self._response_splice is None:
            self._response_splice = FrameSplice(self._loop, ("cluster", "client"), self._spliced_response_read,
                                                self._spliced_response, self._response_splice_failed)
        self._to_client.hand_over()  # the spliced bytes follow what the client was sent before them
        try:
            self._response_splice.start(upstream, transport, self._response_passage.remaining, self._read_bytes)
        except OSError as error:  # the rest is cut through as it is read
            log.warning("cannot splice a response to %s (%s): reading it instead", self._peer, error)
            return
        gate.pause(PauseReason.SPLICING)

    def _spliced_response_read(self, nbytes: int) -> None:
        self._last_activity = self._loop.time()
        self._link.heard()
        self._metrics.bytes_out += nbytes
        self._metrics.bytes_spliced_out += nbytes
        self._response_passage.went_by(nbytes)

    def _spliced_response(self) -> None:
        assert self._link.gate is not None
        self._link.gate.resume(PauseReason.SPLICING)
        self._response_passage.finish()
        if not self._closed:
            self._after_responses()

    def _response_splice_failed(self, reason: str, by_cluster: bool) -> None:
        """The cluster gone in the middle of a response is worth a warning; a client that leaves is not."""
        self.close(CloseReason.UPSTREAM_LOST if by_cluster else CloseReason.CLIENT_LEFT, reason, warn=by_cluster)

    def _local_responses_due(self) -> list[bytes]:
        """The proxy's own answers at the head of the queue: no earlier request is still out."""
        if self._response_passage.remaining:
            return []  # they follow the response being cut through
        due: list[bytes] = []
        now = time.perf_counter()
        for request in self._in_flight.local_answers_due():
            assert request.local_response is not None
            self._metrics.observe_latency(request.api_key, now - request.read_at)
            due.append(request.local_response)
            if request.throttle_ms:
                self._loop.call_soon(self._mute.response_sent, request.throttle_ms)  # once this answer has been written
            self._close_after_write |= request.close_after_response
        return due

    def _send_local_responses_in_turn(self) -> None:
        due = self._local_responses_due()
        if due:
            self._to_client.writelines(due)
            if self._close_after_write:
                self.close(CloseReason.CLOSE_AFTER_RESPONSE)
                return
            self._login_step_answered()
            self._after_responses()

    def _names_brokers(self, api_key: int, api_version: int) -> bool:
        """The response names brokers the client must reach through the proxy."""
        return self._context.rewrites_addresses and carries_addresses(api_key, api_version)

    def _rewrite_response(self, request: InFlight, frame: memoryview) -> tuple[bytes, bytes] | None:
        """A whole replacement frame (size prefix included, ``frame_pieces``), or None to forward it untouched."""
        api_key, api_version = request.api_key, request.api_version
        if api_key == Api.API_VERSIONS:
            header_length = response_header_length(frame, flexible=False)
            body = self._context.adapt_api_versions(frame[header_length:], api_version)
        else:
            names_brokers = self._names_brokers(api_key, api_version)
            throttle_ms = request.throttle_ms if carries_throttle(api_key, api_version) else 0  # else: muted only
            if not throttle_ms and not names_brokers and request.finish is None:
                return None
            header_length = response_header_length(frame, is_flexible_request(api_key, api_version))
            body = request.answer_body  # Kafka's answer to a throttled Fetch: nothing of the cluster's to finish
            if request.finish is not None and body is None:
                body = request.finish(frame[header_length:])
            if throttle_ms:
                body = raise_throttle(api_key, api_version, frame[header_length:] if body is None else memoryview(body),
                                      throttle_ms) or body
            if names_brokers:
                body = self._context.rewrite_addresses(api_key, api_version,
                                                       frame[header_length:] if body is None else body) or body
        if body is None:
            return None
        return frame_pieces(frame, header_length, body)


def frame_pieces(frame: memoryview, header_length: int, body: bytes) -> tuple[bytes, bytes]:
    """A whole frame (size prefix included) in two pieces: the size and the header of ``frame``, then ``body``
    itself, not a copy: a body remembered for its bytes (``RewriteMemo``) is one object however many clients have
    it queued, where a copy each made clients reading nothing cost the proxy several times the memory (measured in
    docs/deploying.md, "Bounded memory")."""
    return b"".join(((header_length + len(body)).to_bytes(4, "big"), frame[:header_length])), body

