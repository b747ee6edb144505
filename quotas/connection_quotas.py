"""Connection quotas as Kafka's ``ConnectionQuotas`` applies them when it accepts a connection (KIP-612).

For each accepted socket, in Kafka's order:

1. ``creation_delay_ms``: the connection is recorded into the listener's creation rate; over
   ``max-connection-creation-rate`` the acceptor waits (accepts nothing) for the throttle time,
   bounded by one quota window, and then while ``max-connections`` are open.
2. ``admit``: the connection is recorded into its IP's ``connection_creation_rate``; over it, the
   connection is un-recorded (from the IP's and the listener's rate) and closed after the throttle
   time (Kafka's delayed close), never served. Then the IP's count: an IP that already has
   ``max-connections-per-ip`` (or its override) connections has the new one closed at once.

An IP whose ``connection_creation_rate`` is observed has every connection accepted; a shadow of its rate
follows enforcement (a connection it would have closed is taken back from the shadow, as Kafka takes it
back from the real rate) and says which ones would have been closed, and after what delay.

Time comes from the caller; nothing here waits or touches a socket.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from quotas.config import IpQuota, Window
from quotas.entities import IDLE_EXPIRY_MS, EntityState, EntityTable
from quotas.rate import SampledRate, bounded_throttle_ms, connection_delay_ms


@dataclass(frozen=True)
class ConnectionLimits:
    """Kafka's broker settings; None is Kafka's Int.MaxValue (no limit)."""

    max_connections: int | None = None
    max_connections_per_ip: int | None = None
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_connection_creation_rate: float | None = None
    """Connections/s over all the proxy's client listeners (one Kafka listener)."""


class Verdict(enum.Enum):
    ACCEPT = "accepted"
    TOO_MANY = "refused"
    """The IP has its maximum of connections: closed at once."""
    THROTTLED = "throttled"
    """Over the IP's creation rate: closed after ``delay_ms``, never served."""


class Admission(NamedTuple):
    verdict: Verdict
    delay_ms: int = 0
    observed_delay_ms: int = 0
    """Accepted under an observed creation rate that would have closed it after this delay."""


class _IpRate(EntityState):
    __slots__ = ("rate", "shadow_rate")

    def __init__(self) -> None:
        super().__init__()
        self.rate = SampledRate()
        self.shadow_rate: SampledRate | None = None
        """Observe mode: the rate as enforcement would have kept it."""


class ConnectionQuotas:
    def __init__(self, limits: ConnectionLimits, window: Window, idle_expiry_ms: int = IDLE_EXPIRY_MS) -> None:
        """``window``: Kafka's ``quota.window.*``, which its connection rates use too (replaceable)."""
        self.limits = limits
        self.window = window
        self._counts: dict[str, int] = {}
        self.total = 0
        self._listener_rate = SampledRate()
        self._ip_rates: EntityTable[str, _IpRate] = EntityTable(idle_expiry_ms)
        self.observed_throttled = 0
        """Connections accepted under an observed creation rate that enforcement would have closed."""
        self.observed_delay_ms = 0
        """The delays after which enforcement would have closed them, summed."""

    def creation_delay_ms(self, now_ms: int) -> int:
        """Record one connection into the listener's creation rate; how long to wait before accepting it."""
        limit = self.limits.max_connection_creation_rate
        self._listener_rate.record(1, now_ms, self.window)
        return 0 if limit is None else bounded_throttle_ms(self._listener_rate, limit, now_ms, self.window)

    def slot_available(self) -> bool:
        limit = self.limits.max_connections
        return limit is None or self.total < limit

    def admit(self, ip: str, ip_quota: IpQuota | None, now_ms: int) -> Admission:
        """The connection's fate once the acceptor took it; an accepted one counts until ``release``."""
        observed_delay_ms = 0
        if ip_quota is not None:
            state = self._ip_rates.get_or_create(ip, now_ms, _IpRate)
            if ip_quota.observed:
                state.rate.record(1, now_ms, self.window)
                observed_delay_ms = self._observe(state, ip_quota.limit, now_ms)
            elif delay_ms := connection_delay_ms(state.rate, ip_quota.limit, now_ms, self.window):
                # not accepted: it must not count against the listener either
                self._listener_rate.record(-1, now_ms, self.window)
                return Admission(Verdict.THROTTLED, delay_ms)
        count = self._counts.get(ip, 0)
        limits = self.limits
        maximum = limits.max_connections_per_ip_overrides.get(ip, limits.max_connections_per_ip)
        if maximum is not None and count >= maximum:
            return Admission(Verdict.TOO_MANY)
        self._counts[ip] = count + 1
        self.total += 1
        return Admission(Verdict.ACCEPT, observed_delay_ms=observed_delay_ms)

    def _observe(self, state: _IpRate, limit: float, now_ms: int) -> int:
        shadow = state.shadow_rate
        if shadow is None:
            shadow = state.shadow_rate = SampledRate()
        delay_ms = connection_delay_ms(shadow, limit, now_ms, self.window)
        if delay_ms:
            self.observed_throttled += 1
            self.observed_delay_ms += delay_ms
        return delay_ms

    def release(self, ip: str) -> None:
        """An accepted connection closed."""
        count = self._counts.get(ip, 0)
        if count <= 0:
            return
        if count == 1:
            del self._counts[ip]
        else:
            self._counts[ip] = count - 1
        self.total -= 1

    def rate_of(self, ip: str, now_ms: int) -> float | None:
        """The IP's connection creation rate (connections/s); None before a rate applied to it."""
        state = self._ip_rates.get(ip)
        return None if state is None else state.rate.measure(now_ms, self.window)

    def connections_of(self, ip: str) -> int:
        return self._counts.get(ip, 0)

    def busiest_ips(self, limit: int) -> list[tuple[str, int]]:
        """The IPs with the most open connections, most first."""
        return heapq.nlargest(limit, self._counts.items(), key=lambda item: item[1])
