"""What the mutation quota needs to know about the cluster: partition counts and ``num.partitions`` (and the
authorizer, ``auto.create.topics.enable``).

Partition counts come from a Metadata request of the proxy's own for each mutation request (they
are rare, and a count read before another client created or deleted the topic would charge the
wrong amount): by name, or for topics named only by id, from the list of every topic with its id.
A broker's metadata follows its controller by a moment, so a topic or a count this proxy has just
seen the cluster accept (CreateTopics, CreatePartitions) counts until the metadata shows it (for the
same topic id), and a topic it has seen deleted stops counting at once.
The cluster's ``num.partitions`` (and ``auto.create.topics.enable``) comes from DescribeConfigs on a broker and is
cached; when the cluster does not answer it, the configured default is used until a CreateTopics answer shows what
the cluster really created (and Kafka's default, true, for auto-creation).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from protocol.apis import Api
from protocol.errors import UNKNOWN_TOPIC_OR_PARTITION
from proxy.cluster.upstream import UPSTREAM_ERRORS, UpstreamAccess, fetch_metadata, request_any
from proxy.settings.config import ProxyConfig

log = logging.getLogger(__name__)

BROKER_CONFIG_TTL_S = 600.0
ACCEPTED_TTL_S = 60.0
"""How long a topic or partition count seen accepted waits for the metadata to show it (it takes milliseconds)."""
EVERY_TOPIC_LOOKUP_INTERVAL_S = 0.1
"""The least time between the starts of two lookups of every topic's name for clients (``every_topic_name``)."""
_DESCRIBE_CONFIGS_VERSION = 1
_BROKER_RESOURCE = 4


class TopicPartitions(NamedTuple):
    partitions: int
    """0 for a topic the cluster does not have."""
    topic_id: uuid.UUID | None = None
    shown: bool = True
    """The cluster's metadata shows it (not only what the proxy saw the cluster accept)."""


