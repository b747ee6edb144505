"""Producer-ID blocks claimed through the cluster (``[allocator] pid_source = "cluster"``): no single allocator.

A proxy claims a block by producing one record, idempotently and with ``acks=all``, to a
single-partition topic; the offset the cluster gives that record is the block number, so the block
is ``first_id + offset x 1000 .. + 999`` and no two claims, by any proxy, can get the same one,
whatever fails (a retried claim is stored once by the idempotent producer; a lost answer wastes a
block, never repeats one). The block log keeps the local record of every claimed block, durable
before the block is used, and refuses a block below one it recorded.

Offsets start again at 0 when the topic is deleted and created again, which would hand out the
same blocks again. So the proxy remembers the topic id it claimed from in
``<state-dir>/pid-blocks-topic.json`` and refuses to claim from a topic with another id until an
operator confirms it with ``[allocator] blocks_topic_id`` (after raising ``first_id`` above every
ID the old topic handed out, for every proxy: the block log refuses blocks below its own record).
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

from allocator.block_log import BLOCK_SIZE
from allocator.durable import write_durably
from proxy.cluster.client import ClusterClient

log = logging.getLogger(__name__)

DEFAULT_BLOCKS_TOPIC = "__kafka_quota_proxy_pid_blocks"
GUARD_FILE = "pid-blocks-topic.json"


class BlocksTopicChanged(Exception):
    """The blocks topic is not the one this proxy claimed from before, and no operator confirmed it."""


class ClusterBlockClaims:
    def __init__(self, client: ClusterClient, state_dir: Path, first_id: int, confirmed_topic_id: str | None,
                 instance: str) -> None:
        self._client = client
        self._guard_path = state_dir / GUARD_FILE
        self._first_id = first_id
        self._confirmed = None if confirmed_topic_id is None else uuid.UUID(confirmed_topic_id)
        self._instance = instance
        self._checked_topic: uuid.UUID | None = None

    async def claim(self) -> int:
        """The first ID of a block claimed for this proxy alone."""
        partition = await self._client.ensure({})
        if partition.topic_id is None:
            raise BlocksTopicChanged(f"the cluster does not tell {self._client.topic}'s topic id (Kafka 2.8+ does): "
                                     "without it a recreated topic cannot be told apart")
        if partition.topic_id != self._checked_topic:
            self._check_topic(partition.topic_id)
        offset = await self._client.produce([json.dumps({"instance": self._instance}).encode()], idempotent=True)
        return self._first_id + offset * BLOCK_SIZE

    def _check_topic(self, topic_id: uuid.UUID) -> None:
        remembered = self._remembered_topic_id()
        if remembered is not None and remembered != topic_id:
            if topic_id != self._confirmed:
                raise BlocksTopicChanged(
                    f"{self._client.topic} now has topic id {topic_id}, but this proxy claimed producer-ID blocks "
                    f"from topic id {remembered}: a recreated topic's offsets start again and would hand out the "
                    f"same IDs. Raise [allocator] first_id above every ID handed out, then confirm with "
                    f'[allocator] blocks_topic_id = "{topic_id}"')
            log.warning("claiming producer-ID blocks from %s topic id %s (confirmed), no longer %s",
                        self._client.topic, topic_id, remembered)
        if remembered != topic_id:
            self._guard_path.parent.mkdir(parents=True, exist_ok=True)
            guard = {"topic": self._client.topic, "topic_id": str(topic_id)}
            write_durably(self._guard_path, json.dumps(guard).encode())
        self._checked_topic = topic_id

    def _remembered_topic_id(self) -> uuid.UUID | None:
        try:
            document = json.loads(self._guard_path.read_text(encoding="utf-8"))
            return uuid.UUID(document["topic_id"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as error:
            raise BlocksTopicChanged(f"{self._guard_path}: unreadable ({error}); it names the topic this proxy "
                                     "claimed producer-ID blocks from") from None
