"""The share groups' offset APIs without the groups and topics refused (the proxy's own topics, or what the ACLs do
not allow), shaped as ``KafkaApis`` answers a group or topic the principal may not use."""

from __future__ import annotations

import uuid

from protocol.apis import Api
from protocol.codecs import decode_request, decode_response, encode_request, encode_response
from protocol.share_group_offsets import share_offsets_answer, share_offsets_refused

RESERVED = frozenset({"quotas"}).__contains__


def no_group(group: str) -> bool:
    return False

ORDERS_ID = uuid.UUID(int=5)


def test_describe_refuses_a_named_reserved_topic_and_leaves_it_out_of_an_all_topics_answer() -> None:
    request = encode_request(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [
        {"group_id": "named", "topics": [{"topic_name": "quotas", "partitions": [0, 1]},
                                         {"topic_name": "orders", "partitions": [0]}]},
        {"group_id": "all", "topics": None},
        {"group_id": "gone", "topics": [{"topic_name": "quotas", "partitions": [0]}]}]})
    refused = share_offsets_refused(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, memoryview(request), no_group, RESERVED)
    assert refused is not None
    forwarded = decode_request(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, refused.forwarded_body)
    assert [(g.group_id, None if g.topics is None else [t.topic_name for t in g.topics]) for g in forwarded.groups] \
        == [("named", ["orders"]), ("all", None), ("gone", [])]

    def offsets(name: str) -> dict[str, object]:
        return {"topic_name": name, "topic_id": ORDERS_ID, "partitions": [
            {"partition_index": 0, "start_offset": 7, "leader_epoch": 0, "lag": 3, "error_code": 0}]}

    cluster = encode_response(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"throttle_time_ms": 0, "groups": [
        {"group_id": "named", "topics": [offsets("orders")], "error_code": 0},
        {"group_id": "all", "topics": [offsets("quotas"), offsets("orders")], "error_code": 0},
        {"group_id": "gone", "topics": [], "error_code": 69, "error_message": "no such group"}]})
    answer = decode_response(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, share_offsets_answer(
        Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, memoryview(cluster), refused))
    shown = {g.group_id: [(t.topic_name, [(p.partition_index, p.start_offset, p.lag, p.error_code)
                                          for p in t.partitions]) for t in g.topics] for g in answer.groups}
    assert shown == {"named": [("orders", [(0, 7, 3, 0)]), ("quotas", [(0, -1, -1, 29), (1, -1, -1, 29)])],
                     "all": [("orders", [(0, 7, 3, 0)])],
                     "gone": []}  # a group's own error stands alone
    unrelated = encode_request(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [
        {"group_id": "g", "topics": [{"topic_name": "orders", "partitions": [0]}]}]})
    assert share_offsets_refused(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, memoryview(unrelated), no_group, RESERVED) is None


