"""Produce requests read straight from the frame, never copying or decoding record data.

The scanner walks a Produce request (v3-v13) and reports, per topic and partition, where the
record batch lies in the frame and the batch-header fields quotas need (producer id, epoch,
sequence, attributes). Offsets of the batch header are Kafka's ``DefaultRecordBatch``'s.
A request that is well formed but carries a partition whose records are not exactly one magic-2
batch is scanned all the same: that partition reports the error Kafka's
``ProduceRequest.validateRecords`` gives it (INVALID_RECORD, or UNSUPPORTED_COMPRESSION_TYPE for
ZStandard before v7), and the broker answers it alone while the other partitions go on.

The walk takes the frame in whatever pieces it comes (``StreamedProduceScan``): a request forwarded as it
arrives is scanned as it goes by, and the record data after each batch header is passed over, so it can
move from socket to socket without being read; ``scan_produce`` reads a whole frame, in one pass when every field
of it reads plainly (as clients encode requests), else by the same walk.
"""

from __future__ import annotations

from collections.abc import Generator
from struct import Struct
from struct import error as StructError
from typing import NamedTuple, TypeVar, cast

from protocol.apis import Api
from protocol.errors import INVALID_RECORD, UNSUPPORTED_COMPRESSION_TYPE, ProtocolError
from protocol.header import RequestHeader, read_uvarint

FIRST_FLEXIBLE_PRODUCE_VERSION = 9
FIRST_TOPIC_ID_PRODUCE_VERSION = 13
MIN_SCANNED_PRODUCE_VERSION = 3  # from v3 a partition carries exactly one magic-2 batch
NEWEST_SCANNED_PRODUCE_VERSION = 13
"""The newest Produce the scanner reads (Apache Kafka 4.3's newest): the proxy offers clients no newer one."""

_INT16 = Struct(">h")
_INT32 = Struct(">i")
_PARTITION_AND_SIZE = Struct(">ii")
_ACKS_TIMEOUT = Struct(">hi")
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount: those a RecordBatch keeps
# are read, the others passed over
_KEPT_BATCH_HEADER = Struct(">8xi4xb4xh4x8x8xqhii")
BATCH_HEADER_BYTES = _KEPT_BATCH_HEADER.size  # 61
_new_tuple = tuple.__new__
BATCH_LOG_OVERHEAD = 12  # baseOffset + batchLength precede what batchLength counts
NO_PRODUCER_ID = -1
FIRST_ZSTD_PRODUCE_VERSION = 7
ZSTD = 4

_T = TypeVar("_T")

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
    """None when the partition's records are null or invalid; kept, with INVALID_RECORD, when bytes follow a valid
    batch (``trailed_batches_appended``)."""
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
    def transactional(self) -> bool:
        """Some batch is transactional (Kafka's ``RequestUtils.hasTransactionalRecords``)."""
        return any(partition.batch is not None and partition.batch.transactional
                   for topic in self.topics for partition in topic.partitions)

    @property
    def has_invalid_partitions(self) -> bool:
        return any(partition.error_code for topic in self.topics for partition in topic.partitions)


class _Cursor:
    """The frame's bytes at hand and where the walk stands in them: ``buf[at:end]`` is frame bytes from offset
    ``base + at`` on (a whole frame, or the pieces of one that arrived so far)."""

    __slots__ = ("buf", "at", "end", "base", "version", "flexible")

    def __init__(self, buf: bytes | memoryview, at: int, version: int) -> None:
        self.buf = buf
        self.at = at
        self.end = len(buf)
        self.base = 0
        self.version = version
        self.flexible = version >= FIRST_FLEXIBLE_PRODUCE_VERSION

    @property
    def offset(self) -> int:
        return self.base + self.at

    def rebase(self, buf: bytes | memoryview) -> None:
        """``buf`` is now the bytes at hand, from where the walk stands on."""
        self.base += self.at
        self.buf, self.at, self.end = buf, 0, len(buf)

    def fail(self, reason: str, offset: int | None = None) -> ProtocolError:
        return ProtocolError(reason, api_key=Api.PRODUCE, api_version=self.version,
                             offset=self.offset if offset is None else offset)


_Walk = Generator[tuple[int, str], None, _T]
"""A walk over a Produce request's body, reading ``cursor.buf``. It yields ``(size, what)``: for ``size`` > 0
when fewer than ``size`` bytes are at hand (more are added to the cursor); for ``size`` < 0 when ``-size``
bytes of record data follow that it does not read (the cursor is moved past them). It returns what it read."""


