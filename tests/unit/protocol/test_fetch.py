from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import Api, request_class, response_class
from protocol.codecs import decode_request, decode_response
from protocol.errors import ProtocolError
from protocol.fetch import (
    NO_SESSION_EPOCH,
    FetchAsked,
    _walked_fetch,
    capped_fetch_request,
    fetch_asked,
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
    if version < 7:
        with pytest.raises(ValueError):  # before v7 there are no sessions
            sessionless_fetch_request(frame, header)
        return
    outside = sessionless_fetch_request(frame, header)
    original = decode_request(Api.FETCH, version, frame[header.length:])
    assert len(outside) == len(frame) and outside[:header.length] == frame[:header.length]
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


@settings(max_examples=300, deadline=None)
@given(data=st.data(), version=st.integers(4, 18))
def test_the_topics_a_request_asks_for_are_its_names_or_its_ids_and_who_asks_is_its_replica_id(
        data: st.DataObject, version: int) -> None:
    """Read from the request's bytes up to v15 (what the proxy offers), as the decoder reads them; a request cut
    short or with a byte after it is never read that way, nor one of a version the proxy does not offer."""
    message, frame = fetch_request(data, version)
    header = parse_request_header(frame, version >= 12)
    expected = [topic.topic_id.bytes if version >= 13 else topic.topic for topic in message.topics]
    if version < 15:
        replica_id = message.replica_id
    else:
        replica_id = -1 if message.replica_state is None else message.replica_state.replica_id
    body = memoryview(frame)[header.length:]
    if version > 15:  # not offered
        with pytest.raises(ProtocolError):
            fetch_asked(frame, header)
        return
    session = (message.session_id, message.session_epoch) if version >= 7 else (0, NO_SESSION_EPOCH)
    asked = fetch_asked(frame, header)
    assert asked == FetchAsked(replica_id, tuple(expected), *session)
    assert asked.outside_any_session == (session == (0, NO_SESSION_EPOCH))
    cut = data.draw(st.integers(0, max(0, len(body) - 1)))
    for bad in (body[:cut], bytes(body) + b"\x00"):
        assert _walked_fetch(memoryview(bad), version) is None


CONSUMERS = FetchAsked(-1, (bytes(16),), 0, NO_SESSION_EPOCH)
"""What ``fetch_with_tags`` asks (v13+), read as a consumer's."""
FOLLOWERS = CONSUMERS._replace(replica_id=3)


def fetch_with_tags(version: int, tags: bytes, partition_tags: bytes = b"\x00") -> memoryview:
    """A Fetch body (v12+) of topic "t" (v13+: a zero id), one partition with ``partition_tags``, its request's
    tagged fields ``tags`` (their count first)."""
    from tests.support import encode_request

    partition = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}
    topic = {"topic": "t", "topic_id": None, "partitions": [partition]}
    frame = encode_request(Api.FETCH, version, correlation_id=7, client_id="c", replica_id=-1, max_wait_ms=0,
                           min_bytes=1, max_bytes=100, isolation_level=0, session_id=0, session_epoch=-1,
                           rack_id="", forgotten_topics_data=[], topics=[topic])[4:]
    body = bytes(frame)[parse_request_header(frame, True).length:]
    # the partition's empty tagged fields, its topic's and the empty forgotten topics, rack id and tagged fields
    assert body.endswith(b"\x00\x00\x01\x01\x00")
    return memoryview(body[:-5] + partition_tags + b"\x00\x01\x01" + tags)


REPLICA_STATE = bytes([1]) + (3).to_bytes(4, "big") + (9).to_bytes(8, "big") + b"\x00"
"""Tag 1, a ReplicaState of replica 3 (epoch 9) after its size."""


def test_a_replica_state_is_read_as_kafka_reads_it_and_one_whose_size_says_otherwise_is_decoded() -> None:
    """Kafka reads a tagged field it knows by its type (``MessageDataGenerator``), not by the size it declares: a
    walk trusting the size could see another replica than the broker parses; such a request is the decoder's."""
    assert _walked_fetch(fetch_with_tags(15, b"\x01" + REPLICA_STATE[:1] + b"\x0d" + REPLICA_STATE[1:]), 15) == \
        FOLLOWERS
    assert _walked_fetch(fetch_with_tags(15, b"\x00"), 15) == CONSUMERS
    # the last of two is Kafka's
    twice = REPLICA_STATE[:1] + b"\x0d" + REPLICA_STATE[1:] + b"\x01\x0d" + (-1).to_bytes(4, "big", signed=True) + \
        bytes(8) + b"\x00"
    assert _walked_fetch(fetch_with_tags(15, b"\x02" + twice), 15) == CONSUMERS
    for declared in (b"\x0c", b"\x0e"):
        body = fetch_with_tags(15, b"\x01" + REPLICA_STATE[:1] + declared + REPLICA_STATE[1:] + b"\x00")
        assert _walked_fetch(body, 15) is None
    cluster_id = b"\x00\x04\x04abc"  # tag 0, size 4: a string of 3 bytes
    assert _walked_fetch(fetch_with_tags(14, b"\x01" + cluster_id), 14) == CONSUMERS
    assert _walked_fetch(fetch_with_tags(14, b"\x01\x00\x05\x04abcd"), 14) is None, "sized past its string"
    assert _walked_fetch(fetch_with_tags(14, b"\x01\x00\x03\x04abc"), 14) is None, "sized short of it"
    assert _walked_fetch(fetch_with_tags(12, b"\x01\x05\x02ab"), 12) is not None, "a tag Kafka does not know"


