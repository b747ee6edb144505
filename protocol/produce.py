"""Produce requests read straight from the frame, never copying or decoding record data.

The scanner walks a Produce request (v3-v13) and reports, per topic and partition, where the
record batch lies in the frame and the batch-header fields quotas need (producer id, epoch,
sequence, attributes). Offsets of the batch header are SPEC §1's (Kafka's ``DefaultRecordBatch``).
A request that is well formed but carries a partition whose records are not exactly one magic-2
batch is scanned all the same: that partition reports the error Kafka's
``ProduceRequest.validateRecords`` gives it (INVALID_RECORD, or UNSUPPORTED_COMPRESSION_TYPE for
ZStandard before v7), and the broker answers it alone while the other partitions go on.
"""

from __future__ import annotations

from struct import Struct
from struct import error as StructError
from typing import NamedTuple

from protocol.apis import Api
from protocol.errors import INVALID_RECORD, UNSUPPORTED_COMPRESSION_TYPE, ProtocolError
from protocol.header import RequestHeader, read_uvarint, skip_tagged_fields

FIRST_FLEXIBLE_PRODUCE_VERSION = 9
FIRST_TOPIC_ID_PRODUCE_VERSION = 13
MIN_SCANNED_PRODUCE_VERSION = 3  # from v3 a partition carries exactly one magic-2 batch

_INT16 = Struct(">h")
_INT32 = Struct(">i")
_ACKS_TIMEOUT = Struct(">hi")
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_BATCH_HEADER = Struct(">qiibIhiqqqhii")
BATCH_HEADER_BYTES = _BATCH_HEADER.size  # 61
BATCH_LOG_OVERHEAD = 12  # baseOffset + batchLength precede what batchLength counts
NO_PRODUCER_ID = -1
FIRST_ZSTD_PRODUCE_VERSION = 7
ZSTD = 4

COMPRESSION_MASK = 0x07
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20


class RecordBatch(NamedTuple):
    """One record batch's header and where the batch lies in the frame."""

    start: int
    end: int
    batch_length: int
    magic: int
    attributes: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)


class PartitionData(NamedTuple):
    partition: int
    batch: RecordBatch | None
    """None when the partition's records are null or invalid."""
    error_code: int = 0
    """Non-zero when the records are not one valid batch (``ProduceRequest.validateRecords``)."""
    error_message: str | None = None


class TopicData(NamedTuple):
    name: str | None
    """Up to v12; v13 names topics by ``topic_id`` (16 bytes) instead."""
    topic_id: bytes | None
    partitions: tuple[PartitionData, ...]


class ProduceScan(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: tuple[TopicData, ...]

    def producer_ids(self) -> set[int]:
        """Producer IDs of the batches (idempotent or transactional ones only)."""
        return {partition.batch.producer_id for topic in self.topics for partition in topic.partitions
                if partition.batch is not None and partition.batch.producer_id != NO_PRODUCER_ID}

    @property
    def has_invalid_partitions(self) -> bool:
        return any(partition.error_code for topic in self.topics for partition in topic.partitions)


class _Reader:
    """A cursor over the frame that turns every overrun into a ProtocolError with its offset."""

    __slots__ = ("buf", "pos", "flexible", "version")

    def __init__(self, buf: bytes | memoryview, pos: int, version: int) -> None:
        self.buf = buf
        self.pos = pos
        self.version = version
        self.flexible = version >= FIRST_FLEXIBLE_PRODUCE_VERSION

    def fail(self, reason: str, offset: int | None = None) -> ProtocolError:
        return ProtocolError(reason, api_key=Api.PRODUCE, api_version=self.version,
                             offset=self.pos if offset is None else offset)

    def need(self, size: int, what: str) -> int:
        start = self.pos
        if size < 0 or start + size > len(self.buf):
            raise self.fail(f"{what} runs past the end of the frame")
        self.pos = start + size
        return start

    def int16(self, what: str) -> int:
        return int(_INT16.unpack_from(self.buf, self.need(2, what))[0])

    def int32(self, what: str) -> int:
        return int(_INT32.unpack_from(self.buf, self.need(4, what))[0])

    def length(self, what: str, classic: Struct) -> int:
        """A string/bytes/array length: -1 for null (classic int16/int32, or compact uvarint - 1)."""
        if self.flexible:
            pos = self.pos
            if pos < len(self.buf) and self.buf[pos] < 0x80:  # one-byte varint: the common case
                self.pos = pos + 1
                return int(self.buf[pos]) - 1
            try:
                length_plus_one, self.pos = read_uvarint(self.buf, self.pos)
            except ProtocolError:
                raise self.fail(f"{what} length truncated") from None
            return length_plus_one - 1
        return int(classic.unpack_from(self.buf, self.need(classic.size, what))[0])

    def string(self, what: str) -> str | None:
        size = self.length(what, _INT16)
        if size < 0:
            if size != -1:
                raise self.fail(f"{what} has negative length {size}")
            return None
        start = self.need(size, what)
        try:
            return bytes(self.buf[start:self.pos]).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8", start) from None

    def array_count(self, what: str) -> int:
        count = self.length(what, _INT32)
        if count < 0:
            raise self.fail(f"{what} is null or negative ({count})")
        return count

    def tagged_fields(self) -> None:
        if self.flexible:
            if self.pos < len(self.buf) and self.buf[self.pos] == 0:  # no tagged fields: the common case
                self.pos += 1
                return
            try:
                self.pos = skip_tagged_fields(self.buf, self.pos)
            except ProtocolError as error:
                raise self.fail(error.reason) from None


def scan_produce(frame: bytes | memoryview, header: RequestHeader) -> ProduceScan:
    """Scan a Produce request; ``frame`` excludes the size prefix, ``header`` was parsed from it."""
    version = header.api_version
    if not MIN_SCANNED_PRODUCE_VERSION <= version <= FIRST_TOPIC_ID_PRODUCE_VERSION:
        raise ProtocolError("Produce version outside the scanned range 3-13", api_key=Api.PRODUCE,
                            api_version=version, offset=0)
    reader = _Reader(frame, header.length, version)
    try:
        transactional_id = reader.string("transactional_id")
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, reader.need(_ACKS_TIMEOUT.size, "acks"))
        topics = tuple(_scan_topic(reader) for _ in range(reader.array_count("topic_data")))
        reader.tagged_fields()
    except StructError as error:  # need() bounds every read; this is a last resort
        raise reader.fail(f"truncated: {error}") from None
    if reader.pos != len(frame):
        raise reader.fail(f"{len(frame) - reader.pos} trailing bytes after the request")
    return ProduceScan(transactional_id, acks, timeout_ms, topics)


