"""Quota entities, Kafka's precedence between them, and the TOML quota file.

Each quota type resolves independently, as each Kafka quota manager has its own overrides. The
level that resolves an entity also decides who shares one bucket (``QuotaKey``): Kafka's metric
tags. As Kafka's ``ClientQuotaManager.DefaultQuotaCallback`` (``quotaMetricTags``/``quotaLimit``).
"""

from __future__ import annotations

import enum
import ipaddress
import math
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from quotas.quota_types import QUOTA_TYPES, EntityKind, QuotaType, types_taking
from quotas.tenants import TenantConfigError, Tenants, parse_tenants

DEFAULT = "<default>"
"""Entity name matching every user (or client id, or topic) that has no entry of its own."""
ANONYMOUS = "ANONYMOUS"
"""The user of a connection without SASL (Kafka's ``KafkaPrincipal.ANONYMOUS``)."""


_IP_TYPES = types_taking(EntityKind.IP)
TENANT_TYPES = types_taking(EntityKind.TENANT)
"""The quota types a tenant's budget may set."""
TOPIC_TYPES = types_taking(EntityKind.TOPIC)
"""The bytes produced to and consumed from a topic."""
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
"""Kafka's legal topic names (``Topic.validate``)."""


class QuotaScope(enum.StrEnum):
    """Where a byte-rate budget applies (``quota.scope``)."""

    BROKER = "broker"
    """One budget per upstream broker per entity, as each Kafka broker keeps its own."""
    PROXY = "proxy"
    """One budget per entity for all the traffic through this proxy, whichever broker it goes to."""
    CLUSTER = "cluster"
    """One budget per entity for the whole fleet of proxies (``[fleet]``): each adds the others' usage."""


class PidQuotaMode(enum.StrEnum):
    THROTTLE = "throttle"
    """Forward the request, answer with throttle_time_ms and mute (KIP-936's text)."""
    REJECT = "reject"
    """Do not forward; answer THROTTLING_QUOTA_EXCEEDED (the project's own rule: KIP-936 only throttles)."""


class QuotaMode(enum.StrEnum):
    """What a quota does to the traffic over it (``mode`` of an entry, ``quota.mode`` of the file)."""

    ENFORCE = "enforce"
    """Throttle, mute and refuse as a Kafka broker does."""
    OBSERVE = "observe"
    """Charge and compute the throttle or refusal enforcement would give, count it, and let the traffic through."""


class QuotaConfigError(ValueError):
    """A quota file or entry is invalid; the message names the file, the entry and the problem."""


