"""The usage log through the cluster (``[usage] topic``): every line of the proxy's usage files reaches the topic,
once each, keyed by the member, though the cluster refused them for a while; no client may write the topic. A fleet's
report made from the topic, through Spark's Kafka source, is the report of its members' files put together."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from quotas.usage_record import POSITION_HEADER
from tests.integration.test_produce_quotas import metrics, produce
from tests.support import Cluster, ProxyProcess, proxy_command, read_to_end, wait_until

pytestmark = pytest.mark.integration
MIB = 1 << 20
REFUSING = {"max.message.bytes": "64"}
"""Under any usage line: the cluster answers MESSAGE_TOO_LARGE to every batch, however small the proxy makes it."""


def librdkafka_produce(bootstrap: str, topic: str, count: int) -> list[KafkaError | None]:
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "rdkafka", "linger.ms": 5,
                         "message.timeout.ms": 30_000})
    for _ in range(count):
        producer.produce(topic, b"r" * 100, on_delivery=lambda error, _: reports.append(error))
        producer.poll(0)
    assert producer.flush(60) == 0
    return reports


def test_every_usage_line_reaches_the_topic_once_after_the_cluster_refused_them_for_a_while(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    usage_topic = f"usage-log-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(usage_topic, 1, 1, topic_configs=REFUSING)])
    config = tmp_path / "proxy.toml"
    config.write_text(f'[usage]\ntopic = "{usage_topic}"\n')
    proxy = own_proxy("--config", str(config))
    announced = f"usage log: appending to topic {usage_topic} as "
    member = next(line.split(announced, 1)[1] for line in proxy.wait_for_log(announced).splitlines()
                  if announced in line)

    admin.create_topics([NewTopic(topic, 1, 1)])
    produce(proxy.bootstrap, topic, "kafka-python", 1)
    assert librdkafka_produce(proxy.bootstrap, topic, 200) == [None] * 200
    wait_until(lambda: metrics(proxy).get("kafka_quota_proxy_usage_topic_failures_total", 0) >= 2, 30,
               "the cluster refusing the usage lines")
    waiting = metrics(proxy)
    assert waiting["kafka_quota_proxy_usage_topic_reachable"] == 0
    assert waiting["kafka_quota_proxy_usage_topic_unsent_bytes"] > 0
    assert waiting["kafka_quota_proxy_usage_topic_lines_sent_total"] == 0

    # a client may not write the proxy's topic, nor reach it any other way
    assert [error.code() if error else None for error in librdkafka_produce(proxy.bootstrap, usage_topic, 1)] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED]

    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, usage_topic,
                                        configs={"max.message.bytes": "1048588"})])
    admin.close()
    wait_until(lambda: metrics(proxy)["kafka_quota_proxy_usage_topic_unsent_bytes"] == 0, 60,
               "the waiting usage lines sent")
    produce(proxy.bootstrap, topic, "after", 1)  # lines written once the topic takes them go too
    assert proxy.stop() == 0, proxy.log()  # the last second is written, then sent

    written = [line for path in sorted((proxy.state_dir / "usage").glob("usage-*.jsonl"))
               for line in path.read_bytes().splitlines()]
    records = read_to_end(broker.bootstrap, usage_topic)
    assert Counter(record.value for record in records) == Counter(written)
    assert len({dict(record.headers)[POSITION_HEADER] for record in records}) == len(records)  # each line once
    assert {record.key for record in records} == {member.encode()}
    clients = {json.loads(line).get("client_id") for line in written}
    assert {"kafka-python", "rdkafka", "after"} <= clients


KAFKA_CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
"""Spark's Kafka source for the report: the newest Maven Central serves here (none of Spark 4.3 yet), which reads
with the Spark installed (4.3.0)."""


REPORTS = """
import json, sys
from pipeline.job import main
sys.exit(max(main(arguments) for arguments in json.loads(sys.argv[1])))
"""
"""``kafka-quota-proxy report``'s main, once for each list of arguments, in one interpreter: one Spark, started once
(its first job takes most of a report's time), for reports this test compares."""


def reports(tmp_path: Path, *sources: tuple[str, ...]) -> list[Any]:
    """The report of each of ``sources`` (``--usage`` values), or what each said when it failed."""
    runs = [[part for source in usage for part in ("--usage", source)] + ["--kafka-connector", KAFKA_CONNECTOR,
             "--out", str(tmp_path / f"report-{index}"), "--master", "local[1]", "--min-seconds", "1"]
            for index, usage in enumerate(sources)]
    done = subprocess.run([sys.executable, "-c", REPORTS, json.dumps(runs)], capture_output=True, text=True,
                          timeout=600)
    return [json.loads((tmp_path / f"report-{index}" / "summary.json").read_text())
            if (tmp_path / f"report-{index}" / "summary.json").exists() else done for index in range(len(sources))]


def test_a_fleets_report_from_its_topic_equals_the_report_of_its_members_files_a_dead_ones_included(
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    fleet = uuid.uuid4().hex[:8]
    usage_topic = f"usage-log-{fleet}"
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[settings]\n"quota.scope" = "cluster"\n'
                          '[[quota]]\nuser = "<default>"\nproducer_byte_rate = 100000000\n')

    def member(name: str) -> tuple[str, str, str, str]:
        config = tmp_path / f"{name}.toml"
        config.write_text(f'[fleet]\ntopic = "usage-{fleet}"\nquotas-topic = "quotas-{fleet}"\n'
                          f'instance-id = "{name}"\n[usage]\ntopic = "{usage_topic}"\n')
        return "--quota-file", str(quota_file), "--config", str(config)

    proxies = [own_proxy(*member(f"proxy-{index}")) for index in range(3)]
    KafkaAdminClient(bootstrap_servers=broker.bootstrap).create_topics([NewTopic(topic, 1, 1)])
    for index, proxy in enumerate(proxies):
        produce(proxy.bootstrap, topic, f"through-{index}", 1)
    assert librdkafka_produce(proxies[0].bootstrap, topic, 100) == [None] * 100
    dying = proxies[2]
    produce(dying.bootstrap, topic, "until-killed", 1)
    # killed once its file has the traffic (a second's counters die with it before), maybe before it was sent
    wait_until(lambda: any(b'"until-killed"' in path.read_bytes()
                           for path in (dying.state_dir / "usage").glob("usage-*.jsonl")), 30, "its usage written")
    assert dying.stop(signal.SIGKILL) == -signal.SIGKILL
    # a new member on the dead one's disk (a pod replaced, its volume kept) sends what the dead one had not
    replacement = ProxyProcess(broker.bootstrap, dying.log_path, *member("proxy-2-replacement"),
                               node_ids=broker.node_ids).start()
    try:
        produce(replacement.bootstrap, topic, "through-replacement", 1)
        wait_until(lambda: metrics(replacement).get("kafka_quota_proxy_usage_topic_reachable") == 1, 30,
                   "the replacement appending")
    finally:
        assert replacement.stop() == 0, replacement.log()
    for proxy in proxies[:2]:
        assert proxy.stop() == 0, proxy.log()

    created = KafkaAdminClient(bootstrap_servers=broker.bootstrap).describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, usage_topic)])
    assert next(iter(created.values()))[usage_topic]["retention.ms"]["value"] == str(7 * 86_400_000)  # the log's
    # a line sent again (its place and bytes: counted once), another line at that place (a crash lost the first from
    # the file: counted), and what another writer appended: a record that is no usage line, one with headers of its own
    first = read_to_end(broker.bootstrap, usage_topic)[0]
    strangers = Producer({"bootstrap.servers": broker.bootstrap})
    strangers.produce(usage_topic, first.value, first.key, headers=first.headers)
    strangers.produce(usage_topic, b"not a line of the files", first.key, headers=first.headers)
    strangers.produce(usage_topic, b"not a usage line")
    strangers.produce(usage_topic, b'{"time": "soon"}', headers=[("trace", b"1")])
    assert strangers.flush(30) == 0
    from_topic, from_files, no_topic = reports(
        tmp_path, (f"kafka://{broker.bootstrap}/{usage_topic}",),
        tuple(str(proxy.state_dir / "usage") for proxy in proxies), (f"kafka://{broker.bootstrap}/no-such-topic",))
    counted = ("lines", "malformed_lines")
    assert {key: value for key, value in from_topic.items() if key not in counted} == {
        key: value for key, value in from_files.items() if key not in counted}
    assert [from_topic[key] - from_files[key] for key in counted] == [3, 3]  # the three others: counted, left out
    clients = {principal["client_id"]: principal for principal in from_topic["principals"]}
    assert {"through-0", "through-1", "through-2", "until-killed", "through-replacement", "rdkafka"} <= set(clients)
    assert clients["until-killed"]["total_bytes"] > 0  # the dead member's traffic
    assert no_topic.returncode == 2
    assert f"no such topic: kafka://{broker.bootstrap}/no-such-topic" in no_topic.stderr, no_topic.stderr[-3000:]


def test_a_connector_that_cannot_be_resolved_is_said_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([*proxy_command(), "report", "--usage", "kafka://127.0.0.1:9/usage", "--kafka-connector",
                           "org.apache.spark:spark-sql-kafka-0-10_2.13:0.0.0-no-such-version", "--out",
                           str(tmp_path / "report"), "--master", "local[1]"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == (
        "kafka-quota-proxy report: Spark's Kafka connector org.apache.spark:spark-sql-kafka-0-10_2.13:0.0.0-no-such-"
        "version could not be resolved from Maven Central (Spark's output above says why): name one it serves with "
        "--kafka-connector (for Spark 4.x, org.apache.spark:spark-sql-kafka-0-10_2.13:VERSION), or reach Maven "
        "Central")
