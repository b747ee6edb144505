"""Prometheus metrics of the quota managers, named after Kafka's quota metrics.

A collector reads the managers' live state at scrape time, so an entity that expires takes its
series with it and recording a request costs no metric update. Per-entity series are kept for the
``MAX_ENTITY_SERIES`` most active entities of each quota; the rest are summed into one series
labelled ``OTHERS``, so a client inventing client ids cannot make a scrape (or Prometheus) grow
without bound. It registers on the registry it is given; there is no global registry.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from quotas.byte_rates import ByteRateManager, TenantBudgets, TopicQuotaManager
from quotas.config import QuotaKey, QuotaType
from quotas.connection_quotas import ConnectionQuotas
from quotas.entities import EntityTable
from quotas.mutations import MutationBuckets, TenantMutationBudgets
from quotas.producer_id_quota import ProducerIdBuckets, ProducerIdQuotaManager, TenantProducerIdBudgets
from quotas.quota_types import QUOTA_TYPES
from quotas.tenants import Holdings, Tenants
from quotas.user_connections import UserConnectionRateManager

_ENTITY_LABELS = ["user", "client_id"]
_BYTE_RATE_LABELS = [*_ENTITY_LABELS, "broker"]
"""Of the rates kept per broker in ``broker`` scope: the byte rates and the request rate."""
_TOPIC_LABELS = ["user", "topic"]
"""A topic quota's bucket: the user is empty for a topic's budget that every user shares."""
_TOPIC_RATE_LABELS = [*_TOPIC_LABELS, "broker"]
_TENANT_LABELS = ["tenant"]
_TENANT_RATE_LABELS = [*_TENANT_LABELS, "broker"]
MAX_ENTITY_SERIES = 1000
OTHERS = "<others>"
"""The label values of the series summing the entities beyond the busiest ``MAX_ENTITY_SERIES``."""

State = TypeVar("State")


def busiest(entities: Iterable[tuple[Any, State]], rate: Callable[[State], float]
            ) -> tuple[list[tuple[Any, State, float]], list[tuple[State, float]]]:
    """(the ``MAX_ENTITY_SERIES`` entities with the highest rate, with it; the others' states and rates)."""
    measured = [(key, state, rate(state)) for key, state in entities]
    if len(measured) <= MAX_ENTITY_SERIES:
        return measured, []
    kept = heapq.nlargest(MAX_ENTITY_SERIES, measured, key=lambda entry: entry[2])
    kept_keys = {id(entry[1]) for entry in kept}
    return kept, [(state, value) for _, state, value in measured if id(state) not in kept_keys]


Manager = ByteRateManager | MutationBuckets | ProducerIdBuckets | UserConnectionRateManager
EntityOf = Callable[[QuotaKey], tuple[str, ...]]


def _principal(key: QuotaKey) -> tuple[str, ...]:
    return key.user, key.client_id


def _user(key: QuotaKey) -> tuple[str, ...]:
    return (key.user,)


def _topic_entity(key: QuotaKey) -> tuple[str, ...]:
    return key.user, key.topic


def _tenant(key: QuotaKey) -> tuple[str, ...]:
    return (key.tenant,)


class _EntityUsage:
    """One (user, client id)'s figures across the buckets of one quota type (a byte rate's brokers)."""

    __slots__ = ("ratio", "throttle_time_ms", "observed_throttled", "observed_throttle_ms")

    def __init__(self) -> None:
        self.ratio = 0.0
        self.throttle_time_ms = 0
        self.observed_throttled = 0
        self.observed_throttle_ms = 0


class QuotaMetrics(Collector):
    def __init__(self, registry: CollectorRegistry, managers: Iterable[Manager], clock_ms: Callable[[], int],
                 connections: ConnectionQuotas | None = None, topics: Iterable[TopicQuotaManager] = (),
                 tenants: Iterable[TenantBudgets | TenantMutationBudgets | TenantProducerIdBudgets] = (),
                 holdings: Holdings | None = None) -> None:
        """``managers``: one per quota type of user and client-id entities; the families each has are named in
        ``QUOTA_TYPES``. ``topics``: the byte rates of topic entities; ``tenants``: the budgets of tenants (their
        families under ``kafka_quota_proxy_tenant_``, labelled by tenant: as many series as the file has tenants);
        ``holdings``: what capped tenants owned when last counted, shown beside their caps."""
        self._managers = list(managers)
        self._topic_managers = list(topics)
        self._tenant_budgets = list(tenants)
        self._holdings = holdings
        self._connections = connections
        self._clock_ms = clock_ms
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        now_ms = self._clock_ms()
        for manager in self._managers:
            spec = QUOTA_TYPES[manager.quota_type]
            if spec.metric is None:
                continue
            if isinstance(manager, ByteRateManager):
                yield from self._rate_metrics(spec.metric, spec.unit, manager, now_ms)
            elif not isinstance(manager, UserConnectionRateManager):
                yield from self._bucket_metrics(f"kafka_quota_proxy_{spec.metric}", spec.unit, manager, now_ms,
                                                _user if spec.user_only else _principal,
                                                ["user"] if spec.user_only else _ENTITY_LABELS)
        for topics in self._topic_managers:
            spec = QUOTA_TYPES[topics.quota_type]
            assert spec.metric is not None and spec.topic_unit is not None  # the types a topic may set have both
            yield from self._rate_metrics(spec.metric, spec.topic_unit, topics, now_ms,
                                          "kafka_quota_proxy_topic", _topic_entity, _TOPIC_RATE_LABELS)
        for budgets in self._tenant_budgets:
            spec = QUOTA_TYPES[budgets.quota_type]
            assert spec.metric is not None  # the types a tenant may set have one
            what = f"{spec.unit} of a tenant's principals"
            if isinstance(budgets, TenantBudgets):
                yield from self._rate_metrics(spec.metric, what, budgets, now_ms, "kafka_quota_proxy_tenant", _tenant,
                                              _TENANT_RATE_LABELS)
            else:
                yield from self._bucket_metrics(f"kafka_quota_proxy_tenant_{spec.metric}", what, budgets, now_ms,
                                                _tenant, _TENANT_LABELS)
        throttled = CounterMetricFamily("kafka_quota_proxy_throttled_requests",
                                        "Requests answered with a throttle time, by quota type",
                                        labels=["quota_type"])
        rejected = CounterMetricFamily("kafka_quota_proxy_rejected_requests",
                                       "Requests (or their topics) refused with THROTTLING_QUOTA_EXCEEDED",
                                       labels=["quota_type"])
        for manager in self._managers:
            throttled.add_metric([manager.quota_type.value], manager.throttled)
            rejected.add_metric([manager.quota_type.value], manager.rejected)
        yield throttled
        yield rejected
        for prefix, whose, managers in (("topic", "a topic quota's", self._topic_managers),
                                        ("tenant", "a tenant's budget's", self._tenant_budgets)):
            if managers:
                family = CounterMetricFamily(f"kafka_quota_proxy_{prefix}_throttled_requests",
                                             f"Requests answered with {whose} throttle time", labels=["quota_type"])
                for manager in managers:
                    family.add_metric([manager.quota_type.value], manager.throttled)
                yield family
        if self._tenant_budgets:  # a byte rate's throttles are never refusals: the bucket types' are
            rejected = CounterMetricFamily("kafka_quota_proxy_tenant_rejected_requests",
                                           "Requests (or their topics) a tenant's budget refused with "
                                           "THROTTLING_QUOTA_EXCEEDED", labels=["quota_type"])
            for manager in self._tenant_budgets:
                if not isinstance(manager, TenantBudgets):
                    rejected.add_metric([manager.quota_type.value], manager.rejected)
            yield rejected
        if self._holdings is not None and self._managers:
            yield from self._tenant_holdings(self._holdings, self._managers[0].config.tenants)
        for manager in self._managers:
            if isinstance(manager, ProducerIdQuotaManager):
                yield CounterMetricFamily("kafka_quota_proxy_producer_ids_admitted",
                                          "New producer IDs charged to a quota", value=manager.admitted_pids)
        yield from self._usage_metrics(now_ms)

    def _usage_metrics(self, now_ms: int) -> Iterator[Metric]:
        """Headroom (rate over limit), the throttles given and what observed quotas would have done, per quota
        type and entity; a topic quota's under ``kafka_quota_proxy_topic_``, per user and topic."""
        principals = _UsageFamilies("kafka_quota_proxy", _ENTITY_LABELS)
        for manager in self._managers:
            principals.add(manager, now_ms, _principal)
        connections = self._connections
        if connections is not None and connections.observed_throttled:
            # before a login there is no user or client id: the IPs are in the proxy's debug log
            labels = [QuotaType.CONNECTION_CREATION_RATE.value, "", ""]
            principals.observed.add_metric(labels, connections.observed_throttled)
            principals.observed_ms.add_metric(labels, connections.observed_delay_ms)
        yield from principals.families()
        for prefix, entity_labels, entity_of, managers in (
                ("kafka_quota_proxy_topic", _TOPIC_LABELS, _topic_entity, self._topic_managers),
                ("kafka_quota_proxy_tenant", _TENANT_LABELS, _tenant, self._tenant_budgets)):
            if managers:
                # a tenant's counters from zero: as few series as tenants, and a dashboard's rate has them at once
                families = _UsageFamilies(prefix, entity_labels, zeros=managers is self._tenant_budgets)
                for manager in managers:
                    families.add(manager, now_ms, entity_of)
                yield from families.families()

    @staticmethod
    def _tenant_holdings(holdings: Holdings, tenants: Tenants) -> Iterator[Metric]:
        """Each capped tenant's caps, and what it owned when last counted (a creation judged against them)."""
        families = {what: (GaugeMetricFamily(f"kafka_quota_proxy_tenant_{what}",
                                             f"The {what} under a capped tenant's topic prefix when a creation was "
                                             "last judged against its caps", labels=_TENANT_LABELS),
                           GaugeMetricFamily(f"kafka_quota_proxy_tenant_max_{what}", f"A tenant's cap on its {what}",
                                             labels=_TENANT_LABELS))
                    for what in ("topics", "partitions")}
        for tenant in tenants.all:
            counted = holdings.counted.get(tenant.name)
            for (owned, cap), held, limit in zip(families.values(), counted or (None, None),
                                                 (tenant.max_topics, tenant.max_partitions), strict=True):
                if limit is not None:
                    cap.add_metric([tenant.name], limit)
                    if held is not None:
                        owned.add_metric([tenant.name], held)
        for owned, cap in families.values():
            yield owned
            yield cap

    @staticmethod
    def _rate_metrics(rate_name: str, what: str, manager: ByteRateManager, now_ms: int,
                      name_prefix: str = "kafka_quota_proxy", entity_of: EntityOf = _principal,
                      labels: list[str] = _BYTE_RATE_LABELS) -> Iterator[Metric]:
        """``kafka_quota_proxy_{rate_name}`` and the throttle beside it: ``produce_byte_rate`` goes with
        ``produce_throttle_time_ms``."""
        prefix = rate_name.removesuffix("_rate").removesuffix("_byte")
        rate = GaugeMetricFamily(f"{name_prefix}_{rate_name}", f"{what[0].upper()}{what[1:]} (Kafka's {prefix} rate); "
                                 "broker is empty in proxy scope", labels=labels)
        throttle = GaugeMetricFamily(f"{name_prefix}_{prefix}_throttle_time_ms",
                                     f"Last {prefix} throttle time given (Kafka's throttle-time)", labels=labels)
        window = manager.config.settings.byte_rate_window
        kept, others = busiest(manager.entities.items(), lambda state: state.rate.measure(now_ms, window))
        for key, state, value in kept:
            labels = [*entity_of(key), key.broker]
            rate.add_metric(labels, value)
            throttle.add_metric(labels, state.last_throttle_ms)
        if others:
            rate.add_metric([OTHERS] * len(labels), sum(value for _, value in others))
            throttle.add_metric([OTHERS] * len(labels), max(state.last_throttle_ms for state, _ in others))
        yield rate
        yield throttle

    @staticmethod
    def _bucket_metrics(prefix: str, what: str,
                        manager: MutationBuckets | ProducerIdBuckets,
                        now_ms: int, entity_of: EntityOf, labels: list[str]) -> Iterator[Metric]:
        """``{prefix}_rate``, ``_tokens`` and ``_throttle_time_ms`` of each bucket, labelled ``entity_of`` it."""
        rate = GaugeMetricFamily(f"{prefix}_rate", f"{what.capitalize()} per second", labels=labels)
        tokens = GaugeMetricFamily(f"{prefix}_tokens", f"Tokens left for {what}; below zero means throttling",
                                   labels=labels)
        throttle = GaugeMetricFamily(f"{prefix}_throttle_time_ms", f"Last throttle time given for {what}",
                                     labels=labels)
        window = manager.config.settings.window_for(manager.quota_type)
        kept, others = busiest(manager.entities.items(), lambda state: state.rate.measure(now_ms, window))
        for key, state, value in kept:
            values = list(entity_of(key))
            rate.add_metric(values, value)
            tokens.add_metric(values, state.bucket.measure(state.limit, window, now_ms))
            throttle.add_metric(values, state.last_throttle_ms)
        if others:  # tokens are per entity: a sum of them means nothing
            rate.add_metric([OTHERS] * len(labels), sum(value for _, value in others))
            throttle.add_metric([OTHERS] * len(labels), max(state.last_throttle_ms for state, _ in others))
        yield rate
        yield tokens
        yield throttle


class _UsageFamilies:
    """``{prefix}_usage_ratio`` and the throttle and observed counters beside it, labelled by quota type and the
    two parts of an entity (user and client id, or user and topic)."""

    def __init__(self, prefix: str, entity_labels: list[str], zeros: bool = False) -> None:
        """``zeros``: the counters of every entity, not only of those with a count."""
        self._others = (OTHERS,) * len(entity_labels)
        self._zeros = zeros
        labels = ["quota_type", *entity_labels]
        self.throttled = CounterMetricFamily(f"{prefix}_throttle_time_ms",
                                             "The throttle times given (or asked of a refused request), summed",
                                             labels=labels)
        self.ratio = GaugeMetricFamily(f"{prefix}_usage_ratio",
                                       "Current rate over the quota, per entity: above 1 is over it (the highest of "
                                       "a byte rate's brokers in broker scope)", labels=labels)
        self.observed = CounterMetricFamily(f"{prefix}_observed_throttled_requests",
                                            "Requests an observed quota let through that enforcement would have "
                                            "throttled or refused", labels=labels)
        self.observed_ms = CounterMetricFamily(f"{prefix}_observed_throttle_time_ms",
                                               "The throttle times enforcement would have given the requests an "
                                               "observed quota let through, summed", labels=labels)

    def add(self, manager: Manager, now_ms: int, entity_of: EntityOf) -> None:
        quota_type = manager.quota_type.value
        kept, others = busiest(_entity_usage(manager, now_ms, entity_of).items(), lambda usage: usage.ratio)
        if others:
            summed = _EntityUsage()
            summed.ratio = max(usage.ratio for usage, _ in others)
            summed.throttle_time_ms = sum(usage.throttle_time_ms for usage, _ in others)
            summed.observed_throttled = sum(usage.observed_throttled for usage, _ in others)
            summed.observed_throttle_ms = sum(usage.observed_throttle_ms for usage, _ in others)
            kept.append((self._others, summed, summed.ratio))
        for entity, usage, _ in kept:
            labels = [quota_type, *entity]
            self.ratio.add_metric(labels, usage.ratio)
            if usage.throttle_time_ms or self._zeros:
                self.throttled.add_metric(labels, usage.throttle_time_ms)
            if usage.observed_throttled or self._zeros:
                self.observed.add_metric(labels, usage.observed_throttled)
                self.observed_ms.add_metric(labels, usage.observed_throttle_ms)

    def families(self) -> Iterator[Metric]:
        yield self.throttled
        yield self.ratio
        yield self.observed
        yield self.observed_ms


def _entity_usage(manager: Manager, now_ms: int, entity_of: EntityOf) -> dict[tuple[str, ...], _EntityUsage]:
    window = manager.config.settings.window_for(manager.quota_type)
    entities: EntityTable[Any, Any] = manager.entities
    usages: dict[tuple[str, ...], _EntityUsage] = {}
    for key, state in entities.items():
        entity = entity_of(key)
        usage = usages.get(entity)
        if usage is None:
            usage = usages[entity] = _EntityUsage()
        limit = state.limit
        if limit > 0:
            usage.ratio = max(usage.ratio, state.rate.measure(now_ms, window) / limit)
        usage.throttle_time_ms += state.throttle_time_ms
        usage.observed_throttled += state.observed_throttled
        usage.observed_throttle_ms += state.observed_throttle_ms
    return usages
