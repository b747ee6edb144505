"""The quota types, and everything that differs between them, in one table.

A quota type's unit, the entities it may be set on, its math (Kafka's ``Rate`` over a window of samples, or its
``TokenBucket``), the window settings it is measured over, how a fleet shares it and the name of its metrics are
read from ``QUOTA_TYPES``: the configuration's checks, the fleet's records, the metrics and the documentation's table
of quota types (docs/quotas.md, which a test holds equal to ``markdown_table``) all ask it. A new quota type is a
row here, its manager and its handler.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass


class QuotaType(enum.StrEnum):
    PRODUCER_BYTE_RATE = "producer_byte_rate"
    CONSUMER_BYTE_RATE = "consumer_byte_rate"
    CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
    PRODUCER_IDS_RATE = "producer_ids_rate"
    CONNECTION_CREATION_RATE = "connection_creation_rate"
    REQUEST_RATE = "request_rate"
    """Requests per second of every api but ApiVersions and SASL's (the proxy's own; Kafka's closest is
    ``request_percentage``, a share of the broker's threads' time, which stays the cluster's)."""


class EntityKind(enum.StrEnum):
    """What a quota entity names (Kafka's ``ClientQuotaEntity`` types, and the proxy's topic)."""

    USER = "user"
    CLIENT_ID = "client-id"
    IP = "ip"
    TOPIC = "topic"
    TENANT = "tenant"
    """A ``[[tenant]]`` of the quota file: one budget every principal of the tenant shares (the proxy's own)."""


class Math(enum.StrEnum):
    RATE = "rate"
    """Kafka's ``Rate`` over ``num`` samples of ``size`` seconds; the throttle makes the rate fall back to the
    quota (``ClientQuotaManager``)."""
    TOKEN_BUCKET = "token bucket"
    """Kafka's ``TokenBucket``: a burst of ``num`` x ``size`` x quota, refilled at the quota; the throttle is the
    time until the bucket is back at zero (``ControllerMutationQuotaManager``)."""


class FleetSharing(enum.StrEnum):
    """How the members of a fleet (``quota.scope = "cluster"``) learn each other's usage of a type."""

    NOT_SHARED = "not shared"
    AMOUNTS = "amounts, published at once"
    """Each member's charges, published within the fleet's interval."""
    AMOUNTS_HELD = "amounts, held while far from the limit"
    """As ``AMOUNTS``, but a bucket far below its limit may wait a second (a rate barely moves for it)."""
    IDS = "the producer IDs themselves"
    """An ID is charged once per window whichever member sees it first."""


@dataclass(frozen=True)
class QuotaTypeSpec:
    unit: str
    """What one unit of the limit is, as the documentation says it."""
    topic_unit: str | None
    """What it is of a topic entity, for the types a topic may set."""
    integral: bool
    """Kafka types the limit as a LONG or an INT (whole numbers only), not a DOUBLE."""
    entities: frozenset[EntityKind]
    """The entity kinds it may be set on. Without ``CLIENT_ID``, a user entity takes it only without a client id."""
    math: Math
    window: str
    """The ``QuotaSettings`` field of its window."""
    window_settings: str
    """The quota file's names of that window's settings (Kafka's broker settings)."""
    fleet: FleetSharing
    gives_back: bool
    """Amounts may be negative: tokens given back for work the cluster refused (a failed topic creation)."""
    metric: str | None
    """The stem of its metric families (``kafka_quota_proxy_<metric>``), or None when it has only the usage
    families every type has."""
    kafka: str
    """Which of Kafka's quotas it is, or that it is the proxy's own."""

    @property
    def user_only(self) -> bool:
        return EntityKind.CLIENT_ID not in self.entities


_USERS_AND_CLIENTS = frozenset({EntityKind.USER, EntityKind.CLIENT_ID})
_PRINCIPALS = _USERS_AND_CLIENTS | {EntityKind.TENANT}
_BYTE_WINDOW = ("byte_rate_window", "quota.window.*")

