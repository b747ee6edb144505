from __future__ import annotations

import pytest

from protocol.apis import is_flexible_request, request_class
from protocol.errors import ProtocolError
from protocol.header import (
    encode_response_header,
    parse_request_header,
    peek_request,
    response_header_for,
    response_header_length,
)
from protocol.produce import produce_acks


def encoded_request(api_key: int, version: int, client_id: str | None = "client-1", **fields: object) -> bytes:
    request = request_class(api_key)[version](**fields)
    request.with_header(correlation_id=4242, client_id=client_id)
    return bytes(request.encode(header=True))


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_request_headers_of_every_version(version: int) -> None:
    frame = encoded_request(3, version, topics=[])
    header = parse_request_header(frame, is_flexible_request(3, version))
    assert (header.api_key, header.api_version, header.correlation_id) == (3, version, 4242)
    assert header.client_id == "client-1"
    assert header.flexible == (version >= 9)
    assert peek_request(frame) == (3, version, 4242)
    body = request_class(3).decode(frame[header.length:], version=version)
    assert body.topics == []


def test_null_client_id() -> None:
    frame = encoded_request(18, 0, client_id=None)
    assert parse_request_header(frame, flexible=False).client_id is None


@pytest.mark.parametrize("version", range(3, 14))
@pytest.mark.parametrize("acks", [-1, 0, 1])
@pytest.mark.parametrize("transactional_id", [None, "tx-ü"])
def test_produce_acks_of_every_version(version: int, acks: int, transactional_id: str | None) -> None:
    frame = encoded_request(0, version, transactional_id=transactional_id, acks=acks, timeout_ms=1000,
                            topic_data=[])
    header = parse_request_header(frame, is_flexible_request(0, version))
    assert produce_acks(frame, header) == acks


def test_truncated_produce_names_version_and_offset() -> None:
    frame = encoded_request(0, 9, transactional_id=None, acks=1, timeout_ms=1, topic_data=[])
    header = parse_request_header(frame, flexible=True)
    with pytest.raises(ProtocolError, match=r"api_key=0, version=9, offset="):
        produce_acks(frame[:header.length + 1], header)


def test_truncated_client_id_is_a_protocol_error() -> None:
    frame = encoded_request(18, 0, client_id="abcdef")
    with pytest.raises(ProtocolError, match="client_id"):
        parse_request_header(frame[:12], flexible=False)


@pytest.mark.parametrize("flexible", [False, True])
def test_response_header_round_trip(flexible: bool) -> None:
    header = encode_response_header(77, flexible)
    assert response_header_length(header + b"body", flexible) == len(header)


def test_api_versions_responses_always_use_header_v0() -> None:
    assert response_header_for(18, request_flexible=True, correlation_id=5) == b"\x00\x00\x00\x05"
    assert response_header_for(3, request_flexible=True, correlation_id=5) == b"\x00\x00\x00\x05\x00"
    assert response_header_for(3, request_flexible=False, correlation_id=5) == b"\x00\x00\x00\x05"
