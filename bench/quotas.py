"""Cost of the quota engines on the hot path (``python -m bench.quotas``).

Targets (issue: quota engines): one produce-quota record <= 5 us; one producer-ID check and
record <= 5 us. Each figure is the fastest of several timed loops on this machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from bench.report import write_results
from quotas.byte_rates import ClientQuotaManager
from quotas.config import DEFAULT, PidQuotaMode, QuotaConfig, QuotaEntity, QuotaSettings, QuotaType
from quotas.producer_id_quota import ProducerBatch, ProducerIdQuotaManager

T0 = 1_700_000_000_000


def per_call_us(loop: Callable[[int], None], calls: int, repeats: int = 5) -> float:
    """The fastest of several timed loops: the least disturbed by the rest of the machine."""
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        loop(calls)
        timings.append((time.perf_counter() - started) / calls * 1e6)
    return min(timings)


USERS = [f"user-{i}" for i in range(64)]
CLIENTS = [f"client-{i}" for i in range(64)]


def produce_record_us(calls: int) -> float:
    config = QuotaConfig(entries={QuotaEntity(None, DEFAULT): {QuotaType.PRODUCER_BYTE_RATE: 10**9}})
    manager = ClientQuotaManager(config)

    def loop(n: int) -> None:
        record, clients = manager.record, CLIENTS
        for i in range(n):  # 64 clients, a request every 100 us of quota time
            record("ANONYMOUS", clients[i & 63], 1024, T0 + i // 10)

    return per_call_us(loop, calls)


def pid_check_us(calls: int, new_pids: bool) -> float:
    """64 users with a producer_ids_rate quota whose filters hold 100k PIDs at 1% (~117 KB): the rate
    over one hour's window, as the manager sizes them."""
    settings = QuotaSettings(producer_id_mode=PidQuotaMode.THROTTLE)
    config = QuotaConfig(settings, {QuotaEntity(DEFAULT, None): {QuotaType.PRODUCER_IDS_RATE: 100_000 / 3600}})
    manager = ProducerIdQuotaManager(config)
    offset = [0]

    def loop(n: int) -> None:
        base = offset[0]
        requests = [(USERS[i & 63], [ProducerBatch((base + i) if new_pids else (i & 1023), 0, 0)]) for i in range(n)]
        check = manager.check
        started = time.perf_counter()
        for i, (user, pids) in enumerate(requests):
            check(user, pids, T0 + i // 10)
        elapsed.append(time.perf_counter() - started)
        offset[0] += n

    elapsed: list[float] = []
    per_call_us(loop, calls)
    return min(elapsed) / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--out", default="bench/quotas-results.json")
    args = parser.parse_args()
    results = {
        "produce_record_us": produce_record_us(args.calls),
        "pid_check_known_us": pid_check_us(args.calls, new_pids=False),
        "pid_check_and_record_new_us": pid_check_us(args.calls, new_pids=True),
    }
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
