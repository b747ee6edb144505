"""The quotas set through AlterClientQuotas, kept for a fleet in one compacted topic of the cluster.

As Kafka's controller stores ``kafka-configs --alter`` and every broker applies it, a change accepted by any
member (or worker) is appended to the topic, one record per entity and quota type (the key; the value the
limit, or null where it was removed), and every member reads the topic from its start and puts in force the
last value of each key. Compaction keeps the topic as small as the overrides, and it outlives every member.
A member answers AlterClientQuotas once the cluster has the change and the member has read it back, so the
same connection describes it at once; the others have it within their next fetch (a long poll, answered
when the record is appended). A member that cannot read the topic keeps the overrides it read last (copied
to its state directory, in force from a start until the topic is read), and says so in the log and in
``kafka_quota_proxy_quota_store_reachable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.cluster.client import ClusterClient, ClusterError, Record
from proxy.cluster.topic_link import RETRY_BACKOFF_S, TopicLink
from proxy.cluster.upstream import UPSTREAM_ERRORS, UpstreamAccess
from proxy.settings.config import ProxyConfig
from proxy.state.quota_service import OverrideChanges, QuotaService
from quotas.config import QuotaConfigError, validate_quota
from quotas.overrides import Overrides, override_record, read_override_record

log = logging.getLogger(__name__)

TOPIC_CONFIGS = {"cleanup.policy": "compact"}
"""Only the last record of each key matters, and it must never expire."""
EARLIEST = -2
READ_AGAIN_ERRORS = frozenset({
    1,    # OFFSET_OUT_OF_RANGE: truncated
    3,    # UNKNOWN_TOPIC_OR_PARTITION: deleted (made again, it gets the overrides in force: _seed)
    100,  # UNKNOWN_TOPIC_ID
})
LONG_POLL_MS = 500
"""A fetch waits this long for a record; one appended meanwhile answers it at once."""
FETCH_MAX_BYTES = 4 * 1024 * 1024


class SharedOverrides(Collector):
    def __init__(self, topic: str, quotas: QuotaService, config: ProxyConfig, access: UpstreamAccess,
                 registry: CollectorRegistry) -> None:
        self.topic = topic
        self._quotas = quotas
        self._timeout_s = config.connect_timeout_s

        def client() -> ClusterClient:
            return ClusterClient(config.upstream, topic, access, config.connect_timeout_s, config.max_frame_bytes)

        self._writer = client()
        self._reader = client()
        self._reading = TopicLink("client quotas", "read", f"the quota topic {topic}",
                                  "keeping the overrides read last")
        self._read: Overrides = {}
        """Every override read from the topic: the last value of each key."""
        self._next_offset = 0
        self._caught_up = False
        """The topic has been read to its end once: until then the state directory's copy stays in force."""
        self._read_back = asyncio.Condition()
        self.records = {"applied": 0, "unreadable": 0}
        self._task: asyncio.Task[None] | None = None
        quotas.share_overrides(topic, self.publish)
        registry.register(self)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._read_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._writer.close()
        self._reader.close()

    async def publish(self, changes: OverrideChanges) -> None:
        """Append ``changes`` to the topic (one batch: all or none), then wait to have read them back, so that
        they are in force here when the client is answered. Raises OSError when the cluster did not take them."""
        keys, values = _records(changes)
        try:
            async with asyncio.timeout(self._timeout_s):
                async with self._read_back:  # what this member enforces is the topic's, before it changes
                    await self._read_back.wait_for(lambda: self._caught_up)
                first = await self._writer.produce(values, keys=keys)
        except TimeoutError:
            raise ClusterError(f"the quota topic {self.topic} was not read or did not take the change in "
                               f"{self._timeout_s:g} s") from None
        last = first + len(values) - 1
        try:
            async with asyncio.timeout(self._timeout_s), self._read_back:
                await self._read_back.wait_for(lambda: self._caught_up and self._next_offset > last)
        except TimeoutError:
            # stored in the cluster all the same: every member (this one too) puts it in force once it reads it
            log.warning("client quotas: the change at offset %d of %s is stored but not read back yet", last,
                        self.topic)

    async def _read_forever(self) -> None:
        offset: int | None = None
        while True:
            try:
                if offset is None:
                    await self._reader.ensure(TOPIC_CONFIGS)
                    offset = await self._reader.offset_at(EARLIEST)
                    self._read, self._caught_up = {}, False
                fetched = await self._reader.fetch(offset, LONG_POLL_MS, FETCH_MAX_BYTES)
            except UPSTREAM_ERRORS as error:
                if isinstance(error, ClusterError) and error.error_code in READ_AGAIN_ERRORS:
                    offset = None  # from its start again, once it exists
                self._reading.failed(error)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            self._reading.succeeded()
            for record in fetched.records:
                self._take(record)
            offset = fetched.next_offset
            caught_up = offset >= fetched.high_watermark
            if caught_up and not self._caught_up and fetched.high_watermark == 0 and self._quotas.overrides:
                await self._seed()
            elif fetched.records or (caught_up and not self._caught_up):
                self._put_in_force(caught_up)
            async with self._read_back:
                self._next_offset = offset
                self._caught_up = self._caught_up or caught_up
                self._read_back.notify_all()

    async def _seed(self) -> None:
        """A topic never written to gets the overrides in force (those of the state directory, for a proxy that
        joins a fleet; those read before, when the topic was deleted), read back like any other change; they stay
        in force meanwhile."""
        overrides = self._quotas.overrides
        log.info("client quotas: %s is new: publishing the %d overrides in force to it", self.topic,
                 sum(map(len, overrides.values())))
        keys, values = _records(overrides)
        try:
            await self._writer.produce(values, keys=keys)
        except UPSTREAM_ERRORS as error:
            log.warning("client quotas: cannot publish the overrides in force to %s (%s): trying again",
                        self.topic, error)

    def _take(self, record: Record) -> None:
        try:
            if record.key is None:
                raise QuotaConfigError("no key")
            entity, quota_type, limit = read_override_record(record.key, record.value)
            if limit is not None:
                validate_quota(entity, quota_type, limit)
        except QuotaConfigError as error:
            self.records["unreadable"] += 1
            log.warning("client quotas: skipping offset %d of %s: %s", record.offset, self.topic, error)
            return
        self.records["applied"] += 1
        self._read.setdefault(entity, {})[quota_type] = limit

    def _put_in_force(self, caught_up: bool) -> None:
        if not (caught_up or self._caught_up):
            return  # the state directory's copy stays in force until the topic is read to its end
        try:
            self._quotas.replace_overrides({entity: dict(quotas) for entity, quotas in self._read.items()})
        except QuotaConfigError as error:
            log.error("client quotas: keeping the overrides in force: those of %s do not apply: %s", self.topic,
                      error)
            return
        if not self._caught_up:
            log.info("client quotas: %d overrides in force from %s", len(self._read), self.topic)

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("kafka_quota_proxy_quota_store_reachable",
                                "1 while the fleet's quota topic is read; 0: the overrides read last stay in force",
                                value=int(self._reading.up and self._caught_up))
        yield GaugeMetricFamily("kafka_quota_proxy_quota_store_overrides",
                                "Quota overrides (entity and quota type) read from the fleet's quota topic",
                                value=sum(map(len, self._read.values())))
        records = CounterMetricFamily("kafka_quota_proxy_quota_store_records",
                                      "Records read from the fleet's quota topic, by outcome", labels=["outcome"])
        for outcome, count in self.records.items():
            records.add_metric([outcome], count)
        yield records


def _records(changes: OverrideChanges) -> tuple[list[bytes], list[bytes]]:
    """The keys and values of the records that carry ``changes``."""
    keys, values = [], []
    for entity, quotas in changes.items():
        for quota_type, limit in quotas.items():
            key, value = override_record(entity, quota_type, limit)
            keys.append(key)
            values.append(value)
    return keys, values