@dataclass(frozen=True)
class QuotaEntity:
    """``user``/``client_id``: a name, ``DEFAULT``, or None when that part is absent; or, alone, an
    ``ip`` (an address, or ``DEFAULT``), the entity of Kafka's connection creation rate; or a ``topic``
    (a name or ``DEFAULT``), alone (one budget for the topic) or with a user (that user's bytes of it); or, alone,
    a ``tenant`` (the name of a ``[[tenant]]``: one budget its principals share)."""

    user: str | None = None
    client_id: str | None = None
    ip: str | None = None
    topic: str | None = None
    tenant: str | None = None

    def __post_init__(self) -> None:
        if self.tenant is not None:
            if (self.user, self.client_id, self.ip, self.topic) != (None, None, None, None):
                raise QuotaConfigError("a tenant entity stands alone (no user, client-id, ip or topic)")
            if not isinstance(self.tenant, str) or not self.tenant:
                raise QuotaConfigError(f"tenant must be the name of a [[tenant]], got {self.tenant!r}")
            return
        if self.ip is not None:
            if self.user is not None or self.client_id is not None or self.topic is not None:
                raise QuotaConfigError("an ip entity stands alone (no user, client-id or topic)")
            object.__setattr__(self, "ip", normalized_ip(self.ip))
            return
        if self.topic is not None:
            if self.client_id is not None:
                raise QuotaConfigError("a topic entity takes a user or nothing else, not a client-id")
            if not isinstance(self.topic, str) or not (self.topic == DEFAULT or _TOPIC_NAME.fullmatch(self.topic)):
                raise QuotaConfigError(f"topic must be a Kafka topic name (letters, digits, '.', '_', '-'; at most "
                                       f"249) or {DEFAULT}, got {self.topic!r}")
        elif self.user is None and self.client_id is None:
            raise QuotaConfigError("an entity needs a user, a client-id or both, an ip, or a topic")
        for part, value in (("user", self.user), ("client-id", self.client_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise QuotaConfigError(f"{part} must be a non-empty string, got {value!r}")

    def describe(self) -> str:
        if self.ip is not None:
            return f"ip={self.ip}"
        if self.tenant is not None:
            return f"tenant={self.tenant}"
        parts = []
        if self.user is not None:
            parts.append(f"user={self.user}")
        if self.client_id is not None:
            parts.append(f"client-id={self.client_id}")
        if self.topic is not None:
            parts.append(f"topic={self.topic}")
        return ", ".join(parts)


def normalized_ip(text: object) -> str:
    """An IP address as the proxy compares them (IPv4-mapped IPv6 as IPv4), or ``DEFAULT``."""
    if text == DEFAULT:
        return DEFAULT
    try:
        address = ipaddress.ip_address(text)  # type: ignore[arg-type]
    except ValueError:
        raise QuotaConfigError(f"ip must be an IP address or {DEFAULT}, got {text!r}") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


class QuotaKey(NamedTuple):
    """Who shares one bucket: Kafka's metric tags; "" stands for a part that is not shared on."""

    user: str
    client_id: str
    broker: str = ""
    """The upstream broker, for byte-rate quotas in ``broker`` scope (Kafka's: one budget per broker)."""
    topic: str = ""
    """The topic of a topic quota's bucket; "" for every other quota."""
    tenant: str = ""
    """The tenant of a tenant's budget (``user`` and ``client_id`` empty); "" for every other quota."""


class ResolvedQuota(NamedTuple):
    key: QuotaKey
    limit: float
    entity: QuotaEntity
    """The configured entity that supplied the limit."""
    observed: bool = False
    """The entity's quotas are observed, not enforced (``QuotaMode.OBSERVE``)."""
    level: int = 0
    """Which of Kafka's eight levels matched, from 1 (user and client id) to 8 (the default client id); for a
    topic quota, which of its six (``QuotaConfig.resolve_topic``); 0 for a tenant's budget."""


class IpQuota(NamedTuple):
    """The ``connection_creation_rate`` applying to one IP."""

    limit: float
    entity: QuotaEntity
    observed: bool = False


@dataclass(frozen=True)
class Window:
    """Kafka's ``*.window.num`` samples of ``*.window.size.seconds`` each."""

    num: int
    size_s: float

    @cached_property
    def size_ms(self) -> int:
        return round(self.size_s * 1000)

    @property
    def length_s(self) -> float:
        return self.num * self.size_s


@dataclass(frozen=True)
class QuotaSettings:
    byte_rate_window: Window = Window(11, 1)
    mutation_window: Window = Window(11, 1)
    producer_id_window: Window = Window(11, 3600)
    producer_id_mode: PidQuotaMode = PidQuotaMode.THROTTLE
    producer_id_false_positive_rate: float = 0.01
    """Target false-positive rate of each producer-ID Bloom filter (a known PID never misses)."""
    quota_scope: QuotaScope = QuotaScope.BROKER
    quota_mode: QuotaMode = QuotaMode.ENFORCE
    """The mode of every entry that does not set its own."""

    def window_for(self, quota_type: QuotaType) -> Window:
        window: Window = getattr(self, QUOTA_TYPES[quota_type].window)
        return window


_RESOLUTION_CACHE_SIZE = 65_536


class QuotaConfig:
    """An immutable snapshot of every quota; replaced whole when the configuration changes."""

    __slots__ = ("settings", "entries", "modes", "origins", "tenants", "budgeted", "_by_type", "_by_topic",
                 "_by_tenant", "_ip_rates", "_cached_resolve", "_cached_resolve_topic")

    def __init__(self, settings: QuotaSettings | None = None,
                 entries: Mapping[QuotaEntity, Mapping[QuotaType, float]] | None = None,
                 modes: Mapping[QuotaEntity, QuotaMode] | None = None,
                 origins: Mapping[tuple[QuotaEntity, QuotaType], str] | None = None,
                 tenants: Tenants | None = None) -> None:
        """``modes``: the entities whose entry sets its own mode (the others take ``settings.quota_mode``);
        ``origins``: where each entity's limit of each type was set, as a person reads it (for ``explain``)."""
        self.settings = settings or QuotaSettings()
        self.tenants = Tenants() if tenants is None else tenants
        self.entries: Mapping[QuotaEntity, Mapping[QuotaType, float]] = dict(entries or {})
        self.modes: Mapping[QuotaEntity, QuotaMode] = dict(modes or {})
        self.origins: Mapping[tuple[QuotaEntity, QuotaType], str] = dict(origins or {})
        # keyed by (user, client_id) tuples: lookups build keys for names that are not valid entities
        self._by_type: dict[QuotaType, dict[tuple[str | None, str | None], tuple[QuotaEntity, float, bool]]] = {
            t: {} for t in QuotaType}
        self._by_topic: dict[QuotaType, dict[tuple[str | None, str], tuple[QuotaEntity, float, bool]]] = {
            t: {} for t in TOPIC_TYPES}
        self._by_tenant: dict[QuotaType, dict[str, tuple[QuotaEntity, float, bool]]] = {t: {} for t in TENANT_TYPES}
        self._ip_rates: dict[str, IpQuota] = {}
        for entity, quotas in self.entries.items():
            observed = self.mode_of(entity) is QuotaMode.OBSERVE
            for quota_type, limit in quotas.items():
                validate_quota(entity, quota_type, limit)
                if entity.tenant is not None:
                    self._by_tenant[quota_type][entity.tenant] = (entity, float(limit), observed)
                elif entity.ip is not None:
                    self._ip_rates[entity.ip] = IpQuota(float(limit), entity, observed)
                elif entity.topic is not None:
                    self._by_topic[quota_type][(entity.user, entity.topic)] = (entity, float(limit), observed)
                else:
                    self._by_type[quota_type][(entity.user, entity.client_id)] = (entity, float(limit), observed)
        self.budgeted = frozenset(quota_type for quota_type, budgets in self._by_tenant.items() if budgets)
        """The quota types some tenant has a budget of (a set look-up for every request that has none)."""
        # Bounded: millions of distinct client ids must not grow memory without limit.
        self._cached_resolve = lru_cache(maxsize=_RESOLUTION_CACHE_SIZE)(self._resolve)
        self._cached_resolve_topic = lru_cache(maxsize=_RESOLUTION_CACHE_SIZE)(self._resolve_topic)

    def resolve(self, quota_type: QuotaType, user: str, client_id: str) -> ResolvedQuota | None:
        """The quota applying to (user, client_id), or None when it is unlimited."""
        return self._cached_resolve(quota_type, user, client_id)

    def configures(self, quota_type: QuotaType) -> bool:
        """Some user, client-id or tenant entity has a quota of ``quota_type``."""
        return bool(self._by_type[quota_type] or self._by_tenant.get(quota_type))

    def resolve_topic(self, quota_type: QuotaType, user: str, topic: str) -> ResolvedQuota | None:
        """The topic quota applying to ``user``'s bytes of ``topic`` (``TOPIC_TYPES``), or None.

        Kafka's precedence with the topic in the client id's place, the levels of a user alone left out:
        (user, topic), (user, default topic), (default user, topic), (default user, default topic), then the
        topic alone and the default topic alone. A quota with a user is a budget per user and topic; one
        without, a budget per topic that every user shares (``QuotaKey.user`` empty)."""
        return self._cached_resolve_topic(quota_type, user, topic)

    def resolve_tenant(self, quota_type: QuotaType, user: str) -> ResolvedQuota | None:
        """The budget of ``user``'s tenant (``Tenants.of_user``), one bucket every principal of the tenant shares
        (``QuotaKey.tenant``); None when the user has no tenant or its tenant no budget of ``quota_type``. A tenant
        named by a budget and no longer in the file (an override set before the file changed) has no principals."""
        budgets = self._by_tenant.get(quota_type)
        if not budgets:
            return None
        tenant = self.tenants.of_user(user)
        found = None if tenant is None else budgets.get(tenant.name)
        if found is None:
            return None
        return ResolvedQuota(QuotaKey("", "", "", "", found[0].tenant or ""), found[1], found[0], found[2])

    def configures_topics(self, quota_type: QuotaType) -> bool:
        """Some topic entity has a quota of ``quota_type``."""
        return bool(self._by_topic.get(quota_type))

    def mode_of(self, entity: QuotaEntity) -> QuotaMode:
        return self.modes.get(entity, self.settings.quota_mode)

    def connection_rate_for(self, ip: str) -> IpQuota | None:
        """The IP's ``connection_creation_rate`` (its own, else the ``<default>`` IP's), or None."""
        rates = self._ip_rates
        return rates.get(ip, rates.get(DEFAULT)) if rates else None

    def _resolve(self, quota_type: QuotaType, user: str, client_id: str) -> ResolvedQuota | None:
        quotas = self._by_type[quota_type]
        if not quotas:
            return None
        both = QuotaKey(user, client_id)
        user_only = QuotaKey(user, "")
        client_only = QuotaKey("", client_id)
        # Kafka's eight levels, most specific first.
        levels = (
            ((user, client_id), both),
            ((user, DEFAULT), both),
            ((user, None), user_only),
            ((DEFAULT, client_id), both),
            ((DEFAULT, DEFAULT), both),
            ((DEFAULT, None), user_only),
            ((None, client_id), client_only),
            ((None, DEFAULT), client_only),
        )
        for level, (entity_key, key) in enumerate(levels, start=1):
            found = quotas.get(entity_key)
            if found is not None:
                return ResolvedQuota(key, found[1], found[0], found[2], level)
        return None


    def _resolve_topic(self, quota_type: QuotaType, user: str, topic: str) -> ResolvedQuota | None:
        quotas = self._by_topic.get(quota_type)
        if not quotas:
            return None
        levels = ((user, topic), (user, DEFAULT), (DEFAULT, topic), (DEFAULT, DEFAULT), (None, topic), (None, DEFAULT))
        for level, entity_key in enumerate(levels, start=1):
            found = quotas.get(entity_key)
            if found is not None:
                # levels 1-4 name a user: a budget per user and topic; 5-6 a topic's, which every user shares
                key = QuotaKey(user if level <= 4 else "", "", "", topic)
                return ResolvedQuota(key, found[1], found[0], found[2], level)
        return None


def validate_quota(entity: QuotaEntity, quota_type: QuotaType, limit: Any) -> None:
    spec = QUOTA_TYPES[quota_type]
    if entity.tenant is not None and quota_type not in TENANT_TYPES:
        raise QuotaConfigError(f"{quota_type} does not apply to {entity.describe()} "
                               f"(a tenant entity takes {', '.join(sorted(TENANT_TYPES))} only)")
    if entity.topic is not None and quota_type not in TOPIC_TYPES:
        raise QuotaConfigError(f"{quota_type} does not apply to {entity.describe()} "
                               f"(a topic entity takes {', '.join(sorted(TOPIC_TYPES))} only)")
    if entity.ip is not None and quota_type not in _IP_TYPES:
        raise QuotaConfigError(f"{quota_type} does not apply to {entity.describe()} "
                               f"(an ip entity takes {', '.join(sorted(_IP_TYPES))} only)")
    if entity.ip is None and entity.tenant is None and spec.user_only and (
            entity.user is None or entity.client_id is not None):
        raise QuotaConfigError(f"{quota_type} applies to users only, not to {entity.describe()}")
    if isinstance(limit, bool) or not isinstance(limit, int | float) or not math.isfinite(limit):
        raise QuotaConfigError(f"{quota_type} must be a number, got {limit!r}")
    if limit <= 0:
        raise QuotaConfigError(f"{quota_type} must be positive, got {limit!r} (omit it for no quota)")
    if spec.integral and limit != int(limit):
        raise QuotaConfigError(f"{quota_type} must be a whole number of bytes/s, got {limit!r}")


# ---- the TOML file ---------------------------------------------------------------------------

_WINDOW_SETTINGS = {
    "quota.window.num": ("byte_rate_window", "num"),
    "quota.window.size.seconds": ("byte_rate_window", "size_s"),
    "controller.quota.window.num": ("mutation_window", "num"),
    "controller.quota.window.size.seconds": ("mutation_window", "size_s"),
    "producer.id.quota.window.num": ("producer_id_window", "num"),
    "producer.id.quota.window.size.seconds": ("producer_id_window", "size_s"),
}
_MODE_SETTING = "producer.id.quota.mode"
_FALSE_POSITIVE_SETTING = "producer.id.quota.false.positive.rate"
_SCOPE_SETTING = "quota.scope"
_QUOTA_MODE_SETTING = "quota.mode"
_ENTITY_KEYS = {"user", "client-id", "ip", "topic", "tenant"}
_ENTRY_MODE_KEY = "mode"


def parse_quota_mode(value: Any, where: str) -> QuotaMode:
    try:
        return QuotaMode(value)
    except ValueError:
        raise QuotaConfigError(f"{where}: one of {', '.join(m.value for m in QuotaMode)}, got {value!r}") from None


def parse_settings(raw: Mapping[str, Any]) -> QuotaSettings:
    windows: dict[str, dict[str, float]] = {}
    defaults = QuotaSettings()
    mode = defaults.producer_id_mode
    false_positive_rate = defaults.producer_id_false_positive_rate
    scope = defaults.quota_scope
    quota_mode = defaults.quota_mode
    for key, value in raw.items():
        if key == _QUOTA_MODE_SETTING:
            quota_mode = parse_quota_mode(value, f"[settings] {key}")
            continue
        if key == _SCOPE_SETTING:
            try:
                scope = QuotaScope(value)
            except ValueError:
                raise QuotaConfigError(
                    f"[settings] {key}: one of {', '.join(s.value for s in QuotaScope)}, got {value!r}") from None
            continue
        if key == _MODE_SETTING:
            try:
                mode = PidQuotaMode(value)
            except ValueError:
                raise QuotaConfigError(
                    f"[settings] {key}: one of {', '.join(m.value for m in PidQuotaMode)}, got {value!r}") from None
            continue
        if key == _FALSE_POSITIVE_SETTING:
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 0.5:
                raise QuotaConfigError(f"[settings] {key}: a number above 0 and below 0.5, got {value!r}")
            false_positive_rate = float(value)
            continue
        if key not in _WINDOW_SETTINGS:
            raise QuotaConfigError(f"[settings] unknown key {key!r}")
        window_name, part = _WINDOW_SETTINGS[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise QuotaConfigError(f"[settings] {key}: must be a positive number, got {value!r}")
        if part == "num" and (value != int(value) or value < 2):
            raise QuotaConfigError(f"[settings] {key}: must be a whole number of at least 2, got {value!r}")
        windows.setdefault(window_name, {})[part] = value
    resolved = {}
    for window_name in ("byte_rate_window", "mutation_window", "producer_id_window"):
        default: Window = getattr(defaults, window_name)
        given = windows.get(window_name, {})
        resolved[window_name] = Window(int(given.get("num", default.num)), float(given.get("size_s", default.size_s)))
    return QuotaSettings(producer_id_mode=mode, producer_id_false_positive_rate=false_positive_rate, quota_scope=scope,
                         quota_mode=quota_mode, **resolved)


class QuotaEntries(NamedTuple):
    limits: dict[QuotaEntity, dict[QuotaType, float]]
    modes: dict[QuotaEntity, QuotaMode]
    """The entries that set their own ``mode``."""
    numbers: dict[QuotaEntity, int]
    """Each entity's entry: its place among the ``[[quota]]`` tables, from 1."""


def parse_entries(raw_entries: Iterable[Any], where: str = "") -> QuotaEntries:
    entries: dict[QuotaEntity, dict[QuotaType, float]] = {}
    modes: dict[QuotaEntity, QuotaMode] = {}
    numbers: dict[QuotaEntity, int] = {}
    for number, raw in enumerate(raw_entries, start=1):
        label = f"{where}[[quota]] #{number}"
        if not isinstance(raw, dict):
            raise QuotaConfigError(f"{label}: must be a table")
        try:
            entity = QuotaEntity(raw.get("user"), raw.get("client-id"), raw.get("ip"), raw.get("topic"),
                                 raw.get("tenant"))
        except QuotaConfigError as error:
            raise QuotaConfigError(f"{label}: {error}") from None
        label = f"{label} ({entity.describe()})"
        quotas: dict[QuotaType, float] = {}
        for key, value in raw.items():
            if key in _ENTITY_KEYS:
                continue
            if key == _ENTRY_MODE_KEY:
                modes[entity] = parse_quota_mode(value, f"{label}: mode")
                continue
            try:
                quota_type = QuotaType(key)
            except ValueError:
                raise QuotaConfigError(
                    f"{label}: unknown key {key!r} (quota types: {', '.join(QuotaType)})") from None
            try:
                validate_quota(entity, quota_type, value)
            except QuotaConfigError as error:
                raise QuotaConfigError(f"{label}: {error}") from None
            quotas[quota_type] = float(value)
        if not quotas:
            raise QuotaConfigError(f"{label}: sets no quota")
        if entity in entries:
            raise QuotaConfigError(f"{label}: duplicate entity (already defined earlier in the file)")
        entries[entity] = quotas
        numbers[entity] = number
    return QuotaEntries(entries, modes, numbers)


_ENTRY_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*quota[ \t]*\]\]", re.MULTILINE)


def entry_lines(text: str) -> list[int]:
    """The line (from 1) of each ``[[quota]]`` table header, in file order."""
    return [text.count("\n", 0, match.start()) + 1 for match in _ENTRY_HEADER.finditer(text)]


def parse_quota_document(document: Mapping[str, Any], source: str, lines: Sequence[int] = ()) -> QuotaConfig:
    """``lines``: each entry's line in ``source`` (``entry_lines``), for the origins ``explain`` shows."""
    unknown = set(document) - {"settings", "quota", "tenant"}
    if unknown:
        raise QuotaConfigError(f"{source}: unknown top-level key(s) {', '.join(sorted(unknown))}")
    try:
        settings = parse_settings(document.get("settings", {}))
        raw_entries = document.get("quota", [])
        if not isinstance(raw_entries, list):
            raise QuotaConfigError("'quota' must be an array of tables ([[quota]])")
        entries = parse_entries(raw_entries)
        tenants = parse_tenants(document.get("tenant", []))
        _check_tenants_named(entries, tenants)
    except (QuotaConfigError, TenantConfigError) as error:
        raise QuotaConfigError(f"{source}: {error}") from None
    known_lines = len(lines) == len(raw_entries)
    origins = {}
    for entity, number in entries.numbers.items():
        where = f"{source} line {lines[number - 1]}" if known_lines else f"{source} [[quota]] #{number}"
        for quota_type in entries.limits[entity]:
            origins[(entity, quota_type)] = where
    return QuotaConfig(settings, entries.limits, entries.modes, origins, tenants)


def _check_tenants_named(entries: QuotaEntries, tenants: Tenants) -> None:
    """Every tenant a ``[[quota]]`` of the file names is one of its ``[[tenant]]`` entries."""
    for entity, number in entries.numbers.items():
        if entity.tenant is not None and tenants.named(entity.tenant) is None:
            names = sorted(tenant.name for tenant in tenants.all)
            known = f" (the file's tenants: {', '.join(names)})" if names else " (the file has none)"
            raise QuotaConfigError(f"[[quota]] #{number} ({entity.describe()}): no [[tenant]] is named "
                                   f"{entity.tenant!r}{known}")


def load_quota_file(path: Path) -> QuotaConfig:
    try:
        text = path.read_text(encoding="utf-8")
        document = tomllib.loads(text)
    except OSError as error:
        raise QuotaConfigError(f"{path}: cannot read: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise QuotaConfigError(f"{path}: not UTF-8 text: {error}") from error
    except tomllib.TOMLDecodeError as error:
        raise QuotaConfigError(f"{path}: not valid TOML: {error}") from error
    return parse_quota_document(document, str(path), entry_lines(text))
