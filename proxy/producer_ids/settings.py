"""``[allocator]`` and ``[ledger]`` of the --config file: where producer IDs come from, the rate of
AllocateProducerIds per cluster principal, and the PID ledger's sizes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from allocator.block_log import DEFAULT_FIRST_ID, MAX_PRODUCER_ID
from proxy.producer_ids.cluster_claims import DEFAULT_BLOCKS_TOPIC
from proxy.settings.config import ConfigError, HostPort, ProxyConfig
from proxy.settings.definitions import Table, TableKey
from proxy.settings.loading import principal_list

PRODUCER_ID_EXPIRATION_MS = 86_400_000
"""Kafka's ``producer.id.expiration.ms`` default: ledger snapshots older than this are deleted."""
PID_SOURCES = ("upstream", "allocator", "cluster")
MODES = ("serve", "forward")
ALLOCATOR_TABLE = Table("allocator", "where producer IDs come from, and AllocateProducerIds (KIP-730)", (
    TableKey("cluster_principals", "who may call AllocateProducerIds", []),
    TableKey("mode", "serve: answer AllocateProducerIds from this proxy's block log; forward: in front of the "
             "controller quorum", "serve"),
    TableKey("pid_source", "upstream: the cluster issues producer IDs; allocator: this proxy answers idempotent "
             "InitProducerId from its own blocks; cluster: blocks claimed through a topic", "upstream"),
    TableKey("bootstrap", "the cluster producer-ID blocks are asked from", derived="--upstream"),
    TableKey("first_id", "the first producer ID of the blocks (2^48: far above the cluster's own)", DEFAULT_FIRST_ID),
    TableKey("end_id", "the end of the ID space (exclusive)", MAX_PRODUCER_ID + 1),
    TableKey("broker_id", "the id this proxy asks for blocks as", derived="none; required with pid_source = "
             "\"allocator\""),
    TableKey("allocations_per_second", "AllocateProducerIds per principal (a token bucket)", 10.0),
    TableKey("blocks_topic", "the topic blocks are claimed through (pid_source = \"cluster\")", DEFAULT_BLOCKS_TOPIC),
    TableKey("blocks_topic_id", "an operator's confirmation that the blocks topic was recreated (its new id)",
             derived="none"),
))
LEDGER_TABLE = Table("ledger", "the PID ledger the producer-ID quota consults across restarts", (
    TableKey("segment_capacity", "PIDs per sealed snapshot (and per Bloom filter)", 100_000),
    TableKey("cache_size", "write-through cache entries", 100_000),
    TableKey("seal_interval_seconds", "seal (and fsync) the active segment at least this often", 3600.0),
    TableKey("producer_id_expiration_ms", "Kafka's producer.id.expiration.ms: older snapshots are deleted",
             PRODUCER_ID_EXPIRATION_MS),
    TableKey("scan_all_produce", "record the PIDs of every Produce, not only of users under a producer-ID quota",
             False),
))
"""``[allocator]`` and ``[ledger]``'s keys, with the defaults ``from_config`` and ``AllocatorSettings`` apply."""


@dataclass(frozen=True)
class AllocatorSettings:
    """``[allocator]`` and ``[ledger]`` of the --config file."""

    cluster_principals: frozenset[str] = frozenset()
    mode: str = ALLOCATOR_TABLE.default("mode")
    """AllocateProducerIds served from this proxy's block log, or forwarded to the controller quorum."""
    pid_source: str = ALLOCATOR_TABLE.default("pid_source")
    bootstrap: HostPort | None = None
    first_id: int = ALLOCATOR_TABLE.default("first_id")
    end_id: int = ALLOCATOR_TABLE.default("end_id")
    broker_id: int | None = None
    allocations_per_second: float = ALLOCATOR_TABLE.default("allocations_per_second")
    blocks_topic: str = ALLOCATOR_TABLE.default("blocks_topic")
    blocks_topic_id: str | None = None
    """An operator's confirmation that the blocks topic was recreated (its new id): see ``cluster_claims``."""
    ledger_capacity: int = LEDGER_TABLE.default("segment_capacity")
    ledger_cache: int = LEDGER_TABLE.default("cache_size")
    ledger_seal_interval_s: float = LEDGER_TABLE.default("seal_interval_seconds")
    producer_id_expiration_ms: int = LEDGER_TABLE.default("producer_id_expiration_ms")
    scan_all_produce: bool = LEDGER_TABLE.default("scan_all_produce")

    @classmethod
    def from_config(cls, config: ProxyConfig) -> AllocatorSettings:
        allocator = dict(config.extra.get("allocator", {}))
        ledger = dict(config.extra.get("ledger", {}))
        ALLOCATOR_TABLE.refuse_unknown(allocator)
        LEDGER_TABLE.refuse_unknown(ledger)

        def allocator_value(key: str) -> Any:
            return allocator.get(key, ALLOCATOR_TABLE.default(key))

        def ledger_value(key: str) -> Any:
            return ledger.get(key, LEDGER_TABLE.default(key))

        try:
            settings = cls(
                cluster_principals=principal_list(allocator_value("cluster_principals"),
                                                  "[allocator] cluster_principals"),
                mode=str(allocator_value("mode")),
                pid_source=str(allocator_value("pid_source")),
                bootstrap=_bootstrap(allocator.get("bootstrap")),
                first_id=int(allocator_value("first_id")),
                end_id=int(allocator_value("end_id")),
                broker_id=_optional_int(allocator.get("broker_id")),
                allocations_per_second=float(allocator_value("allocations_per_second")),
                blocks_topic=str(allocator_value("blocks_topic")),
                blocks_topic_id=_optional_topic_id(allocator.get("blocks_topic_id")),
                ledger_capacity=int(ledger_value("segment_capacity")),
                ledger_cache=int(ledger_value("cache_size")),
                ledger_seal_interval_s=float(ledger_value("seal_interval_seconds")),
                producer_id_expiration_ms=int(ledger_value("producer_id_expiration_ms")),
                scan_all_produce=bool(ledger_value("scan_all_produce")),
            )
        except (TypeError, ValueError) as error:
            raise ConfigError(f"[allocator]/[ledger]: {error}") from None
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
