"""The quota engines as the proxy runs them: one configuration, five managers, live reloads.

The quota in force is the quota file overlaid by the overrides set through AlterClientQuotas, which win over the file
for the same entity and quota type; a removal through the API is kept as a tombstone, so it also hides the file's value.
A proxy alone keeps them in ``<state-dir>/client-quotas.json`` (so they survive restarts): a change is saved (on a
worker thread: a stalled disk must not stall every connection) before it is applied, and one whose save fails is neither
applied nor carried into a later save. A fleet keeps them in a topic of the cluster (``share_overrides``): a change is
published there and applied as each member reads it back, and the file is a copy of what was read, in force at a start
until the topic is read. The quota file is re-read when it changes; a bad file keeps the running configuration and logs
why. Quota time is ``now_ms()``: the request chain reads it once per request and hands it down (``Caller``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry

from allocator.durable import WriteErrors
from proxy.files.state_document import StateDocument
from proxy.files.watched_file import WatchedFile
from quotas.byte_rates import ByteRateManager, ClientQuotaManager, TenantBudgets, TopicQuotaManager
from quotas.config import QuotaConfig, QuotaConfigError, QuotaEntity, QuotaType, load_quota_file
from quotas.connection_quotas import ConnectionLimits, ConnectionQuotas
from quotas.explain import Client, explain, explain_tenant
from quotas.metrics import QuotaMetrics
from quotas.mutations import ControllerMutationQuotaManager, TenantMutationBudgets
from quotas.overrides import OVERRIDES_FILE, Overrides, overlaid, overrides_document, read_overrides
from quotas.producer_id_quota import ProducerIdQuotaManager, TenantProducerIdBudgets
from quotas.tenants import Holdings
from quotas.user_connections import UserConnectionRateManager

log = logging.getLogger(__name__)

RELOAD_INTERVAL_S = 1.0
STORE = "client-quotas"
"""The overrides' name in ``kafka_quota_proxy_state_write_errors_total``."""

QuotaManager = ClientQuotaManager | ControllerMutationQuotaManager | ProducerIdQuotaManager
TenantBudget = TenantBudgets | TenantMutationBudgets | TenantProducerIdBudgets
OverrideChanges = Mapping[QuotaEntity, Mapping[QuotaType, float | None]]


def now_ms() -> int:
    """Quota time: monotonic, so wall-clock jumps never refill or drain a bucket."""
    return time.monotonic_ns() // 1_000_000


