"""What the mutation quota needs to know about the cluster: partition counts and ``num.partitions``.

Partition counts come from a Metadata request of the proxy's own for each mutation request (they
are rare, and a count read before another client created or deleted the topic would charge the
wrong amount): by name, or for topics named only by id, from the list of every topic with its id.
The cluster's ``num.partitions`` comes from DescribeConfigs on a broker and is cached; when the
cluster does not answer it, the configured default is used until a CreateTopics answer shows what
the cluster really created.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable

from protocol.apis import Api
from protocol.errors import UNKNOWN_TOPIC_OR_PARTITION
from proxy.cluster.upstream import UPSTREAM_ERRORS, UpstreamAccess, fetch_metadata, request_any
from proxy.settings.config import ProxyConfig

log = logging.getLogger(__name__)

NUM_PARTITIONS_TTL_S = 600.0
_DESCRIBE_CONFIGS_VERSION = 1
_BROKER_RESOURCE = 4


class ClusterInfo:
    def __init__(self, config: ProxyConfig, broker_ids: Callable[[], Iterable[int]], access: UpstreamAccess) -> None:
        self._config = config
        self._access = access
        self._broker_ids = broker_ids
        self._num_partitions: tuple[int, float] | None = None

    async def partitions(self, topics: list[str]) -> dict[str, int]:
        """Partition counts of ``topics`` (0 for topics the cluster does not have); raises
        ``UPSTREAM_ERRORS`` when the cluster cannot be asked."""
        if not topics:
            return {}
        config = self._config
        response = await fetch_metadata(config.upstream, topics, config.connect_timeout_s, config.max_frame_bytes,
                                        self._access)
        counts = dict.fromkeys(topics, 0)
        for topic in response.topics:
            if topic.error_code != UNKNOWN_TOPIC_OR_PARTITION:
                counts[topic.name] = len(topic.partitions)
        return counts

    async def topics_by_id(self, topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]:
        """Name and partition count of each of ``topic_ids`` the cluster has (absent: unknown)."""
        wanted = set(topic_ids)
        if not wanted:
            return {}
        config = self._config
        response = await fetch_metadata(config.upstream, None, config.connect_timeout_s, config.max_frame_bytes,
                                        self._access)
        return {topic.topic_id: (topic.name, len(topic.partitions)) for topic in response.topics
                if topic.topic_id in wanted and not topic.error_code}

    async def default_partitions(self) -> int:
        """The cluster's ``num.partitions``, or the configured default when it does not say."""
        cached = self._num_partitions
        if cached is not None and time.monotonic() - cached[1] < NUM_PARTITIONS_TTL_S:
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

    async def _describe_num_partitions(self) -> int | None:
        broker_ids = list(self._broker_ids())
        if not broker_ids:
            return None
        resource = {"resource_type": _BROKER_RESOURCE, "resource_name": str(broker_ids[0]),
                    "configuration_keys": ["num.partitions"]}
        try:
            response = await request_any(self._config.upstream, Api.DESCRIBE_CONFIGS, _DESCRIBE_CONFIGS_VERSION,
                                         {"resources": [resource], "include_synonyms": False},
                                         self._config.connect_timeout_s, self._config.max_frame_bytes,
                                         self._access)
        except UPSTREAM_ERRORS as error:
            log.warning("DescribeConfigs for num.partitions failed: %s", error or type(error).__name__)
            return None
        for result in response.results:
            for entry in result.configs if not result.error_code else ():
                if entry.name == "num.partitions" and entry.value is not None and entry.value.isdigit():
                    return int(entry.value)
        return None
