"""The zero-copy Produce scanner agrees with kafka-python's full decoder on every version."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecordsBuilder

from protocol.errors import ProtocolError
from protocol.header import RequestHeader, parse_request_header
from protocol.produce import (
    BATCH_HEADER_BYTES,
    INVALID_RECORD,
    UNSUPPORTED_COMPRESSION_TYPE,
    PartitionData,
    ProduceScan,
    StreamedProduceScan,
    _plain_request,
    produce_topics_head,
    scan_produce,
    trailed_batches_appended,
)

VERSIONS = range(3, 14)


@st.composite
def record_batches(draw: st.DrawFn) -> bytes | None:
    if draw(st.integers(0, 5)) == 0:
        return None
    idempotent = draw(st.booleans())
    transactional = idempotent and draw(st.booleans())
    builder = MemoryRecordsBuilder(
        magic=2, compression_type=0, batch_size=1 << 20, transactional=transactional,
        producer_id=draw(st.integers(0, 2**63 - 1)) if idempotent else -1,
        producer_epoch=draw(st.integers(0, 32767)) if idempotent else -1,
        base_sequence=draw(st.integers(0, 2**31 - 1)) if idempotent else -1)
    for value in draw(st.lists(st.binary(max_size=64), min_size=1, max_size=5)):
        builder.append(1_700_000_000_000, None, value)
    builder.close()
    batch = bytearray(builder.buffer())
    # the scanner reads attributes, it does not decompress: any compression/control bits will do
    attributes = struct.unpack_from(">h", batch, 21)[0]
    attributes = (attributes & ~0x07) | draw(st.integers(0, 4))
    if draw(st.integers(0, 9)) == 0:
        attributes |= 0x20
    struct.pack_into(">h", batch, 21, attributes)
    return bytes(batch)


@st.composite
def produce_requests(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.sampled_from(VERSIONS))
    topics = []
    for _ in range(draw(st.integers(0, 4))):
        partitions = [ProduceRequest.TopicProduceData.PartitionProduceData(index=draw(st.integers(0, 1000)),
                                                                           records=draw(record_batches()))
                      for _ in range(draw(st.integers(0, 4)))]
        if version >= 13:
            topics.append(ProduceRequest.TopicProduceData(topic_id=uuid.UUID(bytes=draw(st.binary(min_size=16,
                                                                                                max_size=16))),
                                                          partition_data=partitions))
        else:
            topics.append(ProduceRequest.TopicProduceData(name=draw(st.text(min_size=1, max_size=20)),
                                                          partition_data=partitions))
    request = ProduceRequest[version](transactional_id=draw(st.none() | st.text(max_size=10)),
                                      acks=draw(st.sampled_from([-1, 0, 1])), timeout_ms=draw(st.integers(0, 60000)),
                                      topic_data=topics)
    request.with_header(correlation_id=9, client_id=draw(st.text(max_size=10)))
    return version, bytes(request.encode(header=True))


@settings(max_examples=400)
@given(produce_requests())
def test_scanner_agrees_with_kafka_python(generated: tuple[int, bytes]) -> None:
    version, frame = generated
    header = parse_request_header(frame, flexible=version >= 9)
    scan = scan_produce(memoryview(frame), header)
    decoded = ProduceRequest.decode(frame[header.length:], version=version)
    assert (scan.transactional_id, scan.acks, scan.timeout_ms) == (
        decoded.transactional_id, decoded.acks, decoded.timeout_ms)
    assert len(scan.topics) == len(decoded.topic_data)
    for topic, expected in zip(scan.topics, decoded.topic_data, strict=True):
        if version >= 13:
            # kafka-python decodes Kafka's ZERO_UUID as None
            expected_id = bytes(16) if expected.topic_id is None else expected.topic_id.bytes
            assert topic.topic_id == expected_id and topic.name is None
        else:
            assert topic.name == expected.name and topic.topic_id is None
        for partition, expected_partition in zip(topic.partitions, expected.partition_data, strict=True):
            assert partition.partition == expected_partition.index
            if expected_partition.records is None:
                assert partition.batch is None and partition.error_code == 0
                continue
            reference = DefaultRecordBatch(bytes(expected_partition.records))
            if version < 7 and reference.compression_type == 4:
                # ZStandard needs Produce v7 (ProduceRequest.validateRecords): that partition alone is refused
                assert partition.batch is None and partition.error_code == UNSUPPORTED_COMPRESSION_TYPE
                continue
            assert partition.error_code == 0
            batch = partition.batch
            assert batch is not None
            assert frame[batch.start:batch.end] == bytes(expected_partition.records)
            assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
                reference.producer_id, reference.producer_epoch, reference.base_sequence)
            assert batch.compression == reference.compression_type
            assert batch.transactional == reference.is_transactional
            assert batch.control == reference.is_control_batch
            assert (batch.magic, batch.records_count) == (reference.magic, reference.records_count)


def encoded(version: int, records: bytes | None) -> tuple[bytes, object]:
    partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)
    topic = ProduceRequest.TopicProduceData(name="t", partition_data=[partition])
    request = ProduceRequest[version](transactional_id=None, acks=1, timeout_ms=1, topic_data=[topic])
    request.with_header(correlation_id=1, client_id="c")
    frame = bytes(request.encode(header=True))
    return frame, parse_request_header(frame, flexible=version >= 9)


def one_batch() -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(1, None, b"v")
    builder.close()
    return bytes(builder.buffer())


def _only_partition(version: int, records: bytes) -> PartitionData:
    frame, header = encoded(version, records)
    return scan_produce(frame, header).topics[0].partitions[0]  # type: ignore[arg-type]


def _old_magic() -> bytes:
    batch = bytearray(one_batch())
    batch[16] = 1
    return bytes(batch)


@pytest.mark.parametrize("version", [7, 11])
@pytest.mark.parametrize(("records", "message"), [
    pytest.param(_old_magic(), "magic version 2", id="magic 1"),
    pytest.param(b"\x00" * (BATCH_HEADER_BYTES - 1), "at least one record batch", id="shorter than a batch header"),
    pytest.param(b"", "at least one record batch", id="empty"),
    pytest.param(one_batch()[:-1], "at least one record batch", id="batch cut short"),
])
def test_invalid_records_give_that_partition_invalid_record(version: int, records: bytes, message: str) -> None:
    """Kafka's ``ProduceRequest.validateRecords``: the partition is answered INVALID_RECORD, the request stands."""
    partition = _only_partition(version, records)
    assert partition.batch is None
    assert partition.error_code == INVALID_RECORD
    assert partition.error_message is not None and message in partition.error_message


