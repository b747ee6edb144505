"""The share groups' offset APIs without the reserved topics, shaped as ``KafkaApis`` answers a topic the principal
may not describe."""

from __future__ import annotations

import uuid

from protocol.apis import Api
from protocol.codecs import decode_request, decode_response, encode_request, encode_response
from protocol.share_group_offsets import share_offsets_answer, share_offsets_refused

RESERVED = frozenset({"quotas"})
ORDERS_ID = uuid.UUID(int=5)


def test_describe_refuses_a_named_reserved_topic_and_leaves_it_out_of_an_all_topics_answer() -> None:
    request = encode_request(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [
        {"group_id": "named", "topics": [{"topic_name": "quotas", "partitions": [0, 1]},
                                         {"topic_name": "orders", "partitions": [0]}]},
        {"group_id": "all", "topics": None},
        {"group_id": "gone", "topics": [{"topic_name": "quotas", "partitions": [0]}]}]})
    refused = share_offsets_refused(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, memoryview(request), RESERVED)
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
    assert share_offsets_refused(Api.DESCRIBE_SHARE_GROUP_OFFSETS, 1, memoryview(unrelated), RESERVED) is None


def test_alter_and_delete_refuse_the_reserved_topic_first_unless_the_whole_request_failed() -> None:
    alter = encode_request(Api.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": "g", "topics": [
        {"topic_name": "quotas", "partitions": [{"partition_index": 0, "start_offset": 0}]},
        {"topic_name": "orders", "partitions": [{"partition_index": 0, "start_offset": 0}]}]})
    refused = share_offsets_refused(Api.ALTER_SHARE_GROUP_OFFSETS, 0, memoryview(alter), RESERVED)
    assert refused is not None
    assert [t.topic_name for t in decode_request(Api.ALTER_SHARE_GROUP_OFFSETS, 0, refused.forwarded_body).topics] \
        == ["orders"]
    served = encode_response(Api.ALTER_SHARE_GROUP_OFFSETS, 0, {"throttle_time_ms": 0, "error_code": 0, "responses": [
        {"topic_name": "orders", "topic_id": ORDERS_ID, "partitions": [{"partition_index": 0, "error_code": 0}]}]})
    answer = decode_response(Api.ALTER_SHARE_GROUP_OFFSETS, 0, share_offsets_answer(
        Api.ALTER_SHARE_GROUP_OFFSETS, 0, memoryview(served), refused))
    assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.responses] == [
        ("quotas", [(0, 29)]), ("orders", [(0, 0)])]
    failed = encode_response(Api.ALTER_SHARE_GROUP_OFFSETS, 0, {"throttle_time_ms": 0, "error_code": 69,
                                                              "error_message": "no such group", "responses": []})
    assert share_offsets_answer(Api.ALTER_SHARE_GROUP_OFFSETS, 0, memoryview(failed), refused) == failed

    delete = encode_request(Api.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": "g", "topics": [
        {"topic_name": "orders"}, {"topic_name": "quotas"}]})
    refused = share_offsets_refused(Api.DELETE_SHARE_GROUP_OFFSETS, 0, memoryview(delete), RESERVED)
    assert refused is not None
    served = encode_response(Api.DELETE_SHARE_GROUP_OFFSETS, 0, {"throttle_time_ms": 0, "error_code": 0, "responses": [
        {"topic_name": "orders", "topic_id": ORDERS_ID, "error_code": 0}]})
    answer = decode_response(Api.DELETE_SHARE_GROUP_OFFSETS, 0, share_offsets_answer(
        Api.DELETE_SHARE_GROUP_OFFSETS, 0, memoryview(served), refused))
    assert [(t.topic_name, t.error_code, t.error_message) for t in answer.responses] == [
        ("quotas", 29, "Topic authorization failed."), ("orders", 0, None)]