def test_a_tag_kafka_refuses_at_the_requests_version_is_left_to_the_decoder() -> None:
    """A ReplicaState before v15, and a partition's ReplicaDirectoryId (v17+) or HighWatermark (v18+) before
    theirs: Kafka's reader throws."""
    assert _walked_fetch(fetch_with_tags(14, b"\x01" + REPLICA_STATE[:1] + b"\x0d" + REPLICA_STATE[1:]), 14) is None
    for tag in (0, 1):
        body = fetch_with_tags(15, b"\x00", partition_tags=bytes([1, tag, 8]) + bytes(8))
        assert _walked_fetch(body, 15) is None
    assert _walked_fetch(fetch_with_tags(15, b"\x00", partition_tags=bytes([1, 2, 8]) + bytes(8)), 15) is not None


def test_a_varint_past_an_int32_is_left_to_the_decoder() -> None:
    """Kafka reads a varint into an int: 2^31 is negative to it, and 2^32 + 1 is 1, so a tag written so is a
    ReplicaState to Kafka, which a walk reading it whole would take for a tag it does not know and skip."""
    for value in (1 << 31, (1 << 32) + 1):
        varint = bytes([0x80 | (value >> shift) & 0x7F for shift in range(0, 28, 7)]) + bytes([value >> 28])
        body = fetch_with_tags(15, b"\x01" + varint + b"\x0d" + REPLICA_STATE[1:])
        assert _walked_fetch(body, 15) is None
        # nor decoded: kafka-python reads the varint whole, and would take the request for a consumer's
        frame = request_header_bytes(15) + bytes(body)
        with pytest.raises(ProtocolError):
            fetch_asked(frame, parse_request_header(frame, True))


def request_header_bytes(version: int) -> bytes:
    """A Fetch request header (v2: flexible versions') of client "c"."""
    return Api.FETCH.to_bytes(2, "big") + version.to_bytes(2, "big") + (7).to_bytes(4, "big") + b"\x00\x01c\x00"


def test_tagged_fields_kafka_reads_are_read_and_those_it_does_not_know_skipped_at_each_level() -> None:
    """A null ClusterId; a ReplicaState with a tagged field of its own, which Kafka skips by its size; tags Kafka
    does not know on a partition and in the request, whatever bytes they hold."""
    assert _walked_fetch(fetch_with_tags(15, b"\x01\x00\x01\x00"), 15) == CONSUMERS
    nested = REPLICA_STATE[1:-1] + b"\x01\x01\x0d" + REPLICA_STATE[1:]  # a ReplicaState-like tag inside
    assert _walked_fetch(fetch_with_tags(15, b"\x01\x01" + bytes([len(nested)]) + nested), 15) == \
        FOLLOWERS
    hidden = b"\x01\x07\x0d" + REPLICA_STATE[1:]  # an unknown tag holding a ReplicaState's bytes
    assert _walked_fetch(fetch_with_tags(15, hidden, partition_tags=b"\x01\x05\x01\x00"), 15) == \
        CONSUMERS
    assert _walked_fetch(fetch_with_tags(12, b"\x00"), 12) == FetchAsked(-1, ("t",), 0, NO_SESSION_EPOCH)


def test_a_topic_id_of_zeros_is_asked_for_as_it_is() -> None:
    """Found by the fuzz target: kafka-python reads Kafka's zero id as None, which the proxy took for an id. The
    cluster knows no topic by it (UNKNOWN_TOPIC_ID): it is looked up, named by nothing, and charged nothing."""
    import uuid

    from tests.support import encode_request

    frame = encode_request(Api.FETCH, 13, correlation_id=7, client_id="c", replica_id=-1, max_wait_ms=0, min_bytes=1,
                           max_bytes=100, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                           forgotten_topics_data=[], topics=[{"topic_id": uuid.UUID(int=0), "partitions": []}])[4:]
    assert fetch_asked(frame, parse_request_header(frame, True)).topics == (bytes(16),)
