"""The records a fleet keeps its AlterClientQuotas overrides in: one per entity and quota type."""

from __future__ import annotations

import pytest

from quotas.config import DEFAULT, QuotaConfigError, QuotaEntity, QuotaType
from quotas.overrides import override_record, read_override_record

ENTITIES = [QuotaEntity("alice"), QuotaEntity(DEFAULT, "app"), QuotaEntity(client_id="app"), QuotaEntity(ip="10.0.0.7"),
            QuotaEntity(topic="orders"), QuotaEntity("alice", topic=DEFAULT)]


@pytest.mark.parametrize("entity", ENTITIES, ids=QuotaEntity.describe)
@pytest.mark.parametrize("limit", [1_048_576, 2.5, None])
def test_an_override_reads_back_as_it_was_written(entity: QuotaEntity, limit: float | None) -> None:
    key, value = override_record(entity, QuotaType.PRODUCER_BYTE_RATE, limit)
    assert read_override_record(key, value) == (entity, QuotaType.PRODUCER_BYTE_RATE, limit)


def test_the_key_names_the_entity_and_the_quota_type_alone() -> None:
    """Compaction keeps the last record of each key: a later limit replaces an earlier one, another type does not."""
    first, _ = override_record(QuotaEntity("alice", "app"), QuotaType.PRODUCER_BYTE_RATE, 1000)
    assert override_record(QuotaEntity("alice", "app"), QuotaType.PRODUCER_BYTE_RATE, None)[0] == first
    assert override_record(QuotaEntity("alice", "app"), QuotaType.CONSUMER_BYTE_RATE, 1000)[0] != first
    assert override_record(QuotaEntity("alice"), QuotaType.PRODUCER_BYTE_RATE, 1000)[0] != first


@pytest.mark.parametrize(("key", "value"), [
    (b"not json", b'{"limit": 1}'),
    (b'{"user": "alice"}', b'{"limit": 1}'),
    (b'{"user": "alice", "quota": "bytes_per_fortnight"}', b'{"limit": 1}'),
    (b'{"quota": "producer_byte_rate"}', b'{"limit": 1}'),
    (b'{"user": "alice", "quota": "producer_byte_rate"}', b'{"limit": "fast"}'),
    (b'{"user": "alice", "quota": "producer_byte_rate"}', b'{"limit": true}'),
    (b'{"user": "alice", "quota": "producer_byte_rate"}', b'{}'),
    (b'{"user": "alice", "quota": "producer_byte_rate"}', b'[1]'),
    (b'["user"]', b'{"limit": 1}'),
])
def test_a_record_that_is_not_an_override_is_refused(key: bytes, value: bytes) -> None:
    with pytest.raises(QuotaConfigError):
        read_override_record(key, value)
