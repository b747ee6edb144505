from __future__ import annotations

import pytest

from quotas.config import (
    DEFAULT,
    IpQuota,
    QuotaConfig,
    QuotaConfigError,
    QuotaEntity,
    QuotaType,
    Window,
    parse_entries,
)
from quotas.connection_quotas import ConnectionLimits, ConnectionQuotas, Verdict
from tests.unit.quotas.clock import FakeClock

WINDOW = Window(11, 1)
RATE = QuotaType.CONNECTION_CREATION_RATE
RATE_2 = IpQuota(2, QuotaEntity(ip=DEFAULT))


def test_the_per_ip_maximum_refuses_the_next_connection_and_overrides_win() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(max_connections_per_ip=2,
                                               max_connections_per_ip_overrides={"10.0.0.9": 3}), WINDOW)
    verdicts = [quotas.admit("10.0.0.1", None, 0).verdict for _ in range(3)]
    assert verdicts == [Verdict.ACCEPT, Verdict.ACCEPT, Verdict.TOO_MANY]
    assert [quotas.admit("10.0.0.9", None, 0).verdict for _ in range(4)][-2:] == [Verdict.ACCEPT, Verdict.TOO_MANY]
    assert (quotas.connections_of("10.0.0.1"), quotas.total) == (2, 5)  # a refused one is not counted
    quotas.release("10.0.0.1")
    assert quotas.admit("10.0.0.1", None, 0).verdict is Verdict.ACCEPT
    assert quotas.busiest_ips(1) == [("10.0.0.9", 3)]


def test_max_connections_is_a_slot_the_acceptor_waits_for() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(max_connections=2), WINDOW)
    for ip in ("a", "b"):
        assert quotas.slot_available()
        quotas.admit(ip, None, 0)
    assert not quotas.slot_available()
    quotas.release("a")
    assert quotas.slot_available()


def test_the_listener_rate_delays_accepting_by_kafkas_bounded_throttle() -> None:
    clock = FakeClock()
    quotas = ConnectionQuotas(ConnectionLimits(max_connection_creation_rate=10), WINDOW)
    delays = [quotas.creation_delay_ms(clock()) for _ in range(102)]
    # the rate divides by at least 10 s: 100 connections are 10/s; the 101st is over
    assert delays[:100] == [0] * 100
    assert delays[100] == 100  # (101 / 10 s - 10) / 10 x 10 s = 0.1 s
    for _ in range(200):
        delay = quotas.creation_delay_ms(clock())
    assert delay == WINDOW.size_ms  # never more than one window (QuotaUtils.boundedThrottleTime)


def test_an_ip_over_its_creation_rate_is_throttled_and_not_counted() -> None:
    clock = FakeClock()
    quotas = ConnectionQuotas(ConnectionLimits(max_connection_creation_rate=1000), WINDOW)
    admitted = []
    for _ in range(25):
        quotas.creation_delay_ms(clock())
        admitted.append(quotas.admit("10.0.0.1", RATE_2, clock()))
    assert [a.verdict for a in admitted[:20]] == [Verdict.ACCEPT] * 20  # 20 in the 10 s minimum window
    assert all(a.verdict is Verdict.THROTTLED and 0 < a.delay_ms <= 1000 for a in admitted[20:])
    assert quotas.connections_of("10.0.0.1") == 20
    assert quotas.admit("10.0.0.2", RATE_2, clock()).verdict is Verdict.ACCEPT  # each IP its own rate
    clock.advance(11_000)
    assert quotas.admit("10.0.0.1", RATE_2, clock()).verdict is Verdict.ACCEPT  # throttled ones were un-recorded


def test_an_observed_creation_rate_accepts_every_connection_and_counts_those_enforcement_would_close() -> None:
    clock = FakeClock()
    enforced = ConnectionQuotas(ConnectionLimits(), WINDOW)
    observed = ConnectionQuotas(ConnectionLimits(), WINDOW)
    observed_rate = RATE_2._replace(observed=True)
    for _ in range(40):
        clock.advance(100)
        verdict = enforced.admit("10.0.0.1", RATE_2, clock())
        seen = observed.admit("10.0.0.1", observed_rate, clock())
        assert seen.verdict is Verdict.ACCEPT and seen.delay_ms == 0
        # the shadow keeps enforcement's rate: each connection it would close is one the enforced quota closed
        assert seen.observed_delay_ms == verdict.delay_ms
    assert observed.connections_of("10.0.0.1") == 40
    assert observed.observed_throttled == 40 - enforced.connections_of("10.0.0.1") > 0


def test_ip_entities_in_the_quota_file() -> None:
    entries = parse_entries([{"ip": "10.0.0.7", "connection_creation_rate": 5},
                             {"ip": DEFAULT, "connection_creation_rate": 50},
                             {"ip": "::ffff:10.0.0.8", "connection_creation_rate": 1}])
    config = QuotaConfig(entries=entries.limits)

    def limit_for(ip: str) -> float | None:
        quota = config.connection_rate_for(ip)
        return None if quota is None else quota.limit

    assert limit_for("10.0.0.7") == 5
    assert limit_for("10.0.0.8") == 1  # IPv4-mapped addresses are IPv4
    assert limit_for("192.168.1.1") == 50
    assert QuotaConfig().connection_rate_for("10.0.0.7") is None
    for bad, message in (({"ip": "db.example", "connection_creation_rate": 5}, "IP address"),
                         ({"ip": "10.0.0.7", "user": "alice", "connection_creation_rate": 5}, "stands alone"),
                         ({"ip": "10.0.0.7", "producer_byte_rate": 5}, "does not apply"),
                         ({"client-id": "app", "connection_creation_rate": 5}, "applies to users only"),
                         ({"user": "alice", "client-id": "app", "connection_creation_rate": 5}, "users only"),
                         ({"ip": "10.0.0.7", "connection_creation_rate": 2.5}, "whole number")):
        with pytest.raises(QuotaConfigError, match=message):
            parse_entries([bad])
    assert QuotaEntity(ip="10.0.0.7").describe() == "ip=10.0.0.7"
