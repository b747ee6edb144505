"""The proxy's own client of one single-partition topic on the cluster: the fleet's shared engine.

The fleet publishes usage to a topic and claims producer-ID blocks from another; both need only
partition 0, so this client knows its leader (Metadata with topic ids, Kafka 2.8+), keeps
one connection to it (TLS and the proxy's SASL login as configured) and sends one request at a time
on it. Any failure closes that connection and forgets the leader: the next call looks it up again,
so a restarted or moved leader costs one failed call, which the caller retries.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from protocol.apis import Api
from protocol.errors import COORDINATOR_LOAD_IN_PROGRESS
from proxy.cluster.upstream import UpstreamAccess, exchange, fetch_metadata, open_upstream, request_any
from proxy.settings.config import HostPort

PARTITION = 0
_CREATE_TOPICS_VERSION = 5
_PRODUCE_VERSION = 7
_FETCH_VERSION = 11
_LIST_OFFSETS_VERSION = 5
_INIT_PRODUCER_ID_VERSION = 4  # Kafka 2.7+
TOPIC_ALREADY_EXISTS = 36
_INIT_PRODUCER_ID_BACKOFF_S = 0.05
_RETRIABLE_PRODUCE_ERRORS = frozenset({
    6,   # NOT_LEADER_OR_FOLLOWER
    7,   # REQUEST_TIMED_OUT
    19,  # NOT_ENOUGH_REPLICAS
    20,  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
})
_SEQUENCE_LOST_ERRORS = frozenset({
    45,  # OUT_OF_ORDER_SEQUENCE_NUMBER
    59,  # UNKNOWN_PRODUCER_ID
    90,  # PRODUCER_FENCED
})
LATEST = -1
RecordHeaders = list[tuple[str, bytes]]
"""A record's headers: names and values."""
_RECORD_OVERHEAD_BYTES = 32
"""More than a record (or a header) takes beside its bytes: lengths and deltas as varints."""


class ClusterError(OSError):
    """The cluster answered with an error, or not as expected (an OSError: callers treat it as unreachable)."""

    def __init__(self, message: str, error_code: int = -1) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True)
class TopicPartition0:
    topic_id: uuid.UUID | None
    """None when the cluster does not report topic ids (before Kafka 2.8)."""
    leader: HostPort


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp_ms: int
    value: bytes
    key: bytes | None = None


@dataclass(frozen=True)
class Fetched:
    records: list[Record]
    next_offset: int
    """The offset to ask next."""
    high_watermark: int
    """The partition's end, as far as consumers may read: ``next_offset`` has reached it once read up."""


@dataclass
class _IdempotentState:
    producer_id: int
    epoch: int
    sequence: int = 0


