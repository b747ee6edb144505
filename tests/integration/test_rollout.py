"""Rolling quotas out safely, against the real broker: observe mode lets every quota type's excess through and
counts what enforcement would have done; ``/quotas/explain`` says why; a live reload to enforce throttles the next
request; and a real Prometheus, scraping the proxy through that traffic, evaluates every expression of the
Grafana dashboard (``examples/grafana/kafka-quota-proxy.json``).

One proxy (a fleet member, so the fleet panels have series) carries the traffic of every test here: its module
fixture runs it once.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from protocol.apis import Api
from proxy.dev.apache_kafka import LOOPBACK, free_port
from tests.cluster_state import cluster_state, leave_as_found
from tests.fidelity import produce_throttle_ms
from tests.integration.test_produce_quotas import metrics, usage_totals
from tests.support import (
    Cluster,
    ProxyProcess,
    call,
    connect_to_leader,
    create_topic_on_one_broker,
    new_producer_id,
    produce_request,
    read_frame,
    record_batch,
)

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
OBSERVED, ENFORCED = "observed", "enforced"
QUOTAS = """
[settings]
"quota.mode" = "{mode}"
"producer.id.quota.window.num" = 2
"producer.id.quota.window.size.seconds" = 5

[[quota]]
client-id = "observed"
producer_byte_rate = 50000
consumer_byte_rate = 50000
controller_mutation_rate = 1

[[quota]]
client-id = "enforced"
producer_byte_rate = 20000
mode = "enforce"

[[quota]]
user = "ANONYMOUS"
producer_ids_rate = 0.2

[[quota]]
ip = "<default>"
connection_creation_rate = 1
mode = "observe"

[[tenant]]
name = "platform"
users = ["ANONYMOUS"]
topic-prefix = "rollout-"
max_partitions = 100000

[[quota]]
tenant = "platform"
request_rate = 100000
"""
"""Far below what the traffic sends: 50 kB/s has 500 kB of credit, 0.2 producer IDs/s two IDs, one mutation/s
eleven mutations, one connection/s ten connections. The ``enforced`` client is enforced and every connection's IP
observed whatever the file's mode (the switch to enforce must not close the test's own connections). The traffic's
tenant has a request-rate budget and a partition cap it never reaches: the dashboard's tenant panels read them."""
NEW_CONNECTIONS = 15
OBSERVED_RECORDS, PIPELINED_PRODUCERS = 1500, 6


@dataclass
class Traffic:
    proxy: ProxyProcess
    quota_file: Path
    topic: str
    pipelined_throttles_ms: list[int]
    created: list[tuple[list[int], int]]
    """Each CreateTopics burst's error codes and throttle."""
    connections_answered: int
    records_read: int
    records_read_by_librdkafka: int
    topics_created_by_librdkafka: int
    usage_ratios: dict[str, float]
    """Each quota type's usage ratio for the observed traffic, read right after that traffic (``usage_ratios_now``)."""
    metrics: dict[str, float]
    prometheus: str


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    assert path, "prometheus is missing: install Debian's prometheus package (make test does, as root)"
    return path


