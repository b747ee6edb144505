"""``quota.scope``: one byte-rate budget per upstream broker (Kafka's meaning) or one per proxy.

Two listeners reach the cluster at two addresses: the broker listener dials the broker directly,
the bootstrap listener dials it through a relay (as through a load balancer), so the proxy sees
two brokers.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from tests.integration.test_produce_quotas import create_topic, metrics
from tests.support import Cluster, TcpRelay, produce_request, read_frame, record_batch

pytestmark = pytest.mark.integration
MIB = 1 << 20


def throttles(port: int, topic: str, requests: int) -> list[int]:
    """``throttle_time_ms`` of ``requests`` 1 MiB Produce requests sent one after another on one connection."""
    seen = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        for i in range(requests):
            sock.sendall(produce_request(topic, record_batch([b"s" * (MIB - 200)]), correlation_id=i, acks=1))
            frame = read_frame(sock)
            seen.append(struct.unpack_from(">i", frame, len(frame) - 4)[0])  # Produce v7: the last field
    return seen


@pytest.mark.parametrize("scope", ["broker", "proxy"])
def test_each_broker_has_its_own_budget_only_in_broker_scope(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str, scope: str) -> None:
    create_topic(broker.bootstrap, topic)
    leader, host, port = broker.leader(topic)
    relay = TcpRelay(host, port)  # the bootstrap listener reaches the partition's leader through it
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(f'[settings]\n"quota.scope" = "{scope}"\n'
                          f'[[quota]]\nuser = "ANONYMOUS"\nproducer_byte_rate = {MIB}\n')
    try:
        proxy = own_proxy("--quota-file", str(quota_file), upstream=f"127.0.0.1:{relay.port}")
        # 6 MiB through each listener: 0.6 MiB/s per broker over Kafka's first 10 s, 1.2 MiB/s together
        through_relay = throttles(proxy.port, topic, 6)
        direct = throttles(proxy.broker_port_base + leader, topic, 6)
    finally:
        relay.stop()
    assert through_relay == [0] * 6
    rates = {key: value for key, value in metrics(proxy).items() if key.startswith("kafka_quota_produce_byte_rate{")}
    if scope == "broker":
        assert direct == [0] * 6
        brokers = {key.split('broker="')[1].split('"')[0] for key in rates}
        assert len(brokers) == 2 and f"127.0.0.1:{relay.port}" in brokers
    else:
        assert direct[:4] == [0] * 4 and direct[-1] > 0, direct  # the 11th MiB is over the shared budget
        assert len(rates) == 1 and 'broker=""' in next(iter(rates))
