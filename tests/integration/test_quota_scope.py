"""``quota.scope``: one byte-rate budget per upstream broker (Kafka's meaning) or one per proxy, with
three Apache Kafka brokers behind the proxy: one topic led by each, written through each broker's
listener on the proxy.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from tests.integration.test_produce_quotas import metrics
from tests.support import Cluster, create_topic_on_one_broker, produce_request, read_frame, record_batch

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
        own_proxy, three_brokers: Cluster, tmp_path: Path, topic: str, scope: str) -> None:
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(f'[settings]\n"quota.scope" = "{scope}"\n'
                          f'[[quota]]\nuser = "ANONYMOUS"\nproducer_byte_rate = {MIB}\n')
    proxy = own_proxy("--quota-file", str(quota_file), cluster=three_brokers)
    # 4 MiB through each broker's listener: 0.4 MiB/s per broker over Kafka's first 10 s, 1.2 MiB/s together
    seen = {}
    for node_id in three_brokers.node_ids:
        led_here = f"{topic}-{node_id}"
        create_topic_on_one_broker(three_brokers, led_here, node_id=node_id)
        seen[node_id] = throttles(proxy.broker_port_base + node_id, led_here, 4)
    first, second, third = (seen[node_id] for node_id in three_brokers.node_ids)
    assert first == second == [0] * 4
    rates = {key: value for key, value in metrics(proxy).items()
             if key.startswith("kafka_quota_proxy_produce_byte_rate{")}
    if scope == "broker":
        assert third == [0] * 4
        brokers = {key.split('broker="')[1].split('"')[0] for key in rates}
        assert len(brokers) == 3
    else:
        assert third[:2] == [0, 0] and third[-1] > 0, third  # the 11th MiB is over the shared budget
        assert len(rates) == 1 and 'broker=""' in next(iter(rates))
