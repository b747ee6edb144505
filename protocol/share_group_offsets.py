"""The share groups' offset APIs (KIP-932: DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets) without the groups and topics a principal may not use, answered as ``KafkaApis`` answers
them.

Describe: a group the principal may not describe is answered GROUP_AUTHORIZATION_FAILED and nothing else, in its place;
a group naming a topic it may not describe gets that topic's partitions TOPIC_AUTHORIZATION_FAILED (start offset and
lag -1, a zero topic id) after the others'; a group asking for all its topics gets an answer without them. Alter and
Delete: a group the principal may not use (READ, DELETE) fails the whole request with GROUP_AUTHORIZATION_FAILED; each
partition (Alter) or topic (Delete) of a topic it may not read TOPIC_AUTHORIZATION_FAILED, before the others' results.
An error of the whole group (or, for Alter and Delete, of the whole request) from the coordinator stands alone, as
Kafka sends it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from protocol.apis import Api, response_class
from protocol.codecs import decode_request, decode_response, encode_request, encode_response
from protocol.errors import ERROR_MESSAGES, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED
from protocol.refused_topics import NameRefusal

SHARE_GROUP_OFFSET_APIS = frozenset({Api.DESCRIBE_SHARE_GROUP_OFFSETS, Api.ALTER_SHARE_GROUP_OFFSETS,
                                     Api.DELETE_SHARE_GROUP_OFFSETS})
_ZERO_ID = uuid.UUID(int=0)
_MESSAGE = ERROR_MESSAGES[TOPIC_AUTHORIZATION_FAILED]


class GroupRefused(NamedTuple):
    """What a request's group is refused."""

    group_id: str
    whole: bool
    """The group itself: not asked of the cluster."""
    topics: tuple[tuple[str, tuple[int, ...]], ...]
    """Each refused topic it names, with its partitions (none for Delete)."""
    every_topic: bool
    """It asks for all its topics (Describe): the refused ones are left out of its answer."""


class ShareOffsetsRefused(NamedTuple):
    groups: tuple[GroupRefused, ...]
    """For each group of the request, in its order (Alter and Delete name one): Kafka answers them in that order."""
    topic_refused: NameRefusal
    forwarded_body: bytes | None
    """None when nothing is left to ask."""


def share_offsets_refused(api_key: int, version: int, body: memoryview, group_refused: Callable[[str], bool],
                          topic_refused: NameRefusal) -> ShareOffsetsRefused | None:
    """What the request asks of the groups and topics refused (``group_refused``, ``topic_refused``: by name) and the
    request that goes on instead, or None when nothing."""
    request = decode_request(api_key, version, body)
    groups: list[GroupRefused] = []
    for group, topics in _groups(api_key, request):
        if group_refused(group.group_id):
            groups.append(GroupRefused(group.group_id, True, (), False))
            continue
        if topics is None:
            groups.append(GroupRefused(group.group_id, False, (), True))
            continue
        named = tuple((topic.topic_name, _partitions(api_key, topic)) for topic in topics
                      if topic_refused(topic.topic_name))
        groups.append(GroupRefused(group.group_id, False, named, False))
        if named:
            group.topics = [topic for topic in topics if not topic_refused(topic.topic_name)]
    if not any(group.whole or group.topics or group.every_topic for group in groups):
        return None
    if all(group.whole for group in groups):
        return ShareOffsetsRefused(tuple(groups), topic_refused, None)
    if api_key == Api.DESCRIBE_SHARE_GROUP_OFFSETS:
        request.groups = [group for group, refused in zip(request.groups, groups, strict=True) if not refused.whole]
    return ShareOffsetsRefused(tuple(groups), topic_refused, encode_request(api_key, version, request))


def _groups(api_key: int, request: Any) -> list[tuple[Any, list[Any] | None]]:
    groups = request.groups if api_key == Api.DESCRIBE_SHARE_GROUP_OFFSETS else [request]
    return [(group, group.topics) for group in groups]


def _partitions(api_key: int, topic: Any) -> tuple[int, ...]:
    if api_key == Api.DESCRIBE_SHARE_GROUP_OFFSETS:
        return tuple(topic.partitions)
    if api_key == Api.ALTER_SHARE_GROUP_OFFSETS:
        return tuple(partition.partition_index for partition in topic.partitions)
    return ()


def share_offsets_answer(api_key: int, version: int, body: memoryview | None, refused: ShareOffsetsRefused) -> bytes:
    """The cluster's answer (None: nothing was asked of it) with the refusals in Kafka's places."""
    cls = response_class(api_key)
    if api_key == Api.DESCRIBE_SHARE_GROUP_OFFSETS:
        group_class = cls.DescribeShareGroupOffsetsResponseGroup
        topic_class = group_class.DescribeShareGroupOffsetsResponseTopic
        partition_class = topic_class.DescribeShareGroupOffsetsResponsePartition
        cluster_answer = None if body is None else decode_response(api_key, version, body)
        answered = iter(() if cluster_answer is None else cluster_answer.groups)
        groups = []
        for asked in refused.groups:
            if asked.whole:
                groups.append(group_class(group_id=asked.group_id, topics=[],
                                          error_code=GROUP_AUTHORIZATION_FAILED, error_message=None))
                continue
            group = next(answered, None)
            if group is None:  # the cluster answered fewer groups than it was asked: nothing to add to
                continue
            groups.append(group)
            if group.error_code:
                continue
            if asked.every_topic:
                group.topics = [topic for topic in group.topics if not refused.topic_refused(topic.topic_name)]
            group.topics = [*group.topics, *(topic_class(topic_name=name, topic_id=_ZERO_ID, partitions=[
                partition_class(partition_index=index, start_offset=-1, leader_epoch=0, lag=-1,
                                error_code=TOPIC_AUTHORIZATION_FAILED, error_message=_MESSAGE) for index in indexes])
                for name, indexes in asked.topics)]
        return encode_response(api_key, version, {
            "throttle_time_ms": 0 if cluster_answer is None else cluster_answer.throttle_time_ms, "groups": groups})
    (asked,) = refused.groups
    if asked.whole:
        return encode_response(api_key, version, {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED,
                                                  "error_message": ERROR_MESSAGES[GROUP_AUTHORIZATION_FAILED],
                                                  "responses": []})
    assert body is not None, "a group not refused is asked of the cluster"
    answer = decode_response(api_key, version, body)
    if answer.error_code:
        return bytes(body)
    if api_key == Api.ALTER_SHARE_GROUP_OFFSETS:
        topic_class = cls.AlterShareGroupOffsetsResponseTopic
        partition_class = topic_class.AlterShareGroupOffsetsResponsePartition
        merged: dict[str, list[int]] = {}  # a topic named twice answered once, as Kafka's builder answers it
        for name, indexes in asked.topics:
            merged.setdefault(name, []).extend(indexes)
        topics = [topic_class(topic_name=name, topic_id=_ZERO_ID, partitions=[
            partition_class(partition_index=index, error_code=TOPIC_AUTHORIZATION_FAILED, error_message=_MESSAGE)
            for index in indexes]) for name, indexes in merged.items()]
    else:
        topic_class = cls.DeleteShareGroupOffsetsResponseTopic
        topics = [topic_class(topic_name=name, topic_id=_ZERO_ID, error_code=TOPIC_AUTHORIZATION_FAILED,
                              error_message=_MESSAGE) for name, _ in asked.topics]
    answer.responses = [*topics, *answer.responses]
    return encode_response(api_key, version, answer)
