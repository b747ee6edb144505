"""Producer-ID figures (``python -m bench.allocator``): local vs forwarded InitProducerId, the PID ledger.

- InitProducerId latency (one request in flight, idempotent, raw socket): answered by the proxy
  from its blocks (``pid_source = "allocator"``), forwarded through the proxy, and direct to the
  broker, interleaved round by round, medians of the rounds' p50/p99.
- Ledger updates/s and lookups/s (hits through the snapshots' filters, and misses).
- Resident memory of a process that has recorded ``--pids`` PIDs (default 10 million).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from allocator.ledger import PidLedger, PidRecord
from bench.report import write_results
from protocol.apis import Api
from proxy.dev.apache_kafka import KafkaCluster
from proxy.state.pid_ledger import LedgerFilters
from tests.support import ProxyProcess, encode_request, read_frame


def init_latencies_us(port: int, requests: int) -> list[float]:
    import socket

    frame = encode_request(Api.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=60_000,
                           producer_id=-1, producer_epoch=-1)
    timings = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(requests):
            started = time.perf_counter()
            sock.sendall(frame)
            answer = read_frame(sock)
            timings.append((time.perf_counter() - started) * 1e6)
            assert answer
    return timings


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def init_producer_id_figures(rounds: int, requests: int, workdir: Path) -> dict[str, object]:
    with KafkaCluster(log_directory=workdir) as broker:
        config = workdir / "allocator.toml"
        config.write_text('[allocator]\npid_source = "allocator"\nbroker_id = 1\n')
        local = ProxyProcess(broker.bootstrap, workdir / "local.log", "--config", str(config),
                             node_ids=broker.broker_ids).start()
        forwarded = ProxyProcess(broker.bootstrap, workdir / "forwarded.log", node_ids=broker.broker_ids).start()
        targets = {"direct": int(broker.bootstrap.rsplit(":", 1)[1]), "forwarded": forwarded.port,
                   "local": local.port}
        try:
            per_round: dict[str, list[tuple[float, float]]] = {name: [] for name in targets}
            for _ in range(rounds):
                for name, port in targets.items():
                    timings = init_latencies_us(port, requests)
                    per_round[name].append((percentile(timings, 0.5), percentile(timings, 0.99)))
        finally:
            local.stop()
            forwarded.stop()
    return {name: {"p50_us": round(statistics.median(p50 for p50, _ in values), 1),
                   "p99_us": round(statistics.median(p99 for _, p99 in values), 1)}
            for name, values in per_round.items()}


def record(pid: int) -> PidRecord:
    return PidRecord(pid, f"user-{pid % 100}", f"client-{pid % 1000}", 0, 1_790_000_000_000, 1_790_000_000_000)


def ledger_figures(workdir: Path, pids: int) -> dict[str, float]:
    ledger = PidLedger(workdir / "speed", LedgerFilters(100_000), 100_000, 10_000)
    started = time.perf_counter()
    for pid in range(pids):
        ledger.update(record(pid))
    updates = pids / (time.perf_counter() - started)
    ledger.flush()
    ledger.close()
    reopened = PidLedger(workdir / "speed", LedgerFilters(100_000), 100_000, 10_000)
    sample = random.Random(1).sample(range(pids), 20_000)
    started = time.perf_counter()
    for pid in sample:  # cold: every lookup goes to the snapshot files through their filters
        assert reopened.read(pid) is not None
    hits = len(sample) / (time.perf_counter() - started)
    started = time.perf_counter()
    for pid in sample:
        assert reopened.read(pid + pids) is None
    misses = len(sample) / (time.perf_counter() - started)
    snapshots = len(reopened.snapshots)
    reopened.close()
    return {"updates_per_s": round(updates), "lookups_per_s_uncached_hits": round(hits),
            "lookups_per_s_misses": round(misses), "snapshots": snapshots}


_RSS_PROBE = """
import sys, psutil
from pathlib import Path
from allocator.ledger import PidLedger
from bench.allocator import record
from proxy.state.pid_ledger import LedgerFilters
ledger = PidLedger(Path(sys.argv[1]), LedgerFilters(100_000), 100_000, 100_000)
for pid in range(int(sys.argv[2])):
    ledger.update(record(pid))
print(psutil.Process().memory_info().rss, len(ledger.snapshots))
"""


def memory_figures(workdir: Path, pids: int) -> dict[str, float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _RSS_PROBE, str(workdir / "memory"), str(pids)],
                          capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    rss, snapshots = map(int, done.stdout.split())
    on_disk = sum(path.stat().st_size for path in (workdir / "memory").iterdir())
    return {"pids": pids, "rss_mb": round(rss / 1e6, 1), "snapshots": snapshots,
            "disk_mb": round(on_disk / 1e6, 1), "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/allocator-results.json")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--pids", type=int, default=10_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        workdir = Path(directory)
        results = {
            "init_producer_id": init_producer_id_figures(args.rounds, args.requests, workdir),
            "ledger": ledger_figures(workdir, 1_000_000),
            "memory": memory_figures(workdir, args.pids),
            "machine": {"cpus": os.cpu_count(), "baseline_rss_mb": round(psutil.Process().memory_info().rss / 1e6)},
        }
    write_results(args.out, results)


if __name__ == "__main__":
    main()
