"""A fleet of a hundred (``python -m bench.fleet_scale``): what one real member pays to read what 99 others publish,
and whether three real members still hold a quota under that load. Writes ``bench/fleet-scale-results.json``.

The 99 others are simulated by a generator process that publishes the records each of them would publish
(``quotas.fleet.Publication``, encoded as the proxy encodes it) for its share of the active principals, when the
proxy's own ``UsageShare`` would publish them: each principal's clients are spread over ``--spread`` members (a
service with that many instances behind the fleet's load balancer), so each member publishes produce and fetch usage
for ``principals x spread / 100`` of them. Two loads: ``calm``, every principal far from its limit (6% fleet-wide),
which members hold for up to a second (``HOLD_MS``) and publish in one record; ``near``, every principal at 60% of
its limit, which every member publishes every interval: the worst case, all principals near their quotas at once.
The generator writes through librdkafka, so its own cost stays off the member's figures.

Phase 1, for each ``--principals`` count and load: one real member serving a paced producer, measured for
``--seconds`` without the others and then with them: its CPU seconds per second (the difference is what reading
the fleet costs), its memory (RSS), the usage topic's bytes per second, the records it applied against those
generated (fewer: it fell behind), and the staleness of what it added (``kafka_quota_proxy_fleet_usage_age_seconds``:
p50 and p99, the upper bounds of the histogram's buckets they fall in, read before and after).
Phase 2, for each load: three real members, a librdkafka producer at full speed through each, one user at a
3 MiB/s cluster-scope quota, with the generator publishing as 97 members for ``--accuracy-principals``
principals: the user's rate over whole throttle cycles (``Acknowledged.rate_over_whole_cycles``) against its quota
(the aim: within 10%).
"""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import psutil
from confluent_kafka import Producer

from bench.report import write_results
from proxy.dev.apache_kafka import KafkaCluster
from quotas.config import QuotaKey, QuotaType
from quotas.fleet import HOLD_MS, MAX_ENTRIES_PER_RECORD, Publication, SharedUsage
from tests.integration.test_fleet import Acknowledged, FlatOutProducer
from tests.integration.test_produce_quotas import create_topic
from tests.support import ProxyProcess

MEMBERS = 100
PUBLISH_INTERVAL_MS = 200
USER_QUOTA = 10 * 1024 * 1024
"""Every principal's (``<default>`` user) byte rates: the synthetic usage stays far below them."""
MIB = 1 << 20


def quota_file(directory: Path, extra: str = "") -> Path:
    path = directory / f"quotas-{uuid.uuid4().hex[:6]}.toml"
    path.write_text('[settings]\n"quota.scope" = "cluster"\n'
                    f'[[quota]]\nuser = "<default>"\nproducer_byte_rate = {USER_QUOTA}\n'
                    f'consumer_byte_rate = {USER_QUOTA}\n' + extra)
    return path


def start_member(bootstrap: str, node_ids: Any, directory: Path, usage_topic: str, quotas: Path,
                 index: int) -> ProxyProcess:
    config = directory / f"member-{index}.toml"
    config.write_text(f'[fleet]\ntopic = "{usage_topic}"\ninstance-id = "member-{index}"\n'
                      f'publish-interval-ms = {PUBLISH_INTERVAL_MS}\nquotas-topic = "quotas-{uuid.uuid4().hex[:8]}"\n')
    proxy = ProxyProcess(bootstrap, directory / f"member-{index}-{uuid.uuid4().hex[:4]}.log", "--config",
                         str(config), "--quota-file", str(quotas), node_ids=node_ids)
    proxy.start()
    proxy.wait_for_log("ready: ", timeout_s=30)
    return proxy


# ---- the 99 others ---------------------------------------------------------------------------

def served_by(principals: int, spread: int) -> dict[int, list[int]]:
    """Member -> the principals whose clients it serves: principal p's clients are spread over members
    p, p + 100/spread, ... (mod 100)."""
    step = MEMBERS / spread
    members: dict[int, list[int]] = {member: [] for member in range(MEMBERS)}
    for principal in range(principals):
        for k in range(spread):
            members[int(principal + k * step) % MEMBERS].append(principal)
    return members


class Load(NamedTuple):
    produce_rate: float
    fetch_rate: float
    """Bytes/s of one principal's clients at one member."""
    intervals_per_publication: int
    """How often each member publishes the principal's usage, as ``UsageShare.take`` decides: every interval once
    the principal's rate is near its limit, else once it would be ``HOLD_MS`` old."""


