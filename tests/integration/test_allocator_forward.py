"""AllocateProducerIds forwarded to the controller quorum (``[allocator] mode = "forward"``).

Tansu has no AllocateProducerIds, so a proxy in ``serve`` mode stands in for the controller: the
forward proxy's ``--upstream`` is the serving proxy, as a real one's is the controller listener.
Requests are raw frames written in one go (a broker's controller channel pipelines them too).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.header import response_header_length
from tests.integration.test_produce_quotas import metrics
from tests.integration.test_producer_id_allocator import (
    CLUSTER_AUTHORIZATION_FAILED,
    FIRST_ID,
    allocate,
    config_file,
)
from tests.support import Cluster, ProxyProcess, call, encode_request, read_frame

pytestmark = pytest.mark.integration
RATE = 0.5
"""Forwarded allocations per second: Kafka's burst is 11 samples x 1 s x 0.5 = 5.5 allocations."""


def serving(own_proxy, tmp_path: Path) -> ProxyProcess:  # type: ignore[no-untyped-def]
    return own_proxy("--config", config_file(tmp_path, "serve.toml", '[allocator]\nmode = "serve"\n'
                                              'cluster_principals = ["User:ANONYMOUS"]\n'
                                              'allocations_per_second = 1000\n'))


def forwarding(own_proxy, tmp_path: Path, upstream: str, principal: str = "User:ANONYMOUS") -> ProxyProcess:  # type: ignore[no-untyped-def]
    return own_proxy("--config", config_file(tmp_path, "forward.toml", f'[allocator]\nmode = "forward"\n'
                                              f'cluster_principals = ["{principal}"]\n'
                                              f'allocations_per_second = {RATE}\n'), upstream=upstream)


def pipelined_allocations(proxy: ProxyProcess, count: int, broker_id: int) -> list[tuple[float, object]]:
    """``count`` AllocateProducerIds in one write; each response with the time it arrived."""
    answers = []
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=60) as sock:
        sock.sendall(b"".join(encode_request(Api.ALLOCATE_PRODUCER_IDS, 0, correlation_id=index, client_id="broker-7",
                                             broker_id=broker_id, broker_epoch=1) for index in range(count)))
        started = time.monotonic()
        for _ in range(count):
            frame = read_frame(sock)
            assert frame, "the proxy closed the connection"
            body = memoryview(frame)[response_header_length(frame, flexible=True):]
            answers.append((time.monotonic() - started, decode_response(Api.ALLOCATE_PRODUCER_IDS, 0, body)))
    return answers


def test_blocks_come_from_the_controller_in_order_and_the_rate_holds_pipelined_requests(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path) -> None:
    controller = serving(own_proxy, tmp_path)
    proxy = forwarding(own_proxy, tmp_path, controller.bootstrap)
    answers = pipelined_allocations(proxy, 8, broker_id=7)

    starts = [answer.producer_id_start for _, answer in answers]  # type: ignore[attr-defined]
    assert starts == [FIRST_ID + 1000 * index for index in range(8)], "blocks are the controller's, in order"
    assert all(answer.error_code == 0 and answer.producer_id_len == 1000  # type: ignore[attr-defined]
               for _, answer in answers)
    throttles = [answer.throttle_time_ms for _, answer in answers]  # type: ignore[attr-defined]
    # the 6th takes the bucket to -0.5 (1 s); each later one waits for the mute, finds ~0 tokens (a little
    # more: the mute ends a few ms after the throttle ran out), goes to ~-1 (2 s)
    assert throttles[:5] == [0] * 5 and 990 <= throttles[5] <= 1000, throttles
    assert all(1900 <= throttle <= 2000 for throttle in throttles[6:]), throttles
    # a broker reads one request at a time and mutes the channel: the 8th answer after the 6th's and
    # 7th's throttles (3 s); without the hold-back all eight came back at once
    assert answers[-1][0] >= 2.7, [round(at, 2) for at, _ in answers]

    forwarded = metrics(proxy)
    assert forwarded['kafka_quota_proxy_producer_id_blocks_total{broker_id="7",principal="User:ANONYMOUS"}'] == 8
    assert forwarded["kafka_quota_proxy_producer_ids_allocated_per_hour"] > 0
    served = metrics(controller)
    assert served['kafka_proxy_requests_total{api="AllocateProducerIds"}'] == 8
    assert served['kafka_quota_proxy_producer_id_blocks_total{broker_id="7",principal="User:ANONYMOUS"}'] == 8

    proxy.stop()
    block_lines = [json.loads(line) for path in (proxy.state_dir / "usage").glob("usage-*.jsonl")
                   for line in path.read_text().splitlines() if '"broker_id"' in line]
    assert sum(line["blocks"] for line in block_lines) == 8
    assert sum(line["block_ids"] for line in block_lines) == 8000
    assert {(line["user"], line["client_id"], line["broker_id"]) for line in block_lines} == {
        ("ANONYMOUS", "broker-7", 7)}


def test_other_principals_are_refused_without_reaching_the_controller(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path) -> None:
    controller = serving(own_proxy, tmp_path)
    proxy = forwarding(own_proxy, tmp_path, controller.bootstrap, principal="User:broker")
    refusals = pipelined_allocations(proxy, 3, broker_id=7)
    assert [answer.error_code for _, answer in refusals] == [CLUSTER_AUTHORIZATION_FAILED] * 3  # type: ignore[attr-defined]
    assert 'kafka_proxy_requests_total{api="AllocateProducerIds"}' not in metrics(controller)
    # the controller handed out nothing: its first block is still the first
    assert allocate(controller, 7, 1).producer_id_start == FIRST_ID  # type: ignore[attr-defined]
    assert not any(name.startswith("kafka_quota_proxy_producer_id_blocks_total{") for name in metrics(proxy))


def test_everything_else_passes_untouched(own_proxy, broker: Cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """No address rewriting and no version ceilings: brokers must reach the controllers' own endpoints
    and speak the versions the controllers do (KRaft's Fetch is newer than the ceiling clients get)."""
    proxy = forwarding(own_proxy, tmp_path, broker.bootstrap)
    host, port = broker.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as direct_sock, \
            socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as proxied_sock:
        for api_key, version, fields in ((Api.API_VERSIONS, 3, {"client_software_name": "t",
                                                                  "client_software_version": "1"}),
                                         (Api.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                             "include_topic_authorized_operations": False})):
            direct = call(direct_sock, api_key, version, **fields)
            proxied = call(proxied_sock, api_key, version, **fields)
            assert proxied == direct, Api(api_key).name
    assert proxy.log().count("listening for broker") == 0, "no broker listeners in front of controllers"
