"""Network faults between the client and the proxy and between the proxy and the broker, from Toxiproxy
(``proxy.dev.toxiproxy``): latency with jitter, a bandwidth limit, frames cut into small TCP segments (``slicer``),
connections reset (``reset_peer``), a black hole (``timeout``), connections closed after some bytes (``limit_data``)
and a 10 s partition.

Each fault is laid on the client's side for a while, then on the broker's, while an idempotent librdkafka producer
writes numbered records through the proxy under a producer byte-rate quota, over it at first. Then: every record it had
acknowledged is in the topic exactly once, by its number (read from the broker), none failed (the client recovered);
the quota charged what went through and held it (throttled, and no faster than the quota allows); and where the
broker went silent the proxy's request timeout fired, as docs/deploying.md says.

Toxiproxy forwards another loopback address to each listener, on the same port: the proxy advertises
``CLIENT_SIDE`` for its listeners, the broker ``BROKER_SIDE`` for its own, so every connection either way passes
through Toxiproxy (``proxy.dev.toxiproxy``).
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from confluent_kafka import Producer

from protocol.apis import Api
from proxy.dev.apache_kafka import KafkaCluster
from proxy.dev.toxiproxy import BROKER_SIDE, CLIENT_SIDE, FAULTS, Fault, Toxiproxy, route_brokers, route_listeners
from tests.integration.test_produce_quotas import create_topic, metrics, usage_lines
from tests.support import Cluster, ProxyProcess, call, read_to_end, wait_until

pytestmark = pytest.mark.integration
RATE = 150_000
"""The producer's quota, bytes/s."""
WINDOWS = 3
RECORD = 1000
BATCH_BYTES = 16_384
"""The producer's batches, one a request (one partition): the most a request can take past the quota."""
BURST_RECORDS = 600
"""Written at once first: 600 KB, twice the quota's burst (Kafka's Rate pads a young window to 2 windows of credit),
so the producer is throttled; then ``RECORDS_PER_S`` go through the faults, under the quota (the faults, not a
backlog, are what the records meet)."""
RECORDS_PER_S = 60
FAULT_S = 2.0
"""How long each fault but the partition (10 s, as the issue asks) lasts on each side, at least (the black hole on
the broker's side lasts until the proxy's request timeout has fired)."""
REQUEST_TIMEOUT_S = 1
"""The proxy's ``request-timeout-seconds``: shorter than the black hole."""
REQUEST_TIMEOUTS = "kafka_quota_proxy_upstream_request_timeouts_total"


class Network(NamedTuple):
    toxiproxy: Toxiproxy
    cluster: Cluster
    upstream: str
    """The cluster's bootstrap through Toxiproxy."""


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    """A broker that advertises ``BROKER_SIDE``, reached only through Toxiproxy."""
    with Toxiproxy() as toxiproxy:
        kafka = KafkaCluster(log_directory=tmp_path_factory.mktemp("faults-kafka"), advertised_host=BROKER_SIDE)
        upstream = route_brokers(toxiproxy, kafka)
        with kafka:
            yield Network(toxiproxy, Cluster(kafka.bootstrap).wait_until_ready(), upstream)


def faulty_proxy(network: Network, directory: Path) -> tuple[ProxyProcess, str]:
    """A proxy whose listeners clients reach through Toxiproxy, at ``CLIENT_SIDE``; its bootstrap there."""
    quota_file = directory / "quotas.toml"
    quota_file.write_text(f'[settings]\n"quota.window.num" = {WINDOWS}\n"quota.window.size.seconds" = 1\n'
                          f'[[quota]]\nuser = "<default>"\nproducer_byte_rate = {RATE}\n')
    proxy = ProxyProcess(network.upstream, directory / "proxy.log", "--advertised-host", CLIENT_SIDE, "--quota-file",
                         str(quota_file), "--request-timeout-seconds", str(REQUEST_TIMEOUT_S),
                         node_ids=network.cluster.node_ids).start()
    return proxy, route_listeners(network.toxiproxy, proxy.port, proxy.broker_port_base, network.cluster.node_ids)


