"""ClusterInfo's partition counts, with the cluster's Metadata answers supplied by the test."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.cluster import info
from proxy.cluster.info import ClusterInfo, TopicPartitions
from proxy.cluster.upstream import UpstreamAccess
from proxy.settings.config import HostPort, ProxyConfig

TOPIC_ID = uuid.uuid4()


UNKNOWN_TOPIC_OR_PARTITION = 3


class Metadata:
    """The cluster's answers, one topic ``t``: its partition count and id as the test sets them (0 partitions:
    not there)."""

    def __init__(self, partitions: int, topic_id: uuid.UUID = TOPIC_ID) -> None:
        self.partitions = partitions
        self.topic_id = topic_id

    async def __call__(self, *_: Any, **__: Any) -> Any:
        if not self.partitions:
            topic = SimpleNamespace(name="t", topic_id=uuid.UUID(int=0), error_code=UNKNOWN_TOPIC_OR_PARTITION,
                                    partitions=[])
        else:
            topic = SimpleNamespace(name="t", topic_id=self.topic_id, error_code=0, partitions=[0] * self.partitions)
        return SimpleNamespace(topics=[topic])


@pytest.fixture
def metadata(monkeypatch: pytest.MonkeyPatch) -> Metadata:
    answers = Metadata(4)
    monkeypatch.setattr(info, "fetch_metadata", answers)
    return answers


def counted(cluster: ClusterInfo) -> TopicPartitions:
    return asyncio.run(cluster.partitions(["t"]))["t"]


def cluster_info() -> ClusterInfo:
    config = ProxyConfig(upstream=(HostPort("127.0.0.1", 9),), listen=HostPort("127.0.0.1", 9092),
                         advertised_host="127.0.0.1", broker_port_base=9100)
    return ClusterInfo(config, lambda: [], UpstreamAccess(None, None))


def test_a_count_the_cluster_accepted_counts_until_its_metadata_shows_it(metadata: Metadata) -> None:
    cluster = cluster_info()
    assert counted(cluster) == TopicPartitions(4, TOPIC_ID)
    cluster.accepted("t", TOPIC_ID, 8)
    assert counted(cluster).partitions == 8  # the broker's metadata is a step behind its controller
    metadata.partitions = 8
    assert counted(cluster).partitions == 8
    metadata.partitions = 6  # caught up once: the metadata decides from now on
    assert counted(cluster).partitions == 6


def test_a_topic_made_again_under_the_same_name_is_not_given_the_old_count(metadata: Metadata) -> None:
    cluster = cluster_info()
    cluster.accepted("t", TOPIC_ID, 8)
    metadata.topic_id = uuid.uuid4()
    assert counted(cluster).partitions == 4


def test_a_topic_the_cluster_created_counts_until_its_metadata_shows_it_and_not_once_deleted(
        metadata: Metadata) -> None:
    """A topic deleted at once after its creation: the broker's metadata may not have it yet."""
    cluster = cluster_info()
    metadata.partitions = 0
    assert counted(cluster) == TopicPartitions(0)
    cluster.accepted("t", TOPIC_ID, 6)
    assert counted(cluster) == TopicPartitions(6, TOPIC_ID)
    assert asyncio.run(cluster.topics_by_id([TOPIC_ID])) == {TOPIC_ID: ("t", 6)}
    cluster.deleted("t")
    assert counted(cluster) == TopicPartitions(0)
    assert asyncio.run(cluster.topics_by_id([TOPIC_ID])) == {}


def test_what_the_cluster_accepted_is_forgotten_after_its_ttl(metadata: Metadata,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = cluster_info()
    metadata.partitions = 0
    cluster.accepted("t", None, 6)  # an answer before CreateTopics v7 has no topic id
    assert counted(cluster) == TopicPartitions(6)
    later = info.time.monotonic() + info.ACCEPTED_TTL_S + 1
    monkeypatch.setattr(info.time, "monotonic", lambda: later)
    assert counted(cluster) == TopicPartitions(0)


def test_clients_asking_for_every_topic_name_share_a_lookup_started_after_they_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A flood of all-topics DescribeTopicPartitions costs the cluster one lookup at a time, one every
    ``EVERY_TOPIC_LOOKUP_INTERVAL_S`` at most; each request gets names read after it came (a topic it has just
    created is there), and a lookup that fails fails every request that waited for it, not one after the other."""
    started: list[float] = []
    release = asyncio.Event()
    topics = ["t"]

    async def every_topic(*_: Any, **__: Any) -> Any:
        started.append(time.monotonic())
        there = list(topics)  # what the cluster has when asked
        await release.wait()
        if not there:
            raise ConnectionRefusedError("the cluster is down")
        return SimpleNamespace(topics=[SimpleNamespace(name=name, topic_id=TOPIC_ID, error_code=0, partitions=[0])
                                       for name in there])

    monkeypatch.setattr(info, "fetch_metadata", every_topic)
    cluster = cluster_info()

    async def clients() -> None:
        first = [asyncio.ensure_future(cluster.every_topic_name()) for _ in range(50)]
        await asyncio.sleep(0.01)
        topics.append("created")  # while the first lookup is in flight: the next requests must see it
        later = [asyncio.ensure_future(cluster.every_topic_name()) for _ in range(50)]
        await asyncio.sleep(0.01)
        release.set()
        # the first request's lookup started before the others came: they share the next
        assert await asyncio.gather(*first, *later) == [frozenset({"t"})] + [frozenset({"t", "created"})] * 99
        assert len(started) == 2 and started[1] - started[0] >= info.EVERY_TOPIC_LOOKUP_INTERVAL_S
        topics.clear()
        failed = await asyncio.gather(*[cluster.every_topic_name() for _ in range(50)], return_exceptions=True)
        assert len(started) == 3 and all(isinstance(error, ConnectionRefusedError) for error in failed)

    asyncio.run(clients())
