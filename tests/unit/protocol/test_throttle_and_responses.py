from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import KNOWN_API_KEYS, WITHOUT_SCHEMA, Api, request_class, response_class
from protocol.codecs import decode_request, decode_response, encode_request
from protocol.errors import ProtocolError
from protocol.header import parse_request_header
from protocol.produce import scan_produce
from protocol.responses import produce_error_response
from protocol.throttle import carries_throttle, raise_throttle, raise_throttle_in_frame, throttle_offset
from protocol.topic_admin import (
    THROTTLED,
    TopicError,
    TopicRef,
    merged_topic_response,
    request_keeping,
    request_topics,
    upstream_results,
)
from tests.unit.protocol.schema_strategies import message_strategy

PRODUCE = 0


@settings(max_examples=300, deadline=None)
@given(data=st.data(), version=st.integers(3, 13), throttle_ms=st.integers(0, 2**31 - 1))
def test_produce_throttle_is_patched_in_place_to_the_maximum(data: st.DataObject, version: int,
                                                             throttle_ms: int) -> None:
    cls = response_class(PRODUCE)
    message = data.draw(message_strategy(cls, version))
    body = bytes(message.encode(version=version))
    patched = raise_throttle(PRODUCE, version, body, throttle_ms)
    expected = max(message.throttle_time_ms, throttle_ms)
    if patched is None:
        assert message.throttle_time_ms >= throttle_ms
        return
    assert len(patched) == len(body)
    decoded = cls.decode(patched, version=version)
    assert decoded.throttle_time_ms == expected
    decoded.throttle_time_ms = message.throttle_time_ms
    assert decoded == cls.decode(body, version=version)


@pytest.mark.parametrize(("api_key", "versions"), [(19, range(2, 8)), (20, range(1, 7)), (37, range(0, 4)),
                                                   (22, range(0, 7)), (67, range(0, 1))])
def test_leading_throttle_field_of_admin_responses(api_key: int, versions: range) -> None:
    for version in versions:
        body = bytes(response_class(api_key)[version](throttle_time_ms=5).encode())
        assert throttle_offset(api_key, version, body) == 0
        patched = raise_throttle(api_key, version, body, 700)
        assert patched is not None and decode_response(api_key, version, patched).throttle_time_ms == 700
        assert raise_throttle(api_key, version, body, 3) is None


def test_versions_without_a_throttle_field() -> None:
    assert throttle_offset(19, 1, b"") is None
    assert throttle_offset(20, 0, b"") is None


def test_truncated_produce_response_is_a_protocol_error() -> None:
    body = bytes(response_class(PRODUCE)[7](responses=[], throttle_time_ms=1).encode())
    with pytest.raises(ProtocolError, match="api_key=0, version=7"):
        throttle_offset(PRODUCE, 7, body[:-2])


def produce_frame(version: int) -> bytes:
    cls = request_class(PRODUCE)
    partitions = [cls.TopicProduceData.PartitionProduceData(index=i, records=None) for i in (0, 3)]
    topic = (cls.TopicProduceData(topic_id=uuid.uuid4(), partition_data=partitions) if version >= 13
             else cls.TopicProduceData(name="orders", partition_data=partitions))
    request = cls[version](transactional_id=None, acks=-1, timeout_ms=100, topic_data=[topic])
    request.with_header(correlation_id=1, client_id="c")
    return bytes(request.encode(header=True))


@pytest.mark.parametrize("version", range(3, 14))
def test_produce_error_response_answers_every_partition(version: int) -> None:
    frame = produce_frame(version)
    scan = scan_produce(frame, parse_request_header(frame, flexible=version >= 9))
    body = produce_error_response(scan, version, 89, 1234)
    response = decode_response(PRODUCE, version, body)
    assert response.throttle_time_ms == 1234
    [topic] = response.responses
    assert [(p.index, p.error_code) for p in topic.partition_responses] == [(0, 89), (3, 89)]
    if version >= 13:
        assert topic.topic_id.bytes == scan.topics[0].topic_id
    else:
        assert topic.name == "orders"


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics_merge_keeps_request_order(version: int) -> None:
    cls = request_class(19)
    request = cls[version](topics=[cls.CreatableTopic(name=name, num_partitions=10, replication_factor=1,
                                                      assignments=[], configs=[]) for name in "abcd"],
                           timeout_ms=1000, validate_only=False)
    entries = request_topics(19, version, request)
    forwarded = request_keeping(19, version, request, {0, 2})
    assert request_topics(19, version, decode_request(19, version, encode_request(19, version, forwarded))) == [
        TopicRef("a"), TopicRef("c")]
    result = response_class(19).CreatableTopicResult
    upstream = response_class(19)[version](throttle_time_ms=50, topics=[
        result(name="c", error_code=0, error_message=None), result(name="a", error_code=36, error_message="exists")])
    results = upstream_results(19, entries, [0, 2], upstream)
    body = merged_topic_response(19, version, entries, results, {1: THROTTLED, 3: THROTTLED}, 4000, 50)
    merged = decode_response(19, version, body)
    assert [(t.name, t.error_code) for t in merged.topics] == [("a", 36), ("b", 89), ("c", 0), ("d", 89)]
    assert merged.throttle_time_ms == 4000
    if version >= 1:
        assert merged.topics[1].error_message == "The throttling quota has been exceeded."


@pytest.mark.parametrize("version", range(0, 7))
def test_delete_topics_all_refused_is_answered_without_upstream(version: int) -> None:
    cls = request_class(20)
    if version >= 6:
        request = cls[version](topics=[cls.DeleteTopicState(name=n, topic_id=None) for n in ("x", "y")],
                               timeout_ms=1)
    else:
        request = cls[version](topic_names=["x", "y"], timeout_ms=1)
    entries = request_topics(20, version, request)
    body = merged_topic_response(20, version, entries, {}, {0: THROTTLED, 1: THROTTLED}, 2000)
    merged = decode_response(20, version, body)
    assert [(r.name, r.error_code) for r in merged.responses] == [("x", 89), ("y", 89)]
    if version >= 1:
        assert merged.throttle_time_ms == 2000