def _take(cursor: _Cursor, size: int, what: str) -> _Walk[int]:
    """``size`` bytes at hand: where they start in ``cursor.buf``. Read ``cursor.buf`` only once this has
    returned: waiting for bytes may give the cursor another buffer."""
    while cursor.end - cursor.at < size:
        yield size, what
    start = cursor.at
    cursor.at = start + size
    return start


def _uvarint(cursor: _Cursor, what: str) -> _Walk[int]:
    result = shift = 0
    while True:
        at = yield from _take(cursor, 1, what)
        byte = cursor.buf[at]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        shift += 7
        if shift > 28:
            raise cursor.fail(f"{what}: varint longer than 5 bytes")


def _length(cursor: _Cursor, what: str, classic: Struct) -> _Walk[int]:
    """A string/bytes/array length: -1 for null (classic int16/int32, or compact uvarint - 1)."""
    if cursor.flexible:
        at = cursor.at
        if at < cursor.end and cursor.buf[at] < 0x80:  # one-byte varint: the common case
            cursor.at = at + 1
            return int(cursor.buf[at]) - 1
        return (yield from _uvarint(cursor, f"{what} length")) - 1
    at = yield from _take(cursor, classic.size, what)
    return int(classic.unpack_from(cursor.buf, at)[0])


def _string(cursor: _Cursor, what: str) -> _Walk[str | None]:
    size = yield from _length(cursor, what, _INT16)
    if size < 0:
        if size != -1:
            raise cursor.fail(f"{what} has negative length {size}")
        return None
    start = yield from _take(cursor, size, what)
    try:
        return bytes(cursor.buf[start:start + size]).decode("utf-8")
    except UnicodeDecodeError:
        raise cursor.fail(f"{what} is not UTF-8", cursor.base + start) from None


def _array_count(cursor: _Cursor, what: str) -> _Walk[int]:
    count = yield from _length(cursor, what, _INT32)
    if count < 0:
        raise cursor.fail(f"{what} is null or negative ({count})")
    return count


def _tagged_fields(cursor: _Cursor) -> _Walk[None]:
    if not cursor.flexible:
        return
    at = cursor.at
    if at < cursor.end and cursor.buf[at] == 0:  # no tagged fields: the common case
        cursor.at = at + 1
        return
    for _ in range((yield from _uvarint(cursor, "tagged fields"))):
        yield from _uvarint(cursor, "tag")
        yield from _take(cursor, (yield from _uvarint(cursor, "tagged field size")), "tagged field")


_NOT_AT_HAND = object()
"""What a field read in place gives when its bytes are not all at hand, or are wrong (a negative length, not UTF-8):
it is read by the walk then, which waits for bytes and says what is wrong."""


def _length_at_hand(cursor: _Cursor, classic: Struct) -> int | None:
    """A string/bytes/array length read in place: None when its bytes are not at hand."""
    at, buf = cursor.at, cursor.buf
    if cursor.flexible:
        if at < cursor.end and buf[at] < 0x80:  # a one-byte varint
            cursor.at = at + 1
            return int(buf[at]) - 1
        return None
    if cursor.end - at < classic.size:
        return None
    cursor.at = at + classic.size
    return int(classic.unpack_from(buf, at)[0])


def _string_at_hand(cursor: _Cursor) -> object:
    """A string (or None for null) read in place when it is all at hand and valid; else ``_NOT_AT_HAND``, the cursor
    where it was."""
    at = cursor.at
    size = _length_at_hand(cursor, _INT16)
    if size == -1:
        return None
    if size is None or size < 0 or cursor.end - cursor.at < size:
        cursor.at = at
        return _NOT_AT_HAND
    start = cursor.at
    try:
        text = str(cursor.buf[start:start + size], "utf-8")
    except UnicodeDecodeError:
        cursor.at = at
        return _NOT_AT_HAND
    cursor.at = start + size
    return text


def _count_at_hand(cursor: _Cursor) -> int | None:
    """An array's count read in place when at hand and not negative; else None, the cursor where it was."""
    at = cursor.at
    count = _length_at_hand(cursor, _INT32)
    if count is None or count < 0:
        cursor.at = at
        return None
    return count


