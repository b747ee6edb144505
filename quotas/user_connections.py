"""The connection creation rate of a user (KIP-612's per-IP rate, applied to the user a login or a certificate
names)."""

from __future__ import annotations

from quotas.config import QuotaConfig, QuotaKey, QuotaType
from quotas.decisions import UNLIMITED, Decision, Requester
from quotas.entities import IDLE_EXPIRY_MS, EntityState, EntityTable, ThrottleCounters
from quotas.rate import SampledRate, connection_delay_ms


class UserConnectionState(EntityState):
    __slots__ = ("rate", "limit", "shadow_rate")

    def __init__(self) -> None:
        super().__init__()
        self.rate = SampledRate()
        self.limit = 0.0
        self.shadow_rate: SampledRate | None = None
        """Observe mode: the rate as enforcement would have kept it (without the connections it would have closed)."""


class UserConnectionRateManager(ThrottleCounters):
    """``connection_creation_rate`` of users (and the ``<default>`` user): the connections a principal opens
    per second, charged once a login or a client certificate has named it. Kafka's math for an IP's rate
    (``ConnectionQuotas``), which Kafka cannot apply to a user: over the rate the connection is taken back
    out of the rate and closed after the throttle, bounded by one window, never served."""

    quota_type = QuotaType.CONNECTION_CREATION_RATE

    def __init__(self, config: QuotaConfig, idle_expiry_ms: int = IDLE_EXPIRY_MS) -> None:
        super().__init__()
        self.config = config
        self.entities: EntityTable[QuotaKey, UserConnectionState] = EntityTable(idle_expiry_ms)

    def update_config(self, config: QuotaConfig) -> None:
        self.config = config

    def record(self, requester: Requester, connections: int, now_ms: int) -> Decision:
        """``connections`` opened (logged in) by ``requester``'s user, whose quota alone applies (KIP-612: the
        client id plays no part). ``admitted`` False: close the connection after ``throttle_ms``."""
        quota = self.config.resolve(self.quota_type, requester.user, "")
        if quota is None:
            return UNLIMITED
        window = self.config.settings.byte_rate_window  # Kafka's connection rates use quota.window.* too
        state = self.entities.get_or_create(quota.key, now_ms, UserConnectionState)
        state.limit = quota.limit
        if quota.observed:
            state.rate.record(connections, now_ms, window)
            if state.shadow_rate is None:
                state.shadow_rate = SampledRate()
            delay_ms = connection_delay_ms(state.shadow_rate, quota.limit, now_ms, window, connections)
            return Decision(True, 0, quota.key, state.observed(delay_ms, refused=bool(delay_ms)))
        delay_ms = connection_delay_ms(state.rate, quota.limit, now_ms, window, connections)
        if not delay_ms:
            return Decision(True, 0, quota.key)
        state.enforced(delay_ms)
        self.rejected += 1
        return Decision(False, delay_ms, quota.key)

    def rate_of(self, key: QuotaKey, now_ms: int) -> float | None:
        """The user's connection creation rate (connections/s); None before one was charged."""
        state = self.entities.get(key)
        return None if state is None else state.rate.measure(now_ms, self.config.settings.byte_rate_window)
