"""Observe mode beside enforce mode (``python -m bench.observe``): each workload four times on one Kafka 4.3.1
node: straight to the broker (no quota anywhere), through a proxy without the quota (what the proxy itself costs),
through a proxy enforcing the quota, and through a proxy observing it. Observe mode must finish in the time the
proxy takes without the quota while the throttle it says enforcement would have given (``observed_throttle_ms`` of
the usage log) is within 10% of the throttle enforce mode gave (its ``throttle_ms``). Writes
``bench/observe-results.json``; docs/quotas.md "Rolling a quota out safely" quotes it.
"""

from __future__ import annotations

import json
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from bench.report import case_arguments, new_results, write_results
from proxy.dev.apache_kafka import KafkaCluster
from quotas.usage_record import USAGE_FIELDS
from tests import fidelity
from tests.fidelity import Quota, Run, Workload
from tests.support import (
    Cluster,
    ProxyProcess,
    new_producer_id,
    produce_request,
    read_frame,
    record_batch,
    serving_leader,
)

MIB = 1 << 20
RECORDS = 24 * 1024
"""1 KiB records: 24 MiB at 1 MiB/s, well past the ten seconds of credit."""
PID_SETTINGS = '"producer.id.quota.window.num" = 2\n"producer.id.quota.window.size.seconds" = 5\n'
"""A producer-ID window of 2 x 5 s: a burst of 10 s of the rate, then the throttle."""


class Case(NamedTuple):
    name: str
    quota: Quota
    workload: Callable[[str], Workload]
    prepare: Callable[[Cluster, str], None]
    settings: str = ""


def new_producer_ids(topic: str, producers: int) -> Workload:
    """One connection to the leader: for each of ``producers`` idempotent producers, InitProducerId and then one
    Produce (acks=1) of its first batch, sent as soon as the last was answered (the proxy holds it for a throttle)."""
    def run(bootstrap: str) -> Run:
        host, port = bootstrap.rsplit(":", 1)
        leader = serving_leader(host, int(port), topic)[1:]
        result = Run()
        with socket.create_connection(leader, timeout=60) as sock:
            for number in range(producers):
                answer = new_producer_id(sock)
                batch = record_batch([b"p" * 100], answer.producer_id, answer.producer_epoch, 0)
                sock.sendall(produce_request(topic, batch, 2 + number, acks=1, client_id="bench-pids"))
                assert read_frame(sock), "connection closed"
                result.delivered(1)
        return result

    return run


def cases() -> list[Case]:
    client = "bench-observe"
    return [
        Case("produce librdkafka", Quota((("client-id", client),), "producer_byte_rate", MIB),
             lambda topic: fidelity.librdkafka_produce(topic, RECORDS, client), fidelity.new_topic()),
        Case("consume librdkafka", Quota((("client-id", client),), "consumer_byte_rate", MIB),
             lambda topic: fidelity.librdkafka_consume(topic, RECORDS, client), fidelity.filled_topic(RECORDS)),
        Case("CreateTopics v6 bursts (strict, retried as Kafka's AdminClient does)",
             Quota((("client-id", client),), "controller_mutation_rate", 20),
             lambda topic: fidelity.raw_create_topics(topic, 60, 10, 6, client), lambda cluster, topic: None),
        Case("new producer IDs (throttle mode)", Quota((("user", "ANONYMOUS"),), "producer_ids_rate", 5),
             lambda topic: new_producer_ids(topic, 200), fidelity.new_topic(), PID_SETTINGS),
    ]


def usage_totals(state_dir: Path) -> dict[str, int]:
    totals: dict[str, int] = {}
    for path in (state_dir / "usage").glob("usage-*.jsonl"):
        for line in path.read_text().splitlines():
            for key, value in json.loads(line).items():
                if key in USAGE_FIELDS:  # not the line's time or entity (its user's tenant among them)
                    totals[key] = totals.get(key, 0) + value
    return totals


def through_proxy(cluster: Cluster, case: Case, topic: str, mode: str | None, directory: Path
                  ) -> tuple[Run, dict[str, int]]:
    """``mode`` None: the proxy holds no quota."""
    quota_file = directory / f"observe-{mode}.toml"
    quota = "" if mode is None else f'[settings]\n"quota.mode" = "{mode}"\n{case.settings}\n{case.quota.toml()}'
    quota_file.write_text(quota)
    proxy = ProxyProcess(cluster.bootstrap, directory / f"proxy-{mode}-{int(time.time() * 1000)}.log",
                         "--quota-file", str(quota_file), node_ids=cluster.node_ids).start()
    try:
        run = case.workload(topic)(proxy.bootstrap)
    finally:
        proxy.stop()  # writes the usage log's last second
    return run, usage_totals(proxy.state_dir)


def measure(cluster: Cluster, case: Case, directory: Path) -> dict[str, Any]:
    stamp = int(time.time() * 1000) % 10**8
    topics = {side: f"observe-{side}-{stamp}" for side in ("direct", "unquoted", "enforce", "observe")}
    for topic in topics.values():
        case.prepare(cluster, topic)
    direct = case.workload(topics["direct"])(cluster.bootstrap)
    unquoted, _ = through_proxy(cluster, case, topics["unquoted"], None, directory)
    enforced, enforced_usage = through_proxy(cluster, case, topics["enforce"], "enforce", directory)
    observed, observed_usage = through_proxy(cluster, case, topics["observe"], "observe", directory)
    given, would_give = enforced_usage.get("throttle_ms", 0), observed_usage.get("observed_throttle_ms", 0)
    return {"direct_s": round(direct.elapsed_s, 2), "proxy_without_quota_s": round(unquoted.elapsed_s, 2),
            "enforce_s": round(enforced.elapsed_s, 2), "observe_s": round(observed.elapsed_s, 2),
            "observe_over_direct": round(observed.elapsed_s / direct.elapsed_s, 3),
            "observe_over_proxy_without_quota": round(observed.elapsed_s / unquoted.elapsed_s, 3),
            "enforce_throttle_ms": given, "observed_throttle_ms": would_give,
            "observed_over_enforced": round(would_give / given, 3) if given else None,
            "observed_throttled_requests": observed_usage.get("observed_throttled", 0),
            "observe_given_throttle_ms": observed_usage.get("throttle_ms", 0)}


def main() -> int:
    args = case_arguments(__doc__, "bench/observe-results.json")
    results = new_results()
    with tempfile.TemporaryDirectory(prefix="kqp-observe-") as scratch, \
            KafkaCluster(log_directory=Path(scratch) / "kafka") as kafka:
        cluster = Cluster(kafka.bootstrap).wait_until_ready()
        for case in cases():
            if args.only and case.name not in args.only:
                continue
            outcome = results["cases"][case.name] = measure(cluster, case, Path(scratch))
            print(f"{case.name}: {outcome}", flush=True)
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
