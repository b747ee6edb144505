from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import Api, request_class, response_class
from protocol.codecs import decode_request, decode_response
from protocol.errors import ProtocolError
from protocol.fetch import (
    NO_SESSION_EPOCH,
    capped_fetch_request,
    fetch_request_topics,
    fetch_response_size,
    fetch_response_start,
    fetch_response_topic_bytes,
    fetch_session_epoch,
    sessionless_fetch_request,
    throttled_fetch_response_body,
)
from protocol.header import encode_response_header, parse_request_header
from protocol.throttle import raise_throttle
from tests.unit.protocol.schema_strategies import message_strategy

FETCH_VERSIONS = st.integers(0, 18)


def fetch_request(data: st.DataObject, version: int) -> tuple[object, bytes]:
    message = data.draw(message_strategy(request_class(Api.FETCH), version))
    message.with_header(correlation_id=7, client_id=data.draw(st.text(max_size=20)))
    return message, bytes(message.encode(header=True, framed=False))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), version=FETCH_VERSIONS, limit=st.integers(0, 2**31 - 1))
def test_the_cap_lowers_max_bytes_and_min_bytes_and_nothing_else(data: st.DataObject, version: int,
                                                                  limit: int) -> None:
    message, frame = fetch_request(data, version)
    header = parse_request_header(frame, version >= 12)
    capped = capped_fetch_request(frame, header, limit)
    original = decode_request(Api.FETCH, version, frame[header.length:])
    if version < 3 or original.max_bytes <= limit:
        assert capped is None  # before v3 there is no max_bytes to cap
        return
    assert capped is not None and len(capped) == len(frame) and capped[:header.length] == frame[:header.length]
    decoded = decode_request(Api.FETCH, version, capped[header.length:])
    assert decoded.max_bytes == limit and decoded.min_bytes == min(original.min_bytes, limit)
    decoded.max_bytes, decoded.min_bytes = original.max_bytes, original.min_bytes
    assert decoded.to_dict() == original.to_dict()


@settings(max_examples=300, deadline=None)
@given(data=st.data(), version=FETCH_VERSIONS)
def test_outside_any_session_a_fetch_changes_its_session_and_nothing_else(data: st.DataObject, version: int) -> None:
    message, frame = fetch_request(data, version)
    header = parse_request_header(frame, version >= 12)
    outside = sessionless_fetch_request(frame, header)
    original = decode_request(Api.FETCH, version, frame[header.length:])
    if version < 7 or (original.session_id, original.session_epoch) == (0, NO_SESSION_EPOCH):
        assert outside is None  # before v7 there are no sessions
        return
    assert outside is not None and len(outside) == len(frame) and outside[:header.length] == frame[:header.length]
    decoded = decode_request(Api.FETCH, version, outside[header.length:])
    assert (decoded.session_id, decoded.session_epoch) == (0, NO_SESSION_EPOCH)
    decoded.session_id, decoded.session_epoch = original.session_id, original.session_epoch
    assert decoded.to_dict() == original.to_dict()


@settings(max_examples=200, deadline=None)
@given(data=st.data(), version=st.integers(1, 18), throttle_ms=st.integers(0, 2**31 - 1))
def test_a_fetch_response_is_charged_4_plus_its_body_and_takes_a_throttle(data: st.DataObject, version: int,
                                                                           throttle_ms: int) -> None:
    message = data.draw(message_strategy(response_class(Api.FETCH), version))
    body = bytes(message.encode(version=version))
    flexible = version >= 12
    response = encode_response_header(3, flexible) + body
    assert fetch_response_size(response, len(response), flexible) == 4 + len(body)
    assert fetch_response_size(response[:8], len(response), flexible) == 4 + len(body)  # still arriving
    patched = raise_throttle(Api.FETCH, version, body, throttle_ms)
    if patched is None:
        assert message.throttle_time_ms >= throttle_ms
        return
    decoded = response_class(Api.FETCH)[version].decode(patched)
    assert decoded.throttle_time_ms == max(message.throttle_time_ms, throttle_ms)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), version=FETCH_VERSIONS)
