"""The requests of one connection still waiting for their answers, in the order they were read.

Kafka answers a connection's requests in the order it read them, and so does the proxy: each response from
the cluster answers the request at the head of the queue (its correlation id must say so), and the
proxy's own answers wait there for their turn, behind the requests still out before them.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from protocol.errors import ProtocolError
from protocol.header import response_correlation_id
from proxy.decision.outcome import ResponseCharge, ResponseFinisher


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
    charge_response: ResponseCharge | None = None
    answer_body: bytes | None = None
    """Set by ``charge_response`` when the client gets this body instead of the upstream one."""
    whole_response: bool = False
    """The answer is read whole, never cut through (``OnResponse.read_whole``)."""

    @property
    def holds_later_requests(self) -> bool:
        """Later requests wait for this one's response (and the mute it brings): it has a throttle, or
        its cost, hence its throttle, is known only from its response (a metered Fetch)."""
        return bool(self.throttle_ms) or self.charge_response is not None


class InFlightRequests:
    """Requests read and not yet answered, oldest first; the bytes of the proxy's own answers among them."""

    __slots__ = ("_queue", "local_answer_bytes")

    def __init__(self) -> None:
        self._queue: deque[InFlight] = deque()
        self.local_answer_bytes = 0
        """Bytes of the proxy's own answers waiting their turn."""

    def __len__(self) -> int:
        return len(self._queue)

    def __bool__(self) -> bool:
        return bool(self._queue)

    @property
    def oldest(self) -> InFlight | None:
        return self._queue[0] if self._queue else None

    def expect(self, request: InFlight) -> None:
        self._queue.append(request)
        if request.local_response is not None:
            self.local_answer_bytes += len(request.local_response)

    def answered_by(self, frame: memoryview, frame_bytes: int, offset: int) -> InFlight:
        """Take the request the cluster's response ``frame`` answers (the whole frame or, cut through, its start;
        ``frame_bytes`` long without its size prefix; ``offset`` where it starts in what was read, for the error),
        charged for the response when its cost is known only now. A response that answers no request, or not
        the oldest, is the cluster's error: the connection cannot go on."""
        if not self._queue or self._queue[0].local_response is not None:
            raise ProtocolError("response without a request", offset=offset)
        request = self._queue.popleft()
        correlation_id = response_correlation_id(frame, 0)
        if correlation_id != request.correlation_id:
            raise ProtocolError(
                f"correlation id {correlation_id} does not match request {request.correlation_id}",
                api_key=request.api_key, api_version=request.api_version, offset=offset)
        if request.charge_response is not None:
            charged = request.charge_response(frame, frame_bytes)
            if charged.throttle_ms > request.throttle_ms or charged.answer_body is not None:
                request = request._replace(throttle_ms=max(request.throttle_ms, charged.throttle_ms),
                                           answer_body=charged.answer_body)
        return request

    def local_answers_due(self) -> list[InFlight]:
        """Take the requests at the head that the proxy answers itself: no earlier request is still out."""
        due: list[InFlight] = []
        while self._queue and self._queue[0].local_response is not None:
            request = self._queue.popleft()
            assert request.local_response is not None
            self.local_answer_bytes -= len(request.local_response)
            due.append(request)
        return due

    def throttle_newest(self, correlation_id: int, throttle_ms: int) -> bool:
        """Raise the throttle of the newest request to ``throttle_ms`` at least, when it is request
        ``correlation_id`` (a request judged once its last byte went by): False when that request expects no
        answer."""
        if not self._queue or self._queue[-1].correlation_id != correlation_id:
            return False
        newest = self._queue[-1]
        self._queue[-1] = newest._replace(throttle_ms=max(newest.throttle_ms, throttle_ms))
        return True

    def clear(self) -> None:
        self._queue.clear()
        self.local_answer_bytes = 0
