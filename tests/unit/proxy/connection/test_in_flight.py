"""The requests of a connection awaiting answers: paired with the cluster's responses in order, the proxy's own
answers in their turn, throttles known only from a response or from a request's end."""

from __future__ import annotations

import pytest

from protocol.errors import ProtocolError
from proxy.connection.in_flight import InFlight, InFlightRequests
from proxy.decision.outcome import ChargedResponse

METADATA, FETCH, PRODUCE = 3, 1, 0


def response(correlation_id: int) -> memoryview:
    return memoryview(correlation_id.to_bytes(4, "big") + b"body")


def local_answer(correlation_id: int, size: int = 100) -> bytes:
    return (size - 4).to_bytes(4, "big") + correlation_id.to_bytes(4, "big") + b"x" * (size - 8)


def test_responses_answer_the_requests_in_the_order_they_were_read() -> None:
    queue = InFlightRequests()
    for correlation_id in (7, 8):
        queue.expect(InFlight(correlation_id, METADATA, 12))
    assert queue.answered_by(response(7), 8, 0).correlation_id == 7
    assert queue.answered_by(response(8), 8, 0).correlation_id == 8
    assert not queue


def test_a_response_to_another_request_or_to_none_is_the_clusters_error() -> None:
    queue = InFlightRequests()
    with pytest.raises(ProtocolError, match="without a request"):
        queue.answered_by(response(1), 8, 0)
    queue.expect(InFlight(5, METADATA, 12))
    with pytest.raises(ProtocolError, match="correlation id 6 does not match request 5"):
        queue.answered_by(response(6), 8, 40)


def test_the_proxys_own_answers_wait_for_the_requests_read_before_them() -> None:
    queue = InFlightRequests()
    queue.expect(InFlight(1, METADATA, 12))
    queue.expect(InFlight(2, METADATA, 12, local_response=local_answer(2, 100)))
    queue.expect(InFlight(3, METADATA, 12, local_response=local_answer(3, 50)))
    assert queue.local_answer_bytes == 150
    assert queue.local_answers_due() == []  # request 1 is still out
    queue.answered_by(response(1), 8, 0)
    assert [request.correlation_id for request in queue.local_answers_due()] == [2, 3]
    assert queue.local_answer_bytes == 0 and not queue


def test_no_response_of_the_clusters_answers_a_request_the_proxy_answers() -> None:
    queue = InFlightRequests()
    queue.expect(InFlight(2, METADATA, 12, local_response=local_answer(2)))
    with pytest.raises(ProtocolError, match="without a request"):
        queue.answered_by(response(2), 8, 0)


def test_a_throttle_known_from_the_response_is_the_larger_of_the_two() -> None:
    charged_at: list[int] = []

    def charge(start: memoryview, size: int) -> ChargedResponse:
        charged_at.append(size)
        return ChargedResponse(throttle_ms=300)

    queue = InFlightRequests()
    queue.expect(InFlight(1, FETCH, 15, throttle_ms=100, charge_response=charge))
    queue.expect(InFlight(2, FETCH, 15, throttle_ms=800, charge_response=charge))
    assert queue.answered_by(response(1), 1_000_000, 0).throttle_ms == 300
    assert queue.answered_by(response(2), 2_000, 0).throttle_ms == 800
    assert charged_at == [1_000_000, 2_000]  # charged by the whole response's size, which may still be arriving


def test_an_answer_the_charge_replaces_goes_with_its_request() -> None:
    queue = InFlightRequests()
    queue.expect(InFlight(1, FETCH, 15, charge_response=lambda start, size: ChargedResponse(500, b"empty")))
    answered = queue.answered_by(response(1), 8, 0)
    assert (answered.throttle_ms, answered.answer_body) == (500, b"empty")


def test_a_throttle_decided_at_a_requests_end_goes_to_it_if_it_expects_an_answer() -> None:
    queue = InFlightRequests()
    assert not queue.throttle_newest(4, 200)  # acks=0: nothing awaits an answer
    queue.expect(InFlight(4, PRODUCE, 9, throttle_ms=300))
    assert not queue.throttle_newest(5, 200)  # request 5 expects none
    assert queue.throttle_newest(4, 200) and queue.oldest == InFlight(4, PRODUCE, 9, throttle_ms=300)
    assert queue.throttle_newest(4, 900) and queue.oldest == InFlight(4, PRODUCE, 9, throttle_ms=900)


def test_holding_later_requests_follows_a_throttle_or_a_charge_to_come() -> None:
    assert not InFlight(1, METADATA, 12).holds_later_requests
    assert InFlight(1, PRODUCE, 9, throttle_ms=1).holds_later_requests
    assert InFlight(1, FETCH, 15, charge_response=lambda start, size: ChargedResponse(0)).holds_later_requests


def test_cleared_it_holds_nothing() -> None:
    queue = InFlightRequests()
    queue.expect(InFlight(2, METADATA, 12, local_response=local_answer(2)))
    queue.clear()
    assert not queue and queue.local_answer_bytes == 0 and queue.oldest is None
