"""The overrides of a fleet: a change goes to the fleet's topic, what is read from it is put in force and copied to
the state directory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from proxy.state.quota_service import OverrideChanges, QuotaService
from quotas.config import QuotaConfigError, QuotaEntity, QuotaType
from quotas.overrides import ALTERED_ORIGIN, OVERRIDES_FILE, read_overrides

ALICE = QuotaEntity("alice")


def test_a_change_is_published_and_in_force_only_once_read_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        quotas = QuotaService(None, CollectorRegistry(), tmp_path)
        published: list[OverrideChanges] = []

        async def publish(changes: OverrideChanges) -> None:
            published.append(changes)

        quotas.share_overrides("quotas-topic", publish)
        await quotas.override({ALICE: {QuotaType.PRODUCER_BYTE_RATE: 1000.0}})
        assert published == [{ALICE: {QuotaType.PRODUCER_BYTE_RATE: 1000.0}}]
        assert quotas.config.entries == {} and not (tmp_path / OVERRIDES_FILE).exists()
        with pytest.raises(QuotaConfigError):  # refused before anything is published
            await quotas.override({QuotaEntity(topic="orders"): {QuotaType.REQUEST_RATE: 5.0}})
        assert len(published) == 1

        quotas.replace_overrides({ALICE: {QuotaType.PRODUCER_BYTE_RATE: 1000.0, QuotaType.CONSUMER_BYTE_RATE: None}})
        assert quotas.config.entries == {ALICE: {QuotaType.PRODUCER_BYTE_RATE: 1000.0}}
        assert quotas.config.origins[(ALICE, QuotaType.PRODUCER_BYTE_RATE)] == f"{ALTERED_ORIGIN} (topic quotas-topic)"
        async with asyncio.timeout(30):  # copied on a worker thread
            while not (tmp_path / OVERRIDES_FILE).exists():
                await asyncio.sleep(0.01)
        assert read_overrides(tmp_path / OVERRIDES_FILE) == quotas.overrides

        with pytest.raises(QuotaConfigError):  # what does not apply leaves the quotas in force as they were
            quotas.replace_overrides({QuotaEntity(topic="orders"): {QuotaType.REQUEST_RATE: 5.0}})
        assert quotas.config.entries == {ALICE: {QuotaType.PRODUCER_BYTE_RATE: 1000.0}}

    asyncio.run(scenario())


def test_the_state_directorys_copy_is_in_force_at_a_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        first = QuotaService(None, CollectorRegistry(), tmp_path)
        await first.override({ALICE: {QuotaType.PRODUCER_BYTE_RATE: 1000.0}})
        second = QuotaService(None, CollectorRegistry(), tmp_path)
        second.share_overrides("quotas-topic", first.override)
        assert second.config.entries == {ALICE: {QuotaType.PRODUCER_BYTE_RATE: 1000.0}}

    asyncio.run(scenario())
