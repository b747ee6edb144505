"""``[allocator]`` and ``[ledger]`` of the --config file: where producer IDs come from, the rate of
AllocateProducerIds per cluster principal, and the PID ledger's sizes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from allocator.block_log import DEFAULT_FIRST_ID, MAX_PRODUCER_ID
from proxy.producer_ids.cluster_claims import DEFAULT_BLOCKS_TOPIC
from proxy.settings.config import ConfigError, HostPort, ProxyConfig
from proxy.settings.loading import principal_list

PRODUCER_ID_EXPIRATION_MS = 86_400_000
"""Kafka's ``producer.id.expiration.ms`` default: ledger snapshots older than this are deleted."""
PID_SOURCES = ("upstream", "allocator", "cluster")
MODES = ("serve", "forward")


@dataclass(frozen=True)
class AllocatorSettings:
    """``[allocator]`` and ``[ledger]`` of the --config file."""

    cluster_principals: frozenset[str] = frozenset()
    mode: str = "serve"
    """AllocateProducerIds served from this proxy's block log, or forwarded to the controller quorum."""
    pid_source: str = "upstream"
    bootstrap: HostPort | None = None
    first_id: int = DEFAULT_FIRST_ID
    end_id: int = MAX_PRODUCER_ID + 1
    broker_id: int | None = None
    allocations_per_second: float = 10.0
    blocks_topic: str = DEFAULT_BLOCKS_TOPIC
    blocks_topic_id: str | None = None
    """An operator's confirmation that the blocks topic was recreated (its new id): see ``cluster_claims``."""
    ledger_capacity: int = 100_000
    ledger_cache: int = 100_000
    ledger_seal_interval_s: float = 3600.0
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS
    scan_all_produce: bool = False

    @classmethod
    def from_config(cls, config: ProxyConfig) -> AllocatorSettings:
        allocator = dict(config.extra.get("allocator", {}))
        ledger = dict(config.extra.get("ledger", {}))
        try:
            settings = cls(
                cluster_principals=principal_list(allocator.pop("cluster_principals", []),
                                                  "[allocator] cluster_principals"),
                mode=str(allocator.pop("mode", "serve")),
                pid_source=str(allocator.pop("pid_source", "upstream")),
                bootstrap=_bootstrap(allocator.pop("bootstrap", None)),
                first_id=int(allocator.pop("first_id", DEFAULT_FIRST_ID)),
                end_id=int(allocator.pop("end_id", MAX_PRODUCER_ID + 1)),
                broker_id=_optional_int(allocator.pop("broker_id", None)),
                allocations_per_second=float(allocator.pop("allocations_per_second", 10.0)),
                blocks_topic=str(allocator.pop("blocks_topic", DEFAULT_BLOCKS_TOPIC)),
                blocks_topic_id=_optional_topic_id(allocator.pop("blocks_topic_id", None)),
                ledger_capacity=int(ledger.pop("segment_capacity", 100_000)),
                ledger_cache=int(ledger.pop("cache_size", 100_000)),
                ledger_seal_interval_s=float(ledger.pop("seal_interval_seconds", 3600.0)),
                producer_id_expiration_ms=int(ledger.pop("producer_id_expiration_ms", PRODUCER_ID_EXPIRATION_MS)),
                scan_all_produce=bool(ledger.pop("scan_all_produce", False)),
            )
        except (TypeError, ValueError) as error:
            raise ConfigError(f"[allocator]/[ledger]: {error}") from None
        for section, leftover in (("allocator", allocator), ("ledger", ledger)):
            if leftover:
                raise ConfigError(f"[{section}]: unknown key(s) {', '.join(sorted(leftover))}")
        if settings.mode not in MODES:
            raise ConfigError(f"[allocator] mode: one of {', '.join(MODES)}, got {settings.mode!r}")
        if settings.mode == "forward" and settings.pid_source != "upstream":
            raise ConfigError("[allocator] mode = \"forward\" puts the proxy in front of the controller quorum, "
                              f"where no client asks for producer IDs: pid_source must be \"upstream\", got "
                              f"{settings.pid_source!r}")
        if settings.pid_source not in PID_SOURCES:
            raise ConfigError(f"[allocator] pid_source: one of {', '.join(PID_SOURCES)}, got {settings.pid_source!r}")
        if not 0 <= settings.first_id < settings.end_id <= MAX_PRODUCER_ID + 1:
            raise ConfigError("[allocator] first_id/end_id: need 0 <= first_id < end_id <= 2^63")
        if (settings.allocations_per_second <= 0 or settings.ledger_capacity < 1 or settings.ledger_cache < 1
                or settings.producer_id_expiration_ms < 1 or settings.ledger_seal_interval_s <= 0):
            raise ConfigError("[allocator]/[ledger]: rates, capacities, sizes and times must be positive")
        if settings.pid_source == "allocator" and settings.broker_id is None:
            raise ConfigError("[allocator] broker_id: required with pid_source = \"allocator\" (the id this proxy "
                              "asks for producer-ID blocks as; give each proxy its own)")
        if settings.broker_id is not None and not 0 <= settings.broker_id <= 0x7FFFFFFF:
            raise ConfigError(f"[allocator] broker_id: 0..2^31-1, got {settings.broker_id}")
        return settings


def _bootstrap(value: Any) -> HostPort | None:
    return None if value is None else HostPort.parse(str(value), "[allocator] bootstrap")


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _optional_topic_id(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ConfigError(f"[allocator] blocks_topic_id: a topic id (UUID), got {value!r}") from None