class QuotaService:
    def __init__(self, quota_file: Path | None, registry: CollectorRegistry, state_dir: Path | None = None,
                 connection_limits: ConnectionLimits | None = None, write_errors: WriteErrors | None = None) -> None:
        self._quota_file = None if quota_file is None else WatchedFile(quota_file)
        self._saving = asyncio.Lock()
        """Held while the overrides change: one after another, each over the one before."""
        self._saved = None if state_dir is None else StateDocument(
            state_dir / OVERRIDES_FILE, STORE, write_errors or WriteErrors(), overrides_document, self._saving)
        self._kept_in = None if self._saved is None else str(self._saved.path)
        """Where the overrides are kept, as ``quotas explain`` names their origin."""
        self._publish: Callable[[OverrideChanges], Awaitable[None]] | None = None
        """With a fleet: hands a change to the fleet's topic, returning once it is there (and read back)."""
        self.overrides: Overrides = self._load_overrides()
        self._file_config = self._load() if quota_file is not None else QuotaConfig()
        config = self._effective(self.overrides)
        self.produce = ClientQuotaManager(config)
        self.fetch = ClientQuotaManager(config, QuotaType.CONSUMER_BYTE_RATE)
        self.requests = ClientQuotaManager(config, QuotaType.REQUEST_RATE)
        self.mutations = ControllerMutationQuotaManager(config)
        self.producer_ids = ProducerIdQuotaManager(config)
        self.managers: dict[QuotaType, QuotaManager] = {manager.quota_type: manager for manager in (
            self.produce, self.fetch, self.requests, self.mutations, self.producer_ids)}
        """Each quota type's manager but the connection creation rate's (``connections``, ``user_connections``)."""
        self.produce_topics = TopicQuotaManager(config)
        self.fetch_topics = TopicQuotaManager(config, QuotaType.CONSUMER_BYTE_RATE)
        self.topic_managers: dict[QuotaType, TopicQuotaManager] = {
            manager.quota_type: manager for manager in (self.produce_topics, self.fetch_topics)}
        """The byte rates of topic entities."""
        self.tenant_budgets: dict[QuotaType, TenantBudget] = {
            quota_type: manager.tenants for quota_type, manager in self.managers.items()}
        """The budgets of tenants, charged by the managers of their types."""
        self.connections = ConnectionQuotas(connection_limits or ConnectionLimits(), config.settings.byte_rate_window)
        """Kafka's: the listener's and each IP's."""
        self.user_connections = UserConnectionRateManager(config)
        self.holdings = Holdings()
        """What each capped tenant owned when last counted (the topic mutation handler counts it)."""
        self._observers: list[Callable[[QuotaConfig], None]] = []
        QuotaMetrics(registry, [*self.managers.values(), self.user_connections], now_ms, self.connections,
                     self.topic_managers.values(), self.tenant_budgets.values(), self.holdings)

    @property
    def config(self) -> QuotaConfig:
        return self.produce.config

    def _load(self) -> QuotaConfig:
        """Initial load: a bad or missing file is fatal (raises QuotaConfigError)."""
        assert self._quota_file is not None
        config = load_quota_file(self._quota_file.path)
        log.info("loaded %d quota entries from %s", len(config.entries), self._quota_file.path)
        return config

    def _effective(self, overrides: Overrides) -> QuotaConfig:
        return overlaid(self._file_config, overrides, self._kept_in)

    def explain(self, who: Client) -> dict[str, object]:
        """``explain`` of the quotas in force (``quotas``), each with its bucket's current rate and usage ratio (None
        when nothing was charged to it yet), and the client's ``tenant`` (``explain_tenant``)."""
        now = now_ms()
        managers = self.managers
        answers = []
        for explanation in explain(self.config, who):
            answer = explanation.as_json()
            if explanation.limit is not None:
                manager: QuotaManager | ByteRateManager | TenantBudget | None = managers.get(explanation.quota_type)
                if explanation.topic is not None:
                    manager = self.topic_managers[explanation.quota_type]
                elif explanation.key is not None and explanation.key.tenant:
                    manager = self.tenant_budgets[explanation.quota_type]
                if explanation.key is None:  # an IP's
                    rate = None if who.ip is None else self.connections.rate_of(who.ip, now)
                elif manager is None:
                    rate = self.user_connections.rate_of(explanation.key, now)
                else:
                    rate = manager.rate_of(explanation.key, now)
                answer["rate"] = rate
                answer["usage_ratio"] = None if rate is None else rate / explanation.limit
            answers.append(answer)
        tenant = explain_tenant(self.config, who)
        return {"quotas": answers, "tenant": None if tenant is None else tenant.as_json()}

    def observe(self, observer: Callable[[QuotaConfig], None]) -> None:
        """Have ``observer`` told the quotas in force now and whenever they change."""
        self._observers.append(observer)
        observer(self.config)

    def apply(self, config: QuotaConfig) -> None:
        for manager in (*self.managers.values(), *self.topic_managers.values(), self.user_connections):
            manager.update_config(config)
        self.connections.window = config.settings.byte_rate_window
        for observer in self._observers:
            observer(config)

    def reload_if_changed(self) -> None:
        if self._quota_file is None or not self._quota_file.changed():
            return
        try:
            self._file_config = load_quota_file(self._quota_file.path)
        except QuotaConfigError as error:
            log.error("keeping the running quotas: %s", error)
            return
        self.apply(self._effective(self.overrides))
        log.info("reloaded %d quota entries from %s", len(self._file_config.entries), self._quota_file.path)

    # ---- overrides set through AlterClientQuotas ------------------------------------------------

    def share_overrides(self, topic: str, publish: Callable[[OverrideChanges], Awaitable[None]]) -> None:
        """Keep the overrides in the fleet's ``topic``: ``override`` hands a change to ``publish``, and
        ``replace_overrides`` puts in force what is read from the topic."""
        self._publish = publish
        self._kept_in = f"topic {topic}"

    async def override(self, changes: OverrideChanges) -> None:
        """Save (write, fsync, rename, on a worker thread) or publish to the fleet's topic, then apply, API
        changes. Raises QuotaConfigError if invalid, OSError if the save or the publication failed: either way
        nothing changed."""
        async with self._saving:
            overrides = {entity: dict(quotas) for entity, quotas in self.overrides.items()}
            for entity, quotas in changes.items():
                overrides.setdefault(entity, {}).update(quotas)
            config = self._effective(overrides)
            if self._publish is not None:
                await self._publish(changes)  # in force once read back from the topic (replace_overrides)
                return
            if self._saved is not None:
                await self._saved.save(overrides)
            self.overrides = overrides
            self.apply(config)

    def replace_overrides(self, overrides: Overrides) -> None:
        """Put in force the overrides read from the fleet's topic (raises QuotaConfigError, changing nothing,
        when they do not make a valid configuration), and copy them to the state directory in the background."""
        config = self._effective(overrides)
        self.overrides = overrides
        self.apply(config)
        if self._saved is not None:
            self._saved.copy(overrides, lambda: self.overrides)

    def _load_overrides(self) -> Overrides:
        path = None if self._saved is None else self._saved.path
        if path is None or not path.exists():
            return {}
        overrides = read_overrides(path)
        log.info("loaded %d client-quota overrides from %s", len(overrides), path)
        return overrides

    async def maintain(self) -> None:
        """Reload the file when it changes and drop expired producer-ID filters (KIP-936 cleanup)."""
        while True:
            await asyncio.sleep(RELOAD_INTERVAL_S)
            self.reload_if_changed()
            self.producer_ids.expire(now_ms())
