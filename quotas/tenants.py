"""Tenants: a team's principals and the topics it owns, and the caps on what it may own.

A tenant names its principals (``users``, ``user-prefix``) and its topics (``topic-prefix``). A principal belongs
to at most one tenant and a topic to at most one, so overlapping entries are refused. On a tenant with a topic prefix,
``max_partitions`` and ``max_topics`` cap the partitions and topics under it, whoever creates them, and
``topics-only-under-prefix`` keeps its principals from creating topics anywhere else. The caps are checked where
Kafka checks a ``CreateTopicPolicy``: after its own checks of an entry, before the mutation quota, answering
POLICY_VIOLATION with a message (``ReplicationControlManager.maybeCheckCreateTopicPolicy``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

_TOPIC_CHARACTERS = re.compile(r"[a-zA-Z0-9._-]{1,248}")
"""What a topic prefix may hold: the start of a legal topic name (``Topic.validate``), leaving a character to name."""
_KEYS = {"name", "users", "user-prefix", "topic-prefix", "max_partitions", "max_topics", "topics-only-under-prefix"}
_CAPS_KEYS = ("max_partitions", "max_topics", "topics-only-under-prefix")
_USER_CACHE_SIZE = 65_536


class TenantConfigError(ValueError):
    """A ``[[tenant]]`` entry is invalid; the message names the entry (and the other one, for an overlap)."""


@dataclass(frozen=True)
class Tenant:
    name: str
    users: frozenset[str] = frozenset()
    user_prefix: str | None = None
    topic_prefix: str | None = None
    max_partitions: int | None = None
    """The most partitions its topics may have together; None: no cap."""
    max_topics: int | None = None
    topics_only_under_prefix: bool = False
    """Its principals may create topics only under ``topic_prefix``."""
    label: str = field(default="", compare=False)
    """How a message names its entry (``[[tenant]] #2 (payments)``)."""

    def has_user(self, user: str) -> bool:
        return user in self.users or (self.user_prefix is not None and user.startswith(self.user_prefix))

    def owns(self, topic: str) -> bool:
        return self.topic_prefix is not None and topic.startswith(self.topic_prefix)

    def keeps_out(self, topic: str) -> bool:
        """Its principals may not create ``topic``: it is outside the prefix they create topics only under."""
        return self.topics_only_under_prefix and not self.owns(topic)

    @property
    def counts_owned(self) -> bool:
        """It has a cap on the topics or partitions it owns: what it owns is read to create more."""
        return self.max_partitions is not None or self.max_topics is not None

    @property
    def capped(self) -> bool:
        """Creating topics or partitions may be refused for it."""
        return self.counts_owned or self.topics_only_under_prefix


class Tenants:
    """Every tenant of a quota file: which one a principal belongs to, and which one owns a topic."""

    __slots__ = ("all", "_by_user", "_user_prefixed", "_topic_prefixed", "_cached_of_user", "capped")

    def __init__(self, tenants: Sequence[Tenant] = ()) -> None:
        self.all: tuple[Tenant, ...] = tuple(tenants)
        self._by_user = {user: tenant for tenant in self.all for user in tenant.users}
        self._user_prefixed = [tenant for tenant in self.all if tenant.user_prefix is not None]
        self._topic_prefixed = [tenant for tenant in self.all if tenant.topic_prefix is not None]
        self.capped = any(tenant.capped for tenant in self.all)
        """Some tenant's topics or principals have a cap (the topic handler reads the cluster then)."""
        # bounded: a prefix match for every distinct principal must not grow memory without limit
        self._cached_of_user = lru_cache(maxsize=_USER_CACHE_SIZE)(self._of_user)

    def of_user(self, user: str) -> Tenant | None:
        """The tenant ``user`` belongs to, if any."""
        return self._cached_of_user(user)

    def named(self, name: str) -> Tenant | None:
        return next((tenant for tenant in self.all if tenant.name == name), None)

    def governs(self, topic: str, creator: str | None = None) -> bool:
        """A cap may refuse ``topic``: its tenant caps what it owns, or it is outside the prefix ``creator``'s tenant
        creates topics under (``creator``: the principal creating it, when it is created)."""
        owner = self.owner_of(topic)
        if owner is not None and owner.counts_owned:
            return True
        tenant = None if creator is None else self.of_user(creator)
        return tenant is not None and tenant.keeps_out(topic)

    def owner_of(self, topic: str) -> Tenant | None:
        """The tenant whose topic prefix ``topic`` starts with, if any."""
        for tenant in self._topic_prefixed:
            if tenant.owns(topic):
                return tenant
        return None

    def _of_user(self, user: str) -> Tenant | None:
        tenant = self._by_user.get(user)
        if tenant is not None:
            return tenant
        for tenant in self._user_prefixed:
            if tenant.has_user(user):
                return tenant
        return None


# ---- the caps ------------------------------------------------------------------------------------------------


Owned = Mapping[str, int]
"""What a tenant owns: each of its topics with its partitions."""


class Holdings:
    """What each capped tenant owned when it was last counted (a creation judged against its caps), for the
    metrics: (topics, partitions)."""

    __slots__ = ("counted",)

    def __init__(self) -> None:
        self.counted: dict[str, tuple[int, int]] = {}

    def count(self, tenant: str, owned: Owned) -> None:
        self.counted[tenant] = (len(owned), sum(owned.values()))


class Creation(NamedTuple):
    """One entry of CreateTopics (``new_topic``) or CreatePartitions that Kafka's own checks let through."""

    topic: str
    partitions: int
    """The partitions the topic has once it is done: a new topic's, or a topic's count after an increase."""
    new_topic: bool


def refusals(tenants: Tenants, user: str, creations: Mapping[int, Creation],
             owned: Mapping[str, Owned]) -> dict[int, str]:
    """The entries the tenants' caps refuse, each with its message, in request order: an entry let through counts
    for the ones after it, as the cluster would have it by then. ``owned``: what each capped tenant owning one of the
    topics owns now (``tenants_to_count``). A topic counts once, at the most partitions anything gives it (a topic
    asked for again, an increase behind a creation still in flight)."""
    creator = tenants.of_user(user)
    now_owned = {name: dict(topics) for name, topics in owned.items()}
    refused = {}
    for index in sorted(creations):
        creation = creations[index]
        if creator is not None and creation.new_topic and creator.keeps_out(creation.topic):
            refused[index] = (f"Tenant {creator.name} may create topics only under its prefix "
                              f"'{creator.topic_prefix}': '{creation.topic}' is not.")
            continue
        owner = tenants.owner_of(creation.topic)
        if owner is None or owner.name not in now_owned:
            continue
        topics = now_owned[owner.name]
        partitions = sum(topics.values())
        before = topics.get(creation.topic)
        more = max(0, creation.partitions - (before or 0))
        if owner.max_topics is not None and before is None and len(topics) + 1 > owner.max_topics:
            refused[index] = (f"Tenant {owner.name} owns {len(topics)} topic(s) under '{owner.topic_prefix}'; one "
                              f"more would be over its cap of {owner.max_topics}.")
        elif owner.max_partitions is not None and partitions + more > owner.max_partitions:
            refused[index] = (f"Tenant {owner.name} owns {partitions} partition(s) under '{owner.topic_prefix}'; "
                              f"{more} more would be over its cap of {owner.max_partitions}.")
        else:
            topics[creation.topic] = (before or 0) + more
    return refused


IN_FLIGHT_TTL_MS = 60_000
"""How long a creation let through counts while its answer has not come (its connection may have closed first)."""


class CreationsInFlight:
    """Creations let through whose answers have not come back: a request pipelined behind them, or sent on another
    connection meanwhile, counts them, or a client could pass a cap by sending its creations all at once. Each
    request's are held apart (``add`` gives its token) and let go by its own answer, or a minute after it was sent."""

    __slots__ = ("_held", "_next_token")

    def __init__(self) -> None:
        self._held: dict[int, tuple[tuple[Creation, ...], int]] = {}
        """Token -> a request's creations and when they stop counting."""
        self._next_token = 0

    def add(self, creations: Iterable[Creation], now_ms: int) -> int:
        token = self._next_token = self._next_token + 1
        self._held[token] = (tuple(creations), now_ms + IN_FLIGHT_TTL_MS)
        return token

    def answered(self, token: int) -> None:
        self._held.pop(token, None)

    def creating(self, topic: str, now_ms: int) -> bool:
        """A creation of ``topic`` is in flight."""
        return any(creation.new_topic and creation.topic == topic for creation in self._counted(now_ms))

    def owned_with(self, tenant: Tenant, in_cluster: Mapping[str, int], now_ms: int) -> Owned:
        """What ``tenant`` owns once its creations in flight are done: each topic as the cluster has it (``in_cluster``:
        its partitions now) or as a creation in flight leaves it, whichever has more partitions."""
        partitions = {topic: count for topic, count in in_cluster.items() if tenant.owns(topic)}
        for creation in self._counted(now_ms):
            if tenant.owns(creation.topic):
                partitions[creation.topic] = max(partitions.get(creation.topic, 0), creation.partitions)
        return partitions

    def _counted(self, now_ms: int) -> list[Creation]:
        for token in [token for token, (_, until_ms) in self._held.items() if until_ms <= now_ms]:
            del self._held[token]
        return [creation for creations, _ in self._held.values() for creation in creations]


def tenants_to_count(tenants: Tenants, topics: Iterable[str]) -> list[Tenant]:
    """The tenants with a cap on what they own that own one of ``topics``: what they own must be read."""
    owners = {tenant.name: tenant for topic in topics
              if (tenant := tenants.owner_of(topic)) is not None and tenant.counts_owned}
    return list(owners.values())


# ---- the quota file's [[tenant]] tables --------------------------------------------------------------------


def parse_tenants(raw_entries: Any) -> Tenants:
    if not isinstance(raw_entries, list):
        raise TenantConfigError("'tenant' must be an array of tables ([[tenant]])")
    tenants: list[Tenant] = []
    for number, raw in enumerate(raw_entries, start=1):
        tenant = _parse_tenant(raw, f"[[tenant]] #{number}")
        for earlier in tenants:
            if earlier.name == tenant.name:
                raise TenantConfigError(f"{tenant.label}: the name of {earlier.label} already")
            _refuse_overlap(earlier, tenant)
        tenants.append(tenant)
    return Tenants(tenants)


def _parse_tenant(raw: Any, label: str) -> Tenant:
    if not isinstance(raw, dict):
        raise TenantConfigError(f"{label}: must be a table")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise TenantConfigError(f"{label}: needs a name (a non-empty string), got {name!r}")
    label = f"{label} ({name})"
    unknown = set(raw) - _KEYS
    if unknown:
        raise TenantConfigError(f"{label}: unknown key(s) {', '.join(sorted(unknown))} "
                                f"(keys: {', '.join(sorted(_KEYS))})")
    users = raw.get("users", [])
    if not isinstance(users, list) or not all(isinstance(user, str) and user for user in users):
        raise TenantConfigError(f"{label}: users must be a list of non-empty strings, got {users!r}")
    user_prefix = _optional_text(raw, "user-prefix", label)
    if not users and user_prefix is None:
        raise TenantConfigError(f"{label}: names no principal (users, user-prefix)")
    topic_prefix = _optional_text(raw, "topic-prefix", label)
    if topic_prefix is not None and not _TOPIC_CHARACTERS.fullmatch(topic_prefix):
        raise TenantConfigError(f"{label}: topic-prefix must be the start of a Kafka topic name (letters, digits, "
                                f"'.', '_', '-'; at most 248), got {topic_prefix!r}")
    if topic_prefix is None and (given := [key for key in _CAPS_KEYS if key in raw and raw[key] is not False]):
        raise TenantConfigError(f"{label}: {', '.join(given)} needs a topic-prefix (the topics it applies to)")
    only_under_prefix = raw.get("topics-only-under-prefix", False)
    if not isinstance(only_under_prefix, bool):
        raise TenantConfigError(f"{label}: topics-only-under-prefix must be true or false, got {only_under_prefix!r}")
    return Tenant(name, frozenset(users), user_prefix, topic_prefix, _cap(raw, "max_partitions", label),
                  _cap(raw, "max_topics", label), only_under_prefix, label)


def _optional_text(raw: Mapping[str, Any], key: str, label: str) -> str | None:
    value = raw.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise TenantConfigError(f"{label}: {key} must be a non-empty string, got {value!r}")
    return value


def _cap(raw: Mapping[str, Any], key: str, label: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TenantConfigError(f"{label}: {key} must be a whole number of at least 0, got {value!r}")
    return value


def _refuse_overlap(earlier: Tenant, tenant: Tenant) -> None:
    """A principal or a topic that two tenants would both take."""
    both = f"{tenant.label} and {earlier.label}"
    shared_users = sorted(tenant.users & earlier.users)
    if shared_users:
        raise TenantConfigError(f"{both} both name user {shared_users[0]!r}: a principal belongs to one tenant")
    for one, other in ((tenant, earlier), (earlier, tenant)):
        taken = sorted(user for user in one.users if other.has_user(user))
        if taken:
            raise TenantConfigError(f"{both} both take user {taken[0]!r} ({other.name} by its user-prefix "
                                    f"'{other.user_prefix}'): a principal belongs to one tenant")
    if _prefixes_overlap(tenant.user_prefix, earlier.user_prefix):
        raise TenantConfigError(f"{both} have overlapping user prefixes '{tenant.user_prefix}' and "
                                f"'{earlier.user_prefix}': a principal belongs to one tenant")
    if _prefixes_overlap(tenant.topic_prefix, earlier.topic_prefix):
        raise TenantConfigError(f"{both} have overlapping topic prefixes '{tenant.topic_prefix}' and "
                                f"'{earlier.topic_prefix}': a topic belongs to one tenant")


def _prefixes_overlap(one: str | None, other: str | None) -> bool:
    return one is not None and other is not None and (one.startswith(other) or other.startswith(one))