class ClusterClient:
    """Partition 0 of ``topic``: metadata, creation, produce (optionally idempotent, acks=all), fetch."""

    def __init__(self, bootstrap: tuple[HostPort, ...], topic: str, access: UpstreamAccess, timeout_s: float,
                 max_frame_bytes: int) -> None:
        self.topic = topic
        self._bootstrap = bootstrap
        self._access = access
        self._timeout_s = timeout_s
        self._max_frame_bytes = max_frame_bytes
        self._partition: TopicPartition0 | None = None
        self._connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._turn = asyncio.Lock()
        self._idempotent: _IdempotentState | None = None

    async def describe(self) -> TopicPartition0 | None:
        """The topic's id and partition 0's leader, or None when the topic does not exist."""
        response = await fetch_metadata(self._bootstrap, [self.topic], self._timeout_s, self._max_frame_bytes,
                                        self._access, topic_ids=True)
        brokers = {broker.node_id: HostPort(broker.host, broker.port) for broker in response.brokers}
        for topic in response.topics:
            if topic.name != self.topic:
                continue
            if topic.error_code == 3:  # UNKNOWN_TOPIC_OR_PARTITION
                return None
            if topic.error_code:
                raise ClusterError(f"metadata of {self.topic}: error {topic.error_code}", topic.error_code)
            for partition in topic.partitions:
                if partition.partition_index == PARTITION and partition.leader_id in brokers:
                    topic_id = uuid.UUID(str(topic.topic_id)) if topic.topic_id else None
                    return TopicPartition0(None if topic_id == uuid.UUID(int=0) else topic_id,
                                           brokers[partition.leader_id])
            raise ClusterError(f"{self.topic} partition {PARTITION} has no leader the cluster names")
        return None

    async def create(self, configs: Mapping[str, str]) -> bool:
        """Create the topic with one partition; False when it already existed."""
        response = await request_any(self._bootstrap, Api.CREATE_TOPICS, _CREATE_TOPICS_VERSION, {
            "topics": [{"name": self.topic, "num_partitions": 1, "replication_factor": -1, "assignments": [],
                        "configs": [{"name": name, "value": value} for name, value in configs.items()]}],
            "timeout_ms": int(self._timeout_s * 1000), "validate_only": False},
            self._timeout_s, self._max_frame_bytes, self._access)
        error_code = response.topics[0].error_code
        if error_code == TOPIC_ALREADY_EXISTS:
            return False
        if error_code:
            raise ClusterError(f"cannot create {self.topic}: error {error_code} "
                               f"{response.topics[0].error_message or ''}".rstrip(), error_code)
        return True

    async def ensure(self, configs: Mapping[str, str]) -> TopicPartition0:
        """The topic, created first if missing."""
        partition = await self.describe()
        if partition is None:
            await self.create(configs)
            for _ in range(50):  # a new topic's leader is elected shortly after creation
                partition = await self.describe()
                if partition is not None:
                    break
                await asyncio.sleep(0.1)
            else:
                raise ClusterError(f"{self.topic} was created but has no leader yet")
        return partition

    async def produce(self, values: Sequence[bytes], idempotent: bool = False,
                      keys: Sequence[bytes] | None = None, headers: Sequence[RecordHeaders] | None = None) -> int:
        """Append ``values`` (with ``keys``, for a compacted topic, and ``headers``) as one batch, acks=all; the offset
        of the first. Idempotent: a retried batch (same producer id and sequence) is stored once and answered with its
        first offset."""
        if idempotent and self._idempotent is None:
            self._idempotent = await self._init_producer_id()
        state = self._idempotent if idempotent else None
        batch = _record_batch(values, state, keys, headers)
        response = await self._call(Api.PRODUCE, _PRODUCE_VERSION, {
            "transactional_id": None, "acks": -1, "timeout_ms": int(self._timeout_s * 1000),
            "topic_data": [{"name": self.topic, "partition_data": [{"index": PARTITION, "records": batch}]}]})
        answer = response.responses[0].partition_responses[0]
        if answer.error_code:
            if answer.error_code in _SEQUENCE_LOST_ERRORS:
                self._idempotent = None  # a new producer id starts its sequences again
            if answer.error_code in _RETRIABLE_PRODUCE_ERRORS:
                self._forget_leader()
            raise ClusterError(f"produce to {self.topic}: error {answer.error_code}", answer.error_code)
        if state is not None:
            state.sequence = (state.sequence + len(values)) & 0x7FFFFFFF
        if answer.base_offset < 0:  # with acks=all a stored batch has an offset; a block number must be one
            raise ClusterError(f"produce to {self.topic}: no offset in the answer ({answer.base_offset})")
        return int(answer.base_offset)

    async def fetch(self, offset: int, max_wait_ms: int, max_bytes: int) -> Fetched:
        """Records from ``offset`` on (waiting up to ``max_wait_ms`` for some), the offset to ask next, and
        the partition's high watermark."""
        response = await self._call(Api.FETCH, _FETCH_VERSION, {
            "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": self.topic, "partitions": [{
                "partition": PARTITION, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
                "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}, extra_wait_s=max_wait_ms / 1000)
        answer = response.responses[0].partitions[0]
        if answer.error_code:
            raise ClusterError(f"fetch from {self.topic} at {offset}: error {answer.error_code}", answer.error_code)
        records: list[Record] = []
        next_offset = offset
        if answer.records:
            batches = MemoryRecords(bytes(answer.records))
            while (batch := batches.next_batch()) is not None:
                for record in batch:
                    if record.offset >= offset and record.value is not None:
                        key = None if record.key is None else bytes(record.key)
                        records.append(Record(record.offset, record.timestamp, bytes(record.value), key))
                # a compacted topic's batch may end past its last kept record: read on from the batch's end
                next_offset = max(next_offset, batch.next_offset)
        return Fetched(records, next_offset, int(answer.high_watermark))

    async def offset_at(self, timestamp_ms: int) -> int:
        """The first offset at or after ``timestamp_ms`` (or LATEST), the end when none is."""
        response = await self._call(Api.LIST_OFFSETS, _LIST_OFFSETS_VERSION, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": self.topic, "partitions": [{
                "partition_index": PARTITION, "current_leader_epoch": -1, "timestamp": timestamp_ms}]}]})
        answer = response.topics[0].partitions[0]
        if answer.error_code:
            raise ClusterError(f"list offsets of {self.topic}: error {answer.error_code}", answer.error_code)
        if answer.offset < 0:
            return await self.offset_at(LATEST)
        return int(answer.offset)

    def close(self) -> None:
        if self._connection is not None:
            self._connection[1].close()
            self._connection = None

    async def _init_producer_id(self) -> _IdempotentState:
        """A producer id from the leader. A Kafka broker answers COORDINATOR_LOAD_IN_PROGRESS while it
        fetches a block of IDs from its controller (at its first idempotent producer): asked again, as
        Kafka's own producer does, until the timeout."""
        async with asyncio.timeout(self._timeout_s):
            while True:
                response = await self._call(Api.INIT_PRODUCER_ID, _INIT_PRODUCER_ID_VERSION,
                                            {"transactional_id": None, "transaction_timeout_ms": 60_000,
                                             "producer_id": -1, "producer_epoch": -1})
                if response.error_code != COORDINATOR_LOAD_IN_PROGRESS:
                    break
                await asyncio.sleep(_INIT_PRODUCER_ID_BACKOFF_S)
        if response.error_code:
            raise ClusterError(f"InitProducerId for {self.topic}: error {response.error_code}", response.error_code)
        return _IdempotentState(response.producer_id, response.producer_epoch)

    async def _call(self, api_key: int, api_version: int, message: dict[str, Any], extra_wait_s: float = 0.0) -> Any:
        async with self._turn:
            try:
                async with asyncio.timeout(self._timeout_s + extra_wait_s):
                    reader, writer = await self._connect()
                    return await exchange(reader, writer, api_key, api_version, message, self._max_frame_bytes)
            except BaseException:
                self._forget_leader()
                raise

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._connection is None:
            if self._partition is None:
                partition = await self.describe()
                if partition is None:
                    raise ClusterError(f"topic {self.topic} does not exist", 3)
                self._partition = partition
            self._connection = await open_upstream(self._partition.leader, self._access, self._max_frame_bytes)
        return self._connection

    def _forget_leader(self) -> None:
        self.close()
        self._partition = None


def _record_batch(values: Sequence[bytes], state: _IdempotentState | None, keys: Sequence[bytes] | None,
                  headers: Sequence[RecordHeaders] | None) -> bytes:
    """One batch of every record given (kafka-python's builder refuses a record past its size, by returning None)."""
    size = sum(map(len, values)) + sum(map(len, keys or ())) + _RECORD_OVERHEAD_BYTES * len(values) + sum(
        len(name) + len(value) + _RECORD_OVERHEAD_BYTES for record in headers or () for name, value in record)
    builder = MemoryRecordsBuilder(
        magic=2, compression_type=0, batch_size=max(1 << 16, 2 * size),
        producer_id=-1 if state is None else state.producer_id,
        producer_epoch=-1 if state is None else state.epoch,
        base_sequence=-1 if state is None else state.sequence)
    now_ms = int(time.time() * 1000)
    for index, value in enumerate(values):
        if builder.append(now_ms, None if keys is None else keys[index], value,
                          None if headers is None else headers[index]) is None:
            raise ValueError(f"record {index} of {len(values)} does not fit a batch of {size} bytes")
    builder.close()
    return bytes(builder.buffer())