@pytest.fixture(scope="module")
def prometheus_for(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Starts a Prometheus scraping a proxy's /metrics every second; stopped with the module."""
    started: list[subprocess.Popen[bytes]] = []

    def start(proxy: ProxyProcess) -> str:
        directory = tmp_path_factory.mktemp("prometheus")
        (directory / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: proxy\n"
            f"    static_configs:\n      - targets: ['{LOOPBACK}:{proxy.metrics_port}']\n")
        address = f"{LOOPBACK}:{free_port()}"
        with open(directory / "prometheus.log", "wb") as log:
            started.append(subprocess.Popen(
                [prometheus_binary(), f"--config.file={directory / 'prometheus.yml'}",
                 f"--storage.tsdb.path={directory / 'data'}", f"--web.listen-address={address}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        url = f"http://{address}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as ready:
                    if ready.status == 200:
                        return url
            except OSError:
                pass
            assert started[-1].poll() is None, (directory / "prometheus.log").read_text()
            assert time.monotonic() < deadline, "Prometheus did not become ready"
            time.sleep(0.2)

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=30)


def pipelined_produce(sock: socket.socket, topic: str, batches: list[bytes], client_id: str) -> list[int]:
    """All requests sent before any answer is read; the answers' throttle times, in order."""
    sock.sendall(b"".join(produce_request(topic, batch, 100 + n, acks=1, client_id=client_id)
                          for n, batch in enumerate(batches)))
    return [produce_throttle_ms(read_frame(sock)) for _ in batches]


def librdkafka_consume(bootstrap: str, topic: str, records: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": OBSERVED, "group.id": f"g-{topic}",
                         "enable.auto.commit": False, "fetch.max.bytes": 4 << 20})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    read, deadline = 0, time.monotonic() + 30
    while read < records and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            read += 1
    consumer.close()
    return read


def librdkafka_produce(bootstrap: str, topic: str, client_id: str, records: int, idempotent: bool) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "enable.idempotence": idempotent,
                         "linger.ms": 5})
    failed: list[object] = []
    for _ in range(records):
        producer.produce(topic, b"o" * 1000, on_delivery=lambda error, _: error and failed.append(error))
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed


def usage_ratios_now(proxy: ProxyProcess, *quota_types: str) -> dict[str, float]:
    """The usage ratio of each of ``quota_types`` for the observed traffic, read right after that traffic: a rate over
    the last 10-11 s, which the rest of the traffic (the enforced client alone is held back ~5 s) can outlast on a busy
    machine."""
    seen = metrics(proxy)
    return {quota_type: seen.get(f"kafka_quota_proxy_usage_ratio{observed_labels(quota_type)}", 0.0)
            for quota_type in quota_types}


@pytest.fixture(scope="module")
def traffic(broker: Cluster, tmp_path_factory: pytest.TempPathFactory, prometheus_for: Any) -> Iterator[Traffic]:
    # the shared broker as the tests before found it: its per-test guard sees this module's topics as already there
    found = cluster_state(broker)
    directory = tmp_path_factory.mktemp("rollout")
    quota_file = directory / "quotas.toml"
    quota_file.write_text(QUOTAS.format(mode="observe"))
    fleet = directory / "fleet.toml"
    fleet.write_text(f'[fleet]\ntopic = "usage-{uuid.uuid4().hex[:8]}"\n')
    proxy = ProxyProcess(broker.bootstrap, directory / "proxy.log", "--quota-file", str(quota_file),
                         "--config", str(fleet), node_ids=broker.node_ids).start()
    try:
        proxy.wait_for_log("fleet: can read the usage topic", timeout_s=30)
        prometheus = prometheus_for(proxy)
        topic = f"rollout-{uuid.uuid4().hex[:8]}"
        create_topic_on_one_broker(broker, topic)

        # librdkafka, idempotent (a new producer ID), 1.5 MB at once: three times the byte quota's credit
        librdkafka_produce(proxy.bootstrap, topic, OBSERVED, OBSERVED_RECORDS, idempotent=True)
        # raw pipelined frames: six producers' first batches of 100 kB, each a new producer ID, none answered yet
        with connect_to_leader(proxy, topic) as sock:
            answers = [new_producer_id(sock) for _ in range(PIPELINED_PRODUCERS)]
            batches = [record_batch([b"r" * 1000] * 100, answer.producer_id, answer.producer_epoch, 0)
                       for answer in answers]
            pipelined = pipelined_produce(sock, topic, batches, OBSERVED)
        ratios = usage_ratios_now(proxy, "producer_byte_rate", "producer_ids_rate")
        # strict CreateTopics (v7): three bursts of 3 topics x 8 partitions, 72 mutations against 11 of credit
        created = []
        with socket.create_connection((LOOPBACK, proxy.port), timeout=30) as sock:
            for burst in range(3):
                answer: Any = call(sock, Api.CREATE_TOPICS, 7, correlation_id=burst, client_id=OBSERVED,
                                   timeout_ms=30_000, validate_only=False, topics=[
                                       {"name": f"{topic}-{burst}-{n}", "num_partitions": 8, "replication_factor": 1,
                                        "assignments": [], "configs": []} for n in range(3)])
                created.append(([result.error_code for result in answer.topics], answer.throttle_time_ms))
        ratios |= usage_ratios_now(proxy, "controller_mutation_rate")
        # fifteen connections in a row, each asking ApiVersions: over one connection/s, and all answered
        answered = 0
        for _ in range(NEW_CONNECTIONS):
            with socket.create_connection((LOOPBACK, proxy.port), timeout=30) as sock:
                answered += call(sock, Api.API_VERSIONS, 3, client_software_name="rollout",  # type: ignore[attr-defined]
                                 client_software_version="1").error_code == 0
        # kafka-python reads all 2.1 MB back at once
        consumer = KafkaConsumer(topic, bootstrap_servers=proxy.bootstrap, client_id=OBSERVED,
                                 auto_offset_reset="earliest", consumer_timeout_ms=20_000, fetch_max_bytes=4 << 20,
                                 max_partition_fetch_bytes=4 << 20)
        expected = OBSERVED_RECORDS + PIPELINED_PRODUCERS * 100
        read = sum(1 for _ in zip(range(expected), consumer, strict=False))
        consumer.close()
        # and librdkafka (pipelined fetches, throttle_time_ms ignored) reads them again
        read_again = librdkafka_consume(proxy.bootstrap, topic, expected)
        ratios |= usage_ratios_now(proxy, "consumer_byte_rate")
        # librdkafka's AdminClient: two more strict CreateTopics of 8 partitions, both created
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap, "client.id": OBSERVED})
        admin_created = [future.result(30) for future in admin.create_topics(
            [NewTopic(f"{topic}-admin-{n}", 8, 1) for n in range(2)], operation_timeout=30).values()]
        # the enforced client: 300 kB against 200 kB of credit, held back by the proxy
        librdkafka_produce(proxy.bootstrap, topic, ENFORCED, 300, idempotent=False)
        yield Traffic(proxy, quota_file, topic, pipelined, created, answered, read, read_again, len(admin_created),
                      ratios, metrics(proxy), prometheus)
    finally:
        proxy.stop()
        assert not leave_as_found(broker, found)  # deletes the topics made here, the fleet's usage topic among them


