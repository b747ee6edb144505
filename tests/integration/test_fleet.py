"""A fleet of three proxies in front of one cluster enforcing one quota (``quota.scope = "cluster"``).

Each proxy publishes what it charged to a usage topic on the cluster and adds the others' usage
into its own rates and buckets, so a principal's budget is the fleet's wherever its connections
land. Without the fleet each proxy would give the user the whole quota (three times it in total),
which is what every assertion on a total would catch.
"""

from __future__ import annotations

import bisect
import errno
import itertools
import signal
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from protocol.apis import Api
from tests.integration.test_kafka_tools import configs
from tests.integration.test_mutation_quotas import creatable, create
from tests.integration.test_produce_quotas import create_topic, metrics, usage_lines
from tests.integration.test_produce_refusals import idempotent_request, partition_errors, producer_id_from
from tests.support import Cluster, ProxyProcess, call, connect_to_leader, read_frame, record_batch, wait_until

pytestmark = pytest.mark.integration
MIB = 1 << 20
THROTTLING_QUOTA_EXCEEDED = 89


def start_fleet(own_proxy, tmp_path: Path, quotas: str, members: int = 3,  # type: ignore[no-untyped-def]
                quotas_topic: str | None = None, first: int = 0, arguments: tuple[str, ...] = (),
                more_config: str = "", acls_topic: str | None = None) -> list[ProxyProcess]:
    """``members`` proxies sharing a fresh usage topic (and quota topic, unless named; ACL topic, if named), with
    ``quotas`` in cluster scope; ANONYMOUS may set quotas (``[admin]``). ``arguments``: more of each member's command
    line; ``more_config``: more of its ``--config`` file, after ``[fleet]`` and ``[admin]``."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text(quotas.replace("[settings]\n", '[settings]\n"quota.scope" = "cluster"\n'))
    usage_topic = f"usage-{uuid.uuid4().hex[:8]}"
    quotas_topic = quotas_topic or f"quotas-{uuid.uuid4().hex[:8]}"
    proxies = []
    for member in range(first, first + members):
        config = tmp_path / f"fleet{member}.toml"
        config.write_text(f'[fleet]\ntopic = "{usage_topic}"\nquotas-topic = "{quotas_topic}"\n'
                          f'instance-id = "proxy-{member}"\npublish-interval-ms = 200\n'
                          + (f'acls-topic = "{acls_topic}"\n' if acls_topic else "")
                          + '[admin]\nprincipals = ["User:ANONYMOUS"]\n' + more_config)
        proxies.append(own_proxy("--quota-file", str(quota_file), "--config", str(config), *arguments))
    for proxy in proxies:
        proxy.wait_for_log("fleet: can read the usage topic", timeout_s=30)
        proxy.wait_for_log("client quotas: can read the quota topic", timeout_s=30)
    return proxies


class FlatOutProducer:
    """A librdkafka producer sending as fast as the proxy lets it (librdkafka ignores throttle_time_ms:
    only the proxy's muting holds it), recording when each byte was acknowledged."""

    VALUE = b"f" * 10_000

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "queue.buffering.max.kbytes": 4096,
                                   "message.timeout.ms": 120_000})
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, error: object, message: object) -> None:
        if error is None:
            self.acked.append((time.monotonic(), len(self.VALUE)))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._producer.produce(self._topic, self.VALUE, on_delivery=self._delivered)
            except BufferError:
                self._producer.poll(0.05)
            self._producer.poll(0)
        self._producer.purge()
        # close() serves the purged messages' callbacks (each holds this object) and stops the client: left
        # open, it reconnects to its proxy, killed or stopped, through the tests after
        self._producer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


BURST_QUOTA_S = 3
"""Flat-out producers held to a rate over Kafka's 11 one-second samples go in cycles: a burst each time the sample
that holds the last burst expires (about every 12 s), throttled between. A second holding three seconds of the quota
or more starts a burst (they held 5-8 here, the seconds between at most 1.7)."""
BURSTS_APART_S = 5


