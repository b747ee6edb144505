"""The chain alone: which link decides each request, and the largest throttle of those that charge it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from protocol.apis import Api
from protocol.header import RequestHeader, read_request_header
from proxy.decision.outcome import CLOSE, FORWARD, Caller, Decided, Forward, OnResponse, Outcome, Respond, Sender
from proxy.handlers.chain import RequestChain
from tests.support import encode_request

SENDER = Sender("alice", "b:9092")
NOW_MS = 1_000


def clock() -> int:
    return NOW_MS


CALLER = Caller("alice", NOW_MS, "b:9092", clock)
"""What the handlers are given: who sent the request, the quota time the chain read once for it, and the clock it
was read from."""
VERSIONS_ANSWER = Respond(b"versions")
LOGIN_ANSWER = Respond(b"login")


class Versions:
    def answer(self, frame: memoryview) -> Decided:
        return VERSIONS_ANSWER


class FakeLogin:
    def __init__(self, done: bool, needs_upstream_before_login: bool) -> None:
        self.done = done
        self.needs_upstream_before_login = needs_upstream_before_login

    def handle(self, frame: memoryview) -> Decided:
        return LOGIN_ANSWER


class Answers:
    """The cluster's answers as clients get them: ``finished`` apis' answers get `` finished`` appended."""

    def __init__(self, *finished: int) -> None:
        self.finished = finished

    def finisher(self, api_key: int, api_version: int) -> Callable[[memoryview], bytes | None] | None:
        return (lambda body: bytes(body) + b" finished") if api_key in self.finished else None


class RequestRate:
    def __init__(self, throttle_ms: int) -> None:
        self.throttle = throttle_ms
        self.charged: list[int] = []
        self.headers: list[RequestHeader | None] = []

    def __call__(self, frame: memoryview, api_key: int, header: RequestHeader | None, caller: Caller) -> int:
        self.charged.append(api_key)
        self.headers.append(header)
        return self.throttle


class Handler:
    def __init__(self, decide: Callable[[RequestHeader, memoryview, Caller], Decided]) -> None:
        self.decide = decide

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        return self.decide(header, frame, caller)


class Streaming(Handler):
    def __init__(self, started: Any) -> None:
        super().__init__(lambda header, frame, caller: FORWARD)
        self.started = started

    def on_request_start(self, header: RequestHeader, frame_start: memoryview, request_bytes: int, caller: Caller
                         ) -> Any:
        return self.started


def request(api_key: int, version: int, **fields: Any) -> tuple[memoryview, int, int]:
    frame = memoryview(encode_request(api_key, version, **fields))[4:]
    return frame, api_key, version


METADATA = request(Api.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False)
API_VERSIONS = request(Api.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
HANDSHAKE = request(Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")


def chain(rate: RequestRate, handlers: dict[int, Any] | None = None, streaming: dict[int, Any] | None = None
          ) -> RequestChain:
    return RequestChain(Versions(), {**(handlers or {}), **(streaming or {})}, rate, clock, Answers())


def test_api_versions_is_the_proxys_before_the_cluster_can_be_asked_and_the_clusters_after() -> None:
    rate = RequestRate(0)
    assert chain(rate).decide(*API_VERSIONS, SENDER, None, upstream_open=False) is VERSIONS_ANSWER
    assert chain(rate).decide(*API_VERSIONS, SENDER, None, upstream_open=True) is FORWARD
    assert rate.charged == [Api.API_VERSIONS]  # what the cluster answers is charged (the charge table exempts it)


def test_a_login_in_progress_answers_every_request_when_the_proxy_terminates_it() -> None:
    rate = RequestRate(500)
    terminating = FakeLogin(done=False, needs_upstream_before_login=False)
    assert chain(rate).decide(*METADATA, SENDER, terminating, upstream_open=False) is LOGIN_ANSWER
    assert rate.charged == [], "nothing is charged before the login says who the client is"


def test_an_inspected_login_answers_only_its_own_requests_and_the_rest_are_charged() -> None:
    rate = RequestRate(0)
    inspecting = FakeLogin(done=False, needs_upstream_before_login=True)
    assert chain(rate).decide(*HANDSHAKE, SENDER, inspecting, upstream_open=True) is LOGIN_ANSWER
    assert chain(rate).decide(*METADATA, SENDER, inspecting, upstream_open=True) is FORWARD
    assert rate.charged == [Api.METADATA]
    done = FakeLogin(done=True, needs_upstream_before_login=False)
    assert chain(rate).decide(*HANDSHAKE, SENDER, done, upstream_open=True) is LOGIN_ANSWER  # a re-login is its


def test_the_largest_throttle_of_the_handler_and_the_request_rate_is_given() -> None:
    throttled = Forward(throttle_ms=100)

    def decide(header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        assert caller == CALLER
        return throttled

    handler = Handler(decide)
    decided = chain(RequestRate(300), {Api.METADATA: handler}).decide(*METADATA, SENDER, None, upstream_open=True)
    assert isinstance(decided, Outcome) and decided.throttle_ms == 300
    decided = chain(RequestRate(50), {Api.METADATA: handler}).decide(*METADATA, SENDER, None, upstream_open=True)
    assert decided is throttled


def test_a_request_whose_handler_judges_it_whole_is_not_started() -> None:
    frame, api_key, version = METADATA
    rate = RequestRate(0)
    whole_only = chain(rate, {Api.METADATA: Handler(lambda header, frame, caller: FORWARD)})
    assert whole_only.start(frame, api_key, version, 10, SENDER) is None
    assert rate.charged == [], "a request not started is charged once whole"


def test_a_request_without_handler_streams_as_it_is_and_a_streaming_handler_gives_its_stream() -> None:
    frame, api_key, version = METADATA
    assert chain(RequestRate(0)).start(frame, api_key, version, 10, SENDER) == (FORWARD, None)
    stream = object()
    streaming = {Api.METADATA: Streaming((FORWARD, stream))}
    outcome, given = chain(RequestRate(200), streaming=streaming).start(frame, api_key, version, 10, SENDER) or (
        None, None)
    assert given is stream and outcome is not None and outcome.throttle_ms == 200
    assert chain(RequestRate(0), streaming={Api.METADATA: Streaming(None)}).start(
        frame, api_key, version, 10, SENDER) is None


def test_the_apis_without_a_handler_go_to_the_otherwise_handler_judged_whole() -> None:
    frame, api_key, version = METADATA
    closing = Handler(lambda header, frame, caller: CLOSE)
    guarded = RequestChain(Versions(), {}, RequestRate(0), clock, Answers(), otherwise=closing)
    assert guarded.decide(*METADATA, SENDER, None, upstream_open=True) is CLOSE
    assert guarded.start(frame, api_key, version, 10, SENDER) is None, "not streamed past it"


def test_a_login_and_api_versions_are_judged_whole_however_large() -> None:
    rate = RequestRate(0)
    for frame, api_key, version in (HANDSHAKE, API_VERSIONS):
        assert chain(rate, streaming={api_key: Streaming((FORWARD, None))}).start(
            frame, api_key, version, 1 << 20, SENDER) is None
    assert rate.charged == []


def test_quota_time_is_read_once_for_a_request_and_given_to_every_link() -> None:
    readings = iter(range(5_000, 6_000, 100))
    seen: list[int] = []

    def decide(header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        seen.append(caller.now_ms)
        return FORWARD

    def rate(frame: memoryview, api_key: int, header: RequestHeader | None, caller: Caller) -> int:
        seen.append(caller.now_ms)
        return 0

    links = RequestChain(Versions(), {Api.METADATA: Handler(decide)}, rate, lambda: next(readings), Answers())
    links.decide(*METADATA, SENDER, None, upstream_open=True)
    links.decide(*METADATA, SENDER, None, upstream_open=True)
    assert seen == [5_000, 5_000, 5_100, 5_100]


def test_a_decision_taken_later_reads_the_chains_clock_again() -> None:
    readings = iter((7_000, 7_250))
    later: list[int] = []

    def waits_then_decides(header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        later.append(caller.later().now_ms)  # as a handler does once the cluster has answered what it asked
        return FORWARD

    RequestChain(Versions(), {Api.METADATA: Handler(waits_then_decides)}, RequestRate(0), lambda: next(readings),
                 Answers()).decide(*METADATA, SENDER, None, upstream_open=True)
    assert later == [7_250]


def test_a_request_header_is_read_once_and_given_to_its_handler_and_the_request_rate() -> None:
    given: list[RequestHeader] = []

    def decide(header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        given.append(header)
        return FORWARD

    rate = RequestRate(0)
    chain(rate, {Api.METADATA: Handler(decide)}).decide(*METADATA, SENDER, None, upstream_open=True)
    assert given == [read_request_header(METADATA[0])]
    assert rate.headers == given
    chain(rate).decide(*METADATA, SENDER, None, upstream_open=True)
    assert rate.headers[1:] == [None], "without a handler nothing reads the header but the request rate, if it charges"


def finished_by(decided: Decided, answer: bytes) -> bytes | None:
    assert isinstance(decided, Forward) and decided.on_response is not None and decided.on_response.finish
    return decided.on_response.finish(memoryview(answer))


def test_what_every_answer_of_its_kind_needs_is_done_after_the_handlers_finish() -> None:
    rate = RequestRate(0)
    links = RequestChain(Versions(), {}, rate, clock, Answers(Api.METADATA))
    forwarded = links.decide(*METADATA, SENDER, None, upstream_open=True)
    assert finished_by(forwarded, b"cluster's") == b"cluster's finished"
    assert links.decide(*METADATA, SENDER, None, upstream_open=True) is forwarded, "made once for the api version"

    def refused_in_part(header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        return Forward(throttle_ms=5, on_response=OnResponse(finish=lambda body: bytes(body) + b" merged"))

    links = RequestChain(Versions(), {Api.METADATA: Handler(refused_in_part)}, rate, clock, Answers(Api.METADATA))
    decided = links.decide(*METADATA, SENDER, None, upstream_open=True)
    assert finished_by(decided, b"cluster's") == b"cluster's merged finished"
    assert isinstance(decided, Forward) and decided.throttle_ms == 5


def test_an_answer_the_proxy_gives_or_none_at_all_is_left_alone_and_a_pending_decision_is_finished_once_made(
        ) -> None:
    answered = Respond(b"the proxy's")
    unanswered = Forward(expects_response=False)

    async def decided_later() -> Outcome:
        return FORWARD

    handlers = {Api.METADATA: Handler(lambda header, frame, caller: answered),
                Api.PRODUCE: Handler(lambda header, frame, caller: unanswered),
                Api.FIND_COORDINATOR: Handler(lambda header, frame, caller: decided_later())}
    links = RequestChain(Versions(), handlers, RequestRate(0), clock, Answers(*handlers))
    assert links.decide(*METADATA, SENDER, None, upstream_open=True) is answered
    produce = request(Api.PRODUCE, 3, transactional_id=None, acks=0, timeout_ms=1000, topic_data=[])
    assert links.decide(*produce, SENDER, None, upstream_open=True) is unanswered
    coordinator = request(Api.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["g"])
    pending = links.decide(*coordinator, SENDER, None, upstream_open=True)
    assert not isinstance(pending, Outcome)
    assert finished_by(asyncio.run(pending), b"coordinator") == b"coordinator finished"  # type: ignore[arg-type]


def test_a_request_streamed_as_it_arrives_has_its_answer_finished_too() -> None:
    frame, api_key, version = METADATA
    links = RequestChain(Versions(), {}, RequestRate(0), clock, Answers(Api.METADATA))
    outcome, _ = links.start(frame, api_key, version, 1 << 20, SENDER) or (None, None)
    assert finished_by(outcome, b"cluster's") == b"cluster's finished"  # type: ignore[arg-type]


def test_a_version_newer_than_the_proxy_offers_closes_the_connection_unjudged() -> None:
    """OffsetCommit v10 names its topics by id alone: read as the v9 the proxy reads, its topic would be one named
    "" (whom the ACLs may allow), and the cluster would commit the group's offsets of any topic. A client that asked
    ApiVersions never sends it; one that does has its connection closed, before any handler or quota."""
    judged: list[int] = []
    rate = RequestRate(0)
    links = RequestChain(Versions(), {Api.OFFSET_COMMIT: Handler(lambda header, frame, caller: judged.append(
        header.api_version) or FORWARD)}, rate, clock, Answers(), version_ceilings={Api.OFFSET_COMMIT: 9})
    fields = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
              "topics": []}
    assert links.decide(*request(Api.OFFSET_COMMIT, 10, **fields), SENDER, None, upstream_open=True) is CLOSE
    assert judged == [] and rate.charged == []
    assert links.start(*request(Api.OFFSET_COMMIT, 10, **fields), 1 << 20, SENDER) is None, "judged once whole"
    assert links.decide(*request(Api.OFFSET_COMMIT, 9, **fields), SENDER, None, upstream_open=True) is FORWARD
    assert judged == [9]
    assert links.decide(*METADATA, SENDER, None, upstream_open=True) is FORWARD, "an API without a ceiling"