QUOTA_TYPES: Mapping[QuotaType, QuotaTypeSpec] = {
    QuotaType.PRODUCER_BYTE_RATE: QuotaTypeSpec(
        "bytes/s of Produce requests", "record bytes/s written to a topic", True,
        _PRINCIPALS | {EntityKind.TOPIC},
        Math.RATE, *_BYTE_WINDOW, FleetSharing.AMOUNTS_HELD, False, "produce_byte_rate",
        "KIP-13 (`ClientQuotaManager`); topic entities are the proxy's own"),
    QuotaType.CONSUMER_BYTE_RATE: QuotaTypeSpec(
        "bytes/s of Fetch responses", "record bytes/s read from a topic", True, _PRINCIPALS | {EntityKind.TOPIC},
        Math.RATE, *_BYTE_WINDOW, FleetSharing.AMOUNTS_HELD, False, "consume_byte_rate",
        "KIP-13 (`ClientQuotaManager`); topic entities are the proxy's own"),
    QuotaType.REQUEST_RATE: QuotaTypeSpec(
        "requests/s, every api but ApiVersions and SASL's", None, False, _PRINCIPALS, Math.RATE, *_BYTE_WINDOW,
        FleetSharing.AMOUNTS_HELD, False, "request_rate", "the proxy's own (Kafka's `request_percentage` is a share "
        "of its threads' time)"),
    QuotaType.CONTROLLER_MUTATION_RATE: QuotaTypeSpec(
        "partition mutations/s", None, False, _PRINCIPALS, Math.TOKEN_BUCKET, "mutation_window",
        "controller.quota.window.*", FleetSharing.AMOUNTS, True, "controller_mutation",
        "KIP-599 (`ControllerMutationQuotaManager`)"),
    QuotaType.PRODUCER_IDS_RATE: QuotaTypeSpec(
        "new producer IDs/s", None, False, frozenset({EntityKind.USER, EntityKind.TENANT}), Math.TOKEN_BUCKET,
        "producer_id_window",
        "producer.id.quota.window.*", FleetSharing.IDS, False, "producer_id", "KIP-936 (never shipped in Kafka)"),
    QuotaType.CONNECTION_CREATION_RATE: QuotaTypeSpec(
        "new connections/s (logins/s of a user)", None, True, frozenset({EntityKind.USER, EntityKind.IP}), Math.RATE,
        *_BYTE_WINDOW, FleetSharing.NOT_SHARED, False, None,
        "KIP-612 (`ConnectionQuotas`) for IPs; users are the proxy's own"),
}


def types_taking(kind: EntityKind) -> frozenset[QuotaType]:
    """The quota types an entity of ``kind`` may set."""
    return frozenset(quota_type for quota_type, spec in QUOTA_TYPES.items() if kind in spec.entities)


def types_shared(*ways: FleetSharing) -> frozenset[QuotaType]:
    return frozenset(quota_type for quota_type, spec in QUOTA_TYPES.items() if spec.fleet in ways)


def markdown_table() -> str:
    """The documentation's table of quota types (docs/quotas.md)."""
    rows = ["| quota type | unit | set on | math | window | in a fleet | Kafka |", "|---|---|---|---|---|---|---|"]
    for quota_type, spec in QUOTA_TYPES.items():
        entities = ", ".join(kind.value for kind in EntityKind if kind in spec.entities)
        if spec.user_only:
            entities = entities.replace("user", "user (without a client id)")
        unit = spec.unit + ("" if spec.topic_unit is None else f" ({spec.topic_unit})") + (
            "; whole numbers" if spec.integral else "")
        rows.append(f"| `{quota_type}` | {unit} | {entities} | {spec.math} | `{spec.window_settings}` | "
                    f"{spec.fleet} | {spec.kafka} |")
    return "\n".join(rows) + "\n"