def _walk_request(cursor: _Cursor) -> _Walk[ProduceScan]:
    # the fields are read in place when at hand (a whole request's always are), without a nested walk
    transactional_id = _string_at_hand(cursor)
    if transactional_id is _NOT_AT_HAND:
        transactional_id = yield from _string(cursor, "transactional_id")
    at = cursor.at
    if cursor.end - at >= _ACKS_TIMEOUT.size:
        cursor.at = at + _ACKS_TIMEOUT.size
    else:
        at = yield from _take(cursor, _ACKS_TIMEOUT.size, "acks")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(cursor.buf, at)
    topics = []
    topic_count = _count_at_hand(cursor)
    if topic_count is None:
        topic_count = yield from _array_count(cursor, "topic_data")
    for _ in range(topic_count):
        name: str | None = None
        topic_id: bytes | None = None
        if cursor.version >= FIRST_TOPIC_ID_PRODUCE_VERSION:
            start = yield from _take(cursor, 16, "topic_id")
            topic_id = bytes(cursor.buf[start:start + 16])
        else:
            read = _string_at_hand(cursor)
            name = (yield from _string(cursor, "topic name")) if read is _NOT_AT_HAND else cast(str | None, read)
            if name is None:  # not nullable: Kafka's parser refuses the request
                raise cursor.fail("topic name is null, which is not nullable")
        partitions = []
        partition_count = _count_at_hand(cursor)
        if partition_count is None:
            partition_count = yield from _array_count(cursor, "partition_data")
        for _ in range(partition_count):
            partitions.append((yield from _walk_partition(cursor)))
        yield from _tagged_fields(cursor)
        topics.append(TopicData(name, topic_id, tuple(partitions)))
    yield from _tagged_fields(cursor)
    return ProduceScan(cast(str | None, transactional_id), acks, timeout_ms, tuple(topics))


class ProduceTopicsHead(NamedTuple):
    transactional_id: str | None
    topic_count: int
    first_name: str | None
    first_topic_id: bytes | None
    """v13 names topics by id instead of name."""


def _walk_topics_head(cursor: _Cursor) -> _Walk[ProduceTopicsHead]:
    transactional_id = yield from _string(cursor, "transactional_id")
    yield from _take(cursor, _ACKS_TIMEOUT.size, "acks")
    count = yield from _array_count(cursor, "topic_data")
    if not count:
        return ProduceTopicsHead(transactional_id, 0, None, None)
    if cursor.version >= FIRST_TOPIC_ID_PRODUCE_VERSION:
        start = yield from _take(cursor, 16, "topic_id")
        return ProduceTopicsHead(transactional_id, count, None, bytes(cursor.buf[start:start + 16]))
    return ProduceTopicsHead(transactional_id, count, (yield from _string(cursor, "topic name")), None)


def produce_topics_head(frame_start: bytes | memoryview, header: RequestHeader) -> ProduceTopicsHead | None:
    """How many topics a Produce request names and its first, read from the request's start (a whole request, or
    the start of one being cut through); None when the start ends before them."""
    plain = _plain_topics_head(frame_start, header.length, header.api_version)
    if plain is not None:
        return plain
    walk = _walk_topics_head(_Cursor(frame_start, header.length, header.api_version))
    try:
        next(walk)
    except StopIteration as read:
        return cast(ProduceTopicsHead, read.value)
    return None


def _walk_partition(cursor: _Cursor) -> _Walk[PartitionData]:
    # the fields of every partition are read in place when at hand (the common case), without a nested walk
    at, buf = cursor.at, cursor.buf
    if cursor.end - at >= 9:  # the index and the records' size at hand (up to 5 bytes of varint when compact)
        if cursor.flexible:
            partition = _INT32.unpack_from(buf, at)[0]
            try:
                size, cursor.at = read_uvarint(buf, at + 4)
            except ProtocolError as error:
                raise cursor.fail(f"records length: {error.reason}", cursor.base + at + 4) from None
            size -= 1
        else:
            partition, size = _PARTITION_AND_SIZE.unpack_from(buf, at)
            cursor.at = at + 8
    else:
        at = yield from _take(cursor, 4, "partition index")
        partition = int(_INT32.unpack_from(cursor.buf, at)[0])
        size = yield from _length(cursor, "records", _INT32)
    result = PartitionData(partition, None)
    if size >= 0:
        start = cursor.offset
        batch = None
        if size >= BATCH_HEADER_BYTES:
            at = cursor.at
            if cursor.end - at >= BATCH_HEADER_BYTES:
                cursor.at = at + BATCH_HEADER_BYTES
            else:
                at = yield from _take(cursor, BATCH_HEADER_BYTES, "records")
            batch = _batch_header(cursor.buf, at, start, size)
            if size > BATCH_HEADER_BYTES:
                yield BATCH_HEADER_BYTES - size, "records"
        else:
            yield from _take(cursor, size, "records")
        problem = _batch_problem(batch, size, cursor.version)
        result = PartitionData(partition, batch) if problem is None else _invalid_partition(partition, batch, problem)
    elif size != -1:
        raise cursor.fail(f"records have negative length {size}")
    if cursor.flexible:
        at = cursor.at
        if at < cursor.end and cursor.buf[at] == 0:  # no tagged fields
            cursor.at = at + 1
        else:
            yield from _tagged_fields(cursor)
    return result