class Acknowledged:
    """What flat-out producers were acknowledged, together, by time."""

    def __init__(self, producers: list[FlatOutProducer]) -> None:
        acked = sorted(event for producer in producers for event in list(producer.acked))
        self._times = [at for at, _ in acked]
        self._total = list(itertools.accumulate((size for _, size in acked), initial=0))

    def bytes_between(self, start: float, end: float) -> int:
        return self._total[bisect.bisect_left(self._times, end)] - self._total[bisect.bisect_left(self._times, start)]

    def bursts(self, start: float, end: float, quota: float) -> list[float]:
        """When the bursts starting between ``start`` and ``end`` started."""
        bursts: list[float] = []
        for at in self._times:
            if start <= at < end and (not bursts or at >= bursts[-1] + BURSTS_APART_S) and (
                    self.bytes_between(at, at + 1) >= BURST_QUOTA_S * quota):
                bursts.append(at)
        return bursts

    def whole_cycles(self, start: float, end: float, quota: float) -> tuple[float, float]:
        """From the first burst starting between ``start`` and ``end`` to the last (at least two cycles)."""
        bursts = self.bursts(start, end, quota)
        assert len(bursts) >= 3, f"bursts at {[round(at - start, 1) for at in bursts]} s: not two whole cycles"
        return bursts[0], bursts[-1]

    def rate_over_whole_cycles(self, start: float, end: float, quota: float) -> float:
        """Bytes/s over ``whole_cycles``. A span that cuts the cycles counts three or four bursts of ~20 MiB in 45 s,
        a rate 15% off either way (two runs in seven failed so); over whole cycles Apache Kafka's own broker gave
        1.06-1.09x its quota to three such producers and 1.03x to two."""
        first, last = self.whole_cycles(start, end, quota)
        return self.bytes_between(first, last) / (last - first)


def throttle_given_s(proxies: list[ProxyProcess], start: float, end: float) -> float:
    """The throttle the members decided in the seconds from ``start`` to ``end`` (``time.monotonic``), summed from
    their usage logs, once every member's log has gone past ``end``: producers still sending keep them writing."""
    to_epoch = time.time() - time.monotonic()
    first, last = int(start + to_epoch), int(end + to_epoch)
    wait_until(lambda: all(any(line["time"] >= last for line in usage_lines(proxy)) for proxy in proxies), 30,
               "every member's usage log past the cycles")
    return sum(line.get("throttle_ms", 0) for proxy in proxies for line in usage_lines(proxy)
               if first <= line["time"] < last) / 1000


def assert_held_to_the_quota(producers: list[FlatOutProducer], proxies: list[ProxyProcess], start: float,
                             end: float, quota: float) -> None:
    """The fleet's rate over whole cycles is at most 15% above the quota: members that did not share would let each
    producer have the whole of it. Below the quota what is checked is what the members decided, not the rate a busy
    machine let the producers reach: the bytes through for each second a producer was muted (for its own throttles,
    one after another) are at least 85% of the quota. A slow machine only raises that figure, as a client that comes
    back late finds a lower rate and is given less; members counting usage twice would throttle each byte twice as
    long."""
    acknowledged = Acknowledged(producers)
    first, last = acknowledged.whole_cycles(start, end, quota)
    through = acknowledged.bytes_between(first, last)
    rate = through / (last - first)
    muted_s = throttle_given_s(proxies, first, last) / len(producers)
    per_muted_s = through / muted_s if muted_s else float("inf")
    scraped = [metrics(proxy) for proxy in proxies]
    age_s = sum(values.get("kafka_quota_proxy_fleet_usage_age_seconds_sum", 0) for values in scraped) / max(
        1, sum(values.get("kafka_quota_proxy_fleet_usage_age_seconds_count", 0) for values in scraped))
    print(f"{len(proxies)} members: {rate / quota:.3f}x the quota over whole cycles, {per_muted_s / quota:.3f}x per "
          f"second muted; the others' usage {age_s:.2f} s old on average when added")
    assert rate <= 1.15 * quota, f"{rate / MIB:.2f} MiB/s through the fleet, quota {quota / MIB:.0f} MiB/s"
    assert per_muted_s >= 0.85 * quota, f"{per_muted_s / MIB:.2f} MiB per second muted, quota {quota / MIB:.0f} MiB/s"


def after_bursts(producers: list[FlatOutProducer], start: float, quota: float, bursts: int) -> float:
    """When ``bursts`` bursts have started after ``start``, the last a second before: looked at once a second, which
    leaves the producers the machine's cores meanwhile."""
    deadline = start + 90
    while (now := time.monotonic()) < deadline:
        if len(Acknowledged(producers).bursts(start, now - 1, quota)) >= bursts:
            return now
        time.sleep(1)
    raise AssertionError(f"not {bursts} bursts in the {deadline - start:.0f} s after the start")


