from __future__ import annotations

from typing import Any

import pytest

from protocol.apis import Api
from protocol.authorization_answers import (
    cluster_described,
    coordinators_answer,
    coordinators_asked,
    coordinators_without,
    groups_deleted,
    groups_deleted_answer,
    groups_described,
    groups_described_answer,
    groups_listed,
    judged_by_the_cluster_first,
    membership_refused,
    offsets_answer,
    offsets_asked,
    transactions_described,
    transactions_described_answer,
    transactions_listed,
)
from protocol.codecs import decode_request, decode_response, encode_request, encode_response
from protocol.errors import ProtocolError

REFUSED_GROUP = "theirs".__eq__
REFUSED_TOPIC = "secret".__eq__


def body(api_key: int, version: int, **fields: Any) -> memoryview:
    return memoryview(encode_request(api_key, version, fields))


@pytest.mark.parametrize(("api_key", "version", "fields"), [
    (Api.JOIN_GROUP, 6, {"generation_id": -1, "protocol_name": "", "leader": "", "member_id": ""}),
    (Api.JOIN_GROUP, 9, {"generation_id": -1, "protocol_name": None, "leader": "", "member_id": ""}),
    (Api.SYNC_GROUP, 5, {"assignment": b"", "protocol_type": None, "protocol_name": None}),
    (Api.HEARTBEAT, 4, {}),
    (Api.LEAVE_GROUP, 5, {"members": []}),
])
def test_a_membership_request_is_refused_with_its_error_and_nothing_else(api_key: int, version: int,
                                                                         fields: dict[str, Any]) -> None:
    answer = decode_response(api_key, version, membership_refused(api_key, version, 30))
    assert answer.error_code == 30 and all(getattr(answer, name) == value for name, value in fields.items())


def test_a_sync_group_without_its_protocol_is_the_clusters_to_refuse_first() -> None:
    complete = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None, "assignments": []}
    assert judged_by_the_cluster_first(Api.SYNC_GROUP, 5, body(Api.SYNC_GROUP, 5, **complete, protocol_type=None,
                                                                protocol_name="range"))
    assert not judged_by_the_cluster_first(Api.SYNC_GROUP, 5, body(Api.SYNC_GROUP, 5, **complete,
                                                                   protocol_type="consumer", protocol_name="range"))
    assert not judged_by_the_cluster_first(Api.SYNC_GROUP, 4, body(Api.SYNC_GROUP, 4, **complete))


def test_refused_coordinator_keys_keep_their_places_among_the_clusters_answers() -> None:
    request = body(Api.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["a", "theirs", "b"])
    assert coordinators_asked(4, request) == (0, ("a", "theirs", "b"))
    forwarded = coordinators_without(4, request, frozenset({"theirs"}))
    assert forwarded is not None and decode_request(Api.FIND_COORDINATOR, 4, forwarded).coordinator_keys == ["a", "b"]
    upstream = encode_response(Api.FIND_COORDINATOR, 4, {"throttle_time_ms": 0, "coordinators": [
        {"key": key, "node_id": 1, "host": "h", "port": 9092, "error_code": 0, "error_message": None}
        for key in ("a", "b")]})
    answer = decode_response(Api.FIND_COORDINATOR, 4, coordinators_answer(4, ("a", "theirs", "b"), {"theirs": 30},
                                                                          memoryview(upstream)))
    assert [(c.key, c.error_code, c.node_id, c.host, c.port, c.error_message) for c in answer.coordinators] == [
        ("a", 0, 1, "h", 9092, None), ("theirs", 30, -1, "", -1, ""), ("b", 0, 1, "h", 9092, None)]
    old = decode_response(Api.FIND_COORDINATOR, 3, coordinators_answer(3, ("theirs",), {"theirs": 53}, None))
    assert (old.error_code, old.error_message, old.node_id, old.host, old.port) == (
        53, "Transactional Id authorization failed.", -1, "", -1)


def offset_fetch(version: int, groups: list[tuple[str, list[str] | None]]) -> memoryview:
    def topics(names: list[str] | None) -> list[dict[str, Any]] | None:
        return None if names is None else [{"name": name, "partition_indexes": [0, 1]} for name in names]
    if version >= 8:
        return body(Api.OFFSET_FETCH, version, require_stable=False, groups=[
            {"group_id": group, "topics": topics(names)} for group, names in groups])
    [(group, names)] = groups
    return body(Api.OFFSET_FETCH, version, group_id=group, topics=topics(names), require_stable=False)


