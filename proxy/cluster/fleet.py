"""A fleet of proxies that enforces one quota, through the Kafka cluster behind them (``[fleet]``).

Every ``publish-interval-ms`` each member publishes what it charged since its last publication
(``quotas.fleet``; a rate far from its limit, or used here below its share, waits up to a second)
as records on one single-partition topic of the cluster, and reads everyone else's from it, adding
their usage into its own rates and buckets (a rate's only into the buckets it holds: its own
clients'). In ``quota.scope = "cluster"`` a principal's budget is therefore the fleet's: a member
sees the others' usage one publish interval plus the cluster's produce-to-fetch latency late
(``kafka_quota_proxy_fleet_usage_age_seconds``).
A member that stops publishing drops out of the sum as its usage leaves the windows: after one byte
window (11 s) for byte rates, as its charges refill for the buckets. When the topic cannot be reached
a member enforces on its own usage alone (and says so in the log and in /metrics); what it charged
meanwhile is kept (bounded) and published when the topic is back, and it reads on from where it was.
The topic has one partition: a fleet publishes a few records a second, ordered, read by every member.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.cluster.client import ClusterClient, ClusterError, Record
from proxy.cluster.shared_settings import shared_acls, shared_overrides
from proxy.cluster.topic_link import RETRY_BACKOFF_S, TopicLink
from proxy.cluster.upstream import UPSTREAM_ERRORS, UpstreamAccess
from proxy.reporting.metrics import Observations
from proxy.security.acl_service import AclService
from proxy.settings.config import ConfigError, ProxyConfig
from proxy.settings.definitions import Table, TableKey
from proxy.state.quota_service import QuotaService, now_ms
from quotas.byte_rates import ByteRateManager, ClientQuotaManager
from quotas.config import QuotaType
from quotas.fleet import MAX_PENDING_ENTRIES, FleetRecordError, Holder, Publication, SharedUsage, UsageShare
from quotas.mutations import ControllerMutationQuotaManager

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "__kafka_quota_proxy_usage"
DEFAULT_QUOTAS_TOPIC = "__kafka_quota_proxy_quotas"
DEFAULT_ACLS_TOPIC = "__kafka_quota_proxy_acls"
DEFAULT_PUBLISH_INTERVAL_MS = 200
TOPIC_RETENTION_MS = 600_000
"""``retention.ms`` of the usage topic when the proxy creates it: a member reads back one window at start."""
FINAL_PUBLISH_TIMEOUT_S = 2.0
"""At shutdown, how long the last publication may take (an unreachable topic must not hold the stop)."""
MIN_PUBLISH_GAP_S = 0.01
"""An urgent publication follows the previous one no sooner than this: at most 100 records a second."""
FETCH_MAX_BYTES = 4 * 1024 * 1024
OFFSET_OUT_OF_RANGE = 1
USAGE_AGE_BUCKETS_S = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 11.0, 60.0)


FLEET_TABLE = Table("fleet", "sharing quotas with the other proxies (or --workers) of a fleet, through the cluster", (
    TableKey("topic", "the usage topic the members publish to and read", DEFAULT_TOPIC),
    TableKey("instance-id", "this member's name, unique in the fleet", derived="the advertised host and the "
             "listen port"),
    TableKey("publish-interval-ms", "how often a member publishes its usage (10-60000)",
             DEFAULT_PUBLISH_INTERVAL_MS),
    TableKey("quotas-topic", "the compacted topic holding the quotas set with AlterClientQuotas", DEFAULT_QUOTAS_TOPIC),
    TableKey("acls-topic", "the compacted topic holding the ACLs created and deleted with CreateAcls and DeleteAcls "
             "(with [authorizer])", DEFAULT_ACLS_TOPIC),
))
"""``[fleet]``'s keys, for the settings reference and the check of what the table holds."""


