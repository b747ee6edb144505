"""Scanning a 1 MiB Produce request vs kafka-python's full decode (``python -m bench.protocol``).

Target (issue: protocol layer): the zero-copy scanner <= 20 us per 1 MiB request, against about
200 us for kafka-python. Figures are the fastest of several timed loops.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecordsBuilder

from bench.report import write_results
from protocol.header import parse_request_header
from protocol.produce import scan_produce


def one_mib_request(version: int, partitions: int) -> bytes:
    per_partition = (1 << 20) // partitions
    records = []
    for _ in range(partitions):
        builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=2 << 20, producer_id=4242,
                                       producer_epoch=0, base_sequence=0)
        while builder.size_in_bytes() < per_partition:
            builder.append(1_700_000_000_000, None, b"x" * 1000)
        builder.close()
        records.append(bytes(builder.buffer()))
    topic = ProduceRequest.TopicProduceData(name="bench", partition_data=[
        ProduceRequest.TopicProduceData.PartitionProduceData(index=i, records=r) for i, r in enumerate(records)])
    request = ProduceRequest[version](transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[topic])
    request.with_header(correlation_id=1, client_id="bench")
    return bytes(request.encode(header=True))


def fastest_us(call: Callable[[], object], loops: int = 2000, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(loops):
            call()
        best = min(best, (time.perf_counter() - started) / loops * 1e6)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="bench/protocol-results.json")
    args = parser.parse_args()
    results = {}
    for version, partitions in ((9, 1), (9, 16), (7, 16)):
        frame = one_mib_request(version, partitions)
        view = memoryview(frame)
        header = parse_request_header(frame, flexible=version >= 9)
        body = view[header.length:]

        def full_decode() -> None:
            request = ProduceRequest.decode(body, version=version)  # noqa: B023 (called in this iteration)
            for topic in request.topic_data:
                for partition in topic.partition_data:
                    DefaultRecordBatch(bytes(partition.records)).producer_id  # noqa: B018 (read the header)

        scan = fastest_us(lambda: scan_produce(view, header))  # noqa: B023
        decode = fastest_us(full_decode, loops=200)
        results[f"v{version}_{partitions}_partitions"] = {
            "bytes": len(frame), "scan_us": scan, "kafka_python_decode_us": decode, "speedup": decode / scan}
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
