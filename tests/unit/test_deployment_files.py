"""docker-compose.yml cannot run here (no Docker engine), so check what can be checked."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from proxy.cluster.fleet import FleetSettings
from proxy.producer_ids.settings import AllocatorSettings
from proxy.settings.loading import build_parser, load_config
from quotas.config import QuotaScope, load_quota_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("proxy", ["proxy", "proxy-2"])
def test_compose_proxy_command_is_a_valid_cli_invocation_and_publishes_every_broker_port(proxy: str) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    # the image's /app is this repository (Dockerfile: COPY examples examples)
    command = [argument.replace("=/app/", f"={ROOT}/") for argument in services[proxy]["command"]]
    config = load_config(build_parser().parse_args(command))
    assert config.admin_principals == {"User:ANONYMOUS"}
    node_ids = sorted(int(services[name]["environment"]["KAFKA_NODE_ID"]) for name in services
                      if name.startswith("kafka-"))
    assert node_ids == [1, 2, 3]
    assert [str(hp) for hp in config.upstream] == [f"kafka-{n}:9092" for n in node_ids]

    published: set[int] = set()
    for mapping in services[proxy]["ports"]:
        host_side = mapping.split(":")[0]
        low, _, high = host_side.partition("-")
        published.update(range(int(low), int(high or low) + 1))
    assert config.listen.port in published
    assert {config.broker_port_base + n for n in node_ids} <= published
    assert config.metrics_listen is not None and config.metrics_listen.port in published
    for path in ("examples/quotas.toml", "examples/proxy.toml", "examples/prometheus.yml", "Dockerfile"):
        assert (ROOT / path).exists()


def test_the_nodes_reach_each_controller_through_a_forwarding_proxy() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    voters = {}
    for name, service in services.items():
        if name.startswith("kafka-"):
            voters[name] = service["environment"]["KAFKA_CONTROLLER_QUORUM_VOTERS"]
    assert len(set(voters.values())) == 1, "every node names the same voters"
    for voter in next(iter(voters.values())).split(","):
        node_id, _, address = voter.partition("@")
        host, _, port = address.partition(":")
        assert host == f"controller-proxy-{node_id}"
        command = [argument.replace("=/app/", f"={ROOT}/") for argument in services[host]["command"]]
        config = load_config(build_parser().parse_args(command))
        assert config.listen.port == int(port)
        assert [str(hp) for hp in config.upstream] == [f"kafka-{node_id}:9093"]  # the node's CONTROLLER listener
        settings = AllocatorSettings.from_config(config)
        assert settings.mode == "forward" and settings.cluster_principals == {"User:ANONYMOUS"}


def test_every_broker_is_published_for_the_tests_against_apache_kafka() -> None:
    """`make test-cluster` in .github/workflows/apache-kafka.yml reaches each broker on localhost:1909N."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    workflow = yaml.safe_load((ROOT / ".github/workflows/apache-kafka.yml").read_text())
    bootstrap = workflow["jobs"]["apache-kafka"]["env"]["KAFKA_BOOTSTRAP"].split(",")
    brokers = {name: service for name, service in compose["services"].items() if name.startswith("kafka-")}
    assert all(service["image"].startswith("apache/kafka:4.") for service in brokers.values())
    advertised = set()
    for service in brokers.values():
        environment = service["environment"]
        assert environment["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft
        external = next(listener for listener in environment["KAFKA_ADVERTISED_LISTENERS"].split(",")
                        if listener.startswith("EXTERNAL://"))
        host_port = external.removeprefix("EXTERNAL://")
        port = host_port.rsplit(":", 1)[1]
        assert f"{port}:{port}" in service["ports"]
        assert f"EXTERNAL://:{port}" in environment["KAFKA_LISTENERS"]
        advertised.add(host_port)
    assert set(bootstrap) == advertised
    steps = workflow["jobs"]["apache-kafka"]["steps"]
    assert any(step.get("run") == "docker compose up -d " + " ".join(sorted(brokers)) for step in steps)
    assert any("make test-cluster" in step.get("run", "") for step in steps)


def test_the_two_compose_proxies_are_distinct_members_of_one_fleet_and_both_scraped() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    configs = [load_config(build_parser().parse_args(
        [argument.replace("=/app/", f"={ROOT}/") for argument in compose["services"][name]["command"]]))
        for name in ("proxy", "proxy-2")]
    fleets = [FleetSettings.from_config(config) for config in configs]
    assert fleets[0] is not None and fleets[1] is not None and fleets[0].topic == fleets[1].topic
    assert fleets[0].instance(configs[0]) != fleets[1].instance(configs[1])
    assert all(load_quota_file(config.quota_file).settings.quota_scope is QuotaScope.CLUSTER
               for config in configs if config.quota_file is not None)
    prometheus = yaml.safe_load((ROOT / "examples/prometheus.yml").read_text())
    targets = prometheus["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == [f"proxy:{configs[0].metrics_listen.port}", f"proxy-2:{configs[1].metrics_listen.port}"]  # type: ignore[union-attr]


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: install Debian's prometheus package (make test does, as root)"
    return path


def test_the_alerting_rules_pass_promtool_and_their_own_tests() -> None:
    for arguments in (["check", "rules", "prometheus-rules.yml"], ["test", "rules", "prometheus-rules-test.yml"]):
        checked = subprocess.run([promtool(), *arguments], cwd=ROOT / "examples", capture_output=True, text=True,
                                 timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    prometheus = yaml.safe_load((ROOT / "examples/prometheus.yml").read_text())
    assert prometheus["rule_files"] == ["prometheus-rules.yml"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert "./examples/prometheus-rules.yml:/etc/prometheus/prometheus-rules.yml:ro" in \
        compose["services"]["prometheus"]["volumes"]


def test_the_dashboard_queries_only_metrics_the_proxy_serves() -> None:
    """Names only: tests/integration/test_rollout.py has a real Prometheus evaluate every expression."""
    readme = (ROOT / "docs" / "operations.md").read_text()
    dashboard = json.loads((ROOT / "examples/grafana/kafka-quota-proxy.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    assert len(expressions) >= 20
    for expression in expressions:
        for name in re.findall(r"\b(kafka_[a-z_]+)", expression):
            documented = re.sub(r"(_total|_bucket)$", "", name)
            assert f"`{documented}" in readme, f"{name} (in the dashboard) is not in docs/operations.md's tables"
