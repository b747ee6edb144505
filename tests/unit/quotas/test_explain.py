"""``quotas explain``: which quota applies to a client, at which of Kafka's levels, in which mode, set where."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from proxy.cli import admin
from proxy.state.quota_service import QuotaService
from quotas.config import DEFAULT, QuotaConfigError, QuotaEntity, QuotaMode, QuotaType, load_quota_file
from quotas.explain import LEVELS, Explanation, explain, parse_client
from quotas.overrides import ALTERED_ORIGIN, OVERRIDES_FILE, overlaid

QUOTAS = """[settings]
"quota.mode" = "observe"

[[quota]]
user = "alice"
producer_byte_rate = 1048576
producer_ids_rate = 2
mode = "enforce"

[[quota]]
user = "<default>"
client-id = "app"
producer_byte_rate = 2000

[[quota]]
client-id = "<default>"
consumer_byte_rate = 4000

[[quota]]
ip = "10.0.0.7"
connection_creation_rate = 5
"""


@pytest.fixture
def quota_file(tmp_path: Path) -> Path:
    path = tmp_path / "quotas.toml"
    path.write_text(QUOTAS)
    return path


def by_type(quota_file: Path, user: str, client_id: str, ip: str | None = None) -> dict[QuotaType, Explanation]:
    return {e.quota_type: e for e in explain(load_quota_file(quota_file), parse_client(user, client_id, ip))}


def test_each_quota_type_names_its_entity_level_mode_and_line(quota_file: Path) -> None:
    alice = by_type(quota_file, "alice", "app", "10.0.0.7")
    produce = alice[QuotaType.PRODUCER_BYTE_RATE]
    assert (produce.entity, produce.limit, produce.mode, produce.origin, produce.level) == (
        QuotaEntity("alice"), 1048576, QuotaMode.ENFORCE, f"{quota_file} line 4", f"level 3 of 8: {LEVELS[2]}")
    fetch = alice[QuotaType.CONSUMER_BYTE_RATE]
    assert (fetch.entity, fetch.mode, fetch.level) == (
        QuotaEntity(None, DEFAULT), QuotaMode.OBSERVE, f"level 8 of 8: {LEVELS[7]}")
    assert alice[QuotaType.CONTROLLER_MUTATION_RATE].entity is None
    assert alice[QuotaType.PRODUCER_IDS_RATE].limit == 2
    assert alice[QuotaType.CONNECTION_CREATION_RATE].level == "the IP's own"
    bob = by_type(quota_file, "bob", "app")
    assert bob[QuotaType.PRODUCER_BYTE_RATE].level == f"level 4 of 8: {LEVELS[3]}"
    assert bob[QuotaType.PRODUCER_IDS_RATE].entity is None
    assert bob[QuotaType.CONNECTION_CREATION_RATE].entity is None


def test_a_quota_set_through_the_api_says_so(quota_file: Path, tmp_path: Path) -> None:
    overrides_path = tmp_path / OVERRIDES_FILE
    config = overlaid(load_quota_file(quota_file), {QuotaEntity("alice"): {QuotaType.PRODUCER_BYTE_RATE: 500.0}},
                      str(overrides_path))
    produce, = (e for e in explain(config, parse_client("alice", "")) if e.quota_type is QuotaType.PRODUCER_BYTE_RATE)
    assert (produce.limit, produce.mode, produce.origin) == (500, QuotaMode.ENFORCE,
                                                             f"{ALTERED_ORIGIN} ({overrides_path})")


@pytest.mark.parametrize(("user", "client_id", "ip", "message"), [
    ("", "app", None, "user: a principal name is not empty"),
    (DEFAULT, "app", None, "user: <default> names the default entity"),
    ("alice", DEFAULT, None, "client-id: <default> names the default entity"),
    ("alice", "app", "10.0.0.300", "ip must be an IP address"),
    ("alice", "app", DEFAULT, "ip: <default> names the default entity"),
])
def test_a_malformed_client_is_a_clear_error(user: str, client_id: str, ip: str | None, message: str) -> None:
    with pytest.raises(QuotaConfigError, match=message):
        parse_client(user, client_id, ip)


def test_the_command_prints_text_or_json_and_reads_the_state_directory(
        quota_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / OVERRIDES_FILE).write_text(json.dumps(
        {"entries": [{"user": "alice", "quotas": {"controller_mutation_rate": 3}}]}))
    assert admin.main(["quotas", "explain", "--quota-file", str(quota_file), "--state-dir", str(state),
                       "--user", "alice", "--client-id", "app"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Quotas of user 'alice', client id 'app':"
    assert lines[1].split()[:4] == ["producer_byte_rate", "1048576", "enforce", "user=alice"]
    assert lines[3].split()[:4] == ["controller_mutation_rate", "3", "enforce", "user=alice"]  # the entry's mode
    assert lines[3].endswith(f"set in {ALTERED_ORIGIN} ({state / OVERRIDES_FILE})")
    assert admin.main(["quotas", "explain", "--quota-file", str(quota_file), "--json", "--ip", "::ffff:10.0.0.7"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["user"] == "ANONYMOUS" and answer["ip"] == "10.0.0.7"
    assert answer["quotas"][0] == {"quota_type": "producer_byte_rate", "quota": None}
    assert answer["quotas"][4]["entity"] == {"ip": "10.0.0.7"} and answer["quotas"][4]["mode"] == "observe"


@pytest.mark.parametrize(("arguments", "message"), [
    ([], "explain needs --quota-file, --state-dir or both"),
    (["--quota-file", "{missing}"], "cannot read"),
    (["--quota-file", "{file}", "--user", DEFAULT], "<default> names the default entity"),
    (["--state-dir", "{file}"], "not a directory"),
])
def test_the_command_explains_what_is_wrong(quota_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            arguments: list[str], message: str) -> None:
    filled = [argument.format(file=quota_file, missing=tmp_path / "none.toml") for argument in arguments]
    assert admin.main(["quotas", "explain", *filled]) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_mode_in_the_file_is_named(quota_file: Path) -> None:
    quota_file.write_text(QUOTAS.replace('mode = "enforce"', 'mode = "shadow"'))
    with pytest.raises(QuotaConfigError, match=r"#1 \(user=alice\): mode: one of enforce, observe, got 'shadow'"):
        load_quota_file(quota_file)


def test_given_a_topic_its_topic_quotas_follow_with_their_level(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "quotas.toml"
    path.write_text('[[quota]]\ntopic = "orders"\nproducer_byte_rate = 1000000\n'
                    '[[quota]]\nuser = "alice"\ntopic = "<default>"\nconsumer_byte_rate = 500\nmode = "observe"\n')
    answers = explain(load_quota_file(path), parse_client("alice", "app", topic="orders"))
    produce, fetch = answers[-2:]
    assert (produce.topic, produce.entity, produce.limit, produce.level) == (
        "orders", QuotaEntity(topic="orders"), 1000000, "topic level 5 of 6: the topic alone (shared by every user)")
    assert (fetch.entity, fetch.mode, fetch.level) == (QuotaEntity("alice", topic=DEFAULT), QuotaMode.OBSERVE,
                                                       "topic level 2 of 6: user and the default topic")
    bob = explain(load_quota_file(path), parse_client("bob", "app", topic="orders"))[-1]
    assert bob.entity is None and bob.text().endswith("no quota of topic orders")
    assert len(explain(load_quota_file(path), parse_client("alice", "app"))) == len(answers) - 2  # no topic asked
    with pytest.raises(QuotaConfigError, match="topic must be a Kafka topic name"):
        parse_client("alice", "app", topic="a/b")
    assert admin.main(["quotas", "explain", "--quota-file", str(path), "--topic", "orders", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["topic"] == "orders"
    assert answer["quotas"][-2]["entity"] == {"topic": "orders"} and answer["quotas"][-2]["topic"] == "orders"


TENANTS = """
[[tenant]]
name = "payments"
users = ["ledger"]
user-prefix = "pay-"
topic-prefix = "payments."
max_partitions = 200
topics-only-under-prefix = true

