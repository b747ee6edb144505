"""Responses the proxy writes itself, shaped exactly as a broker would answer.

A Produce refused by a quota gets one error code on every partition; a Produce with some
partitions invalid is forwarded without them and answered with the upstream's results and the
proxy's errors, in request order; so is a topic-admin request with some topics refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from protocol.apis import request_class, response_class
from protocol.codecs import Api, decode_request, encode_request, encode_response
from protocol.header import RequestHeader
from protocol.produce import FIRST_TOPIC_ID_PRODUCE_VERSION, ProduceScan, TopicData

UNKNOWN_SERVER_ERROR = -1
THROTTLING_QUOTA_EXCEEDED = 89
THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."


class TopicError(NamedTuple):
    error_code: int
    message: str | None


THROTTLED = TopicError(THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED_MESSAGE)


def produce_error_response(scan: ProduceScan, api_version: int, error_code: int, throttle_ms: int) -> bytes:
    """Every partition of the request answered with ``error_code``; the body, header excluded."""
    return merged_produce_response(scan, api_version, None, throttle_ms, error_code)


def merged_produce_response(scan: ProduceScan, api_version: int, upstream: Any | None, throttle_ms: int,
                            error_code: int = UNKNOWN_SERVER_ERROR) -> bytes:
    """Each partition's answer in request order: its own error when the scan found its records
    invalid, else the upstream's result (``upstream`` decoded, or None when nothing was forwarded),
    else ``error_code``. The throttle is max(upstream's, ``throttle_ms``)."""
    cls = response_class(Api.PRODUCE)
    partition_cls = cls.TopicProduceResponse.PartitionProduceResponse
    from_upstream = {} if upstream is None else {
        (_topic_key(api_version, result.name, getattr(result, "topic_id", None)), partition.index): partition
        for result in upstream.responses for partition in result.partition_responses}
    topics = []
    for topic in scan.topics:
        partitions = []
        for p in topic.partitions:
            answered = None if p.error_code else from_upstream.get((_scanned_topic_key(api_version, topic),
                                                                     p.partition))
            if answered is None:
                code, message = (p.error_code, p.error_message) if p.error_code else (error_code, None)
                answered = partition_cls(index=p.partition, error_code=code, base_offset=-1, log_append_time_ms=-1,
                                         log_start_offset=-1, record_errors=[], error_message=message)
            partitions.append(answered)
        if api_version >= FIRST_TOPIC_ID_PRODUCE_VERSION:
            topics.append(cls.TopicProduceResponse(topic_id=_uuid(topic.topic_id), partition_responses=partitions))
        else:
            topics.append(cls.TopicProduceResponse(name=topic.name, partition_responses=partitions))
    upstream_throttle = 0 if upstream is None else (upstream.throttle_time_ms or 0)
    node_endpoints = [] if upstream is None else (getattr(upstream, "node_endpoints", None) or [])
    return encode_response(Api.PRODUCE, api_version, {"responses": topics, "node_endpoints": node_endpoints,
                                                      "throttle_time_ms": max(upstream_throttle, throttle_ms)})


def produce_request_without_invalid_partitions(frame: memoryview, header: RequestHeader, scan: ProduceScan) -> bytes:
    """The request body minus the partitions the scan found invalid (their records copied, not decoded)."""
    request = decode_request(Api.PRODUCE, header.api_version, frame[header.length:])
    version = header.api_version
    invalid = {(_scanned_topic_key(version, topic), p.partition) for topic in scan.topics for p in topic.partitions
               if p.error_code}
    kept_topics = []
    for topic in request.topic_data:
        key = _topic_key(version, topic.name, getattr(topic, "topic_id", None))
        kept = [p for p in topic.partition_data if (key, p.index) not in invalid]
        if kept:
            topic.partition_data = kept
            kept_topics.append(topic)
    request.topic_data = kept_topics
    return encode_request(Api.PRODUCE, header.api_version, request)


def _scanned_topic_key(api_version: int, topic: TopicData) -> str | uuid.UUID | None:
    return _topic_key(api_version, topic.name, _uuid(topic.topic_id))


def _topic_key(api_version: int, name: str | None, topic_id: uuid.UUID | None) -> str | uuid.UUID | None:
    """v13 names topics by id only."""
    return topic_id if api_version >= FIRST_TOPIC_ID_PRODUCE_VERSION else name


def _uuid(raw: bytes | None) -> uuid.UUID | None:
    return None if raw is None or raw == bytes(16) else uuid.UUID(bytes=raw)


# ---- topic-admin requests ----------------------------------------------------------------------

class _TopicApi(NamedTuple):
    request_topics: str
    """Field of the request listing its topics."""
    response_topics: str
    """Field of the response listing per-topic results."""
    result_type: str


_TOPIC_APIS = {
    Api.CREATE_TOPICS: _TopicApi("topics", "topics", "CreatableTopicResult"),
    Api.DELETE_TOPICS: _TopicApi("topics", "responses", "DeletableTopicResult"),
    Api.CREATE_PARTITIONS: _TopicApi("topics", "results", "CreatePartitionsTopicResult"),
}
_FIRST_DELETE_TOPICS_STATE_VERSION = 6  # before it, DeleteTopics lists bare names in topic_names


def request_topic_names(api_key: int, api_version: int, request: Any) -> list[str]:
    """Topic names of a CreateTopics/DeleteTopics/CreatePartitions request, in request order."""
    if api_key == Api.DELETE_TOPICS and api_version < _FIRST_DELETE_TOPICS_STATE_VERSION:
        return list(request.topic_names)
    return [topic.name for topic in getattr(request, _TOPIC_APIS[Api(api_key)].request_topics)]


def request_without_topics(api_key: int, api_version: int, request: Any, refused: set[str]) -> Any:
    """The same request minus ``refused`` topics, to forward upstream."""
    if api_key == Api.DELETE_TOPICS and api_version < _FIRST_DELETE_TOPICS_STATE_VERSION:
        fields = {"topic_names": [name for name in request.topic_names if name not in refused]}
    else:
        field = _TOPIC_APIS[Api(api_key)].request_topics
        fields = {field: [topic for topic in getattr(request, field) if topic.name not in refused]}
    values = {name: getattr(request, name) for name in request_class(api_key).fields if name not in fields}
    return request_class(api_key)(version=api_version, **values, **fields)


def merged_topic_response(api_key: int, api_version: int, topic_order: Sequence[str], upstream: Any | None,
                          refused: Mapping[str, TopicError], throttle_ms: int) -> bytes:
    """Upstream results plus the proxy's refusals, in request order, with max(throttle) applied.

    ``upstream`` is the decoded upstream response, or None when nothing was forwarded.
    """
    api = _TOPIC_APIS[Api(api_key)]
    cls = response_class(api_key)
    result_cls = getattr(cls, api.result_type)
    from_upstream = {} if upstream is None else {r.name: r for r in getattr(upstream, api.response_topics)}
    results = []
    for name in topic_order:
        if name in refused:
            error = refused[name]
            results.append(result_cls(name=name, error_code=error.error_code, error_message=error.message))
        elif name in from_upstream:
            results.append(from_upstream[name])
        else:
            results.append(result_cls(name=name, error_code=UNKNOWN_SERVER_ERROR,
                                      error_message="the cluster's answer had no result for this topic"))
    upstream_throttle = 0 if upstream is None else (getattr(upstream, "throttle_time_ms", 0) or 0)
    fields: dict[str, Any] = {api.response_topics: results}
    if "throttle_time_ms" in cls.fields:
        fields["throttle_time_ms"] = max(upstream_throttle, throttle_ms)
    return encode_response(api_key, api_version, fields)
