"""The request path and the response path alone: fake transports on both sides, a stand-in for the connection that
owns them (``RequestOwner``, ``ResponseOwner``) and for the decisions; the requests in flight and the mute are the real
ones. What goes to the cluster and to the client is asserted byte for byte."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from protocol.apis import Api
from proxy.connection.close_reason import CloseReason
from proxy.connection.flow import PauseReason, ReadGate
from proxy.connection.in_flight import InFlight, InFlightRequests
from proxy.connection.mute import ChannelMute, MuteState
from proxy.connection.outbox import Outbox
from proxy.connection.requests import RequestPath
from proxy.connection.responses import ResponsePath
from proxy.decision.outcome import FORWARD, Decided, Outcome, Respond, Sender

METADATA_V3 = 3
CLIENT_ID = b"app"


def request_frame(correlation_id: int, api_key: int = Api.METADATA, api_version: int = METADATA_V3) -> bytes:
    """A request frame (size prefix included) with a v1 header and an empty body."""
    header = (api_key.to_bytes(2, "big") + api_version.to_bytes(2, "big") + correlation_id.to_bytes(4, "big")
              + len(CLIENT_ID).to_bytes(2, "big") + CLIENT_ID)
    return len(header).to_bytes(4, "big") + header


def response_frame(correlation_id: int, throttle_ms: int = 0) -> bytes:
    """A Metadata v3 response frame: its header, then a body that starts with its throttle."""
    body = throttle_ms.to_bytes(4, "big") + b"\x00\x00\x00\x00"  # throttle_time_ms, then no brokers
    frame = correlation_id.to_bytes(4, "big") + body
    return len(frame).to_bytes(4, "big") + frame


class Transport:
    """Takes everything written; reads pause and resume when told."""

    def __init__(self) -> None:
        self.sent = bytearray()
        self.reading = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.sent += data

    def writelines(self, pieces: list[bytes]) -> None:
        for piece in pieces:
            self.write(piece)

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class Owner:
    """The connection as the paths see it: what holds its requests is set by the test."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.closed = False
        self.draining = False
        self.read_bytes = 1 << 16
        self.read_area = memoryview(bytearray(1 << 16))
        self.holds = False
        self.closes: list[CloseReason] = []
        self.after_responses_calls = 0
        self.requests: RequestPath

    def close(self, reason: CloseReason, detail: str = "", warn: bool | None = None) -> None:
        self.closes.append(reason)
        self.closed = True

    def touched(self) -> None:
        pass

    def holding(self) -> bool:
        return self.holds or self.requests.settling

    def sender(self) -> Sender:
        return Sender("alice", "broker:9092")

    def close_if_answered(self) -> None:
        pass

    def after_responses(self) -> None:
        self.after_responses_calls += 1

    def login_step_answered(self) -> None:
        pass

    def read_buffer(self) -> memoryview:
        return self.read_area

    def read_out(self, nbytes: int) -> bytes:
        return bytes(self.read_area[:nbytes])


class Decisions:
    """Decides each request as the test says (by correlation id), forwarding the rest; remembers the order."""

    def __init__(self) -> None:
        self.decided: list[int] = []
        self.senders: list[Sender] = []
        self.special: dict[int, Decided] = {}

    def decide(self, frame: memoryview, api_key: int, api_version: int, sender: Sender, login: object,
               upstream_open: bool) -> Decided:
        correlation_id = int.from_bytes(frame[4:8], "big")
        self.decided.append(correlation_id)
        self.senders.append(sender)
        return self.special.get(correlation_id, FORWARD)

    def start(self, *args: object) -> None:
        return None  # every request here is judged whole


