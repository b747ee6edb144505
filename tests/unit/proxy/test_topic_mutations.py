"""The mutation handler's decisions, with the cluster's answers supplied by a stand-in ClusterInfo."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from protocol.apis import Api
from protocol.codecs import decode_request, decode_response, encode_response
from protocol.header import read_request_header, response_header_length
from proxy.outcome import Caller, Outcome
from proxy.quota_service import QuotaService, now_ms
from proxy.topic_mutations import TopicMutationHandler
from proxy.usage_log import UsageLog
from tests.support import encode_request

THROTTLED = 89


class StubCluster:
    """What the cluster would say: partition counts and num.partitions (as ClusterInfo answers)."""

    def __init__(self, partitions: dict[str, int], num_partitions: int) -> None:
        self._partitions = partitions
        self._num_partitions = num_partitions
        self.asked: list[list[str]] = []

    def forget(self, topics: Any) -> None:
        list(topics)

    async def partitions(self, topics: list[str]) -> dict[str, int]:
        self.asked.append(topics)
        return {topic: self._partitions.get(topic, 0) for topic in topics}

    async def default_partitions(self) -> int:
        return self._num_partitions

    def learn_default_partitions(self, partitions: int) -> None:
        self._num_partitions = partitions


def handler(tmp_path: Path, cluster: StubCluster, rate: float = 2) -> tuple[TopicMutationHandler, UsageLog]:
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(f'[[quota]]\nclient-id = "limited"\ncontroller_mutation_rate = {rate}\n')
    usage = UsageLog(tmp_path / "usage")
    quotas = QuotaService(quota_file, CollectorRegistry())
    return TopicMutationHandler(quotas, cluster, usage), usage  # type: ignore[arg-type]


def decide(mutations: TopicMutationHandler, api_key: int, version: int, **fields: object) -> tuple[Outcome, bytes]:
    frame = encode_request(api_key, version, client_id="limited", **fields)
    decided = mutations(memoryview(frame)[4:], Caller("ANONYMOUS", now_ms()))
    if isinstance(decided, Awaitable):
        decided = asyncio.run(_wait(decided))
    assert isinstance(decided, Outcome)
    return decided, frame


async def _wait(decided: Awaitable[Outcome]) -> Outcome:
    return await decided


def forwarded_body(outcome: Outcome) -> Any:
    assert outcome.replacement is not None
    frame = memoryview(outcome.replacement)[4:]
    header = read_request_header(frame)
    return decode_request(header.api_key, header.api_version, frame[header.length:])


def local_body(outcome: Outcome, api_key: int, version: int) -> Any:
    assert outcome.local_response is not None
    frame = outcome.local_response[4:]
    return decode_response(api_key, version, frame[response_header_length(frame, flexible=True):])


def test_create_partitions_charges_new_minus_existing_and_cuts_refused_topics(tmp_path: Path) -> None:
    cluster = StubCluster({"a": 4, "b": 10, "c": 1}, num_partitions=3)
    mutations, usage = handler(tmp_path, cluster)
    topics = [{"name": "a", "count": 24, "assignments": None},  # 20: 22 -> 2
              {"name": "b", "count": 15, "assignments": None},  # 5: 2 -> -3
              {"name": "c", "count": 2, "assignments": None}]   # refused: the bucket is below zero
    outcome, _ = decide(mutations, Api.CREATE_PARTITIONS, 3, topics=topics, timeout_ms=1000, validate_only=False)
    assert cluster.asked == [["a", "b", "c"]]
    assert [t.name for t in forwarded_body(outcome).topics] == ["a", "b"]
    assert outcome.throttle_ms == 1500 and outcome.finish is not None
    upstream = encode_response(Api.CREATE_PARTITIONS, 3, {"throttle_time_ms": 0, "results": [
        {"name": "b", "error_code": 0, "error_message": None}, {"name": "a", "error_code": 0, "error_message": None}]})
    merged = decode_response(Api.CREATE_PARTITIONS, 3, outcome.finish(memoryview(upstream)))
    assert [(r.name, r.error_code) for r in merged.results] == [("a", 0), ("b", 0), ("c", THROTTLED)]
    assert merged.throttle_time_ms == 1500


def test_create_topics_with_the_cluster_default_partition_count(tmp_path: Path) -> None:
    mutations, _ = handler(tmp_path, StubCluster({}, num_partitions=12), rate=1)  # burst 11
    topics = [{"name": name, "num_partitions": -1, "replication_factor": -1, "assignments": [], "configs": []}
              for name in ("x", "y")]
    outcome, _ = decide(mutations, Api.CREATE_TOPICS, 7, topics=topics, timeout_ms=1000, validate_only=False)
    # x: 11 - 12 = -1, so y is refused
    assert [t.name for t in forwarded_body(outcome).topics] == ["x"]


def test_the_partitions_the_cluster_really_created_for_minus_one_are_charged(tmp_path: Path) -> None:
    cluster = StubCluster({}, num_partitions=1)  # what the proxy assumes (DescribeConfigs unanswered)
    mutations, _ = handler(tmp_path, cluster, rate=1)  # burst 11
    topic = {"name": "x", "num_partitions": -1, "replication_factor": -1, "assignments": [], "configs": []}
    outcome, _ = decide(mutations, Api.CREATE_TOPICS, 7, topics=[topic], timeout_ms=1000, validate_only=False)
    assert outcome.finish is not None  # 1 charged so far: 10 tokens left
    answer = encode_response(Api.CREATE_TOPICS, 7, {"throttle_time_ms": 0, "topics": [
        {"name": "x", "topic_id": None, "error_code": 0, "error_message": None, "num_partitions": 12,
         "replication_factor": 1, "configs": []}]})
    assert outcome.finish(memoryview(answer)) == answer
    # the cluster made 12: 11 more are charged (bucket at -1), and 12 is assumed from now on
    second, _ = decide(mutations, Api.CREATE_TOPICS, 7, topics=[dict(topic, name="y")], timeout_ms=1000,
                       validate_only=False)
    assert not second.forward and 900 <= second.throttle_ms <= 1000


def test_manual_assignments_count_as_partitions_and_all_refused_is_answered_locally(tmp_path: Path) -> None:
    mutations, _ = handler(tmp_path, StubCluster({}, num_partitions=1), rate=1)
    big = {"name": "big", "num_partitions": -1, "replication_factor": -1, "configs": [],
           "assignments": [{"partition_index": i, "broker_ids": [1]} for i in range(30)]}
    first, _ = decide(mutations, Api.CREATE_TOPICS, 7, topics=[big], timeout_ms=1000, validate_only=False)
    # strict (Kafka's StrictControllerMutationQuota): admitted whatever its size, no throttle until a refusal
    assert first.forward and first.replacement is None and first.throttle_ms == 0  # 11 - 30 = -19
    small = {"name": "small", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    second, _ = decide(mutations, Api.CREATE_TOPICS, 7, topics=[small], timeout_ms=1000, validate_only=False)
    assert not second.forward
    answer = local_body(second, Api.CREATE_TOPICS, 7)
    assert [(t.name, t.error_code) for t in answer.topics] == [("small", THROTTLED)]
    assert 18_900 <= answer.throttle_time_ms <= 19_000


def test_unlimited_clients_and_validate_only_are_not_decoded_or_charged(tmp_path: Path) -> None:
    cluster = StubCluster({"a": 100}, num_partitions=1)
    mutations, _ = handler(tmp_path, cluster)
    frame = encode_request(Api.DELETE_TOPICS, 6, client_id="free", timeout_ms=1000,
                           topics=[{"name": "a", "topic_id": None}])
    assert mutations(memoryview(frame)[4:], Caller("ANONYMOUS", now_ms())) == Outcome()
    for _ in range(3):
        outcome, _ = decide(mutations, Api.CREATE_PARTITIONS, 3, timeout_ms=1000, validate_only=True,
                            topics=[{"name": "a", "count": 500, "assignments": None}])
        assert outcome == Outcome()
    assert cluster.asked == []