class ClusterInfo:
    def __init__(self, config: ProxyConfig, broker_ids: Callable[[], Iterable[int]], access: UpstreamAccess) -> None:
        self._config = config
        self._access = access
        self._broker_ids = broker_ids
        self._num_partitions: tuple[int, float] | None = None
        self._auto_creation: tuple[bool, float] | None = None
        self._every_topic_lookup = asyncio.Lock()
        self._every_topic_name: tuple[float, frozenset[str] | BaseException] | None = None
        """When the last lookup of every topic's name was started, and what it read (or why it could not)."""
        self._every_topic_name_asked = float("-inf")
        self._accepted: dict[str, tuple[uuid.UUID | None, int, float]] = {}
        """Topic name -> (topic id, partition count, when): topics and counts the cluster accepted that its
        metadata may not show yet: on Apache Kafka 4.3 a quick increase may be read one step behind, and a topic
        deleted right after its creation may not be there yet (measured in docs/benchmarks.md)."""

    async def partitions(self, topics: list[str]) -> dict[str, TopicPartitions]:
        """Partition counts and ids of ``topics``; raises ``UPSTREAM_ERRORS`` when the cluster cannot be asked."""
        if not topics:
            return {}
        config = self._config
        response = await fetch_metadata(config.upstream, topics, config.connect_timeout_s, config.max_frame_bytes,
                                        self._access, topic_ids=True)
        counts = {name: self._accepted_unshown(name) for name in topics}
        for topic in response.topics:
            if topic.error_code != UNKNOWN_TOPIC_OR_PARTITION:
                counts[topic.name] = TopicPartitions(self._at_least_accepted(topic.name, topic.topic_id,
                                                                             len(topic.partitions)), topic.topic_id)
        return counts

    def accepted(self, name: str, topic_id: uuid.UUID | None, count: int) -> None:
        """The cluster created the topic with ``count`` partitions (``topic_id`` None when its answer has no id, or
        the proxy did not know the topic it grew),
        or grew it to ``count`` (CreateTopics, CreatePartitions answered without error, not validate_only)."""
        now = time.monotonic()
        for stale in [topic for topic, (_, _, at) in self._accepted.items() if now - at > ACCEPTED_TTL_S]:
            del self._accepted[stale]
        if topic_id is None and name in self._accepted:  # an increase of a topic it saw created: the same topic
            topic_id = self._accepted[name][0]
        self._accepted[name] = (topic_id, count, now)

    def deleted(self, name: str) -> None:
        """The cluster deleted the topic: what it accepted for it before no longer counts."""
        self._accepted.pop(name, None)

    def _accepted_unshown(self, name: str) -> TopicPartitions:
        """What the cluster accepted for a topic its metadata does not show (yet): nothing, after the TTL."""
        accepted = self._accepted.get(name)
        if accepted is None or time.monotonic() - accepted[2] > ACCEPTED_TTL_S:
            return TopicPartitions(0)
        return TopicPartitions(accepted[1], accepted[0])

    def _at_least_accepted(self, name: str, topic_id: uuid.UUID, count: int) -> int:
        accepted = self._accepted.get(name)
        if accepted is None:
            return count
        if accepted[0] == topic_id and accepted[1] > count and time.monotonic() - accepted[2] <= ACCEPTED_TTL_S:
            return accepted[1]
        del self._accepted[name]  # the metadata caught up, or the name is another topic's now
        return count

    async def topics_by_id(self, topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]:
        """Name and partition count of each of ``topic_ids`` the cluster has (absent: unknown)."""
        wanted = set(topic_ids)
        if not wanted:
            return {}
        response = await self._every_topic_metadata()
        found = {topic.topic_id: (topic.name, self._at_least_accepted(topic.name, topic.topic_id,
                                                                      len(topic.partitions)))
                 for topic in response.topics if topic.topic_id in wanted and not topic.error_code}
        now = time.monotonic()
        found.update({topic_id: (name, count) for name, (topic_id, count, at) in self._accepted.items()
                      if topic_id in wanted and topic_id not in found and now - at <= ACCEPTED_TTL_S})
        return found

    async def every_topic(self) -> dict[str, TopicPartitions]:
        """Every topic the cluster has, with what it accepted that its metadata does not show yet; raises
        ``UPSTREAM_ERRORS`` when the cluster cannot be asked."""
        response = await self._every_topic_metadata()
        found = {topic.name: TopicPartitions(self._at_least_accepted(topic.name, topic.topic_id,
                                                                     len(topic.partitions)), topic.topic_id)
                 for topic in response.topics if not topic.error_code}
        now = time.monotonic()
        found.update({name: TopicPartitions(count, topic_id, shown=False)
                      for name, (topic_id, count, at) in self._accepted.items()
                      if name not in found and now - at <= ACCEPTED_TTL_S})
        return found

    async def every_topic_name(self) -> frozenset[str]:
        """The names of every topic the cluster has (``every_topic``), for a client's request, read by a lookup that
        started after the request came: one at a time, and one every ``EVERY_TOPIC_LOOKUP_INTERVAL_S`` at most,
        which the requests waiting for it share, so a flood of them costs the cluster no more than that; raises
        ``UPSTREAM_ERRORS`` when the cluster cannot be asked."""
        came = time.monotonic()
        async with self._every_topic_lookup:
            if self._every_topic_name is None or self._every_topic_name[0] < came:
                wait_s = self._every_topic_name_asked + EVERY_TOPIC_LOOKUP_INTERVAL_S - time.monotonic()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                asked = self._every_topic_name_asked = time.monotonic()
                try:
                    self._every_topic_name = (asked, frozenset(await self.every_topic()))
                except UPSTREAM_ERRORS as error:  # the requests that waited for this lookup fail with it
                    self._every_topic_name = (asked, error)
            found = self._every_topic_name[1]
        if isinstance(found, BaseException):
            raise found
        return found

    async def _every_topic_metadata(self) -> Any:
        config = self._config
        return await fetch_metadata(config.upstream, None, config.connect_timeout_s, config.max_frame_bytes,
                                    self._access)

    async def default_partitions(self) -> int:
        """The cluster's ``num.partitions``, or the configured default when it does not say."""
        cached = self._num_partitions
        if cached is not None and time.monotonic() - cached[1] < BROKER_CONFIG_TTL_S:
            return cached[0]
        value = await self._describe_num_partitions()
        if value is None:
            value = self._config.default_num_partitions
            log.info("the cluster did not report num.partitions; charging %d partition(s) for num_partitions=-1",
                     value)
        self._num_partitions = (value, time.monotonic())
        return value

    def learn_default_partitions(self, partitions: int) -> None:
        """A topic created with ``num_partitions = -1`` got ``partitions``: that is the cluster's default."""
        if self._num_partitions is None or self._num_partitions[0] != partitions:
            log.info("the cluster creates %d partition(s) for num_partitions=-1", partitions)
        self._num_partitions = (partitions, time.monotonic())

    async def auto_creates_topics(self) -> bool:
        """The cluster's ``auto.create.topics.enable`` (Kafka's default, true, when it does not say)."""
        cached = self._auto_creation
        if cached is not None and time.monotonic() - cached[1] < BROKER_CONFIG_TTL_S:
            return cached[0]
        value = await self._describe_broker_config("auto.create.topics.enable")
        self._auto_creation = (value != "false", time.monotonic())
        return self._auto_creation[0]

    async def _describe_num_partitions(self) -> int | None:
        value = await self._describe_broker_config("num.partitions")
        return int(value) if value is not None and value.isdigit() else None

    async def _describe_broker_config(self, name: str) -> str | None:
        """A broker's value of ``name``; None when the cluster does not say."""
        broker_ids = list(self._broker_ids())
        if not broker_ids:
            return None
        resource = {"resource_type": _BROKER_RESOURCE, "resource_name": str(broker_ids[0]),
                    "configuration_keys": [name]}
        try:
            response = await request_any(self._config.upstream, Api.DESCRIBE_CONFIGS, _DESCRIBE_CONFIGS_VERSION,
                                         {"resources": [resource], "include_synonyms": False},
                                         self._config.connect_timeout_s, self._config.max_frame_bytes,
                                         self._access)
        except UPSTREAM_ERRORS as error:
            log.warning("DescribeConfigs for %s failed: %s", name, error or type(error).__name__)
            return None
        for result in response.results:
            for entry in result.configs if not result.error_code else ():
                if entry.name == name and entry.value is not None:
                    return str(entry.value)
        return None
