"""Settings changed through an API and kept for a fleet in one compacted topic of the cluster: the quotas set with
AlterClientQuotas (``shared_overrides``), and the ACLs created and deleted with CreateAcls and DeleteAcls
(``shared_acls``, with the authorizer).

As Kafka's controller stores ``kafka-configs --alter`` or ``kafka-acls --add`` and every broker applies it, a change
accepted by any member (or worker) is appended to the topic, one record per key (an entity and quota type; an ACL),
and every member reads the topic from its start and puts in force the last value of each key. Compaction keeps the
topic as small as the settings, and it outlives every member. A member answers the change once the cluster has it and
the member has read it back, so the same connection sees it at once; the others have it within their next fetch (a
long poll, answered when the record is appended). A member that cannot read the topic keeps the settings it read last
(copied to its state directory, in force from a start until the topic is read), and says so in the log and in
``kafka_quota_proxy_<store>_reachable``. A topic never written to gets the settings in force (those of the state
directory, for a proxy that joins a fleet; those read before, when the topic was deleted), until it takes them.
A change goes in one batch, which the topic takes up to ``MAX_BATCH_BYTES`` (about 20,000 ACLs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Generic, NamedTuple, Protocol, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.cluster.client import ClusterClient, ClusterError, Record
from proxy.cluster.topic_link import RETRY_BACKOFF_S, TopicLink
from proxy.cluster.upstream import UPSTREAM_ERRORS, UpstreamAccess
from proxy.security.acl_file import AclFileError, acl_entry, acls_of_entry
from proxy.security.acl_service import AclChanges, AclService
from proxy.security.acls import AclBinding
from proxy.settings.config import ProxyConfig
from proxy.state.quota_service import OverrideChanges, QuotaService
from quotas.config import QuotaEntity, QuotaType, validate_quota
from quotas.overrides import override_record, read_override_record

log = logging.getLogger(__name__)

FETCH_MAX_BYTES = 4 * 1024 * 1024
MAX_BATCH_BYTES = FETCH_MAX_BYTES
TOPIC_CONFIGS = {"cleanup.policy": "compact", "max.message.bytes": str(MAX_BATCH_BYTES)}
"""Only the last record of each key matters, and it must never expire; a change is one batch, fetched whole."""
EARLIEST = -2
READ_AGAIN_ERRORS = frozenset({
    1,    # OFFSET_OUT_OF_RANGE: truncated
    3,    # UNKNOWN_TOPIC_OR_PARTITION: deleted (made again, it gets the settings in force: _seed)
    100,  # UNKNOWN_TOPIC_ID
})
LONG_POLL_MS = 500
"""A fetch waits this long for a record; one appended meanwhile answers it at once."""

Key = TypeVar("Key")
Value = TypeVar("Value")


class Kept(Protocol[Key, Value]):
    """What a compacted topic keeps for the fleet, and whose settings they are."""

    def record(self, key: Key, value: Value) -> tuple[bytes, bytes]:
        """The record's key and value (never null: a removal is a value too, which compaction keeps)."""

    def read(self, key: bytes, value: bytes) -> tuple[Key, Value]:
        """What ``record`` wrote; raises ValueError when the record is not one."""

    def in_force(self) -> Mapping[Key, Value]:
        """The settings in force, for a topic never written to."""

    def put_in_force(self, read: dict[Key, Value]) -> None:
        """Every setting read from the topic, in force from now on; raises ValueError, changing nothing, when they
        do not make a valid whole."""


class Naming(NamedTuple):
    what: str
    """The settings, as the log names them."""
    topic: str
    """Their topic, as the log names it."""
    metric: str
    """Their metrics are ``kafka_quota_proxy_<metric>_...``."""
    counted: str
    """The settings read are counted in ``kafka_quota_proxy_<metric>_<counted>``."""


