"""Quotas set through AlterClientQuotas (``kafka-configs``), kept in ``<state-dir>/client-quotas.json`` and laid over
the quota file's: for the same entity and quota type the override wins, as Kafka's dynamic quota config does; a
removal through the API is a tombstone that hides the file's value too."""

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


def read_overrides(path: Path) -> Overrides:
    """The overrides saved in ``path`` (``OVERRIDES_FILE`` of a state directory); raises QuotaConfigError."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        overrides: Overrides = {}
        for raw in document["entries"]:
            entity = QuotaEntity(raw.get("user"), raw.get("client-id"), raw.get("ip"), raw.get("topic"))
            overrides[entity] = {QuotaType(key): value for key, value in raw["quotas"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise QuotaConfigError(f"{path}: unreadable client-quota overrides: {error}") from error
    return overrides


def overlaid(file_config: QuotaConfig, overrides: Overrides, overrides_path: Path | None) -> QuotaConfig:
    """The quota file's entries overlaid by ``overrides``; an entity keeps the file's ``mode`` for both."""
    entries = {entity: dict(quotas) for entity, quotas in file_config.entries.items()}
    origins = dict(file_config.origins)
    where = ALTERED_ORIGIN if overrides_path is None else f"{ALTERED_ORIGIN} ({overrides_path})"
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
    return QuotaConfig(file_config.settings, entries, file_config.modes, origins)
