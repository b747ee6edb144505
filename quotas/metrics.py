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

from quotas.managers import ClientQuotaManager, ControllerMutationQuotaManager, ProducerIdQuotaManager

_ENTITY_LABELS = ["user", "client_id"]
_BYTE_RATE_LABELS = [*_ENTITY_LABELS, "broker"]
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


class QuotaMetrics(Collector):
    def __init__(self, registry: CollectorRegistry, produce: ClientQuotaManager, fetch: ClientQuotaManager,
                 mutations: ControllerMutationQuotaManager, producer_ids: ProducerIdQuotaManager,
                 clock_ms: Callable[[], int]) -> None:
        self._produce = produce
        self._fetch = fetch
        self._mutations = mutations
        self._producer_ids = producer_ids
        self._clock_ms = clock_ms
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        now_ms = self._clock_ms()
        yield from self._byte_rate_metrics("produce", "Produce", self._produce, now_ms)
        yield from self._byte_rate_metrics("consume", "Fetch response", self._fetch, now_ms)
        yield from self._bucket_metrics("controller_mutation", "partition mutations", self._mutations, now_ms,
                                        _ENTITY_LABELS)
        yield from self._bucket_metrics("producer_id", "new producer IDs", self._producer_ids, now_ms, ["user"])
        throttled = CounterMetricFamily("kafka_quota_throttled_requests",
                                        "Requests answered with a throttle time, by quota type",
                                        labels=["quota_type"])
        rejected = CounterMetricFamily("kafka_quota_rejected_requests",
                                       "Requests (or their topics) refused with THROTTLING_QUOTA_EXCEEDED",
                                       labels=["quota_type"])
        for manager in (self._produce, self._fetch, self._mutations, self._producer_ids):
            throttled.add_metric([manager.quota_type.value], manager.throttled)
            rejected.add_metric([manager.quota_type.value], manager.rejected)
        yield throttled
        yield rejected
        yield CounterMetricFamily("kafka_quota_producer_ids_admitted", "New producer IDs charged to a quota",
                                  value=self._producer_ids.admitted_pids)

    @staticmethod
    def _byte_rate_metrics(prefix: str, what: str, manager: ClientQuotaManager, now_ms: int) -> Iterator[Metric]:
        rate = GaugeMetricFamily(f"kafka_quota_{prefix}_byte_rate",
                                 f"{what} bytes/s (Kafka's byte-rate); broker is empty in proxy scope",
                                 labels=_BYTE_RATE_LABELS)
        throttle = GaugeMetricFamily(f"kafka_quota_{prefix}_throttle_time_ms",
                                     f"Last {prefix} throttle time given (Kafka's throttle-time)",
                                     labels=_BYTE_RATE_LABELS)
        window = manager.config.settings.byte_rate_window
        kept, others = busiest(manager.entities.items(), lambda state: state.rate.measure(now_ms, window))
        for key, state, value in kept:
            labels = [key.user, key.client_id, key.broker]
            rate.add_metric(labels, value)
            throttle.add_metric(labels, state.last_throttle_ms)
        if others:
            rate.add_metric([OTHERS] * 3, sum(value for _, value in others))
            throttle.add_metric([OTHERS] * 3, max(state.last_throttle_ms for state, _ in others))
        yield rate
        yield throttle

    @staticmethod
    def _bucket_metrics(prefix: str, what: str, manager: ControllerMutationQuotaManager | ProducerIdQuotaManager,
                        now_ms: int, labels: list[str]) -> Iterator[Metric]:
        rate = GaugeMetricFamily(f"kafka_quota_{prefix}_rate", f"{what.capitalize()} per second", labels=labels)
        tokens = GaugeMetricFamily(f"kafka_quota_{prefix}_tokens",
                                   f"Tokens left for {what}; below zero means throttling", labels=labels)
        throttle = GaugeMetricFamily(f"kafka_quota_{prefix}_throttle_time_ms",
                                     f"Last throttle time given for {what}", labels=labels)
        window = manager.config.settings.window_for(manager.quota_type)
        kept, others = busiest(manager.entities.items(), lambda state: state.rate.measure(now_ms, window))
        for key, state, value in kept:
            values = [key.user, key.client_id][:len(labels)]
            rate.add_metric(values, value)
            tokens.add_metric(values, state.bucket.measure(state.limit, window, now_ms))
            throttle.add_metric(values, state.last_throttle_ms)
        if others:  # tokens are per entity: a sum of them means nothing
            rate.add_metric([OTHERS] * len(labels), sum(value for _, value in others))
            throttle.add_metric([OTHERS] * len(labels), max(state.last_throttle_ms for state, _ in others))
        yield rate
        yield tokens
        yield throttle