@pytest.mark.parametrize("version", [7, 11])
@pytest.mark.parametrize("after", [one_batch(), b"\x00"], ids=["a second batch", "a byte"])
def test_a_batch_followed_by_more_bytes_is_refused_but_charged_when_the_request_went_as_it_came(
        version: int, after: bytes) -> None:
    """Kafka appends the batch when the bytes after it do not make a whole one (a byte is trimmed), and refuses the
    partition when they do (a second batch). Judging a whole request the proxy refuses both (INVALID_RECORD: the
    partition never reaches the cluster); for one forwarded while it arrived, whose bytes after the batch went by
    unread, the batch is charged either way."""
    partition = _only_partition(version, one_batch() + after)
    assert partition.error_code == INVALID_RECORD and partition.batch is not None
    assert partition.error_message is not None and "exactly one record batch" in partition.error_message
    frame, header = encoded(version, one_batch() + after)
    appended = trailed_batches_appended(scan_produce(frame, header)).topics[0].partitions[0]
    assert appended == PartitionData(partition.partition, partition.batch)
    frame, header = encoded(version, _old_magic())
    refused = scan_produce(frame, header)
    assert trailed_batches_appended(refused) == refused, "an invalid batch is not charged"


@pytest.mark.parametrize("version", [7, 11])
def test_every_truncation_is_a_protocol_error(version: int) -> None:
    frame, header = encoded(version, one_batch())
    for end in range(header.length, len(frame)):  # type: ignore[attr-defined]
        with pytest.raises(ProtocolError, match="api_key=0"):
            scan_produce(frame[:end], header)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="trailing bytes"):
        scan_produce(frame + b"\x00", header)  # type: ignore[arg-type]


@settings(max_examples=300)
@given(produce_requests(), st.lists(st.integers(1, 300), min_size=1, max_size=5), st.integers(0, 255))
def test_a_request_scanned_as_it_streams_gives_the_whole_scan_without_reading_record_data(
        generated: tuple[int, bytes], pieces: list[int], unread: int) -> None:
    version, frame = generated
    header = parse_request_header(frame, flexible=version >= 9)
    whole = scan_produce(frame, header)
    scan = StreamedProduceScan(header, len(frame))
    blanked = bytearray(frame)
    at, turn = 0, 0
    while at < len(frame):
        piece = pieces[turn % len(pieces)]
        turn += 1
        if scan.records_ahead:  # record data nothing reads: passed over, or fed as garbage
            taken = min(scan.records_ahead, piece)
            blanked[at:at + taken] = bytes([unread]) * taken
            if turn % 2:
                scan.skipped(taken)
            else:
                scan.feed(blanked[at:at + taken])
        else:
            taken = min(piece, len(frame) - at)
            scan.feed(blanked[at:at + taken])
        at += taken
    assert scan.scan == whole
    assert scan_produce(bytes(blanked), header) == whole  # what the scan reads was fed intact


def outcome_of(scan: Callable[[], object]) -> object:
    try:
        return scan()
    except ProtocolError as error:
        return error.reason, error.offset


