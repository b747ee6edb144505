"""Random, truncated and mutated input never raises anything but ProtocolError (10k+ cases)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.addresses import BrokerAddress, rewrite_broker_addresses
from protocol.api_versions import adapt_api_versions
from protocol.apis import request_class, response_class
from protocol.codecs import CODEC_APIS, decode_request, decode_response, max_version
from protocol.errors import ProtocolError
from protocol.framing import FrameSplitter
from protocol.header import parse_request_header
from protocol.produce import produce_acks, scan_produce
from protocol.throttle import raise_throttle
from tests.unit.protocol.schema_strategies import message_strategy

FUZZ = settings(max_examples=3500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutated(draw: st.DrawFn, wire: bytes) -> bytes:
    data = bytearray(wire)
    for _ in range(draw(st.integers(0, 4))):
        action = draw(st.sampled_from(["truncate", "flip", "insert", "delete"]))
        if action == "truncate":
            del data[draw(st.integers(0, len(data))):]
        elif action == "flip" and data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        elif action == "insert":
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif data:
            at = draw(st.integers(0, len(data) - 1))
            del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


def only_protocol_errors(call: Callable[[], Any]) -> None:
    """Success and ProtocolError are both fine; any other exception fails the test."""
    with contextlib.suppress(ProtocolError):
        call()


@st.composite
def codec_inputs(draw: st.DrawFn) -> tuple[int, int, str, bytes]:
    api_key = draw(st.sampled_from(sorted(CODEC_APIS | {0})))
    version = draw(st.integers(3 if api_key == 0 else 0, max_version(api_key)))
    direction = draw(st.sampled_from(["request", "response"]))
    cls = request_class(api_key) if direction == "request" else response_class(api_key)
    wire = bytes(draw(message_strategy(cls, version)).encode(version=version))
    return api_key, version, direction, draw(mutated(wire))


@FUZZ
@given(codec_inputs())
def test_mutated_messages_in_every_decoder(case: tuple[int, int, str, bytes]) -> None:
    api_key, version, direction, body = case
    if direction == "request":
        if api_key == 0:
            header_and_body = bytes([0, 0, 0, version, 0, 0, 0, 1, 0, 0]) + (b"\x00" if version >= 9 else b"") + body
            header = parse_request_header(header_and_body, flexible=version >= 9)
            only_protocol_errors(lambda: scan_produce(header_and_body, header))
            only_protocol_errors(lambda: produce_acks(header_and_body, header))
        else:
            only_protocol_errors(lambda: decode_request(api_key, version, body))
        return
    if api_key in (0, 19, 20, 22, 37, 67):
        only_protocol_errors(lambda: raise_throttle(api_key, version, body, 1000))
    if api_key in (0, 3, 10, 60):
        only_protocol_errors(lambda: rewrite_broker_addresses(api_key, version, body, _advertise))
    if api_key == 18:
        only_protocol_errors(lambda: adapt_api_versions(body, version, {0: 3}))
    if api_key != 0:
        only_protocol_errors(lambda: decode_response(api_key, version, body))


def _advertise(broker: BrokerAddress) -> tuple[str, int]:
    return "proxy", 1 + broker.node_id % 1000


@FUZZ
@given(st.binary(max_size=200), st.integers(0, 13), st.booleans())
def test_random_bytes_in_headers_scanner_and_framing(data: bytes, version: int, flexible: bool) -> None:
    only_protocol_errors(lambda: parse_request_header(data, flexible))
    only_protocol_errors(lambda: FrameSplitter(1 << 20, 8).feed(data))
    try:
        header = parse_request_header(data, flexible)
    except ProtocolError:
        return
    if 3 <= header.api_version <= 13:
        only_protocol_errors(lambda: scan_produce(data, header))
    only_protocol_errors(lambda: produce_acks(data, header))
    only_protocol_errors(lambda: raise_throttle(0, max(1, version), data, 5))


@settings(max_examples=3000, deadline=None)
@given(st.sampled_from(sorted(CODEC_APIS)), st.integers(0, 13), st.binary(max_size=120))
def test_random_bodies_in_codecs(api_key: int, version: int, body: bytes) -> None:
    only_protocol_errors(lambda: decode_request(api_key, version, body))
    only_protocol_errors(lambda: decode_response(api_key, version, body))