class Writer:
    """An idempotent librdkafka producer writing ``BURST_RECORDS`` numbered records at once, then ``RECORDS_PER_S``
    until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                   "linger.ms": 10, "batch.size": BATCH_BYTES, "message.timeout.ms": 120_000,
                                   "reconnect.backoff.max.ms": 500})  # back soon after a fault (the default: 10 s)
        self._topic = topic
        self.acknowledged: list[int] = []
        self.failed: list[str] = []
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._write)

    def _delivered(self, error: Any, message: Any) -> None:
        if error is None:
            self.acknowledged.append(int(message.value()[:10]))
        else:
            self.failed.append(str(error))

    def _write(self) -> None:
        started = time.monotonic()
        number = 0
        while not self.stop.is_set():
            self._producer.produce(self._topic, b"%010d" % number + bytes(RECORD - 10), on_delivery=self._delivered)
            number += 1
            self._producer.poll(0)
            time.sleep(max(0.0, started + (number - BURST_RECORDS) / RECORDS_PER_S - time.monotonic()))

    def start(self) -> Writer:
        self._thread.start()
        return self

    def finish(self, timeout_s: float = 90) -> int:
        """Stop writing; the records still unacknowledged after ``timeout_s``."""
        self.stop.set()
        self._thread.join()
        return int(self._producer.flush(timeout_s))


@pytest.mark.parametrize("fault", FAULTS, ids=[fault.name for fault in FAULTS])
def test_records_survive_the_fault_each_way_and_the_quota_holds(network: Network, tmp_path: Path,
                                                               fault: Fault) -> None:
    toxiproxy = network.toxiproxy
    proxy, bootstrap = faulty_proxy(network, tmp_path)
    topic = f"faults-{uuid.uuid4().hex[:8]}"
    create_topic(network.cluster.bootstrap, topic)
    black_hole = fault.name.startswith("timeout")
    try:
        writer = Writer(bootstrap, topic).start()
        started = time.monotonic()
        time.sleep(1)
        for side in ("client-", "broker-"):
            assert toxiproxy.lay(fault, side)
            time.sleep(fault.seconds if fault.partition else FAULT_S)
            if black_hole and side == "broker-":
                # silent until the proxy gives up on a request: one forwarded late in the fault (the producer
                # throttled, or slow on a loaded machine) has not waited request-timeout-seconds at its end
                wait_until(lambda: metrics(proxy).get(REQUEST_TIMEOUTS, 0.0) >= 1, 30, "the proxy's request timeout")
            toxiproxy.heal()
            time.sleep(0.5)
        unacknowledged = writer.finish()
        elapsed_s = time.monotonic() - started
        timeouts = metrics(proxy).get(REQUEST_TIMEOUTS, 0.0)
    finally:
        proxy.stop()  # its usage log's last second written
        for route in [route for route in toxiproxy.routes if route.startswith("client-")]:
            toxiproxy.unroute(route)
    lines = usage_lines(proxy)
    charged = {counter: sum(line.get(counter, 0) for line in lines) for counter in ("bytes", "throttle_ms")}
    # nothing lost, nothing twice: the client recovered and every acknowledged record is in the topic once
    assert (unacknowledged, writer.failed) == (0, [])
    numbers = [int(bytes(record.value[:10])) for record in read_to_end(network.cluster.bootstrap, topic)]
    assert sorted(numbers) == sorted(writer.acknowledged) and len(set(numbers)) == len(numbers)
    assert len(numbers) >= BURST_RECORDS + RECORDS_PER_S * 2 * FAULT_S
    # the quota charged what went through and held it: throttled, and never faster than it allows
    assert charged["bytes"] >= len(numbers) * RECORD and charged["throttle_ms"] > 0
    allowed = RATE * (elapsed_s + WINDOWS - 1) * 1.1 + BATCH_BYTES  # the last request is charged whole
    print(f"{fault.name}: {len(numbers)} records in {elapsed_s:.1f} s; {charged['bytes']} bytes charged, "
          f"{allowed:.0f} allowed; {timeouts:.0f} request timeouts")
    assert len(numbers) * RECORD <= allowed
    if black_hole:  # the broker went silent for longer than request-timeout-seconds
        assert timeouts >= 1 and "the cluster sent nothing for a request in time" in proxy.log()


SLOW_CLUSTER = Fault("slow cluster", (("latency", "upstream", {"latency": 400}),
                                      ("latency", "downstream", {"latency": 400})))
"""The broker's side 800 ms a round trip: longer than the mutation throttle below, whatever the machine's speed."""


def test_a_mutation_whose_throttle_runs_out_at_the_cluster_holds_nothing_after_its_answer(network: Network,
                                                                                          tmp_path: Path) -> None:
    """CreateTopics v4 (permissive: throttled when it leaves the bucket below zero) for 23 partitions against
    ``controller_mutation_rate`` 2 (a bucket of 22): admitted, throttled 500 ms. Kafka gives a mutation's throttle as
    it answers, less the time the request spent at the cluster (``AbstractControllerMutationQuota.throttleTime``): the
    cluster takes 800 ms here, so none is left, and the connection goes on at once (it once waited for a mute that
    never came: until its idle timeout)."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "slow-mutations"\ncontroller_mutation_rate = 2\n')
    proxy = ProxyProcess(network.upstream, tmp_path / "proxy.log", "--quota-file", str(quota_file),
                         node_ids=network.cluster.node_ids).start()
    topic = f"late-{uuid.uuid4().hex[:8]}"
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            call(sock, Api.API_VERSIONS, 0, client_id="slow-mutations")  # the proxy's link to the cluster is open
            assert network.toxiproxy.lay(SLOW_CLUSTER, "broker-")
            started = time.monotonic()
            created = call(sock, Api.CREATE_TOPICS, 4, client_id="slow-mutations", timeout_ms=30_000,
                           validate_only=False, topics=[{"name": topic, "num_partitions": 23, "replication_factor": 1,
                                                         "assignments": [], "configs": []}])
            waited_s = time.monotonic() - started
            assert created.topics[0].error_code == 0  # type: ignore[attr-defined]
            assert waited_s >= 0.8 and created.throttle_time_ms == 0, (waited_s, created)  # type: ignore[attr-defined]
            network.toxiproxy.heal()
            described = call(sock, Api.METADATA, 12, client_id="slow-mutations",
                             topics=[{"topic_id": None, "name": topic}], allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False)
            assert [t.name for t in described.topics] == [topic]  # type: ignore[attr-defined]
    finally:
        network.toxiproxy.heal()
        proxy.stop()