class StreamedProduceScan:
    """A Produce request (v3-v13) scanned as its bytes go by, in as many pieces as they come: only the
    structure and each batch's header are kept, so the record data after a batch header (``records_ahead``)
    need not be read at all (``skipped``). ``scan`` is the request's ``ProduceScan`` once the walk is done;
    a frame that does not hold a well-formed request raises ProtocolError as soon as that shows."""

    __slots__ = ("header", "scan", "_cursor", "_walk", "_fed", "_end", "_records")

    def __init__(self, header: RequestHeader, frame_bytes: int) -> None:
        """``frame_bytes``: the frame's size without its size prefix; the frame is fed from its first byte."""
        self.header = header
        self.scan: ProduceScan | None = None
        self._cursor = _Cursor(b"", 0, _scanned_version(header))
        self._cursor.base = header.length  # the walk starts after the header, parsed already
        self._walk = _walk_request(self._cursor)
        self._fed = 0
        """Offset in the frame of the next byte fed."""
        self._end = frame_bytes
        self._records = 0

    @property
    def records_ahead(self) -> int:
        """Record bytes coming next that nothing reads."""
        return self._records

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """The frame's next bytes, in order."""
        view = memoryview(data)
        cursor = self._cursor
        at = max(0, min(len(view), cursor.base - self._fed))  # the request header's bytes, parsed already
        self._fed += len(view)
        if self._records:
            taken = min(self._records, len(view) - at)
            at += taken
            self._records -= taken
            cursor.base += taken
            if self._records:
                return
        elif at == len(view) and self._fed < self._end:
            return
        if self.scan is not None:
            if at < len(view):
                raise cursor.fail(f"{self._end - cursor.offset} trailing bytes after the request")
            return
        # the walk reads the new bytes where they lie; what it leaves (part of a field) is kept
        cursor.rebase(view[at:] if cursor.at == cursor.end else bytes(cursor.buf[cursor.at:]) + view[at:])
        self._resume()
        if not isinstance(cursor.buf, bytes):  # the caller's buffer: keep a copy of what the walk left
            cursor.rebase(bytes(cursor.buf[cursor.at:]))

    def skipped(self, size: int) -> None:
        """``size`` bytes of ``records_ahead`` went by unread."""
        assert 0 < size <= self._records
        self._records -= size
        self._fed += size
        self._cursor.base += size
        if not self._records:
            self._resume()

    def _resume(self) -> None:
        """Walk on until the bytes at hand run out."""
        cursor = self._cursor
        while True:
            try:
                size, what = next(self._walk)
            except StopIteration as done:
                self.scan = done.value
                if cursor.offset != self._end:
                    raise cursor.fail(f"{self._end - cursor.offset} trailing bytes after the request") from None
                return
            if cursor.offset + abs(size) > self._end:
                raise cursor.fail(f"{what} runs past the end of the frame")
            if size > 0:
                return
            here = min(-size, cursor.end - cursor.at)  # record data passed over where it lies already
            cursor.at += here
            self._records = -size - here
            if self._records:
                return


def scan_produce(frame: bytes | memoryview, header: RequestHeader) -> ProduceScan:
    """Scan a whole Produce request; ``frame`` excludes the size prefix, ``header`` was parsed from it. A request
    every field of which reads plainly is read in one pass (``_plain_request``); any other is read by the same walk as
    ``StreamedProduceScan``'s, over bytes all at hand (a want of more is the frame's end), which says what is wrong."""
    version = _scanned_version(header)
    plain = _plain_request(frame, header.length, version)
    if plain is not None:
        return plain
    cursor = _Cursor(frame, header.length, version)
    walk = _walk_request(cursor)
    try:
        while True:
            size, what = next(walk)
            if size > 0 or cursor.end - cursor.at < -size:
                raise cursor.fail(f"{what} runs past the end of the frame")
            cursor.at -= size  # record data, passed over
    except StopIteration as done:
        if cursor.at != cursor.end:
            raise cursor.fail(f"{cursor.end - cursor.at} trailing bytes after the request") from None
        return cast(ProduceScan, done.value)


