"""AllocateProducerIds forwarded to the controller quorum (``[allocator] mode = "forward"``).

An Apache Kafka controller and a broker apart from it, whose ``controller.quorum.voters`` names the
forwarding proxy: the broker registers, heartbeats, fetches the metadata log and asks for its
producer-ID blocks through the proxy, as in a deployment. Raw frames written in one go stand for a
broker's pipelined controller channel (they carry the real broker's id and epoch, so the controller
grants them).
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.header import response_header_length
from proxy.dev.apache_kafka import KafkaCluster
from tests.integration.test_produce_quotas import metrics
from tests.integration.test_producer_id_allocator import CLUSTER_AUTHORIZATION_FAILED, config_file
from tests.support import Cluster, ProxyProcess, call, encode_request, new_producer_id, read_frame

pytestmark = pytest.mark.integration
RATE = 0.5
"""Forwarded allocations per second: Kafka's burst is 11 samples x 1 s x 0.5 = 5.5 allocations."""
BURST = 11 * RATE
BLOCK = 1000

Forwarded = tuple[KafkaCluster, ProxyProcess]


@pytest.fixture
def kafka_behind_proxy(tmp_path: Path) -> Iterator[Callable[..., Forwarded]]:
    """Starts a controller, a forwarding proxy in front of it and a broker that reaches the controller
    through the proxy; stops them brokers first (their shutdown still needs the controller)."""
    started: list[Forwarded] = []

    def start(principal: str = "User:ANONYMOUS") -> Forwarded:
        # a killed broker's session ends sooner, so that its next start registers sooner
        kafka = KafkaCluster(1, dedicated_controller=True, log_directory=tmp_path, extra_properties={
            "broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "1000"})
        settings = (f'[allocator]\nmode = "forward"\ncluster_principals = ["{principal}"]\n'
                    f'allocations_per_second = {RATE}\n')
        proxy = ProxyProcess(kafka.controller.controller_endpoint, tmp_path / "forward.log",
                             "--config", config_file(tmp_path, "forward.toml", settings),
                             node_ids=(kafka.controller.node_id,))
        started.append((kafka, proxy))
        kafka.start_controller()
        proxy.start()
        kafka.start_brokers(controller_address=proxy.bootstrap)
        return kafka, proxy

    yield start
    for kafka, proxy in started:
        kafka.stop()
        if proxy.process is not None:
            proxy.stop()


def broker_epoch(kafka: KafkaCluster) -> int:
    """The epoch the controller gave broker 1 at its latest registration, as the broker logs it."""
    epochs = re.findall(r"Successfully registered broker 1 with broker epoch (\d+)",
                        kafka.brokers[0].log_path.read_text())
    assert epochs, "the broker never registered"
    return int(epochs[-1])


def pipelined_allocations(port: int, count: int, broker_id: int, epoch: int) -> list[tuple[float, object]]:
    """``count`` AllocateProducerIds in one write; each response with the seconds from just before the write to its
    arrival (nothing of the requests was read before)."""
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        started = time.monotonic()
        sock.sendall(b"".join(encode_request(Api.ALLOCATE_PRODUCER_IDS, 0, correlation_id=index, client_id="broker-1",
                                             broker_id=broker_id, broker_epoch=epoch) for index in range(count)))
        for _ in range(count):
            frame = read_frame(sock)
            assert frame, "the proxy closed the connection"
            body = memoryview(frame)[response_header_length(frame, flexible=True):]
            answers.append((time.monotonic() - started, decode_response(Api.ALLOCATE_PRODUCER_IDS, 0, body)))
    return answers


def new_producer_ids(bootstrap: str, count: int) -> tuple[list[int], float]:
    """``count`` idempotent producers' InitProducerId on the broker (retrying while it waits for a block),
    and the seconds from the first request to the last answer."""
    host, port = bootstrap.rsplit(":", 1)
    issued: list[int] = []
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        started = time.monotonic()
        while len(issued) < count:
            answer = new_producer_id(sock)
            assert answer.error_code == 0, answer
            issued.append(answer.producer_id)
    return issued, time.monotonic() - started


def test_a_broker_lives_through_the_proxy_and_an_explosion_of_producers_is_held_to_the_rate(
        kafka_behind_proxy: Callable[..., Forwarded]) -> None:
    kafka, proxy = kafka_behind_proxy()
    seen = metrics(proxy)
    assert seen['kafka_quota_proxy_requests_total{api="BrokerRegistration"}'] == 1
    assert seen['kafka_quota_proxy_requests_total{api="BrokerHeartbeat"}'] >= 1
    assert seen['kafka_quota_proxy_requests_total{api="Fetch"}'] >= 1  # the broker replicates the metadata log

    # 12 blocks of new producers as fast as one client asks: the bucket admits the k-th allocation once
    # 5.5 + 0.5 t - (k - 1) > 0, so the 12th comes 2 x (12 - 6.5) = 11 s after the first (at full speed
    # without the quota: 4-5 s here)
    blocks = 12
    issued, elapsed = new_producer_ids(kafka.bootstrap, blocks * BLOCK)
    assert len(set(issued)) == len(issued)
    assert elapsed >= 2 * (blocks - 1 - BURST) - 0.5, f"{blocks} blocks in {elapsed:.1f} s"
    granted = metrics(proxy)['kafka_quota_proxy_producer_id_blocks_total{broker_id="1",principal="User:ANONYMOUS"}']
    assert blocks <= granted <= blocks + 1  # the broker asks for the next block when 90% of one is used

    # kill -9 and start again: the broker registers anew through the proxy (refused with
    # DUPLICATE_BROKER_REGISTRATION and asked again until the killed incarnation's session has expired), and
    # its IDs go on from the controller's durable record, never repeating one
    first_epoch = broker_epoch(kafka)
    kafka.brokers[0].kill()
    kafka.restart(kafka.brokers[0])
    assert metrics(proxy)['kafka_quota_proxy_requests_total{api="BrokerRegistration"}'] >= 2
    assert broker_epoch(kafka) > first_epoch
    after, _ = new_producer_ids(kafka.bootstrap, 10)
    assert min(after) > max(issued)


def test_pipelined_allocations_get_the_controllers_blocks_in_order_held_to_the_rate(
        kafka_behind_proxy: Callable[..., Forwarded]) -> None:
    kafka, proxy = kafka_behind_proxy()
    answers = pipelined_allocations(proxy.port, 8, broker_id=1, epoch=broker_epoch(kafka))

    assert all(answer.error_code == 0 and answer.producer_id_len == BLOCK  # type: ignore[attr-defined]
               for _, answer in answers), answers
    starts = [answer.producer_id_start for _, answer in answers]  # type: ignore[attr-defined]
    assert starts == [starts[0] + BLOCK * index for index in range(8)], "the controller's blocks, in order"
    throttles = [answer.throttle_time_ms for _, answer in answers]  # type: ignore[attr-defined]
    # the 6th takes the bucket to -0.5 (1 s); each later one is read once the mute that began with the answer
    # before it has ended: the bucket is back at 0 plus what the controller's answer took (200 ms adds 0.1),
    # and the charge takes it to about -1 (2 s; 1.8 s after a 200 ms answer). Read at once instead, they
    # would go to -1.5 and -2.5 (3 and 5 s).
    assert throttles[:5] == [0] * 5, throttles
    for index in range(5, 8):
        # the bucket refills meanwhile: each is given its throttle read at once (1, 3, 5 s) less the time from the
        # first charge (after the write) to its own (before its answer), and a millisecond of the clock's rounding
        read_at_once_ms = 1000 + 2000 * (index - 5)
        held_back_ms = read_at_once_ms if index == 5 else 2000  # read once the mute before it had ended
        assert read_at_once_ms - answers[index][0] * 1000 - 1 <= throttles[index] <= held_back_ms, (index, throttles)
    # a broker reads one request at a time and mutes the channel: the 8th answer after the 6th's and
    # 7th's throttles (3 s); without the hold-back all eight came back at once
    assert answers[-1][0] >= 2.7, [round(at, 2) for at, _ in answers]

    forwarded = metrics(proxy)
    assert forwarded['kafka_quota_proxy_producer_id_blocks_total{broker_id="1",principal="User:ANONYMOUS"}'] == 8
    assert forwarded["kafka_quota_proxy_producer_ids_allocated_per_hour"] > 0

    proxy.stop()
    block_lines = [json.loads(line) for path in (proxy.state_dir / "usage").glob("usage-*.jsonl")
                   for line in path.read_text().splitlines() if '"broker_id"' in line]
    assert sum(line["blocks"] for line in block_lines) == 8
    assert sum(line["block_ids"] for line in block_lines) == 8 * BLOCK
    assert {(line["user"], line["client_id"], line["broker_id"]) for line in block_lines} == {
        ("ANONYMOUS", "broker-1", 1)}
    proxy.start()  # the broker's shutdown goes through it


def test_other_principals_are_refused_without_reaching_the_controller(
        kafka_behind_proxy: Callable[..., Forwarded]) -> None:
    kafka, proxy = kafka_behind_proxy(principal="User:broker")
    epoch = broker_epoch(kafka)
    refusals = pipelined_allocations(proxy.port, 3, broker_id=1, epoch=epoch)
    assert [answer.error_code for _, answer in refusals] == [CLUSTER_AUTHORIZATION_FAILED] * 3  # type: ignore[attr-defined]
    assert not any(name.startswith("kafka_quota_proxy_producer_id_blocks_total{") for name in metrics(proxy))
    # the controller handed out nothing: asked directly, its first block is still the first
    (direct,) = pipelined_allocations(kafka.controller.controller_port or 0, 1, broker_id=1, epoch=epoch)
    assert (direct[1].error_code, direct[1].producer_id_start) == (0, 0)  # type: ignore[attr-defined]


def test_everything_else_passes_untouched(own_proxy, broker: Cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """No address rewriting and no version ceilings: brokers must reach the controllers' own endpoints
    and speak the versions the controllers do (KRaft's Fetch is newer than the ceiling clients get)."""
    settings = (f'[allocator]\nmode = "forward"\ncluster_principals = ["User:ANONYMOUS"]\n'
                f'allocations_per_second = {RATE}\n')
    proxy = own_proxy("--config", config_file(tmp_path, "forward.toml", settings))
    with socket.create_connection((broker.host, broker.port), timeout=30) as direct_sock, \
            socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as proxied_sock:
        for api_key, version, fields in ((Api.API_VERSIONS, 3, {"client_software_name": "t",
                                                                  "client_software_version": "1"}),
                                         (Api.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                             "include_topic_authorized_operations": False})):
            direct = call(direct_sock, api_key, version, **fields)
            proxied = call(proxied_sock, api_key, version, **fields)
            if api_key == Api.API_VERSIONS:
                # A KRaft node's finalized-features epoch is its metadata log's offset, which the controller's
                # no-op records move every 500 ms (KIP-835): it may have grown between the two calls.
                assert proxied.finalized_features_epoch >= direct.finalized_features_epoch  # type: ignore[attr-defined]
                proxied.finalized_features_epoch = direct.finalized_features_epoch  # type: ignore[attr-defined]
            assert proxied == direct, Api(api_key).name
    assert proxy.log().count("listening for broker") == 0, "no broker listeners in front of controllers"