def _scan_topic(reader: _Reader) -> TopicData:
    name: str | None = None
    topic_id: bytes | None = None
    if reader.version >= FIRST_TOPIC_ID_PRODUCE_VERSION:
        start = reader.need(16, "topic_id")
        topic_id = bytes(reader.buf[start:reader.pos])
    else:
        name = reader.string("topic name")
    partitions = tuple(_scan_partition(reader) for _ in range(reader.array_count("partition_data")))
    reader.tagged_fields()
    return TopicData(name, topic_id, partitions)


def _scan_partition(reader: _Reader) -> PartitionData:
    partition = reader.int32("partition index")
    size = reader.length("records", _INT32)
    result = PartitionData(partition, None)
    if size >= 0:
        start = reader.need(size, "records")
        batch = _batch_header(reader.buf, start, size)
        problem = _batch_problem(batch, size, reader.version)
        result = PartitionData(partition, batch) if problem is None else PartitionData(partition, None, *problem)
    elif size != -1:
        raise reader.fail(f"records have negative length {size}")
    reader.tagged_fields()
    return result


def _batch_header(buf: bytes | memoryview, start: int, size: int) -> RecordBatch | None:
    if size < BATCH_HEADER_BYTES:
        return None
    (_base_offset, batch_length, _leader_epoch, magic, _crc, attributes, _last_delta, _base_ts, _max_ts,
     producer_id, producer_epoch, base_sequence, records_count) = _BATCH_HEADER.unpack_from(buf, start)
    return RecordBatch(start, start + size, batch_length, magic, attributes, producer_id, producer_epoch,
                       base_sequence, records_count)


def _batch_problem(batch: RecordBatch | None, size: int, version: int) -> tuple[int, str] | None:
    """Kafka's ``ProduceRequest.validateRecords``: the error code and message, or None when valid."""
    if batch is None or BATCH_LOG_OVERHEAD + batch.batch_length > size:
        return INVALID_RECORD, f"Produce requests with version {version} must have at least one record batch " \
                               "per partition"
    if batch.magic != 2:
        return INVALID_RECORD, f"Produce requests with version {version} are only allowed to contain record " \
                               "batches with magic version 2"
    if version < FIRST_ZSTD_PRODUCE_VERSION and batch.compression == ZSTD:
        return UNSUPPORTED_COMPRESSION_TYPE, f"Produce requests with version {version} are not allowed to use " \
                                             "ZStandard compression"
    if BATCH_LOG_OVERHEAD + batch.batch_length != size:
        return INVALID_RECORD, f"Produce requests with version {version} are only allowed to contain exactly " \
                               "one record batch per partition"
    return None


def produce_acks(frame: bytes | memoryview, header: RequestHeader) -> int:
    """``acks`` alone, reading only up to it (acks=0 requests get no response)."""
    reader = _Reader(frame, header.length, header.api_version)
    if header.api_version >= MIN_SCANNED_PRODUCE_VERSION:
        try:
            reader.string("transactional_id")
        except ProtocolError as error:
            raise reader.fail(f"Produce request truncated before acks: {error.reason}") from None
    if reader.pos + 2 > len(frame):
        raise reader.fail("Produce request truncated before acks")
    return reader.int16("acks")