def test_three_proxies_hold_one_user_to_one_byte_rate_and_recover_when_one_dies(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path, topic: str) -> None:
    quota = 3 * MIB
    proxies = start_fleet(own_proxy, tmp_path,
                          f'[settings]\n[[quota]]\nuser = "ANONYMOUS"\nproducer_byte_rate = {quota}\n')
    create_topic(proxies[0].bootstrap, topic)
    producers = [FlatOutProducer(proxy.bootstrap, topic) for proxy in proxies]
    try:
        started = time.monotonic()
        time.sleep(60)
        assert_held_to_the_quota(producers, proxies, started + 10, started + 59, quota)
        assert all(Acknowledged([p]).bytes_between(started + 10, started + 60) > 0 for p in producers)

        proxies[2].stop(signal.SIGKILL)
        killed_at = time.monotonic()
        producers[2].stop()
        # from one byte window (11 s) plus a publish interval and some on, two whole cycles (the two members' rate
        # over them was 1.025-1.056x the quota here, over two cycles or three)
        measured = after_bursts(producers[:2], killed_at + 12, quota, bursts=3)
        assert_held_to_the_quota(producers[:2], proxies[:2], killed_at + 12, measured, quota)
    finally:
        for producer in producers:
            producer.stop()
    members = metrics(proxies[0])
    assert members["kafka_quota_proxy_fleet_members"] == 2  # the killed one dropped out
    assert members["kafka_quota_proxy_fleet_reachable"] == 1
    assert members['kafka_quota_proxy_fleet_records_received_total{outcome="applied"}'] > 100


def described_producer_rate(proxy: ProxyProcess, user: str) -> float | None:
    """The ``producer_byte_rate`` the member describes for ``user`` (DescribeClientQuotas, strict)."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        described = call(sock, Api.DESCRIBE_CLIENT_QUOTAS, 1, strict=True,
                         components=[{"entity_type": "user", "match_type": 0, "match": user}])
    values = {value.key: value.value for entry in described.entries  # type: ignore[attr-defined]
              for value in entry.values}
    return values.get("producer_byte_rate")


def until_every_member_describes(proxies: list[ProxyProcess], user: str, rate: float | None) -> None:
    """Wait until each member describes ``rate`` for ``user`` (30 s at most). How soon a change reaches every member
    is a figure of ``make bench`` (``bench/latency_aims.py``): a busy machine delays the quota topic's readers."""
    wait_until(lambda: all(described_producer_rate(proxy, user) == rate for proxy in proxies), 30,
               f"every member to describe {rate} for {user}")


def produce_throttle_ms(proxy: ProxyProcess, topic: str) -> int:
    """The throttle of one 1 MiB Produce through ``proxy``."""
    with connect_to_leader(proxy, topic) as sock:
        answer = call(sock, Api.PRODUCE, 7, transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[
            {"name": topic, "partition_data": [{"index": 0, "records": record_batch([b"q" * MIB])}]}])
    return int(answer.throttle_time_ms)  # type: ignore[attr-defined]


def test_a_quota_set_with_kafka_configs_through_one_member_reaches_all_and_outlives_them(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path, topic: str) -> None:
    quotas_topic = f"quotas-{uuid.uuid4().hex[:8]}"
    proxies = start_fleet(own_proxy, tmp_path, "[settings]\n", quotas_topic=quotas_topic)
    create_topic(proxies[0].bootstrap, topic)
    assert all(produce_throttle_ms(proxy, topic) == 0 for proxy in proxies)
    configs(proxies[0], "--alter", "--entity-type", "users", "--entity-name", "ANONYMOUS",
            "--add-config", "producer_byte_rate=50000")
    until_every_member_describes(proxies, "ANONYMOUS", 50_000)
    for proxy in proxies:  # Kafka's own tool, through each member
        assert "Quota configs for user-principal 'ANONYMOUS' are producer_byte_rate=50000.0" in configs(
            proxy, "--describe", "--entity-type", "users", "--entity-name", "ANONYMOUS")
        assert produce_throttle_ms(proxy, topic) > 0  # 1 MiB against 50 kB/s: enforced at every member
        assert metrics(proxy)["kafka_quota_proxy_quota_store_reachable"] == 1
    configs(proxies[2], "--alter", "--entity-type", "users", "--entity-name", "ANONYMOUS",
            "--add-config", "producer_byte_rate=70000")
    until_every_member_describes(proxies, "ANONYMOUS", 70_000)

    for proxy in proxies:  # all of them gone: the topic keeps the quota for the next fleet
        proxy.stop()
    restarted = start_fleet(own_proxy, tmp_path, "[settings]\n", quotas_topic=quotas_topic, first=3)
    assert all(described_producer_rate(proxy, "ANONYMOUS") == 70_000 for proxy in restarted)
    configs(restarted[1], "--alter", "--entity-type", "users", "--entity-name", "ANONYMOUS",
            "--delete-config", "producer_byte_rate")
    until_every_member_describes(restarted, "ANONYMOUS", None)


