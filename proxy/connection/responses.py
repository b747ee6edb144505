"""The response path of a client connection: pairing each response with its request (Kafka answers
in order), the proxy's own answers sent in turn, throttles raised into responses, broker addresses
and api versions rewritten, large Fetch responses cut through after their throttle field.

It owns the framing of the cluster's bytes and the response frame in passage; the requests awaiting answers, the
mute and the outboxes are the connection's, handed to it. What it asks of its connection is ``ResponseOwner``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from protocol.apis import is_flexible_response
from protocol.errors import ProtocolError
from protocol.framing import SIZE_PREFIX_BYTES, FrameEnds, FrameSplitter
from protocol.header import response_header_length
from protocol.throttle import carries_throttle, may_stream_response, raise_throttle
from proxy.connection.close_reason import CloseReason
from proxy.connection.context import ProxyContext
from proxy.connection.flow import PauseReason
from proxy.connection.in_flight import InFlight, InFlightRequests
from proxy.connection.mute import ChannelMute
from proxy.connection.outbox import Outbox
from proxy.connection.passage import FramePassage
from proxy.connection.reading import CUT_THROUGH_AFTER_BYTES, SPLICE_AFTER_BYTES
from proxy.connection.splice import FrameSplice, can_splice
from proxy.connection.upstream_link import UpstreamLink

log = logging.getLogger(__name__)

MIN_RESPONSE_FRAME_BYTES = 4  # correlation id


class ResponseOwner(Protocol):
    """What the response path asks of the connection it belongs to."""

    @property
    def closed(self) -> bool: ...

    @property
    def read_bytes(self) -> int:
        """The most one read of the connection takes (its buffer share's)."""

    def close(self, reason: CloseReason, detail: str = "", warn: bool | None = None) -> None: ...

    def touched(self) -> None:
        """Bytes moved: the connection is not idle."""

    def read_buffer(self) -> memoryview:
        """Where the next read lands (the loop's read buffer, no more of it than ``read_bytes``)."""

    def read_out(self, nbytes: int) -> bytes:
        """What the last read put in the read buffer, before the next read reuses it."""

    def login_step_answered(self) -> None:
        """Answers were written (a login step may be over)."""

    def after_responses(self) -> None:
        """Responses were handled: a close, a drain or the requests held may follow."""


class ResponsePath:
    """Bytes from the cluster: framed, paired with their requests, rewritten where needed, sent in turn
    with the proxy's own answers."""

    def __init__(self, owner: ResponseOwner, context: ProxyContext, loop: asyncio.AbstractEventLoop,
                 client: asyncio.Transport, to_client: Outbox, link: UpstreamLink, in_flight: InFlightRequests,
                 mute: ChannelMute, peer: str) -> None:
        self._owner = owner
        self._config = context.config
        self._metrics = context.metrics
        self._loop = loop
        self._client = client
        self._to_client = to_client
        self._link = link
        self._in_flight = in_flight
        self._mute = mute
        self._peer = peer
        self._frames = FrameSplitter(self._config.max_frame_bytes, MIN_RESPONSE_FRAME_BYTES)
        self._passage = FramePassage()
        """The rest of a large Fetch response, going to the client as it arrives (or dropped)."""
        self._splice: FrameSplice | None = None
        """Moves the rest of large Fetch responses socket to socket (made for the first)."""
        self._reads_into_frame = False
        """The cluster's connection's last read buffer was the rest of a response frame read whole."""
        self._close_after_write = False

    @property
    def passing(self) -> bool:
        """A response frame is in passage: its rest is still to come from the cluster."""
        return self._passage.remaining > 0

    def read_buffer(self) -> memoryview:
        """Where the cluster's next read lands: the rest of a response frame being read whole, or the loop's read
        buffer."""
        space = self._frames.frame_space()
        self._reads_into_frame = space is not None
        return self._owner.read_buffer() if space is None else space

    def buffer_updated(self, nbytes: int) -> None:
        if self._reads_into_frame:
            self.frame_read(nbytes)
        else:
            self.data_received(self._owner.read_out(nbytes))

    def stop(self) -> None:
        if self._splice is not None:
            self._splice.stop()
        self._frames.discard()  # as the request path's, at once rather than when the connection is collected

    def data_received(self, data: bytes) -> None:
        if self._owner.closed:
            return
        self._heard_from_upstream(len(data))
        try:
            if self._passage.remaining:
                data = self._passage.take(data)  # the rest of the response being cut through
            if data and not self._owner.closed:
                chunk, ends = self._frames.feed(data)
                if ends:
                    self._route_responses(chunk, ends)
                self._maybe_cut_through_response()
        except Exception as error:
            self._fail_on_responses(error)
            return
        self._owner.after_responses()

    def frame_read(self, nbytes: int) -> None:
        """``nbytes`` more of the response frame read whole (``FrameSplitter.read_whole``) were read into it."""
        if self._owner.closed:
            return
        self._heard_from_upstream(nbytes)
        try:
            whole = self._frames.frame_filled(nbytes)
            if whole is None:
                return
            self._route_responses(*whole)
        except Exception as error:
            self._fail_on_responses(error)
            return
        self._owner.after_responses()

    def _heard_from_upstream(self, nbytes: int) -> None:
        self._owner.touched()
        self._link.heard()
        self._metrics.bytes_out += nbytes

    def _fail_on_responses(self, error: Exception) -> None:
        if isinstance(error, ProtocolError):
            self._owner.close(CloseReason.BAD_RESPONSE, str(error))
        else:
            log.exception("unexpected error handling responses for %s", self._peer, exc_info=error)
            self._owner.close(CloseReason.INTERNAL_ERROR, "handling responses")

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
        self.send_local_answers_in_turn()
        if self._close_after_write:
            self._owner.close(CloseReason.CLOSE_AFTER_RESPONSE)
        elif mute_ms is not None:
            self._mute.response_sent(mute_ms)
        self._owner.login_step_answered()

    def _maybe_cut_through_response(self) -> None:
        """Start forwarding a large Fetch response as it arrives, once its start is here: it is
        charged by its size prefix, and its throttle field comes first in its body."""
        request = self._in_flight.oldest
        if self._frames.buffered_bytes < CUT_THROUGH_AFTER_BYTES or self._owner.closed or request is None:
            return
        if (not may_stream_response(request.api_key) or request.local_response is not None or request.finish is not None
                or request.whole_response):
            self._frames.read_whole()  # its rest is read straight into a buffer of its size
            return
        partial = self._frames.partial_frame(CUT_THROUGH_AFTER_BYTES)
        if partial is None:
            return  # read whole already
        prefix, frame_bytes = partial
        frame = memoryview(prefix)[SIZE_PREFIX_BYTES:]
        request = self._answered_request(frame, frame_bytes - SIZE_PREFIX_BYTES, 0)
        taken = self._frames.take_partial_frame()
        remaining = frame_bytes - len(taken)
        if request.answer_body is not None:
            header_length = response_header_length(frame, is_flexible_response(request.api_key, request.api_version))
            self._to_client.writelines(frame_pieces(frame, header_length, request.answer_body))
            # the rest is read and dropped before anything behind it is answered (begun before the mute's release
            # may decide the requests held)
            self._passage.begin(remaining, None, lambda: self._responses_sent(None))
            # the client has its answer: its mute starts now, not once the dropped rest has arrived
            self._mute.response_sent(request.throttle_ms)
            return
        head = memoryview(taken)[:len(prefix)]
        if request.throttle_ms:
            header_length = response_header_length(frame, is_flexible_response(request.api_key, request.api_version))
            body = raise_throttle(request.api_key, request.api_version, frame[header_length:], request.throttle_ms)
            if body is not None:
                head = memoryview(b"".join((prefix[:SIZE_PREFIX_BYTES + header_length], body)))
        self._to_client.writelines((head, memoryview(taken)[len(prefix):]))
        mute_ms = request.throttle_ms if request.holds_later_requests else None
        self._passage.begin(remaining, self._to_client.write, lambda: self._responses_sent(mute_ms))
        if remaining >= SPLICE_AFTER_BYTES:
            self._splice_rest_of_response()

    def _splice_rest_of_response(self) -> None:
        """The rest of the Fetch response goes to the client inside the kernel, unread: the cluster's
        connection is read no further until its last byte has gone."""
        transport, upstream, gate = self._client, self._link.transport, self._link.gate
        assert transport is not None and upstream is not None and gate is not None
        if not (self._config.splice and can_splice(upstream, transport)):
            return
        if self._splice is None:
            self._splice = FrameSplice(self._loop, ("cluster", "client"), self._spliced_response_read,
                                                self._spliced_response, self._splice_failed)
        self._to_client.hand_over()  # the spliced bytes follow what the client was sent before them
        try:
            self._splice.start(upstream, transport, self._passage.remaining, self._owner.read_bytes)
        except OSError as error:  # the rest is cut through as it is read
            log.warning("cannot splice a response to %s (%s): reading it instead", self._peer, error)
            return
        gate.pause(PauseReason.SPLICING)

    def _spliced_response_read(self, nbytes: int) -> None:
        self._owner.touched()
        self._link.heard()
        self._metrics.bytes_out += nbytes
        self._metrics.bytes_spliced_out += nbytes
        self._passage.went_by(nbytes)

    def _spliced_response(self) -> None:
        assert self._link.gate is not None
        self._link.gate.resume(PauseReason.SPLICING)
        self._passage.finish()
        if not self._owner.closed:
            self._owner.after_responses()

    def _splice_failed(self, reason: str, by_cluster: bool) -> None:
        """The cluster gone in the middle of a response is worth a warning; a client that leaves is not."""
        self._owner.close(CloseReason.UPSTREAM_LOST if by_cluster else CloseReason.CLIENT_LEFT, reason, warn=by_cluster)

    def _local_responses_due(self) -> list[bytes]:
        """The proxy's own answers at the head of the queue: no earlier request is still out."""
        if self._passage.remaining:
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

    def send_local_answers_in_turn(self) -> None:
        due = self._local_responses_due()
        if due:
            self._to_client.writelines(due)
            if self._close_after_write:
                self._owner.close(CloseReason.CLOSE_AFTER_RESPONSE)
                return
            self._owner.login_step_answered()
            self._owner.after_responses()

    @staticmethod
    def _rewrite_response(request: InFlight, frame: memoryview) -> tuple[bytes, bytes] | None:
        """A whole replacement frame (size prefix included, ``frame_pieces``), or None to forward it untouched."""
        api_key, api_version = request.api_key, request.api_version
        throttle_ms = request.throttle_ms if carries_throttle(api_key, api_version) else 0  # else: muted only
        if not throttle_ms and request.finish is None:
            return None
        header_length = response_header_length(frame, is_flexible_response(api_key, api_version))
        body = request.answer_body  # Kafka's answer to a throttled Fetch: nothing of the cluster's to finish
        if request.finish is not None and body is None:
            body = request.finish(frame[header_length:])
        if throttle_ms:
            body = raise_throttle(api_key, api_version, frame[header_length:] if body is None else memoryview(body),
                                  throttle_ms) or body
        if body is None:
            return None
        return frame_pieces(frame, header_length, body)


def frame_pieces(frame: memoryview, header_length: int, body: bytes) -> tuple[bytes, bytes]:
    """A whole frame (size prefix included) in two pieces: the size and the header of ``frame``, then ``body``
    itself, not a copy: a body remembered for its bytes (``RewriteMemo``) is one object however many clients have
    it queued, where a copy each made clients reading nothing cost the proxy several times the memory (measured in
    docs/deploying.md, "Bounded memory")."""
    return b"".join(((header_length + len(body)).to_bytes(4, "big"), frame[:header_length])), body

