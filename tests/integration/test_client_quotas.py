"""AlterClientQuotas / DescribeClientQuotas answered by the proxy, through its `quotas` command."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from protocol.apis import Api
from tests.integration.test_fleet import produce_throttle_ms
from tests.integration.test_mutation_quotas import THROTTLING_QUOTA_EXCEEDED, creatable
from tests.integration.test_produce_quotas import create_topic
from tests.support import (
    Cluster,
    ProxyProcess,
    admin_config,
    call,
    encode_request,
    proxy_command,
    read_frame,
    wait_until,
)

pytestmark = pytest.mark.integration
INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35


def quotas_command(proxy: ProxyProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*proxy_command(), "quotas", *args, "--bootstrap-server", proxy.bootstrap],
                          capture_output=True, text=True, timeout=60)


def create_two_topics(proxy: ProxyProcess, prefix: str) -> list[int]:
    """Error codes of one strict CreateTopics of two 12-partition topics by client id "admin"."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        response = call(sock, Api.CREATE_TOPICS, 7, client_id="admin", timeout_ms=30_000, validate_only=False,
                        topics=[creatable(f"{prefix}-a", 12), creatable(f"{prefix}-b", 12)])
    return [t.error_code for t in response.topics]  # type: ignore[attr-defined]


def test_altered_quota_is_enforced_described_and_survives_a_restart(own_proxy, topic: str,  # type: ignore[no-untyped-def]
                                                                   tmp_path: Path) -> None:
    proxy = own_proxy(*admin_config(tmp_path))
    assert create_two_topics(proxy, f"{topic}-before") == [0, 0]

    altered = quotas_command(proxy, "alter", "--entity-type", "clients", "--entity-name", "admin",
                             "--add-config", "controller_mutation_rate=1")
    assert altered.returncode == 0, altered.stderr
    assert "Completed updating config for client-id 'admin'" in altered.stdout
    # burst 11 x 1 s x 1 = 11: the first topic (12) drives the bucket below zero, the second is refused
    assert create_two_topics(proxy, f"{topic}-after") == [0, THROTTLING_QUOTA_EXCEEDED]

    described = quotas_command(proxy, "describe", "--entity-type", "clients", "--entity-name", "admin")
    assert described.returncode == 0, described.stderr
    assert described.stdout.strip() == "Quota configs for client-id 'admin' are controller_mutation_rate=1"

    proxy.stop()
    restarted = own_proxy("--state-dir", str(proxy.state_dir), *admin_config(tmp_path))
    described = quotas_command(restarted, "describe", "--entity-type", "clients")
    assert "Quota configs for client-id 'admin' are controller_mutation_rate=1" in described.stdout
    assert create_two_topics(restarted, f"{topic}-restarted") == [0, THROTTLING_QUOTA_EXCEEDED]

    deleted = quotas_command(restarted, "alter", "--entity-type", "clients", "--entity-name", "admin",
                             "--delete-config", "controller_mutation_rate")
    assert deleted.returncode == 0, deleted.stderr
    assert quotas_command(restarted, "describe", "--entity-type", "clients").stdout == ""
    assert create_two_topics(restarted, f"{topic}-deleted") == [0, 0]


def test_api_override_wins_over_the_quota_file(own_proxy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nuser = "<default>"\nproducer_byte_rate = 1000000\nproducer_ids_rate = 5\n')
    proxy = own_proxy("--quota-file", str(quota_file), *admin_config(tmp_path))
    assert quotas_command(proxy, "alter", "--entity-type", "users", "--entity-default",
                          "--add-config", "producer_byte_rate=2000000,consumer_byte_rate=3000000").returncode == 0
    described = quotas_command(proxy, "describe", "--entity-type", "users", "--entity-default")
    assert described.stdout.strip() == ("Quota configs for the default user-principal are "
                                        "consumer_byte_rate=3000000,producer_byte_rate=2000000,producer_ids_rate=5")


def test_invalid_and_foreign_quota_changes_get_per_entry_errors(own_proxy, broker: Cluster, topic: str,  # type: ignore[no-untyped-def]
                                                                tmp_path: Path) -> None:
    proxy = own_proxy(*admin_config(tmp_path))
    bob, carol = f"bob-{topic}", f"carol-{topic}"  # unique: the cluster may be shared
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        response = call(sock, Api.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
            {"entity": [{"entity_type": "user", "entity_name": "alice"}],
             "ops": [{"key": "producer_ids_rate", "value": -1.0, "remove": False}]},
            {"entity": [{"entity_type": "client-id", "entity_name": "app"}],
             "ops": [{"key": "producer_ids_rate", "value": 1.0, "remove": False}]},
            {"entity": [{"entity_type": "user", "entity_name": bob}],
             "ops": [{"key": "request_percentage", "value": 1.0, "remove": False}]},
            {"entity": [{"entity_type": "user", "entity_name": carol}],
             "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False},
                     {"key": "consumer_byte_rate", "value": 2048.0, "remove": False}]},
        ])
        try:
            codes = [entry.error_code for entry in response.entries]  # type: ignore[attr-defined]
            # negative rate; PID quota on a client id; a key the cluster owns (forwarded to it); valid
            assert codes == [INVALID_REQUEST, INVALID_REQUEST, 0, 0]
            def described_user_quotas() -> set[tuple[str, str, float]]:
                described = call(sock, Api.DESCRIBE_CLIENT_QUOTAS, 1, strict=False,
                                 components=[{"entity_type": "user", "match_type": 2, "match": None}])
                return {(entry.entity[0].entity_name, value.key, value.value)  # type: ignore[attr-defined]
                        for entry in described.entries for value in entry.values}  # type: ignore[attr-defined]

            # the cluster describes its own quota once its metadata has it (a slow broker takes a moment)
            wait_until(lambda: (bob, "request_percentage", 1.0) in described_user_quotas(), 15,
                       "the cluster to describe its own quota")
            entries = described_user_quotas()
            assert {(carol, "producer_byte_rate", 1024.0), (carol, "consumer_byte_rate", 2048.0)} <= entries
            assert (bob, "request_percentage", 1.0) in entries  # the cluster's own, described by the cluster
            assert not any(name == "alice" for name, _, _ in entries)
            assert cluster_quotas(broker, bob) == {"request_percentage": 1.0}
            assert cluster_quotas(broker, carol) == {}, "the proxy's keys stay in the proxy"
        finally:
            remove_cluster_quota(broker, bob, "request_percentage")  # leave the shared cluster as it was


