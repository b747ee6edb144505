from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from proxy.client_quotas import MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT, _matches, quota_entity
from proxy.quota_service import QuotaService
from quotas.config import DEFAULT, QuotaConfigError, QuotaEntity, QuotaType

BYTES = QuotaType.PRODUCER_BYTE_RATE
PIDS = QuotaType.PRODUCER_IDS_RATE


def component(entity_type: str, match_type: int, match: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(entity_type=entity_type, match_type=match_type, match=match)


def test_entities_from_the_wire() -> None:
    assert quota_entity((("user", "alice"),)) == QuotaEntity("alice")
    assert quota_entity((("client-id", None), ("user", "alice"))) == QuotaEntity("alice", DEFAULT)
    for bad in ((), (("ip", "1.2.3.4"),), (("user", "a"), ("user", "b"))):
        with pytest.raises(QuotaConfigError):
            quota_entity(bad)


def test_describe_filters_match_like_kafka() -> None:
    alice_app = {"user": "alice", "client-id": "app"}
    default_user = {"user": None}
    assert _matches(alice_app, [component("user", MATCH_EXACT, "alice")], strict=False)
    assert not _matches(alice_app, [component("user", MATCH_EXACT, "alice")], strict=True)
    assert _matches(alice_app, [component("user", MATCH_ANY), component("client-id", MATCH_ANY)], strict=True)
    assert not _matches(alice_app, [component("user", MATCH_DEFAULT)], strict=False)
    assert _matches(default_user, [component("user", MATCH_DEFAULT)], strict=True)
    assert _matches(default_user, [component("user", MATCH_ANY)], strict=False)
    assert not _matches(default_user, [component("client-id", MATCH_ANY)], strict=False)


def service(tmp_path: Path, quota_text: str | None = None) -> QuotaService:
    quota_file = None
    if quota_text is not None:
        quota_file = tmp_path / "quotas.toml"
        quota_file.write_text(quota_text)
    return QuotaService(quota_file, CollectorRegistry(), tmp_path / "state")


def test_overrides_persist_win_over_the_file_and_removals_hide_it(tmp_path: Path) -> None:
    text = '[[quota]]\nuser = "alice"\nproducer_byte_rate = 1000\nproducer_ids_rate = 5\n'
    quotas = service(tmp_path, text)
    quotas.override({QuotaEntity("alice"): {BYTES: 2000, PIDS: None}, QuotaEntity(None, "app"): {BYTES: 10}})
    assert quotas.config.entries[QuotaEntity("alice")] == {BYTES: 2000}
    assert quotas.config.resolve(BYTES, "bob", "app") is not None

    restarted = service(tmp_path, text)
    assert restarted.config.entries == quotas.config.entries
    restarted.override({QuotaEntity(None, "app"): {BYTES: None}})
    assert QuotaEntity(None, "app") not in restarted.config.entries


def test_an_invalid_override_changes_nothing(tmp_path: Path) -> None:
    quotas = service(tmp_path)
    with pytest.raises(QuotaConfigError):
        quotas.override({QuotaEntity(None, "app"): {PIDS: 1}})  # producer-ID quotas are per user only
    assert quotas.overrides == {} and not (tmp_path / "state").exists()


def test_a_corrupt_overrides_file_is_refused_at_start(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "client-quotas.json").write_text("{not json")
    with pytest.raises(QuotaConfigError, match="client-quotas.json"):
        service(tmp_path)