class Connection:
    """Both paths over one set of the connection's objects."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.client, self.cluster = Transport(), Transport()
        self.decisions = Decisions()
        self.metrics = SimpleNamespace(bytes_in=0, bytes_out=0, requests_by_api=Counter(), closed_for_bad_input=0,
                                       observe_latency=lambda api_key, seconds: None)
        config = SimpleNamespace(max_frame_bytes=1 << 20, splice=False, request_timeout_s=30.0)
        context = cast(Any, SimpleNamespace(config=config, metrics=self.metrics, requests=self.decisions))
        self.owner = Owner(loop)
        self.gate = ReadGate(cast(Any, self.client))
        self.in_flight = InFlightRequests()
        self.muted: list[str] = []
        self.mute = ChannelMute(loop, lambda: self.muted.append("hold"), lambda: self.muted.append("release"),
                                lambda change: None)
        to_client = Outbox(cast(Any, self.client), 1 << 20, lambda: None, lambda: None)
        link = cast(Any, SimpleNamespace(outbox=Outbox(cast(Any, self.cluster), 1 << 20, lambda: None, lambda: None),
                                         transport=self.cluster, gate=ReadGate(cast(Any, self.cluster)),
                                         broker="broker:9092", heard_at=0.0, heard=lambda: None, opening=False))
        self.responses = ResponsePath(self.owner, context, loop, cast(Any, self.client), to_client, link,
                                      self.in_flight, self.mute, "client:1")
        self.requests = self.owner.requests = RequestPath(
            self.owner, context, loop, cast(Any, self.client), self.gate, to_client, link, self.in_flight, self.mute,
            self.responses, "client:1")

    def in_flight_ids(self) -> list[int]:
        ids = []
        while (oldest := self.in_flight.oldest) is not None:
            ids.append(oldest.correlation_id)
            self.in_flight.answered_by(memoryview(oldest.correlation_id.to_bytes(4, "big")), 4, 0)
        return ids


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    event_loop = asyncio.new_event_loop()
    yield event_loop
    event_loop.close()


def test_pipelined_requests_are_decided_in_order_and_go_upstream_untouched(loop: asyncio.AbstractEventLoop) -> None:
    connection = Connection(loop)
    read = request_frame(1) + request_frame(2) + request_frame(3)
    connection.requests.data_received(read)
    assert connection.decisions.decided == [1, 2, 3]
    assert connection.decisions.senders[0] == Sender("alice", "broker:9092")
    assert bytes(connection.cluster.sent) == read
    assert connection.in_flight_ids() == [1, 2, 3]
    assert connection.metrics.requests_by_api[Api.METADATA] == 3


def test_requests_read_while_held_wait_undecided_then_go_in_order(loop: asyncio.AbstractEventLoop) -> None:
    connection = Connection(loop)
    connection.owner.holds = True
    connection.requests.data_received(request_frame(1) + request_frame(2)[:5])
    connection.requests.data_received(request_frame(2)[5:])
    assert connection.decisions.decided == []
    assert not connection.cluster.sent
    assert connection.gate.paused_for(PauseReason.HOLDING)
    connection.owner.holds = False
    connection.requests.release_held()
    assert connection.decisions.decided == [1, 2]
    assert bytes(connection.cluster.sent) == request_frame(1) + request_frame(2)
    assert not connection.gate.paused_for(PauseReason.HOLDING)


def test_a_frame_of_an_api_kafka_does_not_have_closes_the_connection(loop: asyncio.AbstractEventLoop) -> None:
    connection = Connection(loop)
    connection.requests.data_received(request_frame(1) + request_frame(2, api_key=999))
    assert connection.owner.closes == [CloseReason.BAD_REQUEST]
    assert connection.metrics.closed_for_bad_input == 1
    assert bytes(connection.cluster.sent) == b""  # the good frame before it was not sent on its own either


def test_the_proxys_own_answer_waits_for_the_clusters_answers_before_it(loop: asyncio.AbstractEventLoop) -> None:
    connection = Connection(loop)
    own_answer = response_frame(2)
    connection.decisions.special[2] = Respond(own_answer)
    connection.requests.data_received(request_frame(1) + request_frame(2) + request_frame(3))
    assert bytes(connection.cluster.sent) == request_frame(1) + request_frame(3)
    assert not connection.client.sent  # request 1 is still out
    connection.responses.data_received(response_frame(1) + response_frame(3))
    assert bytes(connection.client.sent) == response_frame(1) + own_answer + response_frame(3)
    assert not connection.in_flight
    assert connection.owner.after_responses_calls >= 1


def test_a_request_whose_decision_asks_the_cluster_first_holds_the_ones_behind_it(
        loop: asyncio.AbstractEventLoop) -> None:
    connection = Connection(loop)
    verdict: asyncio.Future[Outcome] = loop.create_future()

    async def ask_the_cluster() -> Outcome:
        return await verdict

    pending: Awaitable[Outcome] = ask_the_cluster()
    connection.decisions.special[1] = pending
    connection.requests.data_received(request_frame(1) + request_frame(2))
    loop.run_until_complete(asyncio.sleep(0))
    assert connection.decisions.decided == [1]
    assert connection.gate.paused_for(PauseReason.AWAITING_CLUSTER)
    assert not connection.cluster.sent
    verdict.set_result(FORWARD)
    loop.run_until_complete(asyncio.sleep(0.01))
    assert connection.decisions.decided == [1, 2]
    assert bytes(connection.cluster.sent) == request_frame(1) + request_frame(2)
    assert not connection.requests.settling


def test_a_response_that_answers_no_request_out_closes_the_connection(loop: asyncio.AbstractEventLoop) -> None:
    connection = Connection(loop)
    connection.requests.data_received(request_frame(1))
    connection.responses.data_received(response_frame(7))
    assert connection.owner.closes == [CloseReason.BAD_RESPONSE]
    assert not connection.client.sent


def test_a_throttled_response_carries_its_throttle_and_the_mute_starts_once_it_is_written(
        loop: asyncio.AbstractEventLoop) -> None:
    connection = Connection(loop)
    connection.in_flight.expect(InFlight(1, Api.METADATA, METADATA_V3, throttle_ms=500))
    connection.mute.throttled(500, expects_response=True)
    assert connection.mute.state is MuteState.MUTED_AND_RESPONSE_PENDING
    connection.responses.data_received(response_frame(1, throttle_ms=20))  # the cluster's own throttle is smaller
    assert bytes(connection.client.sent) == response_frame(1, throttle_ms=500)
    assert connection.mute.state is MuteState.MUTED_AND_THROTTLED


def test_a_response_arriving_in_pieces_is_written_once_whole(loop: asyncio.AbstractEventLoop) -> None:
    connection = Connection(loop)
    connection.requests.data_received(request_frame(1))
    whole = response_frame(1)
    connection.responses.data_received(whole[:6])
    assert not connection.client.sent
    connection.responses.data_received(whole[6:])
    assert bytes(connection.client.sent) == whole


@pytest.mark.parametrize(("api_key", "api_version", "header_bytes"), [
    (Api.METADATA, 12, 5),  # a flexible request's answer: its header has tagged fields
    (Api.API_VERSIONS, 3, 4),  # ApiVersions' answer never has (header v0), though its request is flexible
])
def test_an_answer_is_finished_as_decided_from_after_its_header(loop: asyncio.AbstractEventLoop, api_key: int,
                                                                api_version: int, header_bytes: int) -> None:
    connection = Connection(loop)
    bodies: list[bytes] = []

    def finish(body: memoryview) -> bytes:
        bodies.append(bytes(body))
        return b"the client's"

    connection.in_flight.expect(InFlight(1, api_key, api_version, 0, None, finish))
    header = (1).to_bytes(4, "big") + b"\x00" * (header_bytes - 4)
    connection.responses.data_received(len(header + b"the cluster's").to_bytes(4, "big") + header + b"the cluster's")
    assert bodies == [b"the cluster's"]
    assert bytes(connection.client.sent) == len(header + b"the client's").to_bytes(4, "big") + header + b"the client's"
