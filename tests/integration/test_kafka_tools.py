"""Kafka's own tools and Java clients through the proxy: ``kafka-configs`` (``kafka.admin.ConfigCommand``) managing
the proxy's quotas, ``kafka-topics`` (the Java AdminClient) under the mutation quota, and Kafka's producer and
consumer performance tools, all run from the jars the launcher resolved."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fidelity import java_tool
from tests.integration.test_produce_quotas import usage_totals
from tests.support import ProxyProcess, admin_config

CONFIG_COMMAND = "kafka.admin.ConfigCommand"


@pytest.fixture
def proxy(own_proxy, tmp_path: Path) -> ProxyProcess:  # type: ignore[no-untyped-def]
    """A proxy where ANONYMOUS may manage quotas (``[admin]``) and client "topics" may create 2 partitions/s."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "topics"\ncontroller_mutation_rate = 2\n')
    return own_proxy("--quota-file", str(quota_file), *admin_config(tmp_path))  # type: ignore[no-any-return]


def configs(proxy: ProxyProcess, *args: str, succeeds: bool = True) -> str:
    return java_tool(CONFIG_COMMAND, "--bootstrap-server", proxy.bootstrap, *args, succeeds=succeeds)


def test_kafka_configs_manages_the_proxys_quotas(proxy: ProxyProcess) -> None:
    configs(proxy, "--alter", "--entity-type", "users", "--entity-name", "alice",
            "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    configs(proxy, "--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
            "--entity-name", "app", "--add-config", "producer_byte_rate=700000")
    configs(proxy, "--alter", "--entity-type", "users", "--entity-default", "--add-config", "producer_byte_rate=500000")
    configs(proxy, "--alter", "--entity-type", "clients", "--entity-name", "app",
            "--add-config", "controller_mutation_rate=10")
    configs(proxy, "--alter", "--entity-type", "ips", "--entity-name", "10.0.0.7",
            "--add-config", "connection_creation_rate=5")
    configs(proxy, "--alter", "--entity-type", "users", "--entity-name", "alice", "--delete-config",
            "consumer_byte_rate")
    assert "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0" in configs(
        proxy, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert "Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=700000.0" in configs(
        proxy, "--describe", "--entity-type", "users", "--entity-type", "clients")
    assert "Quota configs for the default user-principal are producer_byte_rate=500000.0" in configs(
        proxy, "--describe", "--entity-type", "users", "--entity-default")
    assert "Quota configs for client-id 'app' are controller_mutation_rate=10.0" in configs(
        proxy, "--describe", "--entity-type", "clients", "--entity-name", "app")
    assert "Quota configs for ip '10.0.0.7' are connection_creation_rate=5.0" in configs(
        proxy, "--describe", "--entity-type", "ips")


def test_kafka_configs_itself_refuses_producer_ids_rate(proxy: ProxyProcess) -> None:
    """Kafka's tool knows its own quota keys and refuses any other before it sends anything (docs/quotas.md: set it with
    ``kafka-quota-proxy quotas`` or in the quota file)."""
    output = configs(proxy, "--alter", "--entity-type", "users", "--entity-name", "alice",
                     "--add-config", "producer_ids_rate=10", succeeds=False)
    assert "Unexpected config names: Set(producer_ids_rate)" in output


def test_kafka_configs_without_an_admin_principal_is_refused(own_proxy) -> None:  # type: ignore[no-untyped-def]
    output = configs(own_proxy(), "--describe", "--entity-type", "users", succeeds=False)
    assert "ClusterAuthorizationException" in output


def test_kafka_topics_is_refused_past_the_mutation_quota_as_kafka_refuses_it(proxy: ProxyProcess, tmp_path: Path,
                                                                            topic: str) -> None:
    """Two topics of 60 partitions at 2/s (burst 22): the first is created, the second refused, and ``kafka-topics``
    reports it as it does against Kafka's own quota (it asks its AdminClient not to retry on a quota violation;
    run against a Kafka node holding the quota it printed the same line)."""
    client = tmp_path / "client.properties"
    client.write_text("client.id=topics\n")

    def create(name: str, succeeds: bool) -> str:
        return java_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", proxy.bootstrap, "--create",
                         "--topic", name, "--partitions", "60", "--replication-factor", "1",
                         "--command-config", str(client), succeeds=succeeds)

    assert f"Created topic {topic}-0." in create(f"{topic}-0", succeeds=True)
    assert "The throttling quota has been exceeded." in create(f"{topic}-1", succeeds=False)
    listed = java_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", proxy.bootstrap, "--list")
    assert f"{topic}-0" in listed.split() and f"{topic}-1" not in listed.split()
    totals = usage_totals(proxy, lambda totals: totals.get("mutations", 0) >= 60 and totals.get("rejections"))
    assert totals["mutations"] == 60 and totals["rejections"] == 1, totals


def test_kafka_performance_tools_run_through_the_proxy(proxy: ProxyProcess, topic: str) -> None:
    produced = java_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", "20000",
                         "--record-size", "1000", "--throughput", "-1", "--command-property",
                         f"bootstrap.servers={proxy.bootstrap}", "acks=all")
    assert re.search(r"^20000 records sent", produced, re.M), produced
    consumed = java_tool("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", proxy.bootstrap,
                         "--topic", topic, "--num-records", "20000", "--timeout", "60000")
    assert ", 20000, " in consumed, consumed
    usage_totals(proxy, lambda totals: totals.get("bytes", 0) >= 20000 * 1000)
