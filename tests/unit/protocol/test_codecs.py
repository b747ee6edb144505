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


# found by the fuzz targets (tests/fuzz): kafka-python reads a length of -1 as None wherever it is, and the handlers
# iterated or copied what Kafka's own parser never lets be null
@pytest.mark.parametrize(("api_key", "version", "body", "path"), [
    (48, 0, b"\xff\xff\xff\xff\x00", "components"),  # DescribeClientQuotas: a null filter
    (20, 0, b"\x00\x00\x00\x01\xff\xff\x00\x00\x75\x30", "topic_names element"),  # DeleteTopics: a null topic name
    (36, 0, b"\xff\xff\xff\xff", "auth_bytes"),  # SaslAuthenticate before a login: a null token
    (36, 2, b"\x00\x00", "auth_bytes"),  # its flexible form
    (19, 5, b"\x00\x00\x00\x75\x30\x00\x00", "topics"),  # CreateTopics: a null topic list
])
def test_a_null_where_the_schema_allows_none_is_a_protocol_error(api_key: int, version: int, body: bytes,
                                                                 path: str) -> None:
    with pytest.raises(ProtocolError, match=f"null {path}, which is not nullable"):
        decode_request(api_key, version, body)


def test_nulls_the_schema_allows_are_read_as_none() -> None:
    # InitProducerId's transactional_id and DescribeClientQuotas' match are nullable
    assert decode_request(22, 0, b"\xff\xff\x00\x00\xea\x60").transactional_id is None
    [component] = decode_request(48, 0, b"\x00\x00\x00\x01\x00\x04user\x02\xff\xff\x00").components
    assert component.match is None


def test_any_negative_array_length_and_negative_struct_marker_are_null_as_kafka_reads_them() -> None:
    """Kafka's generated readers take an int32 array length below 0 for null (every topic, to Metadata; every
    committed offset of the group, to OffsetFetch), and a nullable struct whose marker byte is below 0 for none;
    kafka-python took -1 and 0xff alone, read -2 as an empty array, and 0x80 as a struct."""
    assert decode_request(3, 1, b"\xff\xff\xff\xfe").topics is None
    assert decode_request(3, 1, b"\x80\x00\x00\x00").topics is None
    assert decode_request(3, 1, b"\x00\x00\x00\x00").topics == []
    assert decode_request(9, 5, b"\x00\x07alice-g\xff\xff\xff\xfe").topics is None
    with pytest.raises(ProtocolError, match="null topics, which is not nullable"):
        decode_request(19, 0, b"\xff\xff\xff\xfe\x00\x00\x75\x30")  # CreateTopics: Kafka refuses a null list
    # DescribeTopicPartitions: topic "a", a partition limit, then a cursor whose marker is 0x80
    for marker in (0x80, 0xFE, 0xFF):
        assert decode_request(75, 0, b"\x02\x02a\x00\x00\x00\x07\xd0" + bytes([marker]) + b"\x00").cursor is None
    cursor = decode_request(75, 0, b"\x02\x02a\x00\x00\x00\x07\xd0\x01\x02a\x00\x00\x00\x03\x00\x00").cursor
    assert (cursor.topic_name, cursor.partition_index) == ("a", 3)