def test_delete_topics_by_id_are_matched_and_answered_by_id() -> None:
    cls = request_class(20)
    ids = [uuid.uuid4() for _ in range(3)]
    request = cls[6](topics=[cls.DeleteTopicState(name=None, topic_id=topic_id) for topic_id in ids], timeout_ms=1)
    entries = request_topics(20, 6, request)
    assert entries == [TopicRef(None, topic_id) for topic_id in ids]
    result = response_class(20).DeletableTopicResult
    upstream = response_class(20)[6](throttle_time_ms=0, responses=[
        result(name="named-by-the-cluster", topic_id=ids[0], error_code=0, error_message=None)])
    results = upstream_results(20, entries, [0, 2], upstream)
    merged = decode_response(20, 6, merged_topic_response(20, 6, entries, results, {1: THROTTLED}, 10))
    # the cluster's own result, the proxy's refusal with the id, and no result: unknown error, still with the id
    assert [(r.name, r.topic_id, r.error_code) for r in merged.responses] == [
        ("named-by-the-cluster", ids[0], 0), (None, ids[1], 89), (None, ids[2], -1)]


def test_create_partitions_merge_and_missing_upstream_result() -> None:
    entries = [TopicRef("p"), TopicRef("q")]
    upstream = response_class(37)[3](throttle_time_ms=0, results=[])
    body = merged_topic_response(37, 3, entries, upstream_results(37, entries, [1], upstream),
                                 {0: TopicError(89, None)}, 10)
    merged = decode_response(37, 3, body)
    assert [(r.name, r.error_code) for r in merged.results] == [("p", 89), ("q", -1)]


def _has_response_schema(api_key: int) -> bool:
    try:
        response_class(api_key)
    except KeyError:
        return False
    return True


_SCHEMA_APIS = sorted(api_key for api_key in KNOWN_API_KEYS if api_key not in WITHOUT_SCHEMA
                      and _has_response_schema(api_key))


@settings(max_examples=400, deadline=None)
@given(data=st.data(), throttle_ms=st.integers(0, 2**31 - 1))
def test_every_api_whose_throttle_is_found_gets_it_raised_and_nothing_else_changes(data: st.DataObject,
                                                                                 throttle_ms: int) -> None:
    # the request-rate quota throttles every api: where the schema puts throttle_time_ms, the proxy finds it
    api_key = data.draw(st.sampled_from(_SCHEMA_APIS))
    cls = response_class(api_key)
    version = data.draw(st.integers(cls.min_version, cls.max_version))
    message = data.draw(message_strategy(cls, version))
    body = bytes(message.encode(version=version))
    if not carries_throttle(api_key, version):
        # not found only where that version has none, or where it follows a part of variable size
        field = _throttle_field(api_key)
        assert field is None or version < int(field[1]["versions"].rstrip("+")) or field[0] > 0, (api_key, version)
        return
    patched = raise_throttle(api_key, version, body, throttle_ms)
    if patched is None:
        assert message.throttle_time_ms >= throttle_ms
        return
    decoded = cls.decode(patched, version=version)
    assert decoded.throttle_time_ms == max(message.throttle_time_ms, throttle_ms)
    decoded.throttle_time_ms = message.throttle_time_ms
    assert decoded == cls.decode(body, version=version)


def _throttle_field(api_key: int) -> tuple[int, dict[str, str]] | None:
    """(its place among the fields, its schema), or None when the api's responses have none."""
    fields = response_class(api_key).json["fields"]
    return next(((place, field) for place, field in enumerate(fields) if field["name"] == "ThrottleTimeMs"), None)


def test_apis_without_a_schema_take_the_throttle_where_kafkas_message_json_puts_it() -> None:
    # ConsumerGroupHeartbeat v0: throttle_time_ms, error_code, ... (flexible: response header v1)
    body = (0).to_bytes(4, "big") + (0).to_bytes(2, "big") + b"\x00" * 12
    assert throttle_offset(68, 0, body) == 0
    frame = _framed(b"\x00\x00\x00\x07\x00" + body)
    patched = raise_throttle_in_frame(68, 0, frame, 1234)
    assert patched[:4 + 5] == frame[:4 + 5] and int.from_bytes(patched[9:13], "big") == 1234
    assert patched[13:] == frame[13:]
    # RenewDelegationToken: error_code, expiry_timestamp_ms, then throttle_time_ms
    assert throttle_offset(39, 1, b"\x00" * 14) == 10
    assert not carries_throttle(38, 3) and raise_throttle_in_frame(38, 3, b"x", 5) == b"x"
    # an api nobody knows is forwarded, muted when throttled, never patched
    assert not carries_throttle(4, 0)


def test_a_local_answer_gets_the_throttle_raised_in_its_frame() -> None:
    body = bytes(response_class(Api.CREATE_TOPICS)[5](throttle_time_ms=10, topics=[]).encode())
    frame = _framed(b"\x00\x00\x00\x09\x00" + body)  # flexible: header v1
    patched = raise_throttle_in_frame(Api.CREATE_TOPICS, 5, frame, 900)
    assert decode_response(Api.CREATE_TOPICS, 5, patched[4 + 5:]).throttle_time_ms == 900
    assert raise_throttle_in_frame(Api.CREATE_TOPICS, 5, frame, 3) == frame


def _framed(header_and_body: bytes) -> bytes:
    return len(header_and_body).to_bytes(4, "big") + header_and_body
