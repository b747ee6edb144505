from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.errors import INVALID_REQUEST
from proxy.decision.outcome import Caller, Decided, Outcome, Respond
from proxy.handlers.client_quotas import (
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    ClientQuotaHandlers,
    _matches,
    quota_entity,
)
from proxy.security.access import Access
from proxy.security.acls import (
    CLUSTER_NAME,
    AclAuthorizer,
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from proxy.state.quota_service import QuotaService
from quotas.config import DEFAULT, QuotaConfigError, QuotaEntity, QuotaType
from tests.support import encode_request
from tests.unit.proxy.outcomes import handled

BYTES = QuotaType.PRODUCER_BYTE_RATE
PIDS = QuotaType.PRODUCER_IDS_RATE
RATE = QuotaType.CONNECTION_CREATION_RATE


def component(entity_type: str, match_type: int, match: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(entity_type=entity_type, match_type=match_type, match=match)


def test_entities_from_the_wire() -> None:
    assert quota_entity((("user", "alice"),)) == QuotaEntity("alice")
    assert quota_entity((("client-id", None), ("user", "alice"))) == QuotaEntity("alice", DEFAULT)
    assert quota_entity((("ip", "1.2.3.4"),)) == QuotaEntity(ip="1.2.3.4")
    assert quota_entity((("ip", None),)) == QuotaEntity(ip=DEFAULT)
    for bad in ((), (("ip", "1.2.3.4"), ("user", "a")), (("ip", "not-an-ip"),), (("user", "a"), ("user", "b"))):
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
    asyncio.run(quotas.override({QuotaEntity("alice"): {BYTES: 2000, PIDS: None},
                                 QuotaEntity(None, "app"): {BYTES: 10}}))
    assert quotas.config.entries[QuotaEntity("alice")] == {BYTES: 2000}
    assert quotas.config.resolve(BYTES, "bob", "app") is not None

    asyncio.run(quotas.override({QuotaEntity(ip="10.0.0.7"): {RATE: 3}}))
    ip_quota = quotas.config.connection_rate_for("10.0.0.7")
    assert ip_quota is not None and ip_quota.limit == 3
    restarted = service(tmp_path, text)
    assert restarted.config.entries == quotas.config.entries
    asyncio.run(restarted.override({QuotaEntity(None, "app"): {BYTES: None}}))
    assert QuotaEntity(None, "app") not in restarted.config.entries


def test_an_invalid_override_changes_nothing(tmp_path: Path) -> None:
    quotas = service(tmp_path)
    with pytest.raises(QuotaConfigError):
        asyncio.run(quotas.override({QuotaEntity(None, "app"): {PIDS: 1}}))  # producer-ID quotas are per user only
    assert quotas.overrides == {} and not (tmp_path / "state").exists()


def test_a_change_whose_save_failed_is_neither_applied_nor_saved_by_the_next_change(tmp_path: Path) -> None:
    quotas = service(tmp_path)
    (tmp_path / "state").mkdir()
    in_the_way = tmp_path / "state" / "client-quotas.json.tmp"
    in_the_way.mkdir()  # the save's temporary file cannot be created: as on a full disk, the write fails
    with pytest.raises(OSError):
        asyncio.run(quotas.override({QuotaEntity("alice"): {BYTES: 1000}}))
    assert quotas.overrides == {} and QuotaEntity("alice") not in quotas.config.entries
    in_the_way.rmdir()
    asyncio.run(quotas.override({QuotaEntity("bob"): {BYTES: 2000}}))
    saved = json.loads((tmp_path / "state" / "client-quotas.json").read_text())
    assert saved == {"entries": [{"user": "bob", "quotas": {"producer_byte_rate": 2000}}]}
    assert set(quotas.config.entries) == {QuotaEntity("bob")}


def test_a_corrupt_overrides_file_is_refused_at_start(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "client-quotas.json").write_text("{not json")
    with pytest.raises(QuotaConfigError, match="client-quotas.json"):
        service(tmp_path)


def alter_codes(handlers: ClientQuotaHandlers, user: str, **op: object) -> list[int]:
    frame = encode_request(Api.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
        {"entity": [{"entity_type": "user", "entity_name": "alice"}], "ops": [op]}])
    return [entry.error_code for entry in answered_locally(handlers, frame, Api.ALTER_CLIENT_QUOTAS, user).entries]


def decided(decision: Decided) -> Outcome:
    if isinstance(decision, Outcome):
        return decision

    async def wait() -> Outcome:
        return await decision
    return asyncio.run(wait())


async def no_cluster_apis() -> frozenset[int]:
    return frozenset()


def answered_locally(handlers: ClientQuotaHandlers, frame: bytes, api_key: int, user: str = "ops") -> Any:
    """The proxy's own answer to ``frame`` from ``user`` (by default the admin ``ops``; nothing of the request
    forwarded)."""
    outcome = decided(handled(handlers, memoryview(frame)[4:], Caller(user, 0)))
    assert isinstance(outcome, Respond), outcome
    return decode_response(api_key, 1, memoryview(outcome.response)[9:])


def altered(handlers: ClientQuotaHandlers, *entries: tuple[str, str, dict[str, object]]) -> Any:
    """AlterClientQuotas of one op per (entity type, name) entity, answered by the proxy."""
    frame = encode_request(Api.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
        {"entity": [{"entity_type": entity_type, "entity_name": name}], "ops": [op]}
        for entity_type, name, op in entries])
    return answered_locally(handlers, frame, Api.ALTER_CLIENT_QUOTAS)


