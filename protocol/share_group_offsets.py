"""The share groups' offset APIs (KIP-932: DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets) without the topics a principal may not describe, answered as ``KafkaApis`` answers them.

Describe: a group naming such a topic gets its partitions TOPIC_AUTHORIZATION_FAILED (start offset and lag -1, a zero
topic id) after the others'; a group asking for all its topics gets an answer without them. Alter: each partition of
such a topic TOPIC_AUTHORIZATION_FAILED, before the others' results. Delete: such a topic TOPIC_AUTHORIZATION_FAILED,
before the others'. An error of the whole group (or, for Alter and Delete, of the whole request) stands alone, as
Kafka sends it. The rest of the request always goes to the cluster, whose coordinator checks the group.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from protocol.apis import Api, response_class
from protocol.codecs import decode_request, decode_response, encode_request, encode_response
from protocol.errors import ERROR_MESSAGES, TOPIC_AUTHORIZATION_FAILED

SHARE_GROUP_OFFSET_APIS = frozenset({Api.DESCRIBE_SHARE_GROUP_OFFSETS, Api.ALTER_SHARE_GROUP_OFFSETS,
                                     Api.DELETE_SHARE_GROUP_OFFSETS})
_ZERO_ID = uuid.UUID(int=0)
_MESSAGE = ERROR_MESSAGES[TOPIC_AUTHORIZATION_FAILED]


class ShareOffsetsRefused(NamedTuple):
    refused: tuple[tuple[tuple[str, tuple[int, ...]], ...], ...]
    """For each group of the request, in its order (Alter and Delete name one): each reserved topic it names, with
    its partitions (none for Delete). Kafka answers the groups in the order asked."""
    every_topic: frozenset[int]
    """Describe's groups (by position) asking for all their topics: the reserved ones are left out of their answers."""
    reserved: frozenset[str]
    forwarded_body: bytes


def share_offsets_refused(api_key: int, version: int, body: memoryview,
                          reserved: frozenset[str]) -> ShareOffsetsRefused | None:
    """What the request asks of the reserved topics and the request that goes on instead, or None when nothing."""
    request = decode_request(api_key, version, body)
    refused: list[tuple[tuple[str, tuple[int, ...]], ...]] = []
    every_topic = set()
    for position, (group, topics) in enumerate(_groups(api_key, request)):
        if topics is None:
            every_topic.add(position)
            refused.append(())
            continue
        named = tuple((topic.topic_name, _partitions(api_key, topic)) for topic in topics
                      if topic.topic_name in reserved)
        refused.append(named)
        if named:
            group.topics = [topic for topic in topics if topic.topic_name not in reserved]
    if not any(refused) and not every_topic:
        return None
    return ShareOffsetsRefused(tuple(refused), frozenset(every_topic), reserved,
                               encode_request(api_key, version, request))


def _groups(api_key: int, request: Any) -> list[tuple[Any, list[Any] | None]]:
    groups = request.groups if api_key == Api.DESCRIBE_SHARE_GROUP_OFFSETS else [request]
    return [(group, group.topics) for group in groups]


def _partitions(api_key: int, topic: Any) -> tuple[int, ...]:
    if api_key == Api.DESCRIBE_SHARE_GROUP_OFFSETS:
        return tuple(topic.partitions)
    if api_key == Api.ALTER_SHARE_GROUP_OFFSETS:
        return tuple(partition.partition_index for partition in topic.partitions)
    return ()


def share_offsets_answer(api_key: int, version: int, body: memoryview, refused: ShareOffsetsRefused) -> bytes:
    """The cluster's answer with the refusals in Kafka's places."""
    answer = decode_response(api_key, version, body)
    cls = response_class(api_key)
    if api_key == Api.DESCRIBE_SHARE_GROUP_OFFSETS:
        topic_class = cls.DescribeShareGroupOffsetsResponseGroup.DescribeShareGroupOffsetsResponseTopic
        partition_class = topic_class.DescribeShareGroupOffsetsResponsePartition
        for position, group in enumerate(answer.groups):
            if group.error_code or position >= len(refused.refused):
                continue
            if position in refused.every_topic:
                group.topics = [topic for topic in group.topics if topic.topic_name not in refused.reserved]
            group.topics = [*group.topics, *(topic_class(topic_name=name, topic_id=_ZERO_ID, partitions=[
                partition_class(partition_index=index, start_offset=-1, leader_epoch=0, lag=-1,
                                error_code=TOPIC_AUTHORIZATION_FAILED, error_message=_MESSAGE) for index in indexes])
                for name, indexes in refused.refused[position])]
        return encode_response(api_key, version, answer)
    if answer.error_code:
        return bytes(body)
    (named,) = refused.refused
    if api_key == Api.ALTER_SHARE_GROUP_OFFSETS:
        topic_class = cls.AlterShareGroupOffsetsResponseTopic
        partition_class = topic_class.AlterShareGroupOffsetsResponsePartition
        topics = [topic_class(topic_name=name, topic_id=_ZERO_ID, partitions=[
            partition_class(partition_index=index, error_code=TOPIC_AUTHORIZATION_FAILED, error_message=_MESSAGE)
            for index in indexes]) for name, indexes in named]
    else:
        topic_class = cls.DeleteShareGroupOffsetsResponseTopic
        topics = [topic_class(topic_name=name, topic_id=_ZERO_ID, error_code=TOPIC_AUTHORIZATION_FAILED,
                              error_message=_MESSAGE) for name, _ in named]
    answer.responses = [*topics, *answer.responses]
    return encode_response(api_key, version, answer)