LOADS = {
    # each principal at 6% of its limit fleet-wide (2% at each of 3 members: over a member's share of a
    # hundred, far from the limit): held
    "calm": Load(0.02 * USER_QUOTA, 0.02 * USER_QUOTA, HOLD_MS // PUBLISH_INTERVAL_MS - 1),
    # each principal at 60% of its limit fleet-wide: every member publishes it every interval
    "near": Load(0.2 * USER_QUOTA, 0.2 * USER_QUOTA, 1),
}


def member_usage(principals: list[int], load: str) -> list[list[SharedUsage]]:
    """What a member serving ``principals`` at ``load`` publishes at once, as the chunks of its publication."""
    seconds = LOADS[load].intervals_per_publication * PUBLISH_INTERVAL_MS / 1000
    produce_rate, fetch_rate, _ = LOADS[load]
    usage = []
    for principal in principals:
        key = QuotaKey(f"user-{principal:06d}", "")
        usage += [SharedUsage(QuotaType.PRODUCER_BYTE_RATE, key, round(produce_rate * seconds), USER_QUOTA),
                  SharedUsage(QuotaType.CONSUMER_BYTE_RATE, key, round(fetch_rate * seconds), USER_QUOTA)]
    return [usage[start:start + MAX_ENTRIES_PER_RECORD] for start in range(0, len(usage), MAX_ENTRIES_PER_RECORD)]


def generate(bootstrap: str, topic: str, members: list[int], principals: int, spread: int, load: str, stop: Any,
             counters: Any) -> None:
    """Publish each of ``members``' records when it is due until ``stop`` is set; ``counters``: records and bytes
    sent, and intervals that ended late (the generator could not keep up)."""
    every = LOADS[load].intervals_per_publication
    templates: list[list[tuple[bytes, bytes]]] = [[] for _ in range(every)]
    serving = served_by(principals, spread)
    for member in members:
        for chunk in member_usage(serving[member], load):
            # encoded once with a marker time: each interval puts its own time in (Publication.encode's JSON)
            encoded = Publication(f"simulated-{member}", 1, tuple(chunk)).encode()
            head, tail = encoded.split(b'"oldest_ms":1,', 1)
            templates[member % every].append((head + b'"oldest_ms":', b"," + tail))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1, "compression.type": "none",
                         "queue.buffering.max.kbytes": 1_048_576, "message.max.bytes": 10_000_000})
    next_at = time.monotonic()
    tick = 0
    while not stop.is_set():
        oldest = str(int(time.time() * 1000) - every * PUBLISH_INTERVAL_MS).encode()
        due = templates[tick % every]
        sent = 0
        for head, tail in due:
            value = head + oldest + tail
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:
                    producer.poll(0.01)
            sent += len(value)
        producer.poll(0)
        with counters.get_lock():
            counters[0] += len(due)
            counters[1] += sent
        tick += 1
        next_at += PUBLISH_INTERVAL_MS / 1000
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        else:
            with counters.get_lock():
                counters[2] += 1
            next_at = time.monotonic()
    producer.flush(30)


class Generator:
    def __init__(self, bootstrap: str, topic: str, members: list[int], principals: int, spread: int,
                 load: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.stop_event = context.Event()
        self.counters = context.Array("d", 3)
        self.process = context.Process(target=generate, args=(bootstrap, topic, members, principals, spread,
                                                              load, self.stop_event, self.counters), daemon=True)
        self.process.start()

    def sent(self) -> tuple[float, float, float]:
        with self.counters.get_lock():
            return self.counters[0], self.counters[1], self.counters[2]

    def stop(self) -> None:
        self.stop_event.set()
        self.process.join(60)


# ---- measuring the real member ---------------------------------------------------------------------

def samples(proxy: ProxyProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port}/metrics", timeout=30) as page:
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in page.read().decode().splitlines() if line and not line.startswith("#")}


AGE = "kafka_quota_proxy_fleet_usage_age_seconds"


