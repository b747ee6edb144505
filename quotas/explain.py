"""Which quota applies to a client, and why: the "resolve" KIP-546 proposed and Kafka never shipped.

For each quota type: the configured entity that applies (by Kafka's eight-level order for user and
client-id quotas, the IP's own entry or the default IP's for the connection creation rate), its
limit, whether it is enforced or observed, and where it was set. Given a topic, the byte rates of the
topic quota applying to the user's bytes of it too (by the six levels of ``TOPIC_LEVELS``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from quotas.config import (
    DEFAULT,
    TOPIC_TYPES,
    QuotaConfig,
    QuotaConfigError,
    QuotaEntity,
    QuotaKey,
    QuotaMode,
    QuotaType,
    ResolvedQuota,
    normalized_ip,
)
from quotas.quota_types import QUOTA_TYPES
from quotas.tenants import Tenant

LEVELS = (
    "/config/users/<user>/clients/<client-id>",
    "/config/users/<user>/clients/<default>",
    "/config/users/<user>",
    "/config/users/<default>/clients/<client-id>",
    "/config/users/<default>/clients/<default>",
    "/config/users/<default>",
    "/config/clients/<client-id>",
    "/config/clients/<default>",
)
"""Kafka's order (``DefaultQuotaCallback``), most specific first; a level's index + 1 is its number."""
TOPIC_LEVELS = (
    "user and topic",
    "user and the default topic",
    "the default user and topic",
    "the default user and the default topic",
    "the topic alone (shared by every user)",
    "the default topic alone (each topic shared by every user)",
)
"""``QuotaConfig.resolve_topic``'s order: Kafka's with the topic in the client id's place."""
_UNRECORDED = "(not recorded)"


class Explanation(NamedTuple):
    quota_type: QuotaType
    entity: QuotaEntity | None = None
    """None: no quota applies."""
    limit: float | None = None
    mode: QuotaMode | None = None
    origin: str | None = None
    level: str | None = None
    """Where the entity stands in Kafka's order, or why an IP quota applies."""
    key: QuotaKey | None = None
    """The bucket it is charged to (who shares it)."""
    topic: str | None = None
    """Set for a topic quota's explanation: the topic asked about."""

    def as_json(self) -> dict[str, Any]:
        asked = {} if self.topic is None else {"topic": self.topic}
        if self.entity is None:
            return {"quota_type": self.quota_type.value, **asked, "quota": None}
        entity = {name: value for name, value in (("user", self.entity.user), ("client-id", self.entity.client_id),
                                                  ("ip", self.entity.ip), ("topic", self.entity.topic),
                                                  ("tenant", self.entity.tenant))
                  if value is not None}
        return {"quota_type": self.quota_type.value, **asked, "quota": self.limit, "mode": str(self.mode),
                "entity": entity, "level": self.level, "origin": self.origin}

    def text(self) -> str:
        if self.entity is None:
            return f"{self.quota_type:<26} no quota" + ("" if self.topic is None else f" of topic {self.topic}")
        limit = int(self.limit) if self.limit is not None and self.limit.is_integer() else self.limit
        return (f"{self.quota_type:<26} {limit!s:>12}  {self.mode!s:<8} {self.entity.describe()} "
                f"({self.level}), set in {self.origin}")


class TenantExplanation(NamedTuple):
    """The tenant a client's user belongs to, how, and the caps on what it owns."""

    tenant: Tenant
    member_by: str
    """"users", or its ``user-prefix``."""

    def as_json(self) -> dict[str, Any]:
        tenant = self.tenant
        return {"name": tenant.name, "member_by": self.member_by, "topic_prefix": tenant.topic_prefix,
                "max_partitions": tenant.max_partitions, "max_topics": tenant.max_topics,
                "topics_only_under_prefix": tenant.topics_only_under_prefix, "origin": tenant.label}

    def text(self) -> str:
        tenant = self.tenant
        caps = [f"at most {cap} {what}" for cap, what in ((tenant.max_partitions, "partitions"),
                                                          (tenant.max_topics, "topics")) if cap is not None]
        if tenant.topics_only_under_prefix:
            caps.append("its users create topics only there")
        owns = "no topics" if tenant.topic_prefix is None else f"the topics under '{tenant.topic_prefix}'"
        return (f"tenant {tenant.name} (by its {self.member_by}), set in {tenant.label}: owns {owns}"
                + (f" ({', '.join(caps)})" if caps else ""))


