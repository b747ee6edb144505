"""Quotas set through AlterClientQuotas (``kafka-configs``), laid over the quota file's: for the same entity and quota
type the override wins, as Kafka's dynamic quota config does; a removal through the API is a tombstone that hides the
file's value too. A proxy alone keeps them in ``<state-dir>/client-quotas.json``; a fleet in a compacted topic, one
record per entity and quota type (``override_record``), which every member reads."""

from __future__ import annotations

import json
from pathlib import Path

from quotas.config import QuotaConfig, QuotaConfigError, QuotaEntity, QuotaType

OVERRIDES_FILE = "client-quotas.json"
"""The overrides' file in a state directory."""

ALTERED_ORIGIN = "AlterClientQuotas"
"""Where an override came from, as ``quotas explain`` says it."""

Overrides = dict[QuotaEntity, dict[QuotaType, float | None]]
"""entity -> quota type -> limit, or None where the API removed the quota."""


_READ_ERRORS = (ValueError, KeyError, TypeError, AttributeError)


def entity_fields(entity: QuotaEntity) -> dict[str, str]:
    """The entity's parts as the overrides' JSON names them."""
    return {name: value for name, value in (
        ("user", entity.user), ("client-id", entity.client_id), ("ip", entity.ip), ("topic", entity.topic),
        ("tenant", entity.tenant)) if value is not None}


def _entity(raw: dict[str, str]) -> QuotaEntity:
    return QuotaEntity(raw.get("user"), raw.get("client-id"), raw.get("ip"), raw.get("topic"), raw.get("tenant"))


def read_overrides(path: Path) -> Overrides:
    """The overrides saved in ``path`` (``OVERRIDES_FILE`` of a state directory); raises QuotaConfigError."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        overrides: Overrides = {}
        for raw in document["entries"]:
            overrides[_entity(raw)] = {QuotaType(key): value for key, value in raw["quotas"].items()}
    except (OSError, *_READ_ERRORS) as error:
        raise QuotaConfigError(f"{path}: unreadable client-quota overrides: {error}") from error
    return overrides


def overrides_document(overrides: Overrides) -> bytes:
    """What ``read_overrides`` reads."""
    entries = [{**entity_fields(entity), "quotas": {str(key): value for key, value in quotas.items()}}
               for entity, quotas in overrides.items()]
    return json.dumps({"entries": entries}, indent=1).encode()


def override_record(entity: QuotaEntity, quota_type: QuotaType, limit: float | None) -> tuple[bytes, bytes]:
    """The key and value of one override in the fleet's compacted topic: the key names the entity and the quota
    type (so compaction keeps the last of each), the value the limit, or null where it was removed."""
    key = json.dumps({**entity_fields(entity), "quota": str(quota_type)}, sort_keys=True, separators=(",", ":"))
    return key.encode(), json.dumps({"limit": limit}).encode()


def read_override_record(key: bytes, value: bytes) -> tuple[QuotaEntity, QuotaType, float | None]:
    """The override one record of the compacted topic holds; raises QuotaConfigError when it is not one."""
    try:
        fields = json.loads(key)
        quota_type = QuotaType(fields.pop("quota"))
        limit = json.loads(value)["limit"]
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int | float)):
            raise TypeError(f"limit {limit!r} is not a number")
        return _entity(fields), quota_type, limit
    except _READ_ERRORS as error:
        raise QuotaConfigError(f"not a client-quota override: {error}") from error


def overlaid(file_config: QuotaConfig, overrides: Overrides, kept_in: str | None) -> QuotaConfig:
    """The quota file's entries overlaid by ``overrides`` (kept in a file or a topic, as ``kept_in`` says); an
    entity keeps the file's ``mode`` for both."""
    entries = {entity: dict(quotas) for entity, quotas in file_config.entries.items()}
    origins = dict(file_config.origins)
    where = ALTERED_ORIGIN if kept_in is None else f"{ALTERED_ORIGIN} ({kept_in})"
    for entity, quotas in overrides.items():
        merged: dict[QuotaType, float | None] = {**entries.get(entity, {}), **quotas}
        kept = {quota_type: limit for quota_type, limit in merged.items() if limit is not None}
        for quota_type in quotas:
            origins.pop((entity, quota_type), None)
            if quota_type in kept:
                origins[(entity, quota_type)] = where
        if kept:
            entries[entity] = kept
        else:
            entries.pop(entity, None)
    return QuotaConfig(file_config.settings, entries, file_config.modes, origins, file_config.tenants)