def test_the_session_epoch_is_read_where_the_version_puts_it(data: st.DataObject, version: int) -> None:
    message, frame = fetch_request(data, version)
    header = parse_request_header(frame, version >= 12)
    expected = message.session_epoch if version >= 7 else NO_SESSION_EPOCH  # type: ignore[attr-defined]
    assert fetch_session_epoch(frame, header) == expected


@settings(max_examples=100, deadline=None)
@given(version=FETCH_VERSIONS, throttle_ms=st.integers(0, 2**31 - 1), session_id=st.integers(-(2**31), 2**31 - 1))
def test_kafkas_throttled_answer_has_no_partitions_and_keeps_the_session(version: int, throttle_ms: int,
                                                                         session_id: int) -> None:
    body = throttled_fetch_response_body(version, throttle_ms, session_id)
    decoded = decode_response(Api.FETCH, version, body)
    assert decoded.responses == []
    if version >= 1:
        assert decoded.throttle_time_ms == throttle_ms
    if version >= 7:
        assert (decoded.error_code, decoded.session_id) == (0, session_id)
    assert fetch_response_start(body, version) == (throttle_ms if version >= 1 else 0,
                                                    session_id if version >= 7 else 0)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), version=FETCH_VERSIONS)
def test_each_topics_record_bytes_are_read_from_any_response(data: st.DataObject, version: int) -> None:
    """Every version's response, tagged fields and aborted transactions included: the sum of the sizes of each
    topic's partitions' records (a topic twice in one response summed), by name until v12, by id from v13."""
    message = data.draw(message_strategy(response_class(Api.FETCH), version))
    body = bytes(message.encode(version=version))
    expected: dict[str | bytes, int] = {}
    for topic in message.responses:
        key = topic.topic_id.bytes if version >= 13 else topic.topic
        expected[key] = expected.get(key, 0) + sum(len(p.records or b"") for p in topic.partitions)
    assert fetch_response_topic_bytes(body, version) == expected
    assert fetch_response_topic_bytes(memoryview(body), version) == expected


@given(data=st.data(), version=FETCH_VERSIONS)
@settings(max_examples=100, deadline=None)
def test_a_response_cut_short_or_overlong_is_a_protocol_error(data: st.DataObject, version: int) -> None:
    message = data.draw(message_strategy(response_class(Api.FETCH), version))
    body = bytes(message.encode(version=version))
    cut = data.draw(st.integers(0, len(body) - 1))
    for bad in (body[:cut], body + b"\x00"):
        with pytest.raises(ProtocolError):
            fetch_response_topic_bytes(bad, version)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), version=st.integers(4, 18))
def test_the_topics_a_request_asks_for_are_its_names_or_its_ids(data: st.DataObject, version: int) -> None:
    message, frame = fetch_request(data, version)
    header = parse_request_header(frame, version >= 12)
    expected = [topic.topic_id.bytes if version >= 13 else topic.topic for topic in message.topics]
    assert fetch_request_topics(frame, header) == expected


def test_a_topic_id_of_zeros_is_asked_for_as_it_is() -> None:
    """Found by the fuzz target: kafka-python reads Kafka's zero id as None, which the proxy took for an id. The
    cluster knows no topic by it (UNKNOWN_TOPIC_ID): it is looked up, named by nothing, and charged nothing."""
    import uuid

    from tests.support import encode_request

    frame = encode_request(Api.FETCH, 13, correlation_id=7, client_id="c", replica_id=-1, max_wait_ms=0, min_bytes=1,
                           max_bytes=100, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                           forgotten_topics_data=[], topics=[{"topic_id": uuid.UUID(int=0), "partitions": []}])[4:]
    assert fetch_request_topics(frame, parse_request_header(frame, True)) == [bytes(16)]