def explain_tenant(config: QuotaConfig, who: Client) -> TenantExplanation | None:
    tenant = config.tenants.of_user(who.user)
    if tenant is None:
        return None
    return TenantExplanation(tenant, "users" if who.user in tenant.users else f"user-prefix '{tenant.user_prefix}'")


class Client(NamedTuple):
    """Who is asking: a connection's user (principal name), client id and address, and the topic it writes or
    reads (for the topic quotas)."""

    user: str
    client_id: str
    ip: str | None = None
    topic: str | None = None


def parse_client(user: str, client_id: str, ip: str | None = None, topic: str | None = None) -> Client:
    """A client as a connection presents it; raises QuotaConfigError for what no connection can be."""
    if not user:
        raise QuotaConfigError("user: a principal name is not empty (a connection without SASL is ANONYMOUS)")
    for part, value in (("user", user), ("client-id", client_id), ("topic", topic)):
        if value == DEFAULT:
            raise QuotaConfigError(f"{part}: {DEFAULT} names the default entity, not a client; ask for a name")
    if topic is not None:
        QuotaEntity(topic=topic)  # a Kafka topic name, or QuotaConfigError
    return Client(user, client_id, None if ip is None else _client_ip(ip), topic)


def _client_ip(text: str) -> str:
    address = normalized_ip(text)
    if address == DEFAULT:
        raise QuotaConfigError(f"ip: {DEFAULT} names the default entity, not a client; ask for an address")
    return address


def explain(config: QuotaConfig, who: Client) -> list[Explanation]:
    """One explanation per quota type, in ``QuotaType`` order."""
    explanations = []
    for quota_type in QuotaType:
        if quota_type is QuotaType.CONNECTION_CREATION_RATE:
            explanations.append(_explain_ip(config, who.ip))
            if config.configures(quota_type):  # a user's too, once a login or certificate names the user
                explanations.append(_explain_entity(config, quota_type, who.user, ""))
            continue
        client_id = "" if QUOTA_TYPES[quota_type].user_only else who.client_id  # a user's quota: no client id
        explanations.append(_explain_entity(config, quota_type, who.user, client_id))
    if who.topic is not None:
        explanations.extend(_explain_topic(config, quota_type, who.user, who.topic) for quota_type in QuotaType
                            if quota_type in TOPIC_TYPES)
    explanations.extend(_explain_tenant_budget(config, quota_type, quota) for quota_type in QuotaType
                        if (quota := config.resolve_tenant(quota_type, who.user)) is not None)
    return explanations


def _explain_tenant_budget(config: QuotaConfig, quota_type: QuotaType, quota: ResolvedQuota) -> Explanation:
    """A budget of the user's tenant, charged beside the user's quota of the type (the larger throttle given)."""
    return Explanation(quota_type, quota.entity, quota.limit, config.mode_of(quota.entity),
                       config.origins.get((quota.entity, quota_type), _UNRECORDED),
                       f"tenant {quota.key.tenant}'s budget, shared by its principals", quota.key)


def _explain_topic(config: QuotaConfig, quota_type: QuotaType, user: str, topic: str) -> Explanation:
    quota = config.resolve_topic(quota_type, user, topic)
    if quota is None:
        return Explanation(quota_type, topic=topic)
    return Explanation(quota_type, quota.entity, quota.limit, config.mode_of(quota.entity),
                       config.origins.get((quota.entity, quota_type), _UNRECORDED),
                       f"topic level {quota.level} of 6: {TOPIC_LEVELS[quota.level - 1]}", quota.key, topic)


def _explain_entity(config: QuotaConfig, quota_type: QuotaType, user: str, client_id: str) -> Explanation:
    quota = config.resolve(quota_type, user, client_id)
    if quota is None:
        return Explanation(quota_type)
    return Explanation(quota_type, quota.entity, quota.limit, config.mode_of(quota.entity),
                       config.origins.get((quota.entity, quota_type), _UNRECORDED),
                       f"level {quota.level} of 8: {LEVELS[quota.level - 1]}", quota.key)


def _explain_ip(config: QuotaConfig, ip: str | None) -> Explanation:
    quota_type = QuotaType.CONNECTION_CREATION_RATE
    if ip is None:
        quota = config.connection_rate_for(DEFAULT)
        level = "the default IP's; give an ip for its own"
    else:
        quota = config.connection_rate_for(ip)
        level = "the default IP's" if quota is not None and quota.entity.ip == DEFAULT else "the IP's own"
    if quota is None:
        return Explanation(quota_type)
    return Explanation(quota_type, quota.entity, quota.limit, config.mode_of(quota.entity),
                       config.origins.get((quota.entity, quota_type), _UNRECORDED), level)