class SharedSettings(Collector, Generic[Key, Value]):
    def __init__(self, naming: Naming, topic: str, kept: Kept[Key, Value], config: ProxyConfig,
                 access: UpstreamAccess, registry: CollectorRegistry) -> None:
        self.what = what = naming.what
        self._naming = naming
        self.topic = topic
        self._kept = kept
        self._timeout_s = config.connect_timeout_s

        def client() -> ClusterClient:
            return ClusterClient(config.upstream, topic, access, config.connect_timeout_s, config.max_frame_bytes)

        self._writer = client()
        self._reader = client()
        self._reading = TopicLink(what, "read", f"the {naming.topic} {topic}", f"keeping the {what} read last")
        self._read: dict[Key, Value] = {}
        """Every setting read from the topic: the last value of each key."""
        self._next_offset = 0
        self._caught_up = False
        """The topic has been read to its end once: until then the state directory's copy stays in force."""
        self._read_back = asyncio.Condition()
        self.records = {"applied": 0, "unreadable": 0}
        self._task: asyncio.Task[None] | None = None
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

    async def publish(self, changes: Mapping[Key, Value]) -> None:
        """Append ``changes`` to the topic (one batch: all or none), then wait to have read them back, so that
        they are in force here when the client is answered. Raises OSError (``ClusterError``) when the cluster did not
        take them."""
        keys, values = self._records(changes)
        try:
            async with asyncio.timeout(self._timeout_s):
                async with self._read_back:  # what this member enforces is the topic's, before it changes
                    await self._read_back.wait_for(lambda: self._caught_up)
                first = await self._writer.produce(values, keys=keys)
        except TimeoutError:
            raise ClusterError(f"the {self._naming.topic} {self.topic} was not read or did not take the change in "
                               f"{self._timeout_s:g} s") from None
        except UPSTREAM_ERRORS as error:  # garbled or refused: still the cluster not taking it
            if isinstance(error, OSError):
                raise
            raise ClusterError(f"the {self._naming.topic} {self.topic} did not take the change: {error}") from error
        last = first + len(values) - 1
        try:
            async with asyncio.timeout(self._timeout_s), self._read_back:
                await self._read_back.wait_for(lambda: self._caught_up and self._next_offset > last)
        except TimeoutError:
            # stored in the cluster all the same: every member (this one too) puts it in force once it reads it
            log.warning("%s: the change at offset %d of %s is stored but not read back yet", self.what, last,
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
            if caught_up and not self._caught_up and fetched.high_watermark == 0 and self._kept.in_force():
                if not await self._seed():
                    await asyncio.sleep(RETRY_BACKOFF_S)
                    continue  # not read to its end until it has them: what it would read would replace them
            elif fetched.records or (caught_up and not self._caught_up):
                self._put_in_force(caught_up)
            async with self._read_back:
                self._next_offset = offset
                self._caught_up = self._caught_up or caught_up
                self._read_back.notify_all()

    async def _seed(self) -> bool:
        """A topic never written to gets the settings in force, read back like any other change; they stay in force
        meanwhile. False when the cluster did not take them."""
        in_force = self._kept.in_force()
        log.info("%s: %s is new: publishing the %d settings in force to it", self.what, self.topic, len(in_force))
        keys, values = self._records(in_force)
        try:
            await self._writer.produce(values, keys=keys)
        except UPSTREAM_ERRORS as error:
            log.warning("%s: cannot publish the settings in force to %s (%s): trying again", self.what, self.topic,
                        error)
            return False
        return True

    def _take(self, record: Record) -> None:
        try:
            if record.key is None or record.value is None:
                raise ValueError("no key or no value")
            key, value = self._kept.read(record.key, record.value)
        except ValueError as error:
            self.records["unreadable"] += 1
            log.warning("%s: skipping offset %d of %s: %s", self.what, record.offset, self.topic, error)
            return
        self.records["applied"] += 1
        self._read[key] = value

    def _put_in_force(self, caught_up: bool) -> None:
        if not (caught_up or self._caught_up):
            return  # the state directory's copy stays in force until the topic is read to its end
        try:
            self._kept.put_in_force(dict(self._read))
        except ValueError as error:
            log.error("%s: keeping the settings in force: those of %s do not apply: %s", self.what, self.topic,
                      error)
            return
        if not self._caught_up:
            log.info("%s: %d settings in force from %s", self.what, len(self._read), self.topic)

    def _records(self, changes: Mapping[Key, Value]) -> tuple[list[bytes], list[bytes]]:
        records = [self._kept.record(key, value) for key, value in changes.items()]
        return [key for key, _ in records], [value for _, value in records]

    def collect(self) -> Iterator[Metric]:
        naming = self._naming
        prefix = f"kafka_quota_proxy_{naming.metric}"
        reachable = self._reading.up and self._caught_up
        yield GaugeMetricFamily(f"{prefix}_reachable", f"1 while the fleet's {naming.topic} is read; 0: the "
                                f"{naming.what} read last stay in force", value=int(reachable))
        yield GaugeMetricFamily(f"{prefix}_{naming.counted}", f"The {naming.counted} read from the fleet's "
                                f"{naming.topic} (the last record of each key)", value=len(self._read))
        records = CounterMetricFamily(f"{prefix}_records", f"Records read from the fleet's {naming.topic}, by outcome",
                                      labels=["outcome"])
        for outcome, count in self.records.items():
            records.add_metric([outcome], count)
        yield records


# ---- the quotas set with AlterClientQuotas --------------------------------------------------------

Override = tuple[QuotaEntity, QuotaType]


class KeptOverrides:
    """The client-quota overrides, one record per entity and quota type, the limit or null where it was removed."""

    def __init__(self, quotas: QuotaService) -> None:
        self._quotas = quotas

    @staticmethod
    def record(key: Override, value: float | None) -> tuple[bytes, bytes]:
        return override_record(*key, value)

    @staticmethod
    def read(key: bytes, value: bytes) -> tuple[Override, float | None]:
        entity, quota_type, limit = read_override_record(key, value)
        if limit is not None:
            validate_quota(entity, quota_type, limit)
        return (entity, quota_type), limit

    def in_force(self) -> dict[Override, float | None]:
        return _flat(self._quotas.overrides)

    def put_in_force(self, read: dict[Override, float | None]) -> None:
        overrides: dict[QuotaEntity, dict[QuotaType, float | None]] = {}
        for (entity, quota_type), limit in read.items():
            overrides.setdefault(entity, {})[quota_type] = limit
        self._quotas.replace_overrides(overrides)


def _flat(changes: OverrideChanges) -> dict[Override, float | None]:
    return {(entity, quota_type): limit for entity, quotas in changes.items() for quota_type, limit in quotas.items()}


def shared_overrides(topic: str, quotas: QuotaService, config: ProxyConfig, access: UpstreamAccess,
                     registry: CollectorRegistry) -> SharedSettings[Override, float | None]:
    """The fleet's quota topic, through which ``quotas`` keeps its overrides from now on."""
    shared = SharedSettings(Naming("client quotas", "quota topic", "quota_store", "overrides"), topic,
                            KeptOverrides(quotas), config, access, registry)

    async def publish(changes: OverrideChanges) -> None:
        await shared.publish(_flat(changes))

    quotas.share_overrides(topic, publish)
    return shared


# ---- the ACLs created and deleted with CreateAcls and DeleteAcls ------------------------------------

class KeptAcls:
    """The ACLs created (true) and deleted (false) through the API, one record per ACL (its ``[[acl]]`` table)."""

    def __init__(self, acls: AclService) -> None:
        self._acls = acls

    @staticmethod
    def record(key: AclBinding, value: bool) -> tuple[bytes, bytes]:
        return _json(acl_entry(key)), _json({"in-force": value})

    @staticmethod
    def read(key: bytes, value: bytes) -> tuple[AclBinding, bool]:
        try:
            acls, in_force = acls_of_entry(json.loads(key)), json.loads(value)["in-force"]
        except (TypeError, KeyError) as error:
            raise AclFileError(f"not an ACL change: {error!r}") from None
        if len(acls) != 1 or not isinstance(in_force, bool):
            raise AclFileError("not an ACL change: one ACL and in-force true or false")
        return acls[0], in_force

    def in_force(self) -> AclChanges:
        return self._acls.changes

    def put_in_force(self, read: AclChanges) -> None:
        self._acls.replace_changes(read)


def _json(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def shared_acls(topic: str, acls: AclService, config: ProxyConfig, access: UpstreamAccess,
                registry: CollectorRegistry) -> SharedSettings[AclBinding, bool]:
    """The fleet's ACL topic, through which ``acls`` keeps the API's changes from now on."""
    shared = SharedSettings(Naming("ACLs", "ACL topic", "acl_store", "changes"), topic, KeptAcls(acls), config,
                            access, registry)
    acls.share(shared.publish)
    return shared
