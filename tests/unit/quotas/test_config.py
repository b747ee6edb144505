from __future__ import annotations

from pathlib import Path

import pytest

from quotas.config import (
    DEFAULT,
    PidQuotaMode,
    QuotaConfig,
    QuotaConfigError,
    QuotaEntity,
    QuotaKey,
    QuotaScope,
    QuotaType,
    Window,
    load_quota_file,
)

BYTES = QuotaType.PRODUCER_BYTE_RATE

# Kafka's eight levels, most specific first, with the bucket each one shares.
LEVELS = [
    (QuotaEntity("alice", "billing"), QuotaKey("alice", "billing")),
    (QuotaEntity("alice", DEFAULT), QuotaKey("alice", "billing")),
    (QuotaEntity("alice", None), QuotaKey("alice", "")),
    (QuotaEntity(DEFAULT, "billing"), QuotaKey("alice", "billing")),
    (QuotaEntity(DEFAULT, DEFAULT), QuotaKey("alice", "billing")),
    (QuotaEntity(DEFAULT, None), QuotaKey("alice", "")),
    (QuotaEntity(None, "billing"), QuotaKey("", "billing")),
    (QuotaEntity(None, DEFAULT), QuotaKey("", "billing")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_configured_level_wins_and_decides_the_bucket(level: int) -> None:
    entries = {entity: {BYTES: 1000.0 * (index + 1)} for index, (entity, _) in enumerate(LEVELS) if index >= level}
    resolved = QuotaConfig(entries=entries).resolve(BYTES, "alice", "billing")
    assert resolved is not None
    assert resolved.entity == LEVELS[level][0]
    assert resolved.limit == 1000.0 * (level + 1)
    assert resolved.key == LEVELS[level][1]


def test_defaults_give_each_user_and_client_their_own_bucket() -> None:
    config = QuotaConfig(entries={QuotaEntity(DEFAULT, None): {BYTES: 10}, QuotaEntity(None, DEFAULT): {BYTES: 5}})
    alice, bob = config.resolve(BYTES, "alice", "x"), config.resolve(BYTES, "bob", "x")
    assert alice is not None and bob is not None
    assert alice.key != bob.key and alice.limit == bob.limit == 10


def test_no_quota_means_unlimited_and_types_resolve_independently() -> None:
    config = QuotaConfig(entries={QuotaEntity("alice", None): {BYTES: 10},
                                  QuotaEntity(None, "billing"): {QuotaType.CONTROLLER_MUTATION_RATE: 2}})
    assert config.resolve(BYTES, "bob", "other") is None
    mutation = config.resolve(QuotaType.CONTROLLER_MUTATION_RATE, "alice", "billing")
    assert mutation is not None and mutation.key == QuotaKey("", "billing")
    assert config.resolve(QuotaType.PRODUCER_IDS_RATE, "alice", "billing") is None


def test_empty_or_null_client_ids_resolve() -> None:
    config = QuotaConfig(entries={QuotaEntity(None, DEFAULT): {BYTES: 10}})
    resolved = config.resolve(BYTES, "ANONYMOUS", "")
    assert resolved is not None and resolved.key == QuotaKey("", "")


EXAMPLE = '''
[settings]
"quota.window.num" = 11
"quota.window.size.seconds" = 1
"controller.quota.window.num" = 11
"controller.quota.window.size.seconds" = 1
"producer.id.quota.window.num" = 11
"producer.id.quota.window.size.seconds" = 3600
"producer.id.quota.mode" = "reject"
"producer.id.quota.false.positive.rate" = 0.001
"quota.scope" = "proxy"

[[quota]]
user = "alice"
client-id = "billing"
producer_byte_rate = 1048576
controller_mutation_rate = 10

[[quota]]
user = "alice"
producer_ids_rate = 0.5

[[quota]]
client-id = "<default>"
producer_byte_rate = 2048
'''


def test_the_documented_file_format_loads(tmp_path: Path) -> None:
    path = tmp_path / "quotas.toml"
    path.write_text(EXAMPLE)
    config = load_quota_file(path)
    assert config.settings.producer_id_mode is PidQuotaMode.REJECT
    assert config.settings.producer_id_window == Window(11, 3600)
    assert config.settings.producer_id_false_positive_rate == 0.001
    assert config.settings.quota_scope is QuotaScope.PROXY
    assert config.entries[QuotaEntity("alice", "billing")] == {BYTES: 1048576, QuotaType.CONTROLLER_MUTATION_RATE: 10}
    assert config.entries[QuotaEntity("alice", None)] == {QuotaType.PRODUCER_IDS_RATE: 0.5}
    assert config.entries[QuotaEntity(None, DEFAULT)] == {BYTES: 2048}


@pytest.mark.parametrize(("text", "message"), [
    ('[[quota]]\nuser = "a"\nbyte_rate = 1\n', r"#1 \(user=a\): unknown key 'byte_rate'"),
    ('[[quota]]\nuser = "a"\nproducer_byte_rate = -5\n', r"#1 \(user=a\): producer_byte_rate must be positive"),
    ('[[quota]]\nuser = "a"\nproducer_byte_rate = "fast"\n', "producer_byte_rate must be a number"),
    ('[[quota]]\nuser = "a"\nproducer_byte_rate = 1.5\n', "whole number of bytes/s"),
    ('[[quota]]\nuser = "a"\nproducer_byte_rate = 1\n[[quota]]\nuser = "a"\nproducer_byte_rate = 2\n',
     r"#2 \(user=a\): duplicate entity"),
    ('[[quota]]\nproducer_byte_rate = 1\n', r"#1: an entity needs a user, a client-id or both"),
    ('[[quota]]\nuser = ""\nproducer_byte_rate = 1\n', "user must be a non-empty string"),
    ('[[quota]]\nclient-id = "c"\nproducer_ids_rate = 1\n', "producer_ids_rate applies to users only"),
    ('[[quota]]\nuser = "u"\nclient-id = "c"\nproducer_ids_rate = 1\n', "applies to users only"),
    ('[[quota]]\nuser = "u"\n', "sets no quota"),
    ('[settings]\n"quota.window.num" = 0\n', r"\[settings\] quota.window.num: must be a positive number"),
    ('[settings]\n"producer.id.quota.mode" = "drop"\n', "one of throttle, reject"),
    ('[settings]\n"quota.window.sizes" = 1\n', "unknown key 'quota.window.sizes'"),
    ('[settings]\n"quota.scope" = "galaxy"\n', "quota.scope: one of broker, proxy, cluster"),
    ('[settings]\n"producer.id.quota.false.positive.rate" = 1\n', "above 0 and below 0.5"),
    ('[quotas]\n', "unknown top-level key"),
    ("[[quota]\n", "not valid TOML"),
])
def test_bad_files_name_file_entry_and_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(QuotaConfigError, match=message) as caught:
        load_quota_file(path)
    assert str(path) in str(caught.value)