def test_alter_and_delete_refuse_the_reserved_topic_first_unless_the_whole_request_failed() -> None:
    alter = encode_request(Api.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": "g", "topics": [
        {"topic_name": "quotas", "partitions": [{"partition_index": 0, "start_offset": 0}]},
        {"topic_name": "orders", "partitions": [{"partition_index": 0, "start_offset": 0}]},
        {"topic_name": "quotas", "partitions": [{"partition_index": 1, "start_offset": 0}]}]})
    refused = share_offsets_refused(Api.ALTER_SHARE_GROUP_OFFSETS, 0, memoryview(alter), no_group, RESERVED)
    assert refused is not None
    assert [t.topic_name for t in decode_request(Api.ALTER_SHARE_GROUP_OFFSETS, 0, refused.forwarded_body).topics] \
        == ["orders"]
    served = encode_response(Api.ALTER_SHARE_GROUP_OFFSETS, 0, {"throttle_time_ms": 0, "error_code": 0, "responses": [
        {"topic_name": "orders", "topic_id": ORDERS_ID, "partitions": [{"partition_index": 0, "error_code": 0}]}]})
    answer = decode_response(Api.ALTER_SHARE_GROUP_OFFSETS, 0, share_offsets_answer(
        Api.ALTER_SHARE_GROUP_OFFSETS, 0, memoryview(served), refused))
    assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.responses] == [
        ("quotas", [(0, 29), (1, 29)]), ("orders", [(0, 0)])], "a topic named twice answered once, as Kafka does"
    failed = encode_response(Api.ALTER_SHARE_GROUP_OFFSETS, 0, {"throttle_time_ms": 0, "error_code": 69,
                                                              "error_message": "no such group", "responses": []})
    assert share_offsets_answer(Api.ALTER_SHARE_GROUP_OFFSETS, 0, memoryview(failed), refused) == failed

    delete = encode_request(Api.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": "g", "topics": [
        {"topic_name": "orders"}, {"topic_name": "quotas"}]})
    refused = share_offsets_refused(Api.DELETE_SHARE_GROUP_OFFSETS, 0, memoryview(delete), no_group, RESERVED)
    assert refused is not None
    served = encode_response(Api.DELETE_SHARE_GROUP_OFFSETS, 0, {"throttle_time_ms": 0, "error_code": 0, "responses": [
        {"topic_name": "orders", "topic_id": ORDERS_ID, "error_code": 0}]})
    answer = decode_response(Api.DELETE_SHARE_GROUP_OFFSETS, 0, share_offsets_answer(
        Api.DELETE_SHARE_GROUP_OFFSETS, 0, memoryview(served), refused))
    assert [(t.topic_name, t.error_code, t.error_message) for t in answer.responses] == [
        ("quotas", 29, "Topic authorization failed."), ("orders", 0, None)]


def test_a_refused_group_is_answered_in_its_place_and_fails_an_alteration_or_deletion_whole() -> None:
    request = encode_request(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [
        {"group_id": "theirs", "topics": [{"topic_name": "orders", "partitions": [0]}]},
        {"group_id": "ours", "topics": None},
        {"group_id": "theirs", "topics": None}]})
    refused = share_offsets_refused(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, memoryview(request),
                                    lambda group: group == "theirs", RESERVED)
    assert refused is not None and refused.forwarded_body is not None
    assert [g.group_id for g in decode_request(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, refused.forwarded_body).groups] \
        == ["ours"]
    cluster = encode_response(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"throttle_time_ms": 7, "groups": [
        {"group_id": "ours", "topics": [], "error_code": 0}]})
    answer = decode_response(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, share_offsets_answer(
        Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, memoryview(cluster), refused))
    assert [(g.group_id, g.error_code, g.error_message, g.topics) for g in answer.groups] == [
        ("theirs", 30, None, []), ("ours", 0, None, []), ("theirs", 30, None, [])]
    assert answer.throttle_time_ms == 7, "the cluster's throttle kept"
    every_group = share_offsets_refused(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, memoryview(request), lambda group: True,
                                        RESERVED)
    assert every_group is not None and every_group.forwarded_body is None
    assert [g.error_code for g in decode_response(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, share_offsets_answer(
        Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, None, every_group)).groups] == [30, 30, 30]

    for api_key, request in (
            (Api.ALTER_SHARE_GROUP_OFFSETS, {"group_id": "theirs", "topics": [
                {"topic_name": "quotas", "partitions": [{"partition_index": 0, "start_offset": 0}]}]}),
            (Api.DELETE_SHARE_GROUP_OFFSETS, {"group_id": "theirs", "topics": [{"topic_name": "orders"}]})):
        whole = share_offsets_refused(api_key, 0, memoryview(encode_request(api_key, 0, request)),
                                      lambda group: group == "theirs", RESERVED)
        assert whole is not None and whole.forwarded_body is None
        answer = decode_response(api_key, 0, share_offsets_answer(api_key, 0, None, whole))
        assert (answer.error_code, answer.error_message, answer.responses) == (
            30, "Group authorization failed.", []), api_key