def committed(names: list[str]) -> list[dict[str, Any]]:
    return [{"name": name, "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                                           "metadata": "", "error_code": 0}]} for name in names]


def test_offset_fetch_refuses_a_group_whole_and_a_topic_of_another_after_the_clusters_answer() -> None:
    asked = offsets_asked(8, offset_fetch(8, [("mine", ["orders", "secret"]), ("theirs", ["orders"]),
                                              ("all", None)]), REFUSED_GROUP, REFUSED_TOPIC)
    assert asked.forwarded_body is not None
    forwarded = decode_request(Api.OFFSET_FETCH, 8, asked.forwarded_body)
    assert [(group.group_id, group.topics and [topic.name for topic in group.topics])
            for group in forwarded.groups] == [("mine", ["orders"]), ("all", None)]
    upstream = encode_response(Api.OFFSET_FETCH, 8, {"throttle_time_ms": 0, "groups": [
        {"group_id": "mine", "error_code": 0, "topics": committed(["orders"])},
        {"group_id": "all", "error_code": 0, "topics": committed(["orders", "secret"])}]})
    answer = decode_response(Api.OFFSET_FETCH, 8, offsets_answer(8, asked, memoryview(upstream), REFUSED_TOPIC))
    assert [(group.group_id, group.error_code, [(topic.name, [(p.error_code, p.committed_offset)
                                                               for p in topic.partitions]) for topic in group.topics])
            for group in answer.groups] == [
        ("mine", 0, [("orders", [(0, 5)]), ("secret", [(29, -1), (29, -1)])]),
        ("theirs", 30, []),
        ("all", 0, [("orders", [(0, 5)])])]


@pytest.mark.parametrize("version", [1, 2, 7])
def test_a_refused_group_of_an_older_offset_fetch_is_answered_as_kafka_answers_it(version: int) -> None:
    asked = offsets_asked(version, offset_fetch(version, [("theirs", ["orders"])]), REFUSED_GROUP, REFUSED_TOPIC)
    assert asked.forwarded_body is None
    answer = decode_response(Api.OFFSET_FETCH, version, offsets_answer(version, asked, None, REFUSED_TOPIC))
    if version >= 2:  # the error is the answer's
        assert (getattr(answer, "error_code", None), answer.topics) == (30, [])
    else:  # on every partition asked
        assert [(p.partition_index, p.error_code) for topic in answer.topics for p in topic.partitions] == [
            (0, 30), (1, 30)]


def test_groups_a_principal_may_not_describe_are_left_out_of_a_list_and_refused_first_in_a_description() -> None:
    listed = encode_response(Api.LIST_GROUPS, 5, {"throttle_time_ms": 0, "error_code": 0, "groups": [
        {"group_id": name, "protocol_type": "consumer", "group_state": "Stable", "group_type": "classic"}
        for name in ("mine", "theirs")]})
    answer = decode_response(Api.LIST_GROUPS, 5, groups_listed(5, memoryview(listed), REFUSED_GROUP))
    assert [group.group_id for group in answer.groups] == ["mine"]
    asked = groups_described(Api.DESCRIBE_GROUPS, 5, body(Api.DESCRIBE_GROUPS, 5, groups=["theirs", "mine"],
                                     include_authorized_operations=True), REFUSED_GROUP)
    assert asked.refused == ("theirs",) and asked.forwarded_body is not None
    assert decode_request(Api.DESCRIBE_GROUPS, 5, memoryview(asked.forwarded_body)).groups == ["mine"]
    upstream = encode_response(Api.DESCRIBE_GROUPS, 5, {"throttle_time_ms": 0, "groups": [{
        "error_code": 0, "group_id": "mine", "group_state": "Stable", "protocol_type": "consumer",
        "protocol_data": "range", "members": [], "authorized_operations": {3, 8}}]})
    described = decode_response(Api.DESCRIBE_GROUPS, 5, groups_described_answer(
        5, asked, memoryview(upstream), lambda group: 1 << 8))
    assert [(group.group_id, group.error_code, group.group_state, group.authorized_operations)
            for group in described.groups] == [("theirs", 30, "", None), ("mine", 0, "Stable", {8})]
    nothing_asked = groups_described(Api.DESCRIBE_GROUPS, 5, body(Api.DESCRIBE_GROUPS, 5, groups=["theirs"],
                                             include_authorized_operations=False), REFUSED_GROUP)
    assert nothing_asked.forwarded_body is None
    assert [group.error_code for group in decode_response(Api.DESCRIBE_GROUPS, 5, groups_described_answer(
        5, nothing_asked, None, lambda group: 0)).groups] == [30]


def test_the_cluster_described_gives_the_principals_operations_and_a_refusal_as_it_is() -> None:
    def described(error_code: int) -> memoryview:
        return memoryview(encode_response(Api.DESCRIBE_CLUSTER, 1, {
            "throttle_time_ms": 0, "error_code": error_code, "error_message": None, "endpoint_type": 1,
            "cluster_id": "c", "controller_id": 1, "brokers": [], "authorized_operations": {5, 7, 8}}))

    answer = decode_response(Api.DESCRIBE_CLUSTER, 1, cluster_described(1, described(0), 1 << 8))
    assert answer.authorized_operations == {8}
    assert decode_response(Api.DESCRIBE_CLUSTER, 1, cluster_described(1, described(0), 0)).authorized_operations \
        == set()
    refused = described(102)
    assert cluster_described(1, refused, 0) == bytes(refused)


def test_groups_a_principal_may_not_delete_are_answered_after_the_others_each_once() -> None:
    refusals, forwarded = groups_deleted(2, body(Api.DELETE_GROUPS, 2, groups_names=["theirs", "mine", "theirs"]),
                                         REFUSED_GROUP)
    assert refusals == ("theirs",) and forwarded is not None
    assert decode_request(Api.DELETE_GROUPS, 2, memoryview(forwarded)).groups_names == ["mine"]
    upstream = encode_response(Api.DELETE_GROUPS, 2, {"throttle_time_ms": 0, "results": [
        {"group_id": "mine", "error_code": 69}]})
    answer = decode_response(Api.DELETE_GROUPS, 2, groups_deleted_answer(2, refusals, memoryview(upstream)))
    assert [(result.group_id, result.error_code) for result in answer.results] == [("mine", 69), ("theirs", 30)]
    assert groups_deleted(2, body(Api.DELETE_GROUPS, 2, groups_names=["theirs"]), REFUSED_GROUP) == (("theirs",), None)


def test_refused_transactions_keep_their_places_and_every_one_loses_the_topics_refused() -> None:
    body = memoryview(encode_request(Api.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["a", "x", "b", "a"]}))
    described = transactions_described(0, body, {"x"}.__contains__)
    assert described.asked == (("a", False), ("x", True), ("b", False), ("a", False))
    assert described.forwarded_body is not None
    assert decode_request(Api.DESCRIBE_TRANSACTIONS, 0, described.forwarded_body).transactional_ids == ["a", "b", "a"]

    def state(transactional_id: str, *topics: str) -> dict[str, Any]:
        return {"error_code": 0, "transactional_id": transactional_id, "transaction_state": "Ongoing",
                "transaction_timeout_ms": 60000, "transaction_start_time_ms": 5, "producer_id": 7,
                "producer_epoch": 1, "topics": [{"topic": topic, "partitions": [0]} for topic in topics]}

    upstream = encode_response(Api.DESCRIBE_TRANSACTIONS, 0, {"throttle_time_ms": 30, "transaction_states": [
        state("a", "t", "hidden"), state("b", "hidden"), state("a", "t", "hidden")]})
    answer = decode_response(Api.DESCRIBE_TRANSACTIONS, 0, transactions_described_answer(
        0, described, memoryview(upstream), {"hidden"}.__contains__))
    assert [(s.transactional_id, s.error_code, s.producer_id, [t.topic for t in s.topics])
            for s in answer.transaction_states] == [("a", 0, 7, ["t"]), ("x", 53, 0, []), ("b", 0, 7, []),
                                                    ("a", 0, 7, ["t"])]
    assert answer.throttle_time_ms == 30, "the cluster's throttle kept"
    every_one_refused = transactions_described(0, body, lambda transactional_id: True)
    assert every_one_refused.forwarded_body is None
    alone = decode_response(Api.DESCRIBE_TRANSACTIONS, 0, transactions_described_answer(
        0, every_one_refused, None, lambda topic: False))
    assert [s.error_code for s in alone.transaction_states] == [53] * 4
    with pytest.raises(ProtocolError, match="fewer transactions"):
        transactions_described_answer(0, described, memoryview(encode_response(
            Api.DESCRIBE_TRANSACTIONS, 0, {"throttle_time_ms": 0, "transaction_states": [state("a")]})),
            lambda topic: False)


def test_transactions_a_principal_may_not_describe_are_left_out_of_a_listing() -> None:
    listed = encode_response(Api.LIST_TRANSACTIONS, 1, {"throttle_time_ms": 0, "error_code": 0,
                                                        "unknown_state_filters": [], "transaction_states": [
        {"transactional_id": name, "producer_id": 1, "transaction_state": "Ongoing"} for name in ("a", "x")]})
    kept = transactions_listed(1, memoryview(listed), {"x"}.__contains__)
    assert kept is not None
    assert [s.transactional_id for s in decode_response(Api.LIST_TRANSACTIONS, 1, kept).transaction_states] == ["a"]
    assert transactions_listed(1, memoryview(listed), lambda transactional_id: False) is None
