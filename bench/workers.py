"""``--workers``: producer throughput at saturation through one and two worker processes, and the proxy's CPU
per MB in both, against the broker measured directly in the same run (``make bench``); then, at one paced load
well below saturation, each worker's CPU per MB against the single worker's (two workers that contended for
anything would each pay more per MB), and the sizing that follows from it.

Saturation: several librdkafka producers at once, each on its own topic and connection, idempotent, acks=all,
1 KB records in large batches. Both proxies are fleet members (``[fleet]``, as ``--workers 2`` requires) with
quotas in cluster scope that never bind, so the whole enforcement path and the fleet's publications run.
Paced load: the same producers, each sending its share of ``--paced-mb-s`` for ``--paced-seconds``; each worker's
CPU seconds (``process_cpu_seconds_total``) and bytes from clients (``kafka_quota_proxy_client_received_bytes_total``)
are read from its own metrics endpoint before and after. Writes bench/workers-results.json.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Producer

from bench.report import write_results
from bench.rounds import rotated
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


def paced_load(bootstrap: str, producers: int, mb_s: float, seconds: float) -> None:
    """``producers`` producers together sending ``mb_s`` MB/s of 1 KB records for ``seconds``, all delivered."""
    topics = [create_topic(bootstrap) for _ in range(producers)]
    clients = [Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 20, "batch.size": 1_000_000}) for _ in topics]
    records_per_s = mb_s * 1e6 / 1024 / producers
    payload = b"x" * 1024

    def send(client: Producer, topic: str) -> None:
        sent = 0
        started = time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            for _ in range(int(elapsed * records_per_s) - sent):
                client.produce(topic, payload, partition=0)
                sent += 1
            client.poll(0.01)
        if client.flush(60) != 0:
            raise RuntimeError("producer did not deliver everything")

    threads = [threading.Thread(target=send, args=pair) for pair in zip(clients, topics, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for topic in topics:
        delete_topic(bootstrap, topic)


def worker_counters(proxy: ProxyProcess, workers: int) -> list[tuple[float, float]]:
    """Each worker's CPU seconds and MB from clients so far, from its own metrics endpoint (port + worker)."""
    counters = []
    for worker in range(workers):
        with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port + worker}/metrics", timeout=10) as page:
            samples = dict(line.rsplit(" ", 1) for line in page.read().decode().splitlines()
                           if line and not line.startswith("#"))
        label = "" if workers == 1 else f'{{worker="{worker}"}}'
        counters.append((float(samples[f"process_cpu_seconds_total{label}"]),
                         float(samples[f"kafka_quota_proxy_client_received_bytes_total{label}"]) / 1e6))
    return counters


def proxy_cpu_s(proxy: ProxyProcess) -> float:
    """CPU seconds of the proxy: its process and, with workers, theirs."""
    assert proxy.process is not None
    process = psutil.Process(proxy.process.pid)
    total = 0.0
    for member in (process, *process.children(recursive=True)):
        times = member.cpu_times()
        total += times.user + times.system
    return total


def paced_cpu_per_mb(proxies: dict[str, ProxyProcess], args: argparse.Namespace) -> dict[str, Any]:
    """Each worker's CPU ms per MB from clients at the paced load, rounds interleaved over the proxies; and the
    single worker at the load each of two workers carries (half), which tells contention from load: a worker's
    fixed costs (its loop's wake-ups, timers, fleet membership) spread over fewer MB at a smaller load."""
    runs = {"workers_1": (proxies["workers_1"], 1, args.paced_mb_s),
            "workers_2": (proxies["workers_2"], 2, args.paced_mb_s),
            "workers_1_half_load": (proxies["workers_1"], 1, args.paced_mb_s / 2)}
    cpu_s = {name: [0.0] * workers for name, (_, workers, _) in runs.items()}
    moved_mb = {name: [0.0] * workers for name, (_, workers, _) in runs.items()}
    names = list(runs)
    for round_index in range(args.rounds):
        for name in rotated(names, round_index):
            proxy, workers, mb_s = runs[name]
            before = worker_counters(proxy, workers)
            paced_load(proxy.bootstrap, args.producers, mb_s, args.paced_seconds)
            after = worker_counters(proxy, workers)
            for worker, ((cpu_before, mb_before), (cpu_after, mb_after)) in enumerate(zip(before, after, strict=True)):
                cpu_s[name][worker] += cpu_after - cpu_before
                moved_mb[name][worker] += mb_after - mb_before
    per_mb = {name: [1000 * cpu / mb for cpu, mb in zip(cpu_s[name], moved_mb[name], strict=True)] for name in runs}
    return {"load_mb_s": {name: mb_s for name, (_, _, mb_s) in runs.items()}, "moved_mb": moved_mb,
            "worker_cpu_ms_per_mb": per_mb}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/workers-results.json")
    parser.add_argument("--producers", type=int, default=8, help="an even spread over two workers' listeners")
    parser.add_argument("--records", type=int, default=25_000, help="per producer per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paced-mb-s", type=float, default=60.0, help="the paced load, all producers together")
    parser.add_argument("--paced-seconds", type=float, default=12.0)
    parser.add_argument("--core-share", type=float, default=0.7, help="the CPU share of a core the sizing plans for")
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
            results["paced"] = paced_cpu_per_mb(proxies, args)
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
    per_worker = results["paced"]["worker_cpu_ms_per_mb"]
    results["ratios"]["paced_worker_cpu_per_mb_vs_single"] = [
        figure / per_worker["workers_1"][0] for figure in per_worker["workers_2"]]
    results["ratios"]["paced_worker_cpu_per_mb_vs_single_at_half_load"] = [
        figure / per_worker["workers_1_half_load"][0] for figure in per_worker["workers_2"]]
    # one core kept --core-share busy forwards this much: at saturation, and at the paced loads
    results["sizing_mb_s_per_core"] = {
        "saturation": 1000 * args.core_share / results["proxy_cpu_ms_per_mb"]["workers_1"],
        **{f"paced_{name}": 1000 * args.core_share / (sum(figures) / len(figures))
           for name, figures in per_worker.items()}}
    print(results["ratios"], file=sys.stderr)
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
