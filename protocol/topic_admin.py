"""CreateTopics, DeleteTopics and CreatePartitions: their topic entries, and merged answers.

A request lists topic entries in order; an entry names a topic, or (DeleteTopics v6+) gives its
id. The proxy answers some entries itself and forwards the rest: the client gets one result per
entry, in request order, each carrying the entry's name and id, with the cluster's results for the
forwarded entries and the proxy's errors for the others.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from protocol.apis import Api, request_class, response_class
from protocol.codecs import encode_response
from protocol.errors import THROTTLING_QUOTA_EXCEEDED, UNKNOWN_SERVER_ERROR

THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."


class TopicError(NamedTuple):
    error_code: int
    message: str | None


THROTTLED = TopicError(THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED_MESSAGE)
_NO_RESULT = TopicError(UNKNOWN_SERVER_ERROR, "the cluster's answer had no result for this topic")


class TopicRef(NamedTuple):
    """One entry of a request: a topic name, a topic id (DeleteTopics v6+), both, or neither."""

    name: str | None
    topic_id: uuid.UUID | None = None


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


def _names_only(api_key: int, api_version: int) -> bool:
    return api_key == Api.DELETE_TOPICS and api_version < _FIRST_DELETE_TOPICS_STATE_VERSION


def request_topics(api_key: int, api_version: int, request: Any) -> list[TopicRef]:
    """The entries of a CreateTopics/DeleteTopics/CreatePartitions request, in request order."""
    if _names_only(api_key, api_version):
        return [TopicRef(name) for name in request.topic_names]
    return [TopicRef(topic.name, getattr(topic, "topic_id", None))
            for topic in getattr(request, _TOPIC_APIS[Api(api_key)].request_topics)]


def request_keeping(api_key: int, api_version: int, request: Any, kept: Collection[int]) -> Any:
    """The same request with only the entries at the ``kept`` indices, to forward upstream."""
    if _names_only(api_key, api_version):
        fields = {"topic_names": [name for i, name in enumerate(request.topic_names) if i in kept]}
    else:
        field = _TOPIC_APIS[Api(api_key)].request_topics
        fields = {field: [topic for i, topic in enumerate(getattr(request, field)) if i in kept]}
    values = {name: getattr(request, name) for name in request_class(api_key).fields if name not in fields}
    return request_class(api_key)(version=api_version, **values, **fields)


def upstream_results(api_key: int, entries: Sequence[TopicRef], forwarded: Collection[int],
                     upstream: Any) -> dict[int, Any]:
    """The cluster's result for each forwarded entry (by index), matched by id, else by name."""
    by_id: dict[uuid.UUID, Any] = {}
    by_name: dict[str, Any] = {}
    for result in getattr(upstream, _TOPIC_APIS[Api(api_key)].response_topics):
        topic_id = getattr(result, "topic_id", None)
        if topic_id is not None:
            by_id.setdefault(topic_id, result)
        if result.name is not None:
            by_name.setdefault(result.name, result)
    matched = {}
    for index in forwarded:
        entry = entries[index]
        result = by_id.get(entry.topic_id) if entry.topic_id is not None else by_name.get(entry.name or "")
        if result is not None:
            matched[index] = result
    return matched


def merged_topic_response(api_key: int, api_version: int, entries: Sequence[TopicRef],
                          from_upstream: Mapping[int, Any], local: Mapping[int, TopicError], throttle_ms: int,
                          upstream_throttle_ms: int = 0) -> bytes:
    """One result per entry in request order: the proxy's error (``local``), else the cluster's
    result, else UNKNOWN_SERVER_ERROR; the throttle is max(cluster's, ``throttle_ms``)."""
    api = _TOPIC_APIS[Api(api_key)]
    cls = response_class(api_key)
    result_cls = getattr(cls, api.result_type)
    results = []
    for index, entry in enumerate(entries):
        found = from_upstream.get(index)
        if found is not None and index not in local:
            results.append(found)
            continue
        error = local.get(index, _NO_RESULT)
        result: dict[str, Any] = {"name": entry.name, "error_code": error.error_code, "error_message": error.message}
        if "topic_id" in result_cls.fields:
            result["topic_id"] = entry.topic_id
        results.append(result_cls(**result))
    response: dict[str, Any] = {api.response_topics: results}
    if "throttle_time_ms" in cls.fields:
        response["throttle_time_ms"] = max(upstream_throttle_ms, throttle_ms)
    return encode_response(api_key, api_version, response)
