"""Topic ids named from the cluster's metadata, for the topic quotas of requests naming topics by id."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable

import pytest

from proxy.cluster import topic_names
from proxy.cluster.topic_names import TopicNames

ORDERS, CLICKS, GONE = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)
CLUSTER = {ORDERS: "orders", CLICKS: "clicks"}


class Cluster:
    """The cluster's answers, counted; ``gate`` holds each until set."""

    def __init__(self) -> None:
        self.asked: list[set[uuid.UUID]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.refusing = False

    async def topics_by_id(self, topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]:
        wanted = set(topic_ids)
        self.asked.append(wanted)
        await self.gate.wait()
        if self.refusing:
            raise ConnectionRefusedError("the cluster is down")
        return {topic_id: (CLUSTER[topic_id], 1) for topic_id in wanted if topic_id in CLUSTER}


def test_connections_waiting_for_the_same_ids_share_one_lookup() -> None:
    async def run() -> tuple[Cluster, TopicNames]:
        cluster = Cluster()
        names = TopicNames(cluster.topics_by_id)
        cluster.gate.clear()
        waiting = [asyncio.ensure_future(names.look_up([ORDERS.bytes])) for _ in range(5)]
        later = asyncio.ensure_future(names.look_up([ORDERS.bytes, CLICKS.bytes]))
        await asyncio.sleep(0)
        cluster.gate.set()
        await asyncio.gather(*waiting, later)
        return cluster, names

    cluster, names = asyncio.run(run())
    # the one that also wanted clicks came before the lookup was sent: it joined it
    assert cluster.asked == [{ORDERS, CLICKS}]
    assert (names.name(ORDERS.bytes), names.name(CLICKS.bytes)) == ("orders", "clicks")
    assert names.unknown([ORDERS.bytes, GONE.bytes]) == {GONE.bytes}


class FakeTime:
    """The lookups' clock, moved on by their waits (``asyncio.sleep`` in ``topic_names``), which it records."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 100.0
        self.waits: list[float] = []
        monkeypatch.setattr(topic_names.asyncio, "sleep", self.sleep)

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_an_id_the_cluster_lacks_or_cannot_name_stays_unnamed_and_is_asked_again_a_second_later(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeTime(monkeypatch)

    async def run() -> tuple[Cluster, TopicNames]:
        cluster = Cluster()
        names = TopicNames(cluster.topics_by_id, clock=clock)
        await names.look_up([GONE.bytes])
        cluster.refusing = True
        await names.look_up([ORDERS.bytes])
        cluster.refusing = False
        await names.look_up([ORDERS.bytes])
        return cluster, names

    cluster, names = asyncio.run(run())
    assert cluster.asked == [{GONE}, {ORDERS}, {ORDERS}]
    assert clock.waits == [1.0, 1.0]  # a made-up id asked over and over costs the cluster one Metadata a second
    assert names.name(GONE.bytes) is None and names.name(ORDERS.bytes) == "orders"
    assert "cannot name 1 topic id(s) for the topic quotas: the cluster is down" in caplog.text


def test_an_id_the_cluster_lacks_is_known_missing_and_one_it_could_not_be_asked_about_is_not() -> None:
    """The refused topics tell them apart: the cluster answers a missing id itself, a lookup that failed leaves the
    id's topic unjudged."""
    async def run() -> TopicNames:
        cluster = Cluster()
        names = TopicNames(cluster.topics_by_id, clock=lambda: 0.0)
        await names.look_up([GONE.bytes])
        cluster.refusing = True
        await names.look_up([ORDERS.bytes])
        return names

    names = asyncio.run(run())
    assert names.missing(GONE.bytes) and names.name(ORDERS.bytes) is None and not names.missing(ORDERS.bytes)


def test_the_names_kept_are_bounded_least_recently_used_first() -> None:
    names = TopicNames(Cluster().topics_by_id, capacity=2)
    names.learn(b"a" * 16, "a")
    names.learn(b"b" * 16, "b")
    assert names.name(b"a" * 16) == "a"  # used: b is now the oldest
    names.learn(b"c" * 16, "c")
    assert names.unknown([b"a" * 16, b"b" * 16, b"c" * 16]) == {b"b" * 16}