@dataclass(frozen=True)
class FleetSettings:
    """``[fleet]`` of the --config file."""

    topic: str = DEFAULT_TOPIC
    instance_id: str = ""
    """Unique in the fleet; "" means the advertised host:port of the bootstrap listener."""
    publish_interval_ms: int = DEFAULT_PUBLISH_INTERVAL_MS
    quotas_topic: str = DEFAULT_QUOTAS_TOPIC
    """Where the fleet keeps the quotas set through AlterClientQuotas (``shared_overrides``)."""
    acls_topic: str = DEFAULT_ACLS_TOPIC
    """Where the fleet keeps the ACLs created and deleted through the ACL APIs (``shared_acls``)."""

    @property
    def own_topics(self) -> tuple[str, ...]:
        return self.topic, self.quotas_topic, self.acls_topic

    @classmethod
    def from_config(cls, config: ProxyConfig) -> FleetSettings | None:
        """None when the file has no ``[fleet]`` table."""
        table = config.extra.get("fleet")
        if table is None:
            return None
        if not isinstance(table, dict):
            raise ConfigError("[fleet]: must be a table")
        FLEET_TABLE.refuse_unknown(table)
        try:
            settings = cls(topic=str(table.get("topic", DEFAULT_TOPIC)),
                           instance_id=str(table.get("instance-id", "")),
                           publish_interval_ms=int(table.get("publish-interval-ms", DEFAULT_PUBLISH_INTERVAL_MS)),
                           quotas_topic=str(table.get("quotas-topic", DEFAULT_QUOTAS_TOPIC)),
                           acls_topic=str(table.get("acls-topic", DEFAULT_ACLS_TOPIC)))
        except (TypeError, ValueError) as error:
            raise ConfigError(f"[fleet]: {error}") from None
        keys = ("topic", "quotas-topic", "acls-topic")
        for key, topic in zip(keys, settings.own_topics, strict=True):
            if not topic or len(topic) > 249:  # the cluster judges the rest (a member says so in the log)
                raise ConfigError(f"[fleet] {key}: a topic name of 1 to 249 characters")
        if len(set(settings.own_topics)) < len(keys):
            raise ConfigError(f"[fleet] {', '.join(keys)}: a topic each, not one for two "
                              f"({', '.join(settings.own_topics)})")
        if not 10 <= settings.publish_interval_ms <= 60_000:
            raise ConfigError(f"[fleet] publish-interval-ms: 10..60000, got {settings.publish_interval_ms}")
        return settings

    def instance(self, config: ProxyConfig, worker: int | None = None) -> str:
        base = self.instance_id or config.advertised_bootstrap
        return base if worker is None else f"{base}/worker-{worker}"


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Fleet(Collector):
    def __init__(self, settings: FleetSettings, instance: str, quotas: QuotaService, config: ProxyConfig,
                 access: UpstreamAccess, registry: CollectorRegistry, acls: AclService | None = None) -> None:
        self.settings = settings
        self.instance = instance
        self._quotas = quotas
        self._urgent = asyncio.Event()
        self.share = UsageShare(settings.publish_interval_ms / 1000, self._urgent.set)
        for manager in (*quotas.managers.values(), *quotas.topic_managers.values(), *quotas.tenant_budgets.values()):
            manager.share = self.share

        def client() -> ClusterClient:
            return ClusterClient(config.upstream, settings.topic, access, config.connect_timeout_s,
                                 config.max_frame_bytes)

        self._publisher = client()
        self._reader = client()
        self._publishing = self._link("publish to")
        self._reading = self._link("read")
        self._unsent: deque[Publication] = deque()
        self._taken_at = wall_ms()
        """When the usage not yet taken from the share started."""
        self._members: dict[str, float] = {}
        """Other instances -> when their last record was read (monotonic s)."""
        self.publications = 0
        self.received = {"applied": 0, "own": 0, "unreadable": 0}
        self.dropped = 0
        self._usage_age = Observations(USAGE_AGE_BUCKETS_S)
        self._tasks: list[asyncio.Task[None]] = []
        self._topic_ready = asyncio.Event()
        self.overrides = shared_overrides(settings.quotas_topic, quotas, config, access, registry)
        self.acls = None if acls is None else shared_acls(settings.acls_topic, acls, config, access, registry)
        """With the authorizer: the ACLs created and deleted through the API, shared by the fleet."""
        registry.register(self)

    @staticmethod
    def _link(action: str) -> TopicLink:
        return TopicLink("fleet", action, "the usage topic", "enforcing on this proxy's usage alone until it can")

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._publish_forever()), loop.create_task(self._read_forever())]
        self.overrides.start()
        if self.acls is not None:
            self.acls.start()
        log.info("fleet: member %s of the fleet on topic %s (publishing every %d ms)", self.instance,
                 self.settings.topic, self.settings.publish_interval_ms)

    async def stop(self) -> None:
        await self.overrides.stop()
        if self.acls is not None:
            await self.acls.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(TimeoutError):  # what was charged since the last publication still counts
            async with asyncio.timeout(FINAL_PUBLISH_TIMEOUT_S):
                await self._publish_pending()
        self._publisher.close()
        self._reader.close()

    # ---- publishing ---------------------------------------------------------------------------

    async def _publish_forever(self) -> None:
        await self._ensure_topic()
        interval_s = self.settings.publish_interval_ms / 1000
        while True:
            if self._publishing.up:
                with contextlib.suppress(TimeoutError):  # the interval ended before anything urgent
                    await asyncio.wait_for(self._urgent.wait(), interval_s)
            else:
                await asyncio.sleep(max(interval_s, RETRY_BACKOFF_S))
            self._urgent.clear()
            await self._publish_pending()
            await asyncio.sleep(MIN_PUBLISH_GAP_S)

    async def _ensure_topic(self) -> None:
        while True:
            try:
                await self._publisher.ensure({"retention.ms": str(TOPIC_RETENTION_MS), "cleanup.policy": "delete"})
            except UPSTREAM_ERRORS as error:
                self._publishing.failed(error)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            self._publishing.succeeded()
            self._topic_ready.set()
            return

    async def _publish_pending(self) -> None:
        """Send what was not sent yet, then what was charged since; a failure keeps both for the next turn."""
        if not self._unsent:
            now = wall_ms()
            self._unsent.extend(self.share.take(self.instance, self._taken_at, now, self.members()))
            self._taken_at = now
        if not self._unsent:
            return
        self._bound_unsent()
        try:
            await self._publisher.produce([publication.encode() for publication in self._unsent])
        except UPSTREAM_ERRORS as error:
            self._publishing.failed(error)
            return
        self.publications += len(self._unsent)
        self._unsent.clear()
        self._publishing.succeeded()

    def _bound_unsent(self) -> None:
        entries = sum(publication.entries for publication in self._unsent)
        while entries > MAX_PENDING_ENTRIES and len(self._unsent) > 1:
            lost = self._unsent.popleft().entries
            entries -= lost
            self.dropped += lost

    # ---- reading ------------------------------------------------------------------------------

    async def _read_forever(self) -> None:
        interval_ms = self.settings.publish_interval_ms
        offset: int | None = None
        await self._topic_ready.wait()
        while True:
            try:
                if offset is None:
                    offset = await self._reader.offset_at(wall_ms() - self._catch_up_ms())
                fetched = await self._reader.fetch(offset, interval_ms, FETCH_MAX_BYTES)
            except UPSTREAM_ERRORS as error:
                if isinstance(error, ClusterError) and error.error_code == OFFSET_OUT_OF_RANGE:
                    offset = None  # the topic's retention passed us by: read back one window from now
                self._reading.failed(error)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            self._reading.succeeded()
            offset = fetched.next_offset
            for record in fetched.records:
                self.apply(record)

    def _catch_up_ms(self) -> int:
        """A member starting (or back after the topic was lost for long) reads back the longest window in which
        usage still counts for a byte rate or a mutation bucket."""
        settings = self._quotas.config.settings
        return round(max(settings.byte_rate_window.length_s, settings.mutation_window.length_s) * 1000)

    def apply(self, record: Record) -> None:
        try:
            publication = Publication.decode(record.value, self._held_users)
        except FleetRecordError as error:
            self.received["unreadable"] += 1
            log.debug("fleet: skipping offset %d of %s: %s", record.offset, self.settings.topic, error)
            return
        if publication.instance == self.instance:
            self.received["own"] += 1
            return
        self.received["applied"] += 1
        self._members[publication.instance] = time.monotonic()
        age_s = max(0.0, (wall_ms() - publication.oldest_ms) / 1000)
        self._usage_age.observe(age_s)
        quotas, now = self._quotas, now_ms()
        settings = quotas.config.settings
        # looked up once a publication, not once an entry: a member of a fleet of a hundred reads a hundred
        # thousand entries a second
        absorbers = {quota_type: (manager.absorb, _absorb_of(quotas.topic_managers.get(quota_type)),
                                  manager.tenants.absorb)
                     for quota_type, manager in quotas.managers.items()
                     if isinstance(manager, ClientQuotaManager | ControllerMutationQuotaManager)
                     and age_s <= settings.window_for(quota_type).length_s}  # else it left the window already
        for usage in publication.usage:
            absorb = absorbers.get(usage.quota_type)
            if absorb is not None:
                key = usage.key
                (absorb[2] if key.tenant else absorb[1] if key.topic else absorb[0])(usage, now)  # type: ignore[misc]
        for shared in publication.producer_ids:
            quotas.producer_ids.absorb_producer_ids(shared, now)

    def _held_users(self, quota_type: QuotaType, holder: Holder) -> Container[str] | None:
        """Another's usage of a rate is kept only for the buckets charged here (``ByteRateManager.absorb``)."""
        quotas = self._quotas
        managers: Mapping[QuotaType, object] = (
            quotas.topic_managers if holder is Holder.TOPIC else quotas.tenant_budgets if holder is Holder.TENANT
            else quotas.managers)
        manager = managers.get(quota_type)
        return manager.held_users if isinstance(manager, ByteRateManager) else None

    def members(self) -> int:
        """Instances heard from within one byte window, this one included."""
        horizon = time.monotonic() - self._quotas.config.settings.byte_rate_window.length_s
        for instance, heard in list(self._members.items()):
            if heard < horizon:
                del self._members[instance]
        return 1 + len(self._members)

    # ---- metrics ------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("kafka_quota_proxy_fleet_reachable", "1 while the usage topic takes this proxy's "
                                "publications and serves the others'; 0: enforcing on this proxy's usage alone",
                                value=int(self._publishing.up and self._reading.up))
        yield GaugeMetricFamily("kafka_quota_proxy_fleet_members",
                                "Fleet members heard from within one byte-rate window, this one included",
                                value=self.members())
        yield CounterMetricFamily("kafka_quota_proxy_fleet_publications", "Usage records published",
                                  value=self.publications)
        failures = CounterMetricFamily("kafka_quota_proxy_fleet_topic_failures",
                                       "Failed attempts to publish to or read the usage topic", labels=["operation"])
        failures.add_metric(["publish"], self._publishing.failures)
        failures.add_metric(["read"], self._reading.failures)
        yield failures
        received = CounterMetricFamily("kafka_quota_proxy_fleet_records_received",
                                       "Usage records read, by outcome", labels=["outcome"])
        for outcome, count in self.received.items():
            received.add_metric([outcome], count)
        yield received
        yield CounterMetricFamily("kafka_quota_proxy_fleet_usage_dropped",
                                  "Usage entries not published: too many waited while the topic was unreachable",
                                  value=self.dropped + self.share.dropped)
        yield HistogramMetricFamily("kafka_quota_proxy_fleet_usage_age_seconds",
                                    "How old another member's usage was when this proxy added it (from the start "
                                    "of the interval it covers): the staleness of the fleet's sum",
                                    buckets=self._usage_age.buckets(), sum_value=self._usage_age.sum)


def _absorb_of(manager: ByteRateManager | None) -> Callable[[SharedUsage, int], None] | None:
    return None if manager is None else manager.absorb
