"""The table of quota types is what the configuration, the managers and the documentation follow."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from proxy.state.quota_service import QuotaService
from quotas.byte_rates import ClientQuotaManager, TopicQuotaManager
from quotas.config import QuotaConfig, QuotaConfigError, QuotaEntity, validate_quota
from quotas.mutations import ControllerMutationQuotaManager
from quotas.producer_id_quota import ProducerIdQuotaManager
from quotas.quota_types import QUOTA_TYPES, EntityKind, Math, QuotaType, markdown_table, types_taking
from quotas.user_connections import UserConnectionRateManager

QUOTAS_PAGE = Path(__file__).parents[3] / "docs" / "quotas.md"
ENTITIES = {EntityKind.USER: QuotaEntity("alice"), EntityKind.CLIENT_ID: QuotaEntity(None, "app"),
            EntityKind.IP: QuotaEntity(ip="10.0.0.7"), EntityKind.TOPIC: QuotaEntity(topic="orders"),
            EntityKind.TENANT: QuotaEntity(tenant="payments")}


def test_the_documentation_holds_the_table() -> None:
    assert markdown_table() in QUOTAS_PAGE.read_text(), (
        "docs/quotas.md's table of quota types differs from quotas/quota_types.py: paste markdown_table() there")


def test_every_type_has_a_row() -> None:
    assert set(QUOTA_TYPES) == set(QuotaType)


@pytest.mark.parametrize("quota_type", list(QuotaType))
def test_an_entity_takes_a_type_exactly_when_the_table_says_so(quota_type: QuotaType) -> None:
    spec = QUOTA_TYPES[quota_type]
    for kind, entity in ENTITIES.items():
        if kind in spec.entities:
            validate_quota(entity, quota_type, 5)
        else:
            with pytest.raises(QuotaConfigError):
                validate_quota(entity, quota_type, 5)
    if EntityKind.USER in spec.entities and spec.user_only:
        with pytest.raises(QuotaConfigError, match="users only"):
            validate_quota(QuotaEntity("alice", "app"), quota_type, 5)
    if spec.integral:
        with pytest.raises(QuotaConfigError, match="whole number"):
            validate_quota(ENTITIES[next(iter(spec.entities))], quota_type, 2.5)


def test_the_types_a_tenant_takes_are_those_a_tenants_budget_is_charged_for() -> None:
    service = QuotaService(None, CollectorRegistry())
    assert set(service.tenant_budgets) == types_taking(EntityKind.TENANT)


def test_each_managers_math_is_the_tables() -> None:
    config = QuotaConfig()
    rates = {ClientQuotaManager(config, quota_type).quota_type for quota_type in (
        QuotaType.PRODUCER_BYTE_RATE, QuotaType.CONSUMER_BYTE_RATE, QuotaType.REQUEST_RATE)}
    rates.add(UserConnectionRateManager(config).quota_type)
    buckets = {ControllerMutationQuotaManager(config).quota_type, ProducerIdQuotaManager(config).quota_type}
    assert {t for t, spec in QUOTA_TYPES.items() if spec.math is Math.RATE} == rates
    assert {t for t, spec in QUOTA_TYPES.items() if spec.math is Math.TOKEN_BUCKET} == buckets
    settings = config.settings
    assert settings.window_for(QuotaType.PRODUCER_IDS_RATE) == settings.producer_id_window
    assert settings.window_for(QuotaType.CONTROLLER_MUTATION_RATE) == settings.mutation_window


@pytest.mark.parametrize("manager", [ClientQuotaManager, TopicQuotaManager, ControllerMutationQuotaManager,
                                     ProducerIdQuotaManager, UserConnectionRateManager])
def test_every_manager_records_a_requesters_amount_at_a_time(manager: type) -> None:
    """One interface to every quota type's manager (a new type adds one more), whatever its unit."""
    parameters = list(inspect.signature(manager.record).parameters.values())
    assert [parameter.name for parameter in parameters[:4]] == ["self", "requester", parameters[2].name, "now_ms"]
    assert parameters[1].annotation == "Requester" and parameters[3].annotation == "int"
    assert all(parameter.default is not inspect.Parameter.empty for parameter in parameters[4:])
