"""ShareFetch (KIP-932 share groups) under the consumer byte-rate quotas, as Kafka meters it.

Kafka's ``handleShareFetchRequest`` charges a share consumer as it charges a Fetch: ``MaxBytes`` (and ``MinBytes``)
capped to what the quota window allows, the answer's size recorded to the same ``consumer_byte_rate``, and when that
throttles, the bytes taken back, the channel muted, and an answer with no records sent instead, which still carries
the results of the acknowledgements the request brought (the share consumer fails any it finds no result for). The
records the cluster acquired for the emptied answer stay locked until their acquisition lock runs out, and come back
with one delivery spent: exactly what Kafka's own throttle costs the group, at the same point.

An answer with an error of the whole request records nothing (Kafka answers those on its error paths, charged to
the request quota only). ShareAcknowledge and the share-group heartbeats carry no records: they count for
``request_rate`` only, as on Kafka.
"""

from __future__ import annotations

from typing import Any

from protocol.apis import Api, response_class
from protocol.codecs import decode_request, decode_response, encode_request, encode_response
from protocol.fetch import TopicRef, fetch_response_size
from protocol.header import RequestHeader, response_header_length
from proxy.cluster.topic_names import TopicNames
from proxy.decision.outcome import FORWARD, Caller, ChargedResponse, Decided, Forward, OnResponse, replacement_request
from proxy.handlers.fetch import ConsumedBytes
from proxy.reporting.usage_log import UsageLog
from proxy.state.quota_service import QuotaService
from quotas.config import QuotaType

Acknowledged = frozenset[tuple[bytes, int]]
"""(topic id, partition) of the request's acknowledgements."""


class ShareFetchHandler:
    def __init__(self, quotas: QuotaService, usage: UsageLog, topic_names: TopicNames) -> None:
        self._quotas = quotas
        self._consumed = ConsumedBytes(quotas, usage, topic_names)

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        user = caller.user
        client_id = header.client_id or ""
        window = self._quotas.fetch.fetch_window(user, client_id)
        per_topic = self._quotas.config.configures_topics(QuotaType.CONSUMER_BYTE_RATE)
        if window is None and not per_topic:
            return FORWARD
        version = header.api_version
        request = decode_request(Api.SHARE_FETCH, version, frame[header.length:])
        if per_topic:  # a share session's answer may hold any of its topics: the smallest window of those named
            names = self._consumed.names(topic.topic_id.bytes for topic in request.topics if topic.topic_id)
            topic_window = self._quotas.fetch_topics.fetch_topics_window(user, names)
            if topic_window is not None:
                window = topic_window.narrowed(window)
        cap = None if window is None else window.cap_bytes
        replacement = None
        if cap is not None and request.max_bytes > cap:
            request.max_bytes = int(min(cap, 2**31 - 1))
            request.min_bytes = min(request.min_bytes, request.max_bytes)
            replacement = replacement_request(frame, header, encode_request(Api.SHARE_FETCH, version, request))
        acknowledged = frozenset((topic.topic_id.bytes, partition.partition_index) for topic in request.topics
                                 if topic.topic_id for partition in topic.partitions
                                 if partition.acknowledgement_batches)

        def charge(response_start: memoryview, response_bytes: int) -> ChargedResponse:
            body = response_start[response_header_length(response_start, True):]
            answer = decode_response(Api.SHARE_FETCH, version, body)  # read whole (``OnResponse.read_whole``)
            if answer.error_code:
                return ChargedResponse(0)
            size = fetch_response_size(response_start, response_bytes, True)
            admitted, throttle_ms = self._consumed.charge(caller, client_id, size,
                                                          (lambda: _topic_bytes(answer)) if per_topic else None)
            if admitted:
                return ChargedResponse(throttle_ms)
            return ChargedResponse(throttle_ms, throttled_share_fetch_answer(
                version, max(throttle_ms, answer.throttle_time_ms), answer, acknowledged))

        return Forward(replacement=replacement, on_response=OnResponse(charge=charge, read_whole=True))


def _topic_bytes(answer: Any) -> dict[TopicRef, int]:
    return {topic.topic_id.bytes: sum(len(partition.records or b"") for partition in topic.partitions)
            for topic in answer.responses if topic.topic_id}


def throttled_share_fetch_answer(version: int, throttle_ms: int, upstream: Any, acknowledged: Acknowledged) -> bytes:
    """Kafka's answer to a ShareFetch it throttles (``ShareFetchContext.throttleResponse``: no error, no records),
    with the cluster's results of the request's acknowledgements merged in, as ``KafkaApis`` merges them."""
    topic_class = response_class(Api.SHARE_FETCH).ShareFetchableTopicResponse
    partition_class = topic_class.PartitionData
    topics = []
    for topic in upstream.responses:
        results = [partition_class(partition_index=partition.partition_index, error_code=0,
                                   acknowledge_error_code=partition.acknowledge_error_code,
                                   acknowledge_error_message=partition.acknowledge_error_message,
                                   current_leader=partition_class.LeaderIdAndEpoch(leader_id=0, leader_epoch=0),
                                   records=b"", acquired_records=[])
                   for partition in topic.partitions
                   if topic.topic_id and (topic.topic_id.bytes, partition.partition_index) in acknowledged]
        if results:
            topics.append(topic_class(topic_id=topic.topic_id, partitions=results))
    return encode_response(Api.SHARE_FETCH, version, {"throttle_time_ms": throttle_ms, "error_code": 0,
                                                      "error_message": None, "acquisition_lock_timeout_ms": 0,
                                                      "responses": topics, "node_endpoints": []})