def entity_labels(quota_type: str, user: str = "", client_id: str = OBSERVED) -> str:
    return f'{{client_id="{client_id}",quota_type="{quota_type}",user="{user}"}}'


def observed_labels(quota_type: str) -> str:
    """The observed traffic's entity for ``quota_type``: its user's for producer IDs (a user quota), else its client
    id's."""
    if quota_type == "producer_ids_rate":
        return entity_labels(quota_type, "ANONYMOUS", "")
    return entity_labels(quota_type)


def explain(proxy: ProxyProcess, query: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{proxy.metrics_port}/quotas/explain?{query}",
                                    timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_observed_quotas_let_everything_through_and_count_what_enforcement_would_have_done(
        traffic: Traffic) -> None:
    assert traffic.pipelined_throttles_ms == [0] * PIPELINED_PRODUCERS
    assert traffic.created == [([0, 0, 0], 0)] * 3
    assert traffic.connections_answered == NEW_CONNECTIONS
    assert traffic.records_read == traffic.records_read_by_librdkafka == OBSERVED_RECORDS + PIPELINED_PRODUCERS * 100
    assert traffic.topics_created_by_librdkafka == 2
    seen = traffic.metrics
    for quota_type in ("producer_byte_rate", "consumer_byte_rate", "controller_mutation_rate", "producer_ids_rate"):
        labels = observed_labels(quota_type)
        assert seen.get(f"kafka_quota_proxy_observed_throttled_requests_total{labels}", 0) > 0, quota_type
        assert seen[f"kafka_quota_proxy_observed_throttle_time_ms_total{labels}"] > 0, quota_type
        assert f"kafka_quota_proxy_throttle_time_ms_total{labels}" not in seen, quota_type
        assert traffic.usage_ratios[quota_type] > 0, quota_type
    for quota_type in ("consumer_byte_rate", "controller_mutation_rate", "producer_ids_rate"):
        assert seen[f'kafka_quota_proxy_throttled_requests_total{{quota_type="{quota_type}"}}'] == 0
        assert seen[f'kafka_quota_proxy_rejected_requests_total{{quota_type="{quota_type}"}}'] == 0
    # eight producer IDs in the last 10 s against 0.2/s: the headroom an operator reads before enforcing
    assert traffic.usage_ratios["producer_ids_rate"] > 1
    observed = "kafka_quota_proxy_observed_throttled_requests_total"
    assert seen[f'{observed}{entity_labels("connection_creation_rate", "", "")}'] > 0
    assert all(value == 0 for name, value in seen.items() if name.startswith("kafka_quota_proxy_listener_connections")
               and ('outcome="throttled"' in name or 'outcome="refused"' in name))
    # the enforced client beside it was held back
    assert seen[f'kafka_quota_proxy_throttle_time_ms_total{entity_labels("producer_byte_rate", "", ENFORCED)}'] > 0
    totals = usage_totals(traffic.proxy, lambda totals: totals.get("observed_throttled"))
    assert totals.get("rejections", 0) == 0


def test_explain_answers_for_a_running_proxy_and_a_live_switch_to_enforce_throttles(traffic: Traffic) -> None:
    batch = record_batch([b"e" * 1000] * 100)
    with connect_to_leader(traffic.proxy, traffic.topic) as sock:
        # 600 kB now, past the 500 kB of credit and let through (observed): the rate explain reads and the switch to
        # enforce below finds, whatever of the module's traffic a busy machine has let leave the 11-s window
        assert pipelined_produce(sock, traffic.topic, [batch] * 6, OBSERVED) == [0] * 6
    status, answer = explain(traffic.proxy, f"client_id={OBSERVED}")
    assert status == 200 and answer["user"] == "ANONYMOUS" and answer["client_id"] == OBSERVED
    produce = next(quota for quota in answer["quotas"] if quota["quota_type"] == "producer_byte_rate")
    assert produce["mode"] == "observe" and produce["quota"] == 50000 and produce["entity"] == {"client-id": OBSERVED}
    assert produce["origin"] == f"{traffic.quota_file} line 7" and produce["rate"] > 0
    assert produce["usage_ratio"] == produce["rate"] / 50000
    enforced = explain(traffic.proxy, f"client_id={ENFORCED}")[1]["quotas"][0]
    assert enforced["mode"] == "enforce" and enforced["quota"] == 20000
    for bad in ("user=%3Cdefault%3E", "users=alice", "ip=300.1.1.1", "client_id=a&client_id=b"):
        status, answer = explain(traffic.proxy, bad)
        assert status == 400 and answer["error"], bad

    traffic.quota_file.write_text(QUOTAS.format(mode="enforce"))
    traffic.proxy.wait_for_log("reloaded", timeout_s=30)
    with connect_to_leader(traffic.proxy, traffic.topic) as sock:
        throttle_ms, = pipelined_produce(sock, traffic.topic, [batch], OBSERVED)
    assert throttle_ms > 0  # from the rate charged while it was observed
    assert explain(traffic.proxy, f"client_id={OBSERVED}")[1]["quotas"][0]["mode"] == "enforce"


def dashboard_expressions() -> list[str]:
    dashboard = json.loads((ROOT / "examples/grafana/kafka-quota-proxy.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]


def test_a_real_prometheus_evaluates_every_dashboard_expression_to_series(traffic: Traffic) -> None:
    """Each expression is asked of Prometheus' HTTP API until it returns series (a rate needs two scrapes after
    its counter first appeared)."""
    empty = set(dashboard_expressions())
    deadline = time.monotonic() + 30
    while empty and time.monotonic() < deadline:
        for expression in sorted(empty):
            query = urllib.parse.urlencode({"query": expression})
            with urllib.request.urlopen(f"{traffic.prometheus}/api/v1/query?{query}", timeout=10) as response:
                answer = json.load(response)
            assert answer["status"] == "success", (expression, answer)
            if answer["data"]["result"]:
                empty.discard(expression)
        time.sleep(1)
    assert not empty, f"no series for: {sorted(empty)}"