def _plain_request(buf: bytes | memoryview, at: int, version: int) -> ProduceScan | None:
    """The walk's scan of a whole request (the body from ``at`` to the end of ``buf``) read in one pass with no walk
    (no generator, no cursor: the proxy scans every Produce of a user with a producer-ID quota); None, and the walk
    reads it, when anything is not plain: a null or negative length where the walk refuses one, a compact string or
    array length of more than one byte, a tagged field, a field cut short, bytes left over."""
    flexible = version >= FIRST_FLEXIBLE_PRODUCE_VERSION
    end = len(buf)
    try:
        transactional_id, at = _plain_transactional_id(buf, at, flexible)
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, at)
        at += _ACKS_TIMEOUT.size
        topic_count, at = _plain_length(buf, at, flexible)
        topics = []
        for _ in range(topic_count):
            name = topic_id = None
            if version >= FIRST_TOPIC_ID_PRODUCE_VERSION:
                topic_id = bytes(buf[at:at + 16])
                at += 16
            else:
                size, at = _plain_length(buf, at, flexible, _INT16)
                name = str(buf[at:at + size], "utf-8")
                at += size
            partition_count, at = _plain_length(buf, at, flexible)
            partitions = []
            for _ in range(partition_count):
                if flexible:
                    (partition,) = _INT32.unpack_from(buf, at)
                    size, at = read_uvarint(buf, at + 4)
                    size -= 1
                else:
                    partition, size = _PARTITION_AND_SIZE.unpack_from(buf, at)
                    at += 8
                if size == -1:
                    partitions.append(_new_tuple(PartitionData, (partition, None, 0, None)))
                elif size < 0:
                    return None
                else:  # a size running past the frame's end fails a later read, or the end's check
                    start = at
                    at += size
                    batch = _batch_header(buf, start, start, size) if size >= BATCH_HEADER_BYTES else None
                    problem = _batch_problem(batch, size, version)
                    partitions.append(_new_tuple(PartitionData, (partition, batch, 0, None)) if problem is None else
                                      _invalid_partition(partition, batch, problem))
                if flexible:
                    at = _no_tagged_fields(buf, at)
            if flexible:
                at = _no_tagged_fields(buf, at)
            topics.append(TopicData(name, topic_id, tuple(partitions)))
        if flexible:
            at = _no_tagged_fields(buf, at)
    except (_NotPlain, StructError, IndexError, UnicodeDecodeError, ProtocolError):
        return None
    return ProduceScan(transactional_id, acks, timeout_ms, tuple(topics)) if at == end else None


def _plain_topics_head(buf: bytes | memoryview, at: int, version: int) -> ProduceTopicsHead | None:
    """``produce_topics_head`` read in one pass with no walk (the body from ``at`` on); None, and the walk reads it,
    when anything is not plain (as for ``_plain_request``) or not at hand."""
    flexible = version >= FIRST_FLEXIBLE_PRODUCE_VERSION
    try:
        transactional_id, at = _plain_transactional_id(buf, at, flexible)
        count, at = _plain_length(buf, at + _ACKS_TIMEOUT.size, flexible)
        if not count:
            return ProduceTopicsHead(transactional_id, 0, None, None)
        if version >= FIRST_TOPIC_ID_PRODUCE_VERSION:
            return ProduceTopicsHead(transactional_id, count, None, bytes(_at_hand(buf, at, 16)))
        size, at = _plain_length(buf, at, flexible, _INT16)
        return ProduceTopicsHead(transactional_id, count, str(_at_hand(buf, at, size), "utf-8"), None)
    except (_NotPlain, StructError, IndexError, UnicodeDecodeError):
        return None


class _NotPlain(Exception):
    """A field ``_plain_request`` or ``_plain_topics_head`` leaves to the walk."""


def _plain_transactional_id(buf: bytes | memoryview, at: int, flexible: bool) -> tuple[str | None, int]:
    """The transactional id (nullable) and where what follows starts."""
    size, at = _plain_nullable_length(buf, at, flexible, _INT16)
    if size == -1:
        return None, at
    return str(_at_hand(buf, at, size), "utf-8"), at + size


