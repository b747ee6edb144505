"""Every version of every codec round-trips against kafka-python's own encoder and decoder."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.apis import request_class, response_class
from protocol.codecs import CODEC_APIS, decode_request, decode_response, encode_request, encode_response, max_version
from protocol.errors import ProtocolError
from tests.unit.protocol.schema_strategies import message_strategy

CASES = [(api_key, version, direction) for api_key in sorted(CODEC_APIS) for version in range(max_version(api_key) + 1)
         for direction in ("request", "response")]


@pytest.mark.parametrize(("api_key", "version", "direction"), CASES)
@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_round_trip_matches_kafka_python(api_key: int, version: int, direction: str, data: st.DataObject) -> None:
    cls = request_class(api_key) if direction == "request" else response_class(api_key)
    message = data.draw(message_strategy(cls, version))
    if api_key == 18 and direction == "response":
        message.error_code = 0  # an ApiVersions error answer is always in v0 format (tested elsewhere)
    wire = bytes(message.encode(version=version))
    decode, encode = (decode_request, encode_request) if direction == "request" else (decode_response, encode_response)
    ours = decode(api_key, version, wire)
    assert ours == cls.decode(wire, version=version)
    assert encode(api_key, version, ours) == wire


@pytest.mark.parametrize("api_key", sorted(CODEC_APIS))
def test_unsupported_version_is_a_protocol_error(api_key: int) -> None:
    with pytest.raises(ProtocolError, match=f"api_key={api_key}, version=99"):
        decode_request(api_key, 99, b"")


def test_allocate_producer_ids_wire_format_matches_spec() -> None:
    body = encode_request(67, 0, {"broker_id": 3, "broker_epoch": 7})
    assert body == bytes.fromhex("00000003" "0000000000000007" "00")
    response = encode_response(67, 0, {"throttle_time_ms": 1, "error_code": 0, "producer_id_start": 1 << 48,
                                       "producer_id_len": 1000})
    assert response == bytes.fromhex("00000001" "0000" "0001000000000000" "000003e8" "00")
    decoded = decode_response(67, 0, response)
    assert (decoded.producer_id_start, decoded.producer_id_len) == (1 << 48, 1000)
