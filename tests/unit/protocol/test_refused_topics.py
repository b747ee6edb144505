from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import Api, request_class
from protocol.codecs import decode_request, decode_response, encode_request, encode_response, max_version
from protocol.refused_topics import (
    PARTITIONED_APIS,
    Authorized,
    MetadataNamed,
    answer_with_refusals,
    fetch_answer_with_refusals,
    fetch_refused,
    metadata_answer,
    metadata_asked,
    metadata_named,
    share_answer_with_refusals,
    share_refused,
    topics_refused,
)
from tests.unit.protocol.schema_strategies import message_strategy

REFUSED = frozenset({"quotas"}).__contains__
QUOTAS_ID, ORDERS_ID = uuid.uuid4(), uuid.uuid4()


def request(version: int, topics: list[dict[str, object]] | None) -> memoryview:
    fields = {"topics": topics, "allow_auto_topic_creation": True, "include_topic_authorized_operations": False,
              "include_cluster_authorized_operations": False}
    return memoryview(encode_request(Api.METADATA, version, fields))


def answer(version: int, names: list[str]) -> memoryview:
    topics = [{"error_code": 0, "name": name, "topic_id": QUOTAS_ID if name == "quotas" else ORDERS_ID,
               "is_internal": False, "partitions": []} for name in names]
    return memoryview(encode_response(Api.METADATA, version, {"brokers": [], "cluster_id": "c", "controller_id": 1,
                                                              "topics": topics}))


def client_sees(version: int, asked_topics: list[dict[str, object]] | None, cluster_names: list[str]) -> list[tuple]:
    asked = metadata_asked(request(version, asked_topics), version, REFUSED)
    body = metadata_answer(answer(version, cluster_names), version, asked, REFUSED)
    topics = decode_response(Api.METADATA, version, body).topics
    return [(topic.error_code, topic.name, getattr(topic, "topic_id", None)) for topic in topics]


@pytest.mark.parametrize("version", [1, 9, 12])
def test_an_all_topics_answer_leaves_the_reserved_topics_out(version: int) -> None:
    assert client_sees(version, None, ["orders", "quotas"]) == [
        (0, "orders", ORDERS_ID if version >= 10 else None)]


def test_a_reserved_name_is_refused_after_the_others_and_never_asked_of_the_cluster() -> None:
    asked = metadata_asked(request(12, [{"name": "quotas", "topic_id": None}, {"name": "orders", "topic_id": None}]),
                           12, REFUSED)
    assert asked.forwarded_body is not None
    forwarded = decode_request(Api.METADATA, 12, asked.forwarded_body)
    assert [topic.name for topic in forwarded.topics] == ["orders"]  # nor created by it
    assert client_sees(12, [{"name": "quotas", "topic_id": None}, {"name": "orders", "topic_id": None}],
                       ["orders"]) == [(0, "orders", ORDERS_ID), (29, "quotas", None)]  # None: the zero id


def test_a_reserved_topic_named_by_id_is_refused_without_its_name() -> None:
    assert client_sees(12, [{"name": None, "topic_id": QUOTAS_ID}], ["quotas"]) == [(29, None, QUOTAS_ID)]


def test_a_v0_request_naming_only_reserved_topics_gets_only_their_refusals() -> None:
    """v0 reads an empty list as every topic: the cluster's whole answer is left out."""
    assert client_sees(0, [{"name": "quotas"}], ["orders", "quotas"]) == [(29, "quotas", None)]


def test_a_request_naming_only_the_clients_topics_is_left_as_it_is() -> None:
    asked = metadata_asked(request(9, [{"name": "orders"}]), 9, REFUSED)
    assert not (asked.all_topics or asked.refused_names or asked.by_id) and asked.forwarded_body is None


