"""Produce responses the proxy writes itself, shaped exactly as a broker would answer.

A Produce refused by a quota gets one error code on every partition; a Produce with some
partitions invalid is forwarded without them and answered with the upstream's results and the
proxy's errors, in request order. (Topic-admin requests: ``protocol.topic_admin``.)
"""

from __future__ import annotations

import uuid
from typing import Any

from protocol.apis import response_class
from protocol.codecs import Api, decode_request, encode_request, encode_response
from protocol.errors import UNKNOWN_SERVER_ERROR
from protocol.header import RequestHeader
from protocol.produce import FIRST_TOPIC_ID_PRODUCE_VERSION, ProduceScan, TopicData


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