def age_percentiles(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """p50 and p99 of the ages observed between two scrapes: the upper bound of the bucket each falls in."""
    buckets = sorted((float(name.split('le="')[1].rstrip('"}')), after[name] - before.get(name, 0.0))
                     for name in after if name.startswith(f"{AGE}_bucket"))
    total = buckets[-1][1] if buckets else 0.0
    result: dict[str, Any] = {"observed": total}
    for name, quantile in (("p50_s_at_most", 0.5), ("p99_s_at_most", 0.99)):
        result[name] = next((bound for bound, count in buckets if count >= quantile * total), None) if total else None
    return result


def paced_producer(bootstrap: str, topic: str, stop: threading.Event) -> threading.Thread:
    """1 MB/s of 1 KB records through the member: the clients it serves meanwhile."""
    def run() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": 1})
        value = b"c" * 1000
        while not stop.is_set():
            for _ in range(100):
                producer.produce(topic, value)
            producer.poll(0)
            time.sleep(0.1)
        producer.flush(30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def measure_member(proxy: ProxyProcess, seconds: float, generator: Generator | None) -> dict[str, Any]:
    assert proxy.process is not None
    process = psutil.Process(proxy.process.pid)
    before, cpu_before = samples(proxy), process.cpu_times()
    sent_before = generator.sent() if generator else (0.0, 0.0, 0.0)
    started = time.monotonic()
    rss_max = 0
    while time.monotonic() - started < seconds:
        time.sleep(1)
        rss_max = max(rss_max, process.memory_info().rss)
    elapsed = time.monotonic() - started
    after, cpu_after = samples(proxy), process.cpu_times()
    sent_after = generator.sent() if generator else (0.0, 0.0, 0.0)
    applied = 'kafka_quota_proxy_fleet_records_received_total{outcome="applied"}'
    return {
        "seconds": round(elapsed, 1),
        "cpu_s_per_s": round((cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system) / elapsed, 3),
        "rss_max_mb": round(rss_max / 1e6, 1),
        "records_applied_per_s": round((after.get(applied, 0) - before.get(applied, 0)) / elapsed, 1),
        "generated_records_per_s": round((sent_after[0] - sent_before[0]) / elapsed, 1),
        "usage_topic_mb_per_s": round((sent_after[1] - sent_before[1]) / elapsed / 1e6, 2),
        "generator_late_intervals": sent_after[2] - sent_before[2],
        "usage_age": age_percentiles(before, after),
    }


def one_member(cluster: KafkaCluster, directory: Path, principals: int, load: str,
               args: argparse.Namespace) -> dict[str, Any]:
    usage_topic = f"usage-{uuid.uuid4().hex[:8]}"
    member = start_member(cluster.bootstrap, cluster.broker_ids, directory, usage_topic, quota_file(directory), 0)
    topic = f"served-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic)
    stop = threading.Event()
    client = paced_producer(member.bootstrap, topic, stop)
    try:
        member.wait_for_log("fleet: can read the usage topic", timeout_s=30)
        time.sleep(3)
        alone = measure_member(member, args.seconds, None)
        generator = Generator(cluster.bootstrap, usage_topic, list(range(1, MEMBERS)), principals, args.spread,
                              load)
        try:
            time.sleep(5)  # the generator's first intervals (and the member's first reads) are not the steady state
            with_others = measure_member(member, args.seconds, generator)
        finally:
            generator.stop()
    finally:
        stop.set()
        client.join(30)
        member.stop()
    return {"principals": principals, "load": load, "published_every_ms": LOADS[load].intervals_per_publication
            * PUBLISH_INTERVAL_MS, "usage_entries_per_member": 2 * len(served_by(principals, args.spread)[1]),
            "alone": alone, "with_99_others": with_others,
            "fleet_cpu_s_per_s": round(with_others["cpu_s_per_s"] - alone["cpu_s_per_s"], 3)}


def accuracy(cluster: KafkaCluster, directory: Path, load: str, args: argparse.Namespace) -> dict[str, Any]:
    usage_topic = f"usage-{uuid.uuid4().hex[:8]}"
    quota = 3 * MIB
    quotas = quota_file(directory, f'[[quota]]\nuser = "ANONYMOUS"\nproducer_byte_rate = {quota}\n')
    members = [start_member(cluster.bootstrap, cluster.broker_ids, directory, usage_topic, quotas, index)
               for index in range(3)]
    topic = f"held-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic)
    generator = Generator(cluster.bootstrap, usage_topic, list(range(3, MEMBERS)), args.accuracy_principals,
                          args.spread, load)
    producers = [FlatOutProducer(member.bootstrap, topic) for member in members]
    try:
        started = time.monotonic()
        time.sleep(10 + args.accuracy_seconds + 1)  # past Kafka's first burst; a second for the last burst's bytes
        rate = Acknowledged(producers).rate_over_whole_cycles(started + 10, started + 10 + args.accuracy_seconds,
                                                              quota)
        ages = age_percentiles({}, samples(members[0]))
    finally:
        for producer in producers:
            producer.stop()
        generator.stop()
        for member in members:
            member.stop()
    return {"principals_in_background": args.accuracy_principals, "load": load, "quota_mib_s": quota / MIB,
            "rate_mib_s": round(rate / MIB, 3), "ratio": round(rate / quota, 3), "member_0_usage_age": ages}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/fleet-scale-results.json")
    parser.add_argument("--principals", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--spread", type=int, default=3, help="members serving each principal's clients")
    parser.add_argument("--loads", nargs="+", choices=sorted(LOADS), default=["calm", "near"],
                        help="every principal far from its limit (calm), or near it (near)")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--accuracy-principals", type=int, default=10_000)
    parser.add_argument("--accuracy-seconds", type=float, default=60.0)
    args = parser.parse_args()
    results: dict[str, Any] = {"machine": {"cpus": psutil.cpu_count(), "python": platform.python_version()},
                               "settings": {**vars(args), "members": MEMBERS,
                                            "publish_interval_ms": PUBLISH_INTERVAL_MS}}
    directory = Path(tempfile.mkdtemp(prefix="kqp-fleet-scale-"))
    with KafkaCluster(log_directory=directory / "kafka") as cluster:
        results["one_member"] = [one_member(cluster, directory, principals, load, args)
                                 for principals in args.principals for load in args.loads]
        results["three_members_accuracy"] = [accuracy(cluster, directory, load, args) for load in args.loads]
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
