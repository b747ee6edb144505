"""``--workers``: producer throughput at saturation through one and two worker processes, and the proxy's CPU
per MB in both, against the broker measured directly in the same run (``make bench``).

Saturation: several librdkafka producers at once, each on its own topic and connection, idempotent, acks=all,
1 KB records in large batches. Both proxies are fleet members (``[fleet]``, as ``--workers 2`` requires) with
quotas in cluster scope that never bind, so the whole enforcement path and the fleet's publications run.
Writes bench/workers-results.json.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Producer

from bench.report import write_results
from bench.run import QUOTAS, create_topic, delete_topic, interleaved_medians, produce_all
from proxy.dev.apache_kafka import KafkaCluster
from tests.support import ProxyProcess


def saturated_mb_s(bootstrap: str, producers: int, records: int) -> float:
    """MB/s of ``producers`` producers each sending ``records`` 1 KB records at once."""
    topics = [create_topic(bootstrap) for _ in range(producers)]
    clients = [Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 20, "batch.size": 1_000_000, "batch.num.messages": 100_000,
                         "queue.buffering.max.kbytes": 262_144}) for _ in topics]
    threads = [threading.Thread(target=produce_all, args=(client, topic, records, 1024))
               for client, topic in zip(clients, topics, strict=True)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for topic in topics:
        delete_topic(bootstrap, topic)
    return producers * records * 1024 / elapsed / 1e6


def proxy_cpu_s(proxy: ProxyProcess) -> float:
    """CPU seconds of the proxy: its process and, with workers, theirs."""
    assert proxy.process is not None
    process = psutil.Process(proxy.process.pid)
    total = 0.0
    for member in (process, *process.children(recursive=True)):
        times = member.cpu_times()
        total += times.user + times.system
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/workers-results.json")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--records", type=int, default=50_000, help="per producer per run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kqp-workers-"))
    quotas = workdir / "quotas.toml"
    quotas.write_text('[settings]\n"quota.scope" = "cluster"\n' + QUOTAS)
    results: dict[str, Any] = {"machine": {"cpus": psutil.cpu_count(), "python": platform.python_version()},
                               "settings": vars(args)}
    with KafkaCluster(log_directory=workdir) as broker:
        proxies: dict[str, ProxyProcess] = {}
        for workers in (1, 2):
            config = workdir / f"fleet-{workers}.toml"
            config.write_text(f'[fleet]\ntopic = "bench-usage-{uuid.uuid4().hex[:8]}"\n')
            proxy = ProxyProcess(broker.bootstrap, workdir / f"proxy-{workers}.log", "--log-level", "WARNING",
                                 "--workers", str(workers), "--config", str(config), "--quota-file", str(quotas),
                                 node_ids=broker.broker_ids)
            proxy.start()
            proxy.wait_for_log("ready: ", timeout_s=30, occurrence=workers)
            proxies[f"workers_{workers}"] = proxy
        targets = {"direct": broker.bootstrap, **{name: proxy.bootstrap for name, proxy in proxies.items()}}
        cpu = {name: 0.0 for name in proxies}
        moved_mb = {name: 0.0 for name in proxies}

        def measure(bootstrap: str) -> float:
            name = next((n for n, proxy in proxies.items() if proxy.bootstrap == bootstrap), None)
            if name is None:
                return saturated_mb_s(bootstrap, args.producers, args.records)
            before = proxy_cpu_s(proxies[name])
            mb_s = saturated_mb_s(bootstrap, args.producers, args.records)
            cpu[name] += proxy_cpu_s(proxies[name]) - before
            moved_mb[name] += args.producers * args.records * 1024 / 1e6
            return mb_s

        try:
            results["throughput_mb_s"] = interleaved_medians(targets, args.rounds, measure)
        finally:
            for proxy in proxies.values():
                proxy.stop()
    medians = {name: figures["median"] for name, figures in results["throughput_mb_s"].items()}
    results["proxy_cpu_ms_per_mb"] = {name: 1000 * cpu[name] / moved_mb[name] for name in proxies}
    results["ratios"] = {
        "workers_1_vs_direct": medians["workers_1"] / medians["direct"],
        "workers_2_vs_direct": medians["workers_2"] / medians["direct"],
        "workers_2_vs_workers_1": medians["workers_2"] / medians["workers_1"],
    }
    print(results["ratios"], file=sys.stderr)
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