def test_the_topics_asked_to_be_created_that_the_principal_may_not_create_are_named() -> None:
    named = [{"name": "new", "topic_id": None}, {"name": "orders", "topic_id": None}]
    asked = metadata_asked(request(12, named), 12, REFUSED, creation_refused="new".__eq__)
    assert asked.creation_withheld == {"new"} and asked.forwarded_body is None  # the handler looks them up
    assert not metadata_asked(request(12, named), 12, REFUSED, creation_refused=lambda name: False).creation_withheld
    fields = {"topics": named, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    not_creating = metadata_asked(memoryview(encode_request(Api.METADATA, 12, fields)), 12, REFUSED,
                                  creation_refused="new".__eq__)
    assert not not_creating.creation_withheld


def test_the_authorized_operations_asked_for_are_the_principals_not_the_proxys() -> None:
    fields = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": True,
              "include_cluster_authorized_operations": True}
    asked = metadata_asked(memoryview(encode_request(Api.METADATA, 10, fields)), 10, REFUSED)
    assert asked.topic_operations and asked.cluster_operations
    proxys = encode_response(Api.METADATA, 10, {"brokers": [], "cluster_id": "c", "controller_id": 1,
                                                "authorized_operations": set(range(12)), "topics": [
        {"error_code": 0, "name": "orders", "topic_id": ORDERS_ID, "is_internal": False, "partitions": [],
         "authorized_operations": set(range(12))}]})
    authorized = Authorized({"orders": 1 << 3}.__getitem__, 1 << 8)
    answered = decode_response(Api.METADATA, 10, metadata_answer(memoryview(proxys), 10, asked, REFUSED,
                                                                 authorized=authorized))
    assert answered.authorized_operations == {8}  # kafka-python reads the bit field as its bits' positions
    assert [topic.authorized_operations for topic in answered.topics] == [{3}]


@pytest.mark.parametrize("api_key", sorted(PARTITIONED_APIS))
def test_a_request_naming_only_reserved_partitions_is_answered_without_the_cluster(api_key: int) -> None:
    api = PARTITIONED_APIS[api_key]
    version = max_version(api_key)
    request_class_ = request_class(api_key)
    topic_class = next(getattr(request_class_, name) for name in dir(request_class_)
                       if name[0].isupper() and api.request_partitions in getattr(getattr(request_class_, name),
                                                                                 "fields", {}))
    partitions: list[object] = [3, 5] if api.request_index is None else [
        getattr(topic_class, name)(**{api.request_index: index}) for name in dir(topic_class)
        if name[0].isupper() and hasattr(getattr(topic_class, name), "fields") for index in (3, 5)]
    request = request_class_(version=version, **{api.topics: [topic_class(**{api.name: "quotas",
                                                                             api.request_partitions: partitions})]})
    refused = topics_refused(api_key, version, memoryview(encode_request(api_key, version, request)), REFUSED)
    assert refused is not None and refused.forwarded_body is None
    answer = decode_response(api_key, version, answer_with_refusals(api_key, version, None, refused))
    assert [(getattr(topic, api.name), [(getattr(p, api.answer_index), p.error_code)
                                        for p in getattr(topic, api.answer_partitions)])
            for topic in getattr(answer, api.answered_topics())] == [("quotas", [(3, 29), (5, 29)])]


def fetch_request(version: int, topics: list[object], session_epoch: int = 0) -> memoryview:
    field = "topic_id" if version >= 13 else "topic"
    fields = {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
              "session_id": 9 if session_epoch > 0 else 0, "session_epoch": session_epoch, "rack_id": "",
              "forgotten_topics_data": [], "topics": [
                  {field: topic, "partitions": [{"partition": index, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                                 "current_leader_epoch": -1, "last_fetched_epoch": -1,
                                                 "log_start_offset": -1} for index in (0, 1)]} for topic in topics]}
    return memoryview(encode_request(Api.FETCH, version, fields))


@pytest.mark.parametrize("version", [12, 13])
def test_a_fetch_goes_without_the_reserved_topic_and_outside_its_session(version: int) -> None:
    names = {QUOTAS_ID.bytes: "quotas", ORDERS_ID.bytes: "orders"}
    topics: list[object] = [QUOTAS_ID, ORDERS_ID] if version >= 13 else ["quotas", "orders"]
    refused = fetch_refused(fetch_request(version, topics), version,
                            lambda ref: (names[ref] if isinstance(ref, bytes) else ref) == "quotas")
    assert refused is not None and refused.forwarded_body is not None
    forwarded = decode_request(Api.FETCH, version, refused.forwarded_body)
    assert len(forwarded.topics) == 1 and (forwarded.session_id, forwarded.session_epoch) == (0, -1)
    answer = decode_response(Api.FETCH, version, fetch_answer_with_refusals(version, None, refused))
    assert [[(p.partition_index, p.error_code, p.high_watermark) for p in topic.partitions]
            for topic in answer.responses] == [[(0, 29, -1), (1, 29, -1)]]