def wait_for_log_in_any(proxies: list[ProxyProcess], text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(text in proxy.log() for proxy in proxies):
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} in no member's log after {timeout_s} s:\n"
                                 + "\n".join(proxy.log() for proxy in proxies))
        time.sleep(0.05)


def test_members_keep_the_quotas_they_read_while_the_topic_is_gone_and_give_them_back(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path) -> None:
    quotas_topic = f"quotas-{uuid.uuid4().hex[:8]}"
    proxies = start_fleet(own_proxy, tmp_path, "[settings]\n", members=2, quotas_topic=quotas_topic)
    configs(proxies[0], "--alter", "--entity-type", "users", "--entity-name", "ANONYMOUS",
            "--add-config", "producer_byte_rate=50000")
    until_every_member_describes(proxies, "ANONYMOUS", 50_000)
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        deleted = call(sock, Api.DELETE_TOPICS, 4, topic_names=[quotas_topic], timeout_ms=30_000)
    assert deleted.responses[0].error_code == 0  # type: ignore[attr-defined]
    for proxy in proxies:
        proxy.wait_for_log("client quotas: cannot read the quota topic", timeout_s=30)
        assert described_producer_rate(proxy, "ANONYMOUS") == 50_000  # kept meanwhile
    # made again by a member (whichever reads first), and given the overrides in force: a member that starts now
    # reads them
    wait_for_log_in_any(proxies, "is new: publishing the 1 settings in force", timeout_s=60)
    (late,) = start_fleet(own_proxy, tmp_path, "[settings]\n", members=1, quotas_topic=quotas_topic, first=2)
    until_every_member_describes([late], "ANONYMOUS", 50_000)  # the seed may land after its first read
    assert all(metrics(proxy)["kafka_quota_proxy_quota_store_reachable"] == 1 for proxy in (*proxies, late))


def usage_records_applied(metrics_ports: list[int]) -> float:
    """The others' usage records applied by the members (or workers) serving metrics on ``metrics_ports``, together."""
    return sum(value for port in metrics_ports for key, value in metrics_of(port).items()
               if key.startswith('kafka_quota_proxy_fleet_records_received_total{outcome="applied"'))


def until_every_charge_is_applied(metrics_ports: list[int], charges: int) -> None:
    """Wait until every member serving metrics on ``metrics_ports`` has applied the others' ``charges`` (a member
    publishes each charge of a mutation or a producer ID at once, as a record each other member applies), so that
    whichever member decides the next request decides it on the whole fleet's bucket. How stale a member's view
    gets is a figure of ``make bench`` (``bench/fleet_scale.py``): here it must not decide what is admitted."""
    records = (len(metrics_ports) - 1) * charges
    wait_until(lambda: usage_records_applied(metrics_ports) >= records, 30, f"{records} usage records applied")


def assert_one_bucket(outcomes: list[int], burst: int, elapsed_s: float) -> None:
    """``outcomes`` (error codes in order) are what one bucket of ``burst`` refilled at 1/s for ``elapsed_s`` admits,
    within 15%, fewer attempts than that all admitted: a bucket at each member would admit up to three times it."""
    admitted, allowed = outcomes.count(0), burst + elapsed_s
    assert set(outcomes) <= {0, THROTTLING_QUOTA_EXCEEDED}
    assert min(len(outcomes), allowed) * 0.85 <= admitted <= allowed * 1.15, (admitted, allowed, outcomes)