def _at_hand(buf: bytes | memoryview, at: int, size: int) -> bytes | memoryview:
    """The ``size`` bytes from ``at``, all at hand (a slice stops short at the end of the bytes at hand)."""
    if at + size > len(buf):
        raise _NotPlain
    return buf[at:at + size]


def _plain_length(buf: bytes | memoryview, at: int, flexible: bool, classic: Struct = _INT32) -> tuple[int, int]:
    """An array count or a non-null string length, and where what follows starts."""
    size, at = _plain_nullable_length(buf, at, flexible, classic)
    if size < 0:
        raise _NotPlain
    return size, at


def _plain_nullable_length(buf: bytes | memoryview, at: int, flexible: bool, classic: Struct) -> tuple[int, int]:
    """A length, -1 for null, and where what follows starts."""
    if flexible:
        size = buf[at] - 1
        at += 1
        if size >= 0x7F:
            raise _NotPlain
    else:
        (size,) = classic.unpack_from(buf, at)
        at += classic.size
    if size < -1:
        raise _NotPlain
    return size, at


def _no_tagged_fields(buf: bytes | memoryview, at: int) -> int:
    if buf[at]:
        raise _NotPlain
    return at + 1


def _scanned_version(header: RequestHeader) -> int:
    version = header.api_version
    if not MIN_SCANNED_PRODUCE_VERSION <= version <= NEWEST_SCANNED_PRODUCE_VERSION:
        raise ProtocolError(f"Produce version outside the scanned range {MIN_SCANNED_PRODUCE_VERSION}-"
                            f"{NEWEST_SCANNED_PRODUCE_VERSION}", api_key=Api.PRODUCE, api_version=version, offset=0)
    return version


def _batch_header(buf: bytes | memoryview, at: int, start: int, size: int) -> RecordBatch:
    # made as a plain tuple is (a named tuple's own constructor is a Python call): this runs for every batch
    return _new_tuple(RecordBatch, (start, start + size, *_KEPT_BATCH_HEADER.unpack_from(buf, at)))


def _invalid_partition(partition: int, batch: RecordBatch | None, problem: tuple[int, str]) -> PartitionData:
    """A partition whose records ``validateRecords`` refuses: its batch kept when bytes follow it alone
    (``trailed_batches_appended``)."""
    trailed = batch is not None and problem[1].endswith(_ONE_BATCH_ONLY)
    return PartitionData(partition, batch if trailed else None, *problem)


def trailed_batches_appended(scan: ProduceScan) -> ProduceScan:
    """The scan of a request that went to the cluster as it came (forwarded while it arrived), with a valid batch
    followed by more bytes taken for appended: Kafka reads a partition's batches while the bytes left hold a whole
    one (``ByteBufferLogInputStream``), so fewer bytes after the batch than make one are trimmed and the batch
    appended, and only a whole second batch (or a corrupt one) is refused. The bytes could not all be read as they
    went by, so such a batch is charged either way: a quota errs on the side of the charge."""
    if not any(partition.batch is not None and partition.error_code for topic in scan.topics
               for partition in topic.partitions):
        return scan
    return scan._replace(topics=tuple(topic._replace(partitions=tuple(
        PartitionData(partition.partition, partition.batch) if partition.batch is not None else partition
        for partition in topic.partitions)) for topic in scan.topics))


_ONE_BATCH_ONLY = "are only allowed to contain exactly one record batch per partition"


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
        return INVALID_RECORD, f"Produce requests with version {version} {_ONE_BATCH_ONLY}"
    return None


def produce_acks(frame: bytes | memoryview, header: RequestHeader) -> int:
    """``acks`` alone, reading only up to it (acks=0 requests get no response); ``frame`` may be a request's
    start."""
    cursor = _Cursor(frame, header.length, header.api_version)
    pos = cursor.at
    try:
        if header.api_version >= MIN_SCANNED_PRODUCE_VERSION:  # after the transactional_id
            if cursor.flexible:
                length_plus_one, pos = read_uvarint(frame, pos)
                length = length_plus_one - 1
            else:
                (length,) = _INT16.unpack_from(frame, pos)
                pos += _INT16.size
            if length < -1:
                raise cursor.fail(f"transactional_id has negative length {length}")
            pos += max(length, 0)
        (acks,) = _INT16.unpack_from(frame, pos)
    except (ProtocolError, StructError):
        raise cursor.fail("Produce request truncated before acks") from None
    return int(acks)
