"""The request-rate quota as a connection applies it: charged per request, the largest throttle wins."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import CollectorRegistry

from protocol.apis import Api, response_class
from protocol.codecs import decode_response
from protocol.header import peek_request, read_request_header, response_header_for
from proxy.decision.outcome import (
    CLOSE,
    FORWARD,
    Caller,
    ChargedResponse,
    Forward,
    OnResponse,
    Outcome,
    Respond,
    frame,
    throttled_at_least,
)
from proxy.handlers.request_rate import RequestRateHandler
from proxy.reporting.usage_log import UsageLog
from proxy.state.quota_service import QuotaService
from tests.support import encode_request


def handler(tmp_path: Path, quotas: str, charges: bool = True) -> RequestRateHandler:
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(quotas)
    return RequestRateHandler(QuotaService(quota_file, CollectorRegistry()), UsageLog(tmp_path / "usage"), charges)


def charged(rates: RequestRateHandler, request: memoryview, caller: Caller) -> int:
    """Charged as a request no handler has read the header of."""
    return rates.throttle_ms(request, peek_request(request).api_key, None, caller)


def metadata(client_id: str) -> memoryview:
    return memoryview(encode_request(Api.METADATA, 12, client_id=client_id, topics=None))[4:]


def consumer_group_heartbeat(client_id: str) -> memoryview:
    """api key 68 v0, which kafka-python has no schema for: only its header is read."""
    name = client_id.encode()
    header = (68).to_bytes(2, "big") + (0).to_bytes(2, "big") + (7).to_bytes(4, "big")
    return memoryview(header + len(name).to_bytes(2, "big") + name + b"\x00" + b"\x01\x02\x03")


def test_every_request_of_the_entity_is_charged_whatever_its_api(tmp_path: Path) -> None:
    rates = handler(tmp_path, '[[quota]]\nclient-id = "busy"\nrequest_rate = 1\n')
    caller = Caller("ANONYMOUS", 1_000_000)
    # 1/s over 11 one-second windows admits 10 at once; the 11th is (11/10 - 1)/1 x 10 s = 1000 ms over
    throttles = [charged(rates, request("busy"), caller) for request in [metadata, consumer_group_heartbeat] * 6]
    assert throttles == [0] * 10 + [1000, 2000]
    assert charged(rates, metadata("idle"), caller) == 0


def test_nothing_is_charged_in_front_of_the_controllers(tmp_path: Path) -> None:
    rates = handler(tmp_path, '[[quota]]\nclient-id = "<default>"\nrequest_rate = 1\n', charges=False)
    caller = Caller("ANONYMOUS", 1_000_000)
    assert {charged(rates, metadata("broker-1"), caller) for _ in range(50)} == {0}


def test_the_largest_throttle_of_a_request_is_the_one_given() -> None:
    assert throttled_at_least(FORWARD, 0, Api.METADATA, 12) is FORWARD
    assert throttled_at_least(Forward(throttle_ms=500), 300, Api.PRODUCE, 9) == Forward(throttle_ms=500)
    assert throttled_at_least(CLOSE, 300, Api.PRODUCE, 9) is CLOSE  # a connection that closes is not muted
    def mutation_throttle_left(response_start: memoryview, response_bytes: int) -> ChargedResponse:
        return ChargedResponse(300)  # a mutation quota's, known as the cluster answers

    shrinking = Forward(on_response=OnResponse(charge=mutation_throttle_left))
    # the larger of the two is taken once the answer comes (``InFlightRequests.answered_by``)
    assert throttled_at_least(shrinking, 800, Api.CREATE_TOPICS, 7) == Forward(
        throttle_ms=800, on_response=OnResponse(charge=mutation_throttle_left))


def test_a_local_answer_carries_the_larger_throttle_in_its_body() -> None:
    body = bytes(response_class(Api.CREATE_TOPICS)[7](throttle_time_ms=100, topics=[]).encode())
    local = frame(response_header_for(Api.CREATE_TOPICS, True, 9) + body)
    outcome = throttled_at_least(Respond(local, throttle_ms=100), 2500, Api.CREATE_TOPICS, 7)
    assert isinstance(outcome, Respond) and outcome.throttle_ms == 2500
    assert decode_response(Api.CREATE_TOPICS, 7, outcome.response[4 + 5:]).throttle_time_ms == 2500


def test_a_decision_still_pending_is_throttled_once_it_is_made() -> None:
    async def decided_later() -> Outcome:
        return Forward(throttle_ms=10)

    pending = throttled_at_least(decided_later(), 700, Api.PRODUCE, 9)
    assert not isinstance(pending, Outcome)
    assert asyncio.run(pending).throttle_ms == 700  # type: ignore[arg-type]


def test_api_versions_and_logins_are_never_charged(tmp_path: Path) -> None:
    rates = handler(tmp_path, '[[quota]]\nclient-id = "busy"\nrequest_rate = 1\n')
    caller = Caller("ANONYMOUS", 1_000_000)
    frames = [encode_request(Api.API_VERSIONS, 3, client_id="busy", client_software_name="t",
                             client_software_version="1"),
              encode_request(Api.SASL_HANDSHAKE, 1, client_id="busy", mechanism="PLAIN")]
    assert {charged(rates, memoryview(frame)[4:], caller) for frame in frames * 20} == {0}
    assert charged(rates, metadata("busy"), caller) == 0  # the first charged request of its burst


def schemaless_request(api_key: int, client_id: str) -> memoryview:
    """A flexible request of ``api_key`` v1 whose body the proxy never reads: only its header is."""
    name = client_id.encode()
    header = api_key.to_bytes(2, "big") + (1).to_bytes(2, "big") + (7).to_bytes(4, "big")
    return memoryview(header + len(name).to_bytes(2, "big") + name + b"\x00" + b"\x01\x02\x03")


def test_share_acknowledgements_and_the_share_group_heartbeat_count_for_the_request_rate(tmp_path: Path) -> None:
    rates = handler(tmp_path, '[[quota]]\nclient-id = "share"\nrequest_rate = 1\n')
    caller = Caller("ANONYMOUS", 1_000_000)
    acknowledge = memoryview(encode_request(Api.SHARE_ACKNOWLEDGE, 2, client_id="share", group_id="g", member_id="m",
                                            share_session_epoch=1, topics=[]))[4:]
    share_group_heartbeat = schemaless_request(76, "share")  # ShareGroupHeartbeat, which kafka-python lacks
    throttles = [charged(rates, request, caller) for request in [acknowledge, share_group_heartbeat] * 6]
    assert throttles == [0] * 10 + [1000, 2000]  # as for any request: Kafka's request quota counts them all


def test_the_client_id_is_taken_from_the_header_the_chain_read_when_it_read_one(tmp_path: Path) -> None:
    rates = handler(tmp_path, '[[quota]]\nclient-id = "busy"\nrequest_rate = 1\n')
    caller = Caller("ANONYMOUS", 1_000_000)
    request = metadata("idle")
    header = read_request_header(request)._replace(client_id="busy")
    throttles = [rates.throttle_ms(request, Api.METADATA, header, caller) for _ in range(12)]
    assert throttles[-2:] == [1000, 2000]