def test_topics_created_through_three_proxies_follow_one_mutation_bucket(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path) -> None:
    # 1 partition/s, burst 11 x 1 s x 1 = 11: over the 20 s below the fleet admits about 11 + 20 = 31; alone, each
    # proxy would admit 31, 93 in all
    proxies = start_fleet(own_proxy, tmp_path,
                          '[settings]\n[[quota]]\nclient-id = "churn"\ncontroller_mutation_rate = 1\n')
    prefix = f"m-{uuid.uuid4().hex[:6]}"
    outcomes: list[int] = []
    sockets = [socket.create_connection(("127.0.0.1", proxy.port), timeout=30) for proxy in proxies]
    try:
        started = time.monotonic()
        while time.monotonic() - started < 20:
            attempt = len(outcomes)
            outcomes += create(sockets[attempt % 3], "churn", creatable(f"{prefix}-{attempt}", 1))
            if outcomes[-1] == 0:
                until_every_charge_is_applied([proxy.metrics_port for proxy in proxies], outcomes.count(0))
            time.sleep(0.1)
        elapsed = time.monotonic() - started
    finally:
        for sock in sockets:
            sock.close()
    assert_one_bucket(outcomes, 11, elapsed)


def test_thirty_new_producer_ids_over_three_proxies_follow_one_bucket(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    # 1 PID/s with 2 windows of 5 s: burst 10; 30 new PIDs, one every 0.25 s round the three proxies
    proxies = start_fleet(own_proxy, tmp_path, '[settings]\n"producer.id.quota.window.num" = 2\n'
                          '"producer.id.quota.window.size.seconds" = 5\n"producer.id.quota.mode" = "reject"\n'
                          '[[quota]]\nuser = "ANONYMOUS"\nproducer_ids_rate = 1\n')
    create_topic(broker.bootstrap, topic)
    connections = [connect_to_leader(proxy, topic) for proxy in proxies]
    outcomes: list[int] = []
    first_admitted: tuple[int, int] | None = None
    try:
        started = time.monotonic()
        for i in range(30):
            sock = connections[i % 3]
            pid = producer_id_from(proxies[i % 3])
            sock.sendall(idempotent_request(topic, pid, 0, correlation_id=i))
            (error,) = partition_errors(read_frame(sock)).values()
            outcomes.append(error)
            if error == 0:
                first_admitted = first_admitted or (i % 3, pid)
                until_every_charge_is_applied([proxy.metrics_port for proxy in proxies], outcomes.count(0))
            time.sleep(max(0.0, started + 0.25 * (i + 1) - time.monotonic()))
        # one bucket: 10 at once, then 1/s; three buckets would admit all 30
        assert_one_bucket(outcomes, 10, time.monotonic() - started)
        # a PID one proxy charged is not charged again by another, even with the fleet's bucket below zero
        assert first_admitted is not None
        owner, pid = first_admitted
        other = (owner + 1) % 3
        connections[other].sendall(idempotent_request(topic, pid, 1, correlation_id=99))
        assert partition_errors(read_frame(connections[other])) == {0: 0}
    finally:
        for sock in connections:
            sock.close()


def test_a_member_that_cannot_reach_the_topic_enforces_alone_and_says_so(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path) -> None:
    config = tmp_path / "fleet.toml"
    # a topic name the cluster refuses: the member can never publish, yet serves and enforces
    config.write_text('[fleet]\ntopic = "bad topic name!"\n')
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[settings]\n"quota.scope" = "cluster"\n[[quota]]\nuser = "ANONYMOUS"\n'
                          'controller_mutation_rate = 1\n')
    proxy = own_proxy("--quota-file", str(quota_file), "--config", str(config))
    proxy.wait_for_log("fleet: cannot publish to the usage topic", timeout_s=30)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        versions = call(sock, Api.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
        assert versions.error_code == 0  # type: ignore[attr-defined]
    values = metrics(proxy)
    assert values["kafka_quota_proxy_fleet_reachable"] == 0
    assert values['kafka_quota_proxy_fleet_topic_failures_total{operation="publish"}'] >= 1


# ---- producer-ID blocks claimed through the cluster (pid_source = "cluster") -----------------------

COORDINATOR_LOAD_IN_PROGRESS = 14
FIRST_ID = 1 << 48


def cluster_pid_config(tmp_path: Path, name: str, blocks_topic: str, extra: str = "") -> str:
    config = tmp_path / f"{name}.toml"
    config.write_text(f'[allocator]\npid_source = "cluster"\nblocks_topic = "{blocks_topic}"\n{extra}')
    return str(config)


def init_producer_ids(proxy: ProxyProcess, count: int, pipelined: int = 100) -> list[int]:
    """``count`` PIDs from raw InitProducerId frames, ``pipelined`` in flight at a time on one connection;
    answers "block not there yet" (retriable, as for a broker) are asked again."""
    from protocol.codecs import decode_response
    from protocol.header import response_header_length
    from tests.support import encode_request

    issued: list[int] = []
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        while len(issued) < count:
            wanted = min(pipelined, count - len(issued))
            sock.sendall(b"".join(encode_request(Api.INIT_PRODUCER_ID, 4, correlation_id=i, transactional_id=None,
                                                 transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1)
                                  for i in range(wanted)))
            for _ in range(wanted):
                frame = read_frame(sock)
                body = memoryview(frame)[response_header_length(frame, True):]
                answer = decode_response(Api.INIT_PRODUCER_ID, 4, body)
                if answer.error_code == 0:
                    issued.append(answer.producer_id)
                else:
                    assert answer.error_code == COORDINATOR_LOAD_IN_PROGRESS, answer
            if len(issued) < count:
                time.sleep(0.01)
    return issued


def test_three_proxies_claiming_blocks_through_the_cluster_never_repeat_an_id_across_kills(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path) -> None:
    blocks_topic = f"blocks-{uuid.uuid4().hex[:8]}"
    proxies = [own_proxy("--config", cluster_pid_config(tmp_path, f"p{i}", blocks_topic)) for i in range(3)]
    issued: list[int] = []
    for round_ in range(4):  # 4 rounds x 3 proxies x 1,667 = 20,004 PIDs, a proxy killed -9 after each round
        for proxy in proxies:
            issued += init_producer_ids(proxy, 1_667)
        victim = proxies[round_ % 3]
        victim.stop(signal.SIGKILL)
        victim.start()
    assert len(issued) >= 20_000
    assert len(set(issued)) == len(issued), "an ID was handed out twice"
    # every ID lies in a block numbered by an offset of the blocks topic: first_id + offset x 1000
    blocks = {(pid - FIRST_ID) // 1000 for pid in issued}
    assert min(pid - FIRST_ID for pid in issued) >= 0
    assert len(blocks) >= 21  # 20,000 IDs need 20 blocks; each kill abandons the rest of a block
    for proxy in proxies:
        assert "cannot claim" not in proxy.log()


def test_a_recreated_blocks_topic_is_refused_until_an_operator_confirms_it(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path) -> None:
    from kafka.admin import KafkaAdminClient

    blocks_topic = f"blocks-{uuid.uuid4().hex[:8]}"
    proxy = own_proxy("--config", cluster_pid_config(tmp_path, "first", blocks_topic))
    (before,) = init_producer_ids(proxy, 1)
    assert proxy.stop() == 0
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.delete_topics([blocks_topic])
        wait_until(lambda: blocks_topic not in admin.list_topics(), 30, f"{blocks_topic} deleted")
    finally:
        admin.close()
    proxy.start()  # the proxy creates the topic again: its offsets start at 0, which would repeat `before`
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        for attempt in range(20):
            answer = call(sock, Api.INIT_PRODUCER_ID, 4, correlation_id=attempt, transactional_id=None,
                          transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1)
            assert answer.error_code == COORDINATOR_LOAD_IN_PROGRESS, answer  # type: ignore[attr-defined]
            time.sleep(0.05)
    log_text = proxy.wait_for_log("now has topic id")
    new_topic_id = log_text.split("blocks_topic_id = \"")[1].split("\"")[0]
    assert proxy.stop() == 0

    # confirmed, but first_id not raised: the block log still refuses blocks below what it recorded
    confirmed = own_proxy("--config", cluster_pid_config(tmp_path, "confirmed", blocks_topic,
                                                         f'blocks_topic_id = "{new_topic_id}"\n'),
                          "--state-dir", str(proxy.state_dir))
    with socket.create_connection(("127.0.0.1", confirmed.port), timeout=30) as sock:
        answer = call(sock, Api.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=60_000,
                      producer_id=-1, producer_epoch=-1)
        assert answer.error_code == COORDINATOR_LOAD_IN_PROGRESS  # type: ignore[attr-defined]
    confirmed.wait_for_log("is below")
    assert confirmed.stop() == 0

    raised = own_proxy("--config", cluster_pid_config(tmp_path, "raised", blocks_topic,
                                                      f'blocks_topic_id = "{new_topic_id}"\n'
                                                      f"first_id = {FIRST_ID + 1_000_000}\n"),
                       "--state-dir", str(proxy.state_dir))
    (after,) = init_producer_ids(raised, 1)
    assert after > before


# ---- all cores of one machine: --workers ----------------------------------------------------------

def test_two_workers_share_the_listeners_and_one_quota_and_a_dead_worker_comes_back(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path) -> None:
    import psutil

    config = tmp_path / "workers.toml"
    config.write_text(f'[fleet]\ntopic = "usage-{uuid.uuid4().hex[:8]}"\n')
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[settings]\n"quota.scope" = "cluster"\n[[quota]]\nclient-id = "churn"\n'
                          'controller_mutation_rate = 1\n')
    proxy = own_proxy("--workers", "2", "--config", str(config), "--quota-file", str(quota_file))
    proxy.wait_for_log("ready: ", timeout_s=30, occurrence=2)
    proxy.wait_for_log("fleet: can read the usage topic", timeout_s=30, occurrence=2)
    prefix = f"w-{uuid.uuid4().hex[:6]}"
    outcomes = []
    started = time.monotonic()
    for attempt in range(40):  # a new connection each time: the kernel spreads them over the workers
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            outcomes += create(sock, "churn", creatable(f"{prefix}-{attempt}", 1))
        if outcomes[-1] == 0:
            until_every_charge_is_applied([proxy.metrics_port + worker for worker in (0, 1)], outcomes.count(0))
        time.sleep(0.1)
    elapsed = time.monotonic() - started
    assert set(outcomes) <= {0, THROTTLING_QUOTA_EXCEEDED}
    # one bucket for both workers: 11 at once, then 1/s; two buckets would admit up to twice the burst
    assert outcomes.count(0) <= 11 + elapsed + 2, (outcomes.count(0), elapsed)
    accepted = []
    for worker in (0, 1):
        values = metrics_of(proxy.metrics_port + worker)
        accepted.append(values[f'kafka_quota_proxy_listener_connections_total{{listener="bootstrap",outcome="accepted",'
                               f'worker="{worker}"}}'])
        assert values[f'process_cpu_seconds_total{{worker="{worker}"}}'] > 0  # each worker's own CPU, for sizing
    assert all(count > 0 for count in accepted) and sum(accepted) >= 40, accepted

    assert proxy.process is not None
    victim = next(child for child in psutil.Process(proxy.process.pid).children()
                  if any(listening.laddr.port == proxy.metrics_port + 1 for listening in child.net_connections()))
    killed_at = time.time()
    victim.kill()
    proxy.wait_for_log("exited with -9: starting it again", timeout_s=30)
    # while worker 1 is down its metrics port stays taken (the supervisor holds it), so nothing (an outgoing
    # connection's ephemeral port, say) can take it from the worker coming back; SO_REUSEADDR: a scrape's
    # TIME_WAIT alone would not refuse this bind
    with socket.socket() as intruder, pytest.raises(OSError) as refused:
        intruder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        intruder.bind(("127.0.0.1", proxy.metrics_port + 1))
    assert refused.value.errno == errno.EADDRINUSE
    # and a scrape in the meantime waits for the worker coming back instead of being refused: the new worker 1
    # answers it, forked a second after the kill (its start time is read in whole boot seconds, so up to 1 s
    # early; its CPU time may still read 0: a fresh fork's clock ticks, which failed this test once in CI)
    restarted = metrics_of(proxy.metrics_port + 1, timeout_s=60)
    assert restarted['process_start_time_seconds{worker="1"}'] >= killed_at - 0.5
    proxy.wait_for_log("ready: ", timeout_s=30, occurrence=3)
    assert proxy.stop() == 0


def test_a_quota_set_through_one_worker_is_in_force_at_both(own_proxy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import json
    import urllib.request

    quotas_topic = f"quotas-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "workers.toml"
    config.write_text(f'[fleet]\ntopic = "usage-{uuid.uuid4().hex[:8]}"\nquotas-topic = "{quotas_topic}"\n'
                      '[admin]\nprincipals = ["User:ANONYMOUS"]\n')
    proxy = own_proxy("--workers", "2", "--config", str(config))
    proxy.wait_for_log("client quotas: can read the quota topic", timeout_s=30, occurrence=2)
    configs(proxy, "--alter", "--entity-type", "users", "--entity-name", "ANONYMOUS",
            "--add-config", "producer_byte_rate=50000")  # through whichever worker the kernel chose

    def in_force(worker: int) -> list[Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port + worker}/quotas/explain?user=ANONYMOUS",
                                    timeout=10) as response:
            return [(answer["quota"], answer["origin"]) for answer in json.load(response)["quotas"]
                    if answer["quota_type"] == "producer_byte_rate"]

    # each worker's own endpoint: both have it, from the topic (the other worker once it has read it)
    expected = [(50_000, f"AlterClientQuotas (topic {quotas_topic})")]
    wait_until(lambda: [in_force(0), in_force(1)] == [expected, expected], 30, "the quota in force at both workers")


def metrics_of(port: int, timeout_s: float = 30) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as response:
        text = response.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def anonymous_write(proxy: ProxyProcess, topic: str) -> int:
    """The error of one record ANONYMOUS writes to ``topic`` through ``proxy``."""
    with connect_to_leader(proxy, topic) as sock:
        answer = call(sock, Api.PRODUCE, 9, transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[
            {"name": topic, "partition_data": [{"index": 0, "records": record_batch([b"a record"])}]}])
    return int(answer.responses[0].partition_responses[0].error_code)  # type: ignore[attr-defined]


def acl_change(proxy: ProxyProcess, api_key: int, topic: str) -> list[int]:
    """ANONYMOUS's WRITE on ``topic`` created (CreateAcls) or deleted (DeleteAcls) through ``proxy``: the errors."""
    fields = {"resource_type": 2, "resource_name": topic, "principal": "User:ANONYMOUS", "host": "*",
              "operation": 4, "permission_type": 3}
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        if api_key == Api.CREATE_ACLS:
            created = call(sock, api_key, 3, creations=[{**fields, "resource_pattern_type": 3}])
            return [result.error_code for result in created.results]  # type: ignore[attr-defined]
        deleted = call(sock, api_key, 3, filters=[{
            "resource_type_filter": 2, "resource_name_filter": topic, "pattern_type_filter": 3,
            "principal_filter": "User:ANONYMOUS", "host_filter": "*", "operation": 4, "permission_type": 3}])
        return [len(result.matching_acls) for result in deleted.filter_results]  # type: ignore[attr-defined]


def test_an_acl_created_through_one_member_is_enforced_by_all_and_outlives_them(  # type: ignore[no-untyped-def]
        own_proxy, broker: Cluster, tmp_path: Path, topic: str) -> None:
    """With the authorizer, the ACLs created and deleted with the ACL APIs are the fleet's, as the quotas set with
    AlterClientQuotas are: kept in a topic of the cluster, read by every member (and by a member that starts later)."""
    acl_file = tmp_path / "acls.toml"
    acl_file.write_text('[[acl]]\nprincipal = "User:ANONYMOUS"\nresource-type = "cluster"\noperations = ["alter"]\n'
                        '[[acl]]\nprincipal = "User:ANONYMOUS"\nresource-type = "topic"\nresource-name = "*"\n'
                        'operations = ["describe"]\n')
    acls_topic = f"acls-{uuid.uuid4().hex[:8]}"
    authorizer = f'[authorizer]\nenabled = true\nacl-file = "{acl_file}"\n'
    proxies = start_fleet(own_proxy, tmp_path, "[settings]\n", members=2, more_config=authorizer,
                          acls_topic=acls_topic)
    create_topic(broker.bootstrap, topic)
    assert [anonymous_write(proxy, topic) for proxy in proxies] == [29, 29]
    assert acl_change(proxies[0], Api.CREATE_ACLS, topic) == [0]
    assert anonymous_write(proxies[0], topic) == 0, "in force on the member that took it when it answers"
    wait_until(lambda: anonymous_write(proxies[1], topic) == 0, 30, "the other member allowing the write")
    assert acl_change(proxies[1], Api.DELETE_ACLS, topic) == [1]
    assert anonymous_write(proxies[1], topic) == 29
    wait_until(lambda: anonymous_write(proxies[0], topic) == 29, 30, "the other member refusing the write again")
    assert acl_change(proxies[0], Api.CREATE_ACLS, topic) == [0]
    for proxy in proxies:
        assert proxy.stop() == 0, proxy.log()
    # all of them gone: the topic keeps the ACLs for the next fleet (a member on a fresh state directory)
    (late,) = start_fleet(own_proxy, tmp_path, "[settings]\n", members=1, first=5, more_config=authorizer,
                          acls_topic=acls_topic)
    late.wait_for_log("ACLs: can read the ACL topic", timeout_s=30)
    wait_until(lambda: anonymous_write(late, topic) == 0, 30, "the late member allowing the write")
    assert metrics(late)["kafka_quota_proxy_acl_store_reachable"] == 1