def streamed_in_pieces(frame: bytes, header: RequestHeader, piece: int) -> ProduceScan | None:
    scan = StreamedProduceScan(header, len(frame))
    for at in range(0, len(frame), piece):
        scan.feed(frame[at:at + piece])
    return scan.scan


@settings(max_examples=400)
@given(produce_requests(), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
       st.integers(-40, 8), st.integers(1, 64))
def test_a_request_whole_or_streamed_is_read_alike_however_it_is_broken(
        generated: tuple[int, bytes], changes: list[tuple[int, int]], resized: int, piece: int) -> None:
    """A whole frame (read in one pass when it reads plainly, else walked) and pieces as they come (walked) give
    the same scan, or the same error at the same offset, whatever bytes were changed, cut off or added."""
    version, frame = generated
    header = parse_request_header(frame, flexible=version >= 9)
    broken = bytearray(frame[:max(header.length, len(frame) + resized)] if resized < 0 else frame + bytes(resized))
    for offset, value in changes:
        if header.length < len(broken):
            broken[header.length + offset % (len(broken) - header.length)] = value
    whole = outcome_of(lambda: scan_produce(bytes(broken), header))
    assert whole == outcome_of(lambda: streamed_in_pieces(bytes(broken), header, max(1, len(broken))))
    if isinstance(whole, ProduceScan):
        assert streamed_in_pieces(bytes(broken), header, piece) == whole


@settings(max_examples=300)
@given(produce_requests())
def test_a_request_as_clients_encode_it_is_read_in_one_pass_to_the_walks_scan(generated: tuple[int, bytes]) -> None:
    """Every Produce of a user with a producer-ID quota is scanned whole: one that reads plainly (as every client
    encodes one) is read without the walk, to the same scan."""
    version, frame = generated
    header = parse_request_header(frame, flexible=version >= 9)
    plain = _plain_request(frame, header.length, version)
    assert plain is not None
    assert plain == streamed_in_pieces(frame, header, len(frame))


@pytest.mark.parametrize("version", [7, 11])
def test_a_streamed_request_leaves_record_data_to_be_passed_over(version: int) -> None:
    records = one_batch()
    frame, header = encoded(version, records)
    scan = StreamedProduceScan(header, len(frame))  # type: ignore[arg-type]
    batch_at = frame.index(records)
    scan.feed(frame[:batch_at + BATCH_HEADER_BYTES])
    assert scan.records_ahead == len(records) - BATCH_HEADER_BYTES and scan.scan is None
    scan.skipped(scan.records_ahead)
    scan.feed(frame[batch_at + len(records):])
    assert scan.scan == scan_produce(frame, header)  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [7, 11])
def test_a_streamed_request_that_does_not_fit_its_frame_fails_as_soon_as_that_shows(version: int) -> None:
    frame, header = encoded(version, one_batch())
    with pytest.raises(ProtocolError, match="runs past the end of the frame"):
        StreamedProduceScan(header, len(frame) - 1).feed(frame[:-1])  # type: ignore[arg-type]
    scan = StreamedProduceScan(header, len(frame) + 5)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="5 trailing bytes"):
        scan.feed(frame)


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_a_null_topic_name_is_a_protocol_error(version: int) -> None:
    """Found by the fuzz target: the scan took a null name, and the proxy's answers to the request carried it (a
    Produce response the client cannot read). Kafka's parser refuses the request."""
    flexible = version >= 9
    header = struct.pack(">hhih", 0, version, 1, 1) + b"c" + (b"\x00" if flexible else b"")
    null_string, one = (b"\x00", b"\x02") if flexible else (b"\xff\xff", b"\x00\x00\x00\x01")
    no_partitions = b"\x01" if flexible else b"\x00\x00\x00\x00"
    tagged = b"\x00" if flexible else b""
    frame = header + null_string + struct.pack(">hi", 1, 30_000) + one + null_string + no_partitions + tagged + tagged
    with pytest.raises(ProtocolError, match="topic name is null"):
        scan_produce(frame, parse_request_header(frame, flexible))


@settings(max_examples=200)
@given(produce_requests(), st.integers(0, 200))
def test_the_topics_head_agrees_with_the_whole_scan_from_any_start_long_enough(generated: tuple[int, bytes],
                                                                                cut: int) -> None:
    version, frame = generated
    header = parse_request_header(frame, flexible=version >= 9)
    scan = scan_produce(memoryview(frame), header)
    head = produce_topics_head(memoryview(frame)[:header.length + cut], header)
    if head is None:  # the start ends before the first topic: a longer one reads it
        assert produce_topics_head(memoryview(frame), header) is not None
        return
    first = scan.topics[0] if scan.topics else None
    assert head == (scan.transactional_id, len(scan.topics), first and first.name, first and first.topic_id)