def described(handlers: ClientQuotaHandlers, entity_type: str) -> list[tuple[list[tuple[str, str]], list[Any]]]:
    """Every entity of ``entity_type`` with its quotas, as DescribeClientQuotas answers, answered by the proxy."""
    frame = encode_request(Api.DESCRIBE_CLIENT_QUOTAS, 1, strict=False,
                           components=[{"entity_type": entity_type, "match_type": MATCH_ANY, "match": None}])
    answer = answered_locally(handlers, frame, Api.DESCRIBE_CLIENT_QUOTAS)
    return [([(e.entity_type, e.entity_name) for e in entry.entity], [(v.key, v.value) for v in entry.values])
            for entry in answer.entries]


def test_only_admin_principals_may_alter_and_validate_only_changes_nothing(tmp_path: Path) -> None:
    quotas = service(tmp_path)
    handlers = ClientQuotaHandlers(quotas, no_cluster_apis, frozenset({"User:ops"}), Access())
    assert alter_codes(handlers, "mallory", key="producer_ids_rate", value=5.0, remove=False) == [31]
    assert quotas.overrides == {}
    assert alter_codes(handlers, "ops", key="producer_ids_rate", value=5.0, remove=False) == [0]
    assert quotas.config.entries[QuotaEntity("alice")] == {PIDS: 5.0}
    frame = encode_request(Api.ALTER_CLIENT_QUOTAS, 1, validate_only=True, entries=[
        {"entity": [{"entity_type": "user", "entity_name": "alice"}],
         "ops": [{"key": "producer_ids_rate", "value": 9.0, "remove": False}]}])
    decided(handled(handlers, memoryview(frame)[4:], Caller("ops", 0)))
    assert quotas.config.entries[QuotaEntity("alice")] == {PIDS: 5.0}


def test_without_admin_principals_nobody_may_alter_or_describe_and_nothing_is_forwarded(tmp_path: Path) -> None:
    quotas = service(tmp_path, '[[quota]]\nuser = "alice"\nproducer_byte_rate = 1000\n')
    handlers = ClientQuotaHandlers(quotas, no_cluster_apis, frozenset(), Access())
    frame = encode_request(Api.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
        {"entity": [{"entity_type": "user", "entity_name": "alice"}],
         "ops": [{"key": "producer_byte_rate", "value": 0.0, "remove": True}]},
        {"entity": [{"entity_type": "user", "entity_name": "bob"}],
         "ops": [{"key": "request_percentage", "value": 1.0, "remove": False}]}])
    refused = handled(handlers, memoryview(frame)[4:], Caller("ANONYMOUS", 0))
    assert isinstance(refused, Respond)
    answer = decode_response(Api.ALTER_CLIENT_QUOTAS, 1, memoryview(refused.response)[9:])
    assert [entry.error_code for entry in answer.entries] == [31, 31]
    assert quotas.config.entries[QuotaEntity("alice")] == {BYTES: 1000}

    frame = encode_request(Api.DESCRIBE_CLIENT_QUOTAS, 1, strict=False,
                           components=[{"entity_type": "user", "match_type": MATCH_ANY, "match": None}])
    refused = handled(handlers, memoryview(frame)[4:], Caller("ANONYMOUS", 0))
    assert isinstance(refused, Respond)
    answer = decode_response(Api.DESCRIBE_CLIENT_QUOTAS, 1, memoryview(refused.response)[9:])
    assert answer.error_code == 31 and not answer.entries