def cluster_quotas(cluster: Cluster, user: str) -> dict[str, float]:
    """What the cluster itself holds for ``user`` (asked directly, not through a proxy)."""
    with socket.create_connection((cluster.host, cluster.port), timeout=30) as sock:
        described = call(sock, Api.DESCRIBE_CLIENT_QUOTAS, 1, strict=True,
                         components=[{"entity_type": "user", "match_type": 0, "match": user}])
    return {value.key: value.value for entry in described.entries for value in entry.values}  # type: ignore[attr-defined]


def remove_cluster_quota(cluster: Cluster, user: str, key: str) -> None:
    with socket.create_connection((cluster.host, cluster.port), timeout=30) as sock:
        call(sock, Api.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
            {"entity": [{"entity_type": "user", "entity_name": user}],
             "ops": [{"key": key, "value": 0.0, "remove": True}]}])


def test_without_an_admin_table_nobody_may_alter_or_describe_quotas(own_proxy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nuser = "<default>"\nproducer_byte_rate = 1000000\n')
    proxy = own_proxy("--quota-file", str(quota_file))
    removed = quotas_command(proxy, "alter", "--entity-type", "users", "--entity-default",
                             "--delete-config", "producer_byte_rate")
    assert removed.returncode == 1 and "error 31" in removed.stderr, removed.stderr
    described = quotas_command(proxy, "describe", "--entity-type", "users")
    assert described.returncode == 1 and "error 31" in described.stderr, described.stderr
    proxy.stop()
    allowed = own_proxy("--quota-file", str(quota_file), "--state-dir", str(proxy.state_dir), *admin_config(tmp_path))
    described = quotas_command(allowed, "describe", "--entity-type", "users")
    assert described.stdout.strip() == "Quota configs for the default user-principal are producer_byte_rate=1000000"


def test_a_clients_api_versions_request_does_not_change_what_the_proxy_forwards(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    # after a client's ApiVersions v5 (which the cluster answers with UNSUPPORTED_VERSION and a list naming
    # ApiVersions alone) the proxy must still forward a cluster-owned key to the cluster
    user = f"bob-{topic}"
    proxy = own_proxy(*admin_config(tmp_path))
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        newest = bytearray(encode_request(Api.API_VERSIONS, 3, correlation_id=7, client_id="probe",
                                          client_software_name="probe", client_software_version="1"))
        newest[6:8] = (5).to_bytes(2, "big")  # a version after the newest anyone serves
        sock.sendall(newest)
        read_frame(sock)
        answer = call(sock, Api.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
            {"entity": [{"entity_type": "user", "entity_name": user}],
             "ops": [{"key": "request_percentage", "value": 1.0, "remove": False}]}])
    try:
        assert [entry.error_code for entry in answer.entries] == [0]  # type: ignore[attr-defined]
        assert cluster_quotas(broker, user) == {"request_percentage": 1.0}
    finally:
        remove_cluster_quota(broker, user, "request_percentage")  # leave the shared cluster as it was


def test_a_tenants_budget_is_set_described_enforced_and_removed_with_the_quotas_command(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[tenant]]\nname = "ops"\nusers = ["ANONYMOUS"]\n')
    proxy = own_proxy("--quota-file", str(quota_file), *admin_config(tmp_path))
    create_topic(broker.bootstrap, topic)
    assert produce_throttle_ms(proxy, topic) == 0
    altered = quotas_command(proxy, "alter", "--entity-type", "tenants", "--entity-name", "ops",
                             "--add-config", "producer_byte_rate=100000")
    assert altered.returncode == 0, altered.stderr
    assert "Completed updating config for tenant 'ops'" in altered.stdout
    described = quotas_command(proxy, "describe", "--entity-type", "tenants")
    assert described.stdout.strip() == "Quota configs for tenant 'ops' are producer_byte_rate=100000"
    assert produce_throttle_ms(proxy, topic) > 0  # 1 MiB over at least 10 s: above 100 kB/s
    unknown = quotas_command(proxy, "alter", "--entity-type", "tenants", "--entity-name", "nobody",
                             "--add-config", "producer_byte_rate=100000")
    assert unknown.returncode == 1 and "no [[tenant]] of the quota file is named 'nobody'" in unknown.stderr
    removed = quotas_command(proxy, "alter", "--entity-type", "tenants", "--entity-name", "ops",
                             "--delete-config", "producer_byte_rate")
    assert removed.returncode == 0, removed.stderr
    assert quotas_command(proxy, "describe", "--entity-type", "tenants").stdout == ""
    assert produce_throttle_ms(proxy, topic) == 0
