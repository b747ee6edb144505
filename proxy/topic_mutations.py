"""CreateTopics, DeleteTopics and CreatePartitions under the controller mutation quota (SPEC §4).

Strict versions (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+) admit topics one by
one in request order; refused topics are cut from the forwarded request and answered by the
proxy with THROTTLING_QUOTA_EXCEEDED, merged back into the cluster's answer in request order
(nothing is forwarded when every topic is refused). Older versions are admitted whole and only
throttled. ``validate_only`` requests are not charged (KIP-599). Partition counts the request
does not carry come from the cluster (``ClusterInfo``), which may mean waiting for it.
"""

from __future__ import annotations

from typing import Any

from protocol.apis import Api
from protocol.codecs import decode_request, decode_response, encode_request
from protocol.header import RequestHeader, read_request_header
from protocol.responses import (
    THROTTLED,
    TopicError,
    merged_topic_response,
    request_topic_names,
    request_without_topics,
)
from proxy.cluster_info import ClusterInfo
from proxy.outcome import FORWARD, Caller, Decided, Outcome, local_answer, replacement_request
from proxy.quota_service import QuotaService, now_ms
from proxy.usage_log import UsageLog
from quotas.config import QuotaType

STRICT_SINCE_VERSION = {Api.CREATE_TOPICS: 6, Api.DELETE_TOPICS: 5, Api.CREATE_PARTITIONS: 3}
"""Kafka's ``strictSinceVersion`` per API (KafkaApis)."""

_USE_CLUSTER_DEFAULT = -1
_FIRST_CREATE_TOPICS_RESULT_WITH_PARTITIONS = 5  # CreatableTopicResult.NumPartitions


class TopicMutationHandler:
    def __init__(self, quotas: QuotaService, cluster: ClusterInfo, usage: UsageLog) -> None:
        self._quotas = quotas
        self._cluster = cluster
        self._usage = usage

    def __call__(self, frame: memoryview, caller: Caller) -> Decided:
        header = read_request_header(frame)
        client_id = header.client_id or ""
        if self._quotas.config.resolve(QuotaType.CONTROLLER_MUTATION_RATE, caller.user, client_id) is None:
            return FORWARD
        api_key, version = Api(header.api_key), header.api_version
        request = decode_request(api_key, version, frame[header.length:])
        names = request_topic_names(api_key, version, request)
        if getattr(request, "validate_only", False):
            return FORWARD
        if api_key == Api.CREATE_TOPICS:
            requested = [_created_partitions(topic) for topic in request.topics]
            if _USE_CLUSTER_DEFAULT not in requested:
                return self._admit(frame, header, request, names, requested, caller.user, caller.now_ms)
            return self._with_cluster_default(frame, header, request, names, requested, caller.user)
        return self._with_current_counts(frame, header, request, names, caller.user)

    async def _with_cluster_default(self, frame: memoryview, header: RequestHeader, request: Any, names: list[str],
                                    requested: list[int], user: str) -> Outcome:
        """CreateTopics with ``num_partitions = -1``: charged the cluster's ``num.partitions``."""
        frame = memoryview(bytes(frame))  # the connection's buffer moves on while we wait
        default = await self._cluster.default_partitions()
        counts = [default if count == _USE_CLUSTER_DEFAULT else count for count in requested]
        defaulted = {name for name, count in zip(names, requested, strict=True) if count == _USE_CLUSTER_DEFAULT}
        return self._admit(frame, header, request, names, counts, user, now_ms(), (default, defaulted))

    async def _with_current_counts(self, frame: memoryview, header: RequestHeader, request: Any, names: list[str],
                                   user: str) -> Outcome:
        """DeleteTopics and CreatePartitions: charged from the topics' current partition counts."""
        frame = memoryview(bytes(frame))  # the connection's buffer moves on while we wait
        existing = await self._cluster.partitions([name for name in names if name])
        if header.api_key == Api.DELETE_TOPICS:
            # a topic named only by id (v6) is charged 0: SPEC §4 "0 if unknown"
            counts = [existing.get(name, 0) if name else 0 for name in names]
        else:
            counts = [max(0, topic.count - existing.get(topic.name, 0)) for topic in request.topics]
        return self._admit(frame, header, request, names, counts, user, now_ms())

    def _admit(self, frame: memoryview, header: RequestHeader, request: Any, names: list[str], counts: list[int],
               user: str, now: int, assumed_default: tuple[int, set[str]] | None = None) -> Outcome:
        """``assumed_default``: the partition count charged for the named ``num_partitions = -1`` topics."""
        api_key, version = Api(header.api_key), header.api_version
        client_id = header.client_id or ""
        strict = version >= STRICT_SINCE_VERSION[api_key]
        decision = self._quotas.mutations.admit_topics(user, client_id, counts, strict, now)
        self._cluster.forget(name for name in names if name)  # the cluster's counts change now
        refused: dict[str, TopicError] = {
            name: THROTTLED for name, admitted in zip(names, decision.topics_admitted, strict=True) if not admitted}
        charged = sum(count for count, admitted in zip(counts, decision.topics_admitted, strict=True) if admitted)
        self._usage.mutations(user, client_id, charged, decision.throttle_ms, len(refused))
        throttle_ms = decision.throttle_ms
        if refused and len(refused) == len(names):
            body = merged_topic_response(api_key, version, names, None, refused, throttle_ms)
            return local_answer(header, body, throttle_ms)
        relearn: set[str] = set()
        if assumed_default is not None and version >= _FIRST_CREATE_TOPICS_RESULT_WITH_PARTITIONS:
            relearn = assumed_default[1] - set(refused)
        if not refused and not relearn:
            return Outcome(throttle_ms=throttle_ms)

        def finish(upstream_body: memoryview) -> bytes:
            upstream = decode_response(api_key, version, upstream_body)
            if relearn:
                assert assumed_default is not None
                self._charge_real_default(upstream, relearn, assumed_default[0], user, client_id)
            if not refused:
                return bytes(upstream_body)
            return merged_topic_response(api_key, version, names, upstream, refused, throttle_ms)

        if not refused:
            return Outcome(throttle_ms=throttle_ms, finish=finish)
        forwarded = request_without_topics(api_key, version, request, set(refused))
        return Outcome(throttle_ms=throttle_ms, finish=finish,
                       replacement=replacement_request(frame, header, encode_request(api_key, version, forwarded)))

    def _charge_real_default(self, response: Any, topics: set[str], assumed: int, user: str, client_id: str) -> None:
        """The cluster answered how many partitions ``-1`` made for ``topics``: charge the difference."""
        for result in response.topics:
            if result.name in topics and not result.error_code and result.num_partitions > 0:
                self._cluster.learn_default_partitions(result.num_partitions)
                difference = result.num_partitions - assumed
                self._quotas.mutations.correct(user, client_id, difference, now_ms())
                self._usage.mutations(user, client_id, difference, 0, 0)


def _created_partitions(topic: Any) -> int:
    """CreateTopics: the partitions a topic creates; -1 means the cluster's num.partitions."""
    if topic.assignments:
        return len(topic.assignments)
    return int(topic.num_partitions)