def test_the_proxys_own_keys_request_rate_and_a_users_connection_rate_are_set_not_forwarded(tmp_path: Path) -> None:
    quotas = service(tmp_path)
    handlers = ClientQuotaHandlers(quotas, no_cluster_apis, frozenset({"User:ops"}), Access())
    assert alter_codes(handlers, "ops", key="request_rate", value=200.0, remove=False) == [0]
    assert alter_codes(handlers, "ops", key="connection_creation_rate", value=5.0, remove=False) == [0]
    assert quotas.config.entries[QuotaEntity("alice")] == {QuotaType.REQUEST_RATE: 200.0, RATE: 5.0}
    assert alter_codes(handlers, "ops", key="request_rate", value=-1.0, remove=False) == [INVALID_REQUEST]
    with pytest.raises(QuotaConfigError, match="connection_creation_rate applies to users only"):
        asyncio.run(quotas.override({QuotaEntity(None, "app"): {RATE: 5}}))


def test_topic_entities_are_the_proxys_set_persisted_and_described_without_the_cluster(tmp_path: Path) -> None:
    """Kafka has no topic entity type: the proxy alone sets it (kept over a restart) and answers a filter
    naming it, even when the cluster serves DescribeClientQuotas."""
    assert quota_entity((("topic", "orders"),)) == QuotaEntity(topic="orders")
    assert quota_entity((("topic", None), ("user", "alice"))) == QuotaEntity("alice", topic=DEFAULT)
    with pytest.raises(QuotaConfigError, match="not a client-id"):
        quota_entity((("topic", "orders"), ("client-id", "app")))
    quotas = service(tmp_path)

    async def every_api() -> frozenset[int]:
        return frozenset({Api.ALTER_CLIENT_QUOTAS, Api.DESCRIBE_CLIENT_QUOTAS})

    handlers = ClientQuotaHandlers(quotas, every_api, frozenset({"User:ops"}), Access())
    answer = altered(handlers, ("topic", "orders", {"key": "producer_byte_rate", "value": 1e6, "remove": False}),
                     ("topic", "orders", {"key": "request_rate", "value": 5.0, "remove": False}))
    assert [entry.error_code for entry in answer.entries] == [0, INVALID_REQUEST]
    assert "request_rate does not apply to topic=orders" in answer.entries[1].error_message
    assert service(tmp_path).config.resolve_topic(BYTES, "bob", "orders") is not None  # saved
    assert described(handlers, "topic") == [([("topic", "orders")], [("producer_byte_rate", 1e6)])]


def test_tenant_budgets_are_the_proxys_set_for_tenants_of_the_file_and_described_without_the_cluster(
        tmp_path: Path) -> None:
    assert quota_entity((("tenant", "payments"),)) == QuotaEntity(tenant="payments")
    for bad in ((("tenant", "payments"), ("user", "alice")), (("tenant", None),)):
        with pytest.raises(QuotaConfigError, match="tenant"):
            quota_entity(bad)
    quotas = service(tmp_path, '[[tenant]]\nname = "payments"\nuser-prefix = "pay-"\n')

    async def every_api() -> frozenset[int]:
        return frozenset({Api.ALTER_CLIENT_QUOTAS, Api.DESCRIBE_CLIENT_QUOTAS})

    handlers = ClientQuotaHandlers(quotas, every_api, frozenset({"User:ops"}), Access())
    answer = altered(handlers, ("tenant", "payments", {"key": "producer_byte_rate", "value": 1e6, "remove": False}),
                     ("tenant", "search", {"key": "producer_byte_rate", "value": 1e6, "remove": False}),
                     ("tenant", "payments", {"key": "connection_creation_rate", "value": 5.0, "remove": False}))
    assert [entry.error_code for entry in answer.entries] == [0, INVALID_REQUEST, INVALID_REQUEST]
    assert "no [[tenant]] of the quota file is named 'search'" in answer.entries[1].error_message
    assert "connection_creation_rate does not apply to tenant=payments" in answer.entries[2].error_message
    # saved, and in force for every principal of the tenant
    budget = service(tmp_path, '[[tenant]]\nname = "payments"\nuser-prefix = "pay-"\n').config.resolve_tenant(
        BYTES, "pay-api")
    assert budget is not None and budget.limit == 1e6
    assert described(handlers, "tenant") == [([("tenant", "payments")], [("producer_byte_rate", 1e6)])]