def test_a_share_fetch_refuses_the_reserved_topics_partitions_and_their_acknowledgements() -> None:
    acknowledged = [{"first_offset": 0, "last_offset": 3, "acknowledge_types": [1]}]
    request = encode_request(Api.SHARE_FETCH, 2, {
        "group_id": "g", "member_id": "m", "share_session_epoch": 1, "max_wait_ms": 0, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10, "forgotten_topics_data": [], "topics": [
            {"topic_id": QUOTAS_ID, "partitions": [{"partition_index": 0, "acknowledgement_batches": acknowledged},
                                                   {"partition_index": 1, "acknowledgement_batches": []}]},
            {"topic_id": ORDERS_ID, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]})
    refused = share_refused(Api.SHARE_FETCH, 2, memoryview(request), lambda topic_id: topic_id == QUOTAS_ID.bytes)
    assert refused is not None and refused.forwarded_body is not None
    kept = decode_request(Api.SHARE_FETCH, 2, refused.forwarded_body)
    assert [topic.topic_id for topic in kept.topics] == [ORDERS_ID]
    answer = decode_response(Api.SHARE_FETCH, 2, share_answer_with_refusals(Api.SHARE_FETCH, 2, None, refused))
    assert [(p.partition_index, p.error_code, p.acknowledge_error_code) for topic in answer.responses
            for p in topic.partitions] == [(0, 29, 29), (1, 29, 0)]
    session_gone = encode_response(Api.SHARE_FETCH, 2, {
        "throttle_time_ms": 0, "error_code": 123, "error_message": None, "acquisition_lock_timeout_ms": 0,
        "responses": [], "node_endpoints": []})
    assert share_answer_with_refusals(Api.SHARE_FETCH, 2, memoryview(session_gone), refused) == session_gone, \
        "an error of the whole request stands alone, as Kafka sends it"


def test_an_election_of_every_partition_goes_as_it_came() -> None:
    """ElectLeaders with no topics elects every partition's preferred leader: nothing to refuse, nothing moved but
    leadership, as for every topic of the cluster."""
    request = encode_request(Api.ELECT_LEADERS, 2, {"election_type": 0, "topic_partitions": None, "timeout_ms": 1000})
    assert topics_refused(Api.ELECT_LEADERS, 2, memoryview(request), REFUSED) is None


@settings(max_examples=300, deadline=None)
@given(data=st.data(), version=st.integers(0, 13))
def test_a_metadata_naming_topics_by_name_alone_is_read_as_the_decoder_reads_it(data: st.DataObject,
                                                                                 version: int) -> None:
    """The names of a Metadata request naming topics by name and asking for no authorized operations, read from its
    bytes (the judge's fast way); any other request, or one cut short or with bytes after it, is the decoder's."""
    body = bytes(data.draw(message_strategy(request_class(Api.METADATA), version)).encode(version=version))
    decoded = decode_request(Api.METADATA, version, body)
    named = metadata_named(memoryview(body), version)
    topics = decoded.topics
    by_name_alone = topics is not None and not (version == 0 and not topics) and all(
        topic.name is not None and getattr(topic, "topic_id", None) in (None, uuid.UUID(int=0)) for topic in topics)
    operations = bool(getattr(decoded, "include_topic_authorized_operations", False)) or (
        version <= 10 and bool(getattr(decoded, "include_cluster_authorized_operations", False)))
    if not by_name_alone or operations:
        assert named is None
    else:
        assert named == MetadataNamed(tuple(topic.name for topic in topics),
                                      version < 4 or decoded.allow_auto_topic_creation)
    cut = data.draw(st.integers(0, max(0, len(body) - 1)))
    for bad in (body[:cut], body + b"\x00"):
        assert metadata_named(memoryview(bad), version) is None or bad == body


def test_a_metadata_naming_topics_by_name_with_the_zero_id_is_read_by_name() -> None:
    """What clients send from v10 (the strategies above draw no zero id): a name with Kafka's zero id is by name; any
    other id makes the whole request one by id, as Kafka reads it."""
    for version in range(10, 14):
        named = [{"topic_id": uuid.UUID(int=0), "name": name} for name in ("a", "b")]
        assert metadata_named(request(version, named), version) == MetadataNamed(("a", "b"), True)
        by_id = [*named, {"topic_id": ORDERS_ID, "name": "a"}]
        assert metadata_named(request(version, by_id), version) is None