[[tenant]]
name = "search"
users = ["indexer"]
"""


def test_the_tenant_a_user_belongs_to_is_named_with_how_and_its_caps(
        quota_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quota_file.write_text(QUOTAS + TENANTS)
    assert admin.main(["quotas", "explain", "--quota-file", str(quota_file), "--user", "pay-api"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "  tenant payments (by its user-prefix 'pay-'), set in [[tenant]] #1 (payments): owns the topics under "
        "'payments.' (at most 200 partitions, its users create topics only there)")
    assert admin.main(["quotas", "explain", "--quota-file", str(quota_file), "--user", "indexer"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "  tenant search (by its users), set in [[tenant]] #2 (search): owns no topics")
    assert admin.main(["quotas", "explain", "--quota-file", str(quota_file), "--user", "ledger", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tenant"] == {
        "name": "payments", "member_by": "users", "topic_prefix": "payments.", "max_partitions": 200,
        "max_topics": None, "topics_only_under_prefix": True, "origin": "[[tenant]] #1 (payments)"}
    assert admin.main(["quotas", "explain", "--quota-file", str(quota_file), "--user", "alice", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tenant"] is None
    assert admin.main(["quotas", "explain", "--quota-file", str(quota_file), "--user", "alice"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "  no tenant"


def test_a_running_proxys_explanation_names_the_tenant_too(quota_file: Path) -> None:
    quota_file.write_text(QUOTAS + TENANTS)
    answer = QuotaService(quota_file, CollectorRegistry()).explain(parse_client("pay-api", "app"))
    assert answer["tenant"] == {"name": "payments", "member_by": "user-prefix 'pay-'", "topic_prefix": "payments.",
                                "max_partitions": 200, "max_topics": None, "topics_only_under_prefix": True,
                                "origin": "[[tenant]] #1 (payments)"}
    assert [quota["quota_type"] for quota in answer["quotas"]][:2] == ["producer_byte_rate", "consumer_byte_rate"]