def test_a_budget_of_a_tenant_the_file_no_longer_has_may_still_be_removed(tmp_path: Path) -> None:
    text = '[[tenant]]\nname = "payments"\nusers = ["pay"]\n[[tenant]]\nname = "search"\nusers = ["indexer"]\n'
    quotas = service(tmp_path, text)
    asyncio.run(quotas.override({QuotaEntity(tenant="search"): {BYTES: 1e6}}))
    quotas = service(tmp_path, text.split("[[tenant]]\nname = \"search\"")[0])  # the file lost the tenant
    handlers = ClientQuotaHandlers(quotas, no_cluster_apis, frozenset({"User:ops"}), Access())

    def alter(**op: object) -> int:
        return int(altered(handlers, ("tenant", "search", op)).entries[0].error_code)

    assert QuotaEntity(tenant="search") in quotas.config.entries  # kept, applying to nobody
    assert alter(key="producer_byte_rate", value=5.0, remove=False) == INVALID_REQUEST
    assert alter(key="producer_byte_rate", value=0.0, remove=True) == 0
    assert QuotaEntity(tenant="search") not in quotas.config.entries


def test_with_the_authorizer_the_acls_on_the_cluster_decide_beside_admin_principals(tmp_path: Path) -> None:
    """ALTER_CONFIGS on the cluster alters the proxy's quotas, DESCRIBE_CONFIGS describes them
    (``ControllerApis.handleAlterClientQuotas``, ``KafkaApis.handleDescribeClientQuotasRequest``); anyone else is
    refused with Kafka's messages and nothing changes."""
    quotas = service(tmp_path)
    authorizer = AclAuthorizer([AclBinding(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, f"User:{user}",
                                           "*", operation, AclPermission.ALLOW)
                                for user, operation in (("ops", AclOperation.ALTER_CONFIGS),
                                                        ("auditor", AclOperation.DESCRIBE_CONFIGS))])
    handlers = ClientQuotaHandlers(quotas, no_cluster_apis, frozenset({"User:admin"}), Access(authorizer=authorizer))
    for user in ("mallory", "auditor"):
        frame = encode_request(Api.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
            {"entity": [{"entity_type": "user", "entity_name": user}],
             "ops": [{"key": "producer_ids_rate", "value": 1e9, "remove": False}]}])
        answer = answered_locally(handlers, frame, Api.ALTER_CLIENT_QUOTAS, user)
        assert [(entry.error_code, entry.error_message) for entry in answer.entries] == [
            (31, "Cluster authorization failed.")]
    assert quotas.overrides == {}
    assert alter_codes(handlers, "ops", key="producer_ids_rate", value=5.0, remove=False) == [0]
    assert alter_codes(handlers, "admin", key="producer_ids_rate", value=6.0, remove=False) == [0]
    assert quotas.config.entries[QuotaEntity("alice")] == {PIDS: 6.0}
    describe = encode_request(Api.DESCRIBE_CLIENT_QUOTAS, 1, strict=False,
                              components=[{"entity_type": "user", "match_type": MATCH_ANY, "match": None}])
    refused = answered_locally(handlers, describe, Api.DESCRIBE_CLIENT_QUOTAS, "mallory")
    assert (refused.error_code, refused.error_message, refused.entries) == (31, None, None)
    allowed = answered_locally(handlers, describe, Api.DESCRIBE_CLIENT_QUOTAS, "auditor")
    assert (allowed.error_code, allowed.error_message) == (0, "")
    assert [[(value.key, value.value) for value in entry.values] for entry in allowed.entries] == [[(
        "producer_ids_rate", 6.0)]]

