from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry

from protocol.apis import Api
from protocol.codecs import decode_request
from protocol.header import encode_response_header, read_request_header
from proxy.decision.outcome import FORWARD, Caller
from proxy.handlers.fetch import FetchHandler
from proxy.reporting.usage_log import UsageLog
from proxy.state.quota_service import QuotaService
from tests.support import encode_request

MIB = 1 << 20


def handler(tmp_path: Path) -> tuple[FetchHandler, UsageLog]:
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "metered"\nconsumer_byte_rate = 1048576\n')
    usage = UsageLog(tmp_path / "usage")
    return FetchHandler(QuotaService(quota_file, CollectorRegistry()), usage), usage


def fetch(client_id: str, version: int = 11, replica_id: int = -1, max_bytes: int = 50 * MIB) -> memoryview:
    frame = encode_request(Api.FETCH, version, client_id=client_id, replica_id=replica_id, max_wait_ms=500,
                           min_bytes=20 * MIB, max_bytes=max_bytes, isolation_level=1, topics=[])
    return memoryview(frame)[4:]


def test_a_metered_consumer_gets_kafkas_cap_and_pays_for_each_response(tmp_path: Path) -> None:
    fetch_handler, usage = handler(tmp_path)
    outcome = fetch_handler(fetch("metered"), Caller("ANONYMOUS", 0))
    assert outcome.forward and outcome.replacement is not None and outcome.charge_response is not None
    capped = memoryview(outcome.replacement)[4:]
    header = read_request_header(capped)
    request = decode_request(Api.FETCH, 11, capped[header.length:])
    assert (request.max_bytes, request.min_bytes) == (10 * MIB, 10 * MIB)  # 1 MiB/s x (11 - 1) x 1 s
    response = encode_response_header(1, False) + bytes(12 * MIB)
    assert outcome.charge_response(memoryview(response), len(response)) > 0  # 12 MiB in the 10 s minimum window
    usage.start()
    usage.stop(1_790_000_000)
    [line] = (tmp_path / "usage").glob("usage-*.jsonl")
    logged = json.loads(line.read_text())
    assert logged["fetch_bytes"] == 4 + 12 * MIB and logged["throttle_ms"] > 0  # Kafka charges 4 + body


def test_consumers_without_a_quota_pass_untouched_and_a_claimed_follower_is_charged(tmp_path: Path) -> None:
    fetch_handler, _ = handler(tmp_path)
    assert fetch_handler(fetch("free"), Caller("ANONYMOUS", 0)) is FORWARD
    claimed_follower = fetch_handler(fetch("metered", replica_id=3), Caller("ANONYMOUS", 0))
    assert claimed_follower.charge_response is not None and claimed_follower.replacement is not None
    within = fetch_handler(fetch("metered", max_bytes=MIB), Caller("ANONYMOUS", 0))
    assert within.replacement is None and within.charge_response is not None
