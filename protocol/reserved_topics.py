"""Requests and answers without the topics a principal may not describe, shaped as Kafka shapes them.

The proxy keeps topics of its own (``proxy.handlers.reserved_topics``); to a client they are what a topic it may not
describe is to Kafka (``KafkaApis.handleTopicMetadataRequest``): left out of an all-topics answer, answered
TOPIC_AUTHORIZATION_FAILED when named (by name: the name and a zero topic id; by id: the id and no name), and
never created by the request.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from protocol.apis import Api, response_class
from protocol.codecs import decode_request, decode_response, encode_request, encode_response
from protocol.errors import TOPIC_AUTHORIZATION_FAILED

_ZERO_ID = uuid.UUID(int=0)


class MetadataAsked(NamedTuple):
    all_topics: bool
    refused_names: tuple[str, ...]
    """Reserved topics the request names by name, answered refused after the others."""
    by_id: bool
    """Topics are named by id (v12+): a reserved one shows only in the cluster's answer."""
    forwarded_body: bytes | None
    """The request body without the refused names, or None when it goes as it came."""


def metadata_asked(body: memoryview, version: int, reserved: frozenset[str]) -> MetadataAsked:
    """What a Metadata request asks of the reserved topics, and the body that goes to the cluster instead."""
    request = decode_request(Api.METADATA, version, body)
    topics = request.topics
    if topics is None or (version == 0 and not topics):
        return MetadataAsked(True, (), False, None)
    refused = tuple(topic.name for topic in topics if topic.name in reserved)
    by_id = any(topic.name is None for topic in topics)
    if not refused:
        return MetadataAsked(False, (), by_id, None)
    request.topics = [topic for topic in topics if topic.name not in reserved]
    if version == 0 and not request.topics:  # v0 reads no topics as all: the answer keeps only the refusals
        return MetadataAsked(True, refused, by_id, encode_request(Api.METADATA, version, request))
    return MetadataAsked(False, refused, by_id, encode_request(Api.METADATA, version, request))


def metadata_answer(body: memoryview, version: int, asked: MetadataAsked, reserved: frozenset[str]) -> bytes:
    """The cluster's Metadata answer as the client gets it: reserved topics left out of an all-topics answer,
    one named by id answered refused with its id alone, the names refused appended (Kafka appends them too)."""
    answer = decode_response(Api.METADATA, version, body)
    topic_class = response_class(Api.METADATA).MetadataResponseTopic
    topics = []
    for topic in answer.topics:
        if topic.name not in reserved:
            if not (asked.all_topics and asked.refused_names):  # a v0 request naming only reserved topics
                topics.append(topic)
        elif not asked.all_topics:  # named by id: Kafka does not disclose the name
            topics.append(_refused(topic_class, None, topic.topic_id))
    topics += [_refused(topic_class, name, _ZERO_ID) for name in asked.refused_names]
    answer.topics = topics
    return encode_response(Api.METADATA, version, answer)


def _refused(topic_class: Any, name: str | None, topic_id: uuid.UUID | None) -> Any:
    return topic_class(error_code=TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=topic_id, is_internal=False,
                       partitions=[])
