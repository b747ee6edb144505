"""The producer-ID blocks handed out (served here or granted by the controller through this proxy),
as metrics and usage-log lines."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from allocator.block_log import ProducerIdBlock
from proxy.decision.outcome import Caller
from proxy.reporting.usage_log import UsageLog
from proxy.state.quota_service import now_ms
from quotas.config import Window
from quotas.rate import SampledRate

_HOUR_WINDOW = Window(60, 60)
"""The cluster-wide block rate: sixty one-minute samples."""
MAX_BROKER_SERIES = 1000
"""Broker ids with a metric series of their own; more are summed as "other" (ids come from requests)."""


class BlockAllocations(Collector):
    """The blocks handed out (served here or granted by the controller through this proxy): counted per
    requesting broker id and principal, as a cluster-wide rate, and in the usage log."""

    def __init__(self, registry: CollectorRegistry, usage: UsageLog) -> None:
        self._usage = usage
        self._blocks: dict[tuple[str, str], int] = {}
        """(broker id, principal) -> blocks; broker ids beyond MAX_BROKER_SERIES are counted as "other"."""
        self._broker_ids: set[int] = set()
        self._block_rate = SampledRate()
        self._id_rate = SampledRate()
        registry.register(self)

    def allocated(self, caller: Caller, client_id: str, broker_id: int, block: ProducerIdBlock) -> None:
        if broker_id in self._broker_ids or len(self._broker_ids) < MAX_BROKER_SERIES:
            self._broker_ids.add(broker_id)
            broker = str(broker_id)
        else:
            broker = "other"
        key = (broker, caller.principal)
        self._blocks[key] = self._blocks.get(key, 0) + 1
        self._block_rate.record(1, caller.now_ms, _HOUR_WINDOW)
        self._id_rate.record(block.size, caller.now_ms, _HOUR_WINDOW)
        self._usage.blocks(caller.user, client_id, broker_id, block.size)

    def collect(self) -> Iterator[Metric]:
        blocks = CounterMetricFamily("kafka_quota_proxy_producer_id_blocks",
                                     "Producer-ID blocks handed out, by requesting broker id and principal",
                                     labels=["broker_id", "principal"])
        for (broker, principal), count in sorted(self._blocks.items()):
            blocks.add_metric([broker, principal], count)
        yield blocks
        now = now_ms()
        yield GaugeMetricFamily("kafka_quota_proxy_producer_id_blocks_per_hour",
                                "Producer-ID blocks handed out over the last hour, all brokers together",
                                value=self._block_rate.measure(now, _HOUR_WINDOW) * 3600)
        yield GaugeMetricFamily("kafka_quota_proxy_producer_ids_allocated_per_hour",
                                "Producer IDs in the blocks handed out over the last hour (blocks x their size): "
                                "the rate at which the cluster issues new producer IDs",
                                value=self._id_rate.measure(now, _HOUR_WINDOW) * 3600)

