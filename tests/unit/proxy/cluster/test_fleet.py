"""A fleet member's publishing when the usage topic fails: what it charged is kept and sent once it is back."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from proxy.cluster.fleet import Fleet, FleetSettings
from proxy.cluster.upstream import PLAINTEXT
from proxy.settings.config import HostPort, ProxyConfig
from proxy.state.quota_service import QuotaService
from quotas.config import QuotaConfig, QuotaEntity, QuotaScope, QuotaSettings, QuotaType
from quotas.decisions import Requester
from quotas.fleet import Publication


class FlakyTopic:
    """Stands in for the usage topic's client: fails while ``down``, records what it was sent."""

    def __init__(self) -> None:
        self.down = True
        self.sent: list[Publication] = []

    async def produce(self, values: list[bytes], idempotent: bool = False) -> int:
        if self.down:
            raise OSError("unreachable")
        self.sent += [Publication.decode(value) for value in values]
        return len(self.sent)


def test_usage_charged_while_the_topic_is_down_is_published_once_it_is_back() -> None:
    async def scenario() -> None:
        config = ProxyConfig(upstream=(HostPort("127.0.0.1", 9),), listen=HostPort("127.0.0.1", 9092),
                             advertised_host="p1", broker_port_base=9093)
        registry = CollectorRegistry()
        quotas = QuotaService(None, registry)
        quotas.apply(QuotaConfig(QuotaSettings(quota_scope=QuotaScope.CLUSTER),
                                 {QuotaEntity("alice", None): {QuotaType.PRODUCER_BYTE_RATE: 1000.0}}))
        fleet = Fleet(FleetSettings(), "p1:9092", quotas, config, PLAINTEXT, registry)
        topic = FlakyTopic()
        fleet._publisher = topic  # type: ignore[assignment]
        # over half the limit (Kafka's 10-s floor: 600 B/s): published at once, never held (UsageShare)
        quotas.produce.record(Requester("alice", "c"), 6000, 0)
        await fleet._publish_pending()
        quotas.produce.record(Requester("alice", "c"), 4000, 1)
        await fleet._publish_pending()  # still down: both kept
        assert topic.sent == [] and registry.get_sample_value("kafka_quota_proxy_fleet_reachable") == 0
        assert registry.get_sample_value("kafka_quota_proxy_fleet_topic_failures_total", {"operation": "publish"}) == 2
        topic.down = False
        await fleet._publish_pending()  # the first take, kept since the first failure
        await fleet._publish_pending()  # what was charged while it waited
        assert [usage.amount for publication in topic.sent for usage in publication.usage] == [6000, 4000]
        await fleet._publish_pending()
        assert len(topic.sent) == 2  # nothing twice
        assert registry.get_sample_value("kafka_quota_proxy_fleet_publications_total") == 2

    asyncio.run(scenario())
