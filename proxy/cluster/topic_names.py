"""Topic ids to names, for the topic quotas and the refused topics of requests that name topics by id (Produce v13,
Fetch v13+, ShareFetch, ShareAcknowledge).

A topic quota is set by name; a request naming a topic by id is charged once the proxy knows the name. The
cache is filled from the cluster's metadata, asked for every topic at once when an id is missing: one request in
flight at a time, however many connections wait for it, and one a second at most (the ids wanted meanwhile join
the next), so a client naming made-up ids costs the cluster no more than that. An id the cluster does not have
stays unnamed: the cluster refuses such a topic (UNKNOWN_TOPIC_ID), so nothing of it is ever appended or read. An id
it could not be asked about stays unnamed too, but not known missing (``missing``): a topic that may be refused is
refused then, not let through unjudged.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable

from proxy.cluster.upstream import UPSTREAM_ERRORS

log = logging.getLogger(__name__)

MAX_TOPIC_NAMES = 200_000
"""Ids remembered, least recently used dropped first: the names of a cluster's topics (about 100 bytes each)."""
MAX_MISSING_IDS = 10_000
"""Ids the cluster said it does not have, remembered (least recently asked dropped first: a client may make them
up); one forgotten is as one never looked up."""

LOOKUP_INTERVAL_S = 1.0
"""The least time between the starts of two lookups."""

TopicsById = Callable[[Iterable[uuid.UUID]], Awaitable[dict[uuid.UUID, tuple[str, int]]]]
"""``ClusterInfo.topics_by_id``: name and partition count of each id the cluster has."""


class TopicNames:
    def __init__(self, topics_by_id: TopicsById, capacity: int = MAX_TOPIC_NAMES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._topics_by_id = topics_by_id
        self._capacity = capacity
        self._clock = clock
        self._names: OrderedDict[bytes, str] = OrderedDict()
        self._missing: OrderedDict[bytes, None] = OrderedDict()
        self._lookup: asyncio.Future[None] | None = None
        self._wanted: set[bytes] = set()
        self._asking = False
        """The lookup in flight has asked: the ids wanted now wait for the next."""
        self._next_ask = 0.0

    def name(self, topic_id: bytes) -> str | None:
        name = self._names.get(topic_id)
        if name is not None:
            self._names.move_to_end(topic_id)
        return name

    def missing(self, topic_id: bytes) -> bool:
        """The cluster said it has no topic of this id when last asked (not: it could not be asked)."""
        return topic_id in self._missing

    def unknown(self, topic_ids: Iterable[bytes]) -> set[bytes]:
        return {topic_id for topic_id in topic_ids if topic_id not in self._names}

    def learn(self, topic_id: bytes, name: str) -> None:
        self._names[topic_id] = name
        self._names.move_to_end(topic_id)
        while len(self._names) > self._capacity:
            self._names.popitem(last=False)

    async def look_up(self, topic_ids: Iterable[bytes]) -> None:
        """Ask the cluster for the names of ``topic_ids``: in the lookup not yet sent if there is one, else in the
        next. A cluster that cannot be asked leaves them unnamed, logged."""
        wanted = self.unknown(topic_ids)
        while wanted:
            if self._lookup is None:
                self._wanted = set(wanted)
                self._lookup = asyncio.ensure_future(self._ask())
            elif not self._asking:
                self._wanted |= wanted
            asked = self._wanted
            await asyncio.shield(self._lookup)
            wanted = self.unknown(wanted) - asked

    async def _ask(self) -> None:
        wait_s = self._next_ask - self._clock()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        self._asking = True
        self._next_ask = self._clock() + LOOKUP_INTERVAL_S
        wanted = self._wanted
        try:
            found = await self._topics_by_id(uuid.UUID(bytes=topic_id) for topic_id in wanted)
            for topic_id, (name, _) in found.items():
                self.learn(topic_id.bytes, name)
                self._missing.pop(topic_id.bytes, None)
            for topic_id_bytes in wanted - {topic_id.bytes for topic_id in found}:
                self._missing[topic_id_bytes] = None
                self._missing.move_to_end(topic_id_bytes)
            while len(self._missing) > MAX_MISSING_IDS:
                self._missing.popitem(last=False)
        except UPSTREAM_ERRORS as error:
            log.warning("cannot name %d topic id(s) for the topic quotas: %s", len(wanted),
                        error or type(error).__name__)
        finally:
            self._lookup = None
            self._asking = False
