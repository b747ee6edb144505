"""Waits the suite once held to aims in seconds, as figures (``python -m bench.latency_aims``): a wait in seconds on a
shared machine's cores measures the machine as much as the proxy, so ``make test`` checks what the proxy decided and
this reports how long it took, each against the aim it had. Writes ``bench/latency-aims-results.json``.

- ``burst``: 150 clients opening at once, each asking Metadata: the slowest answer (aim: 1 s, TCP's retransmission of
  a connection a full listen queue dropped; ``tests/integration/test_connection_quotas.py`` checks that none is).
- ``quota_reach``: a quota set with Kafka's ``kafka-configs`` through one member of a fleet of three: from the tool's
  answer until every member describes it (aim: 1 s; ``tests/integration/test_fleet.py`` checks that it reaches all).
- ``scrape``: ``/metrics`` of a proxy that has seen 20,000 client ids (aim: 2 s; the suite checks the page's bound).
Each is measured ``--rounds`` times, with a new proxy (or fleet) each round.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.report import new_results, write_results
from proxy.dev.apache_kafka import KafkaCluster
from tests.integration.test_connection_quotas import burst_of_clients
from tests.integration.test_fleet import described_producer_rate, start_fleet
from tests.integration.test_kafka_tools import configs
from tests.integration.test_metrics_endpoint import default_client_quota, produce_as_many_client_ids, scrape
from tests.support import Cluster, ProxyProcess

AIMS_S = {"burst": 1.0, "quota_reach": 1.0, "scrape": 2.0}


@contextmanager
def proxies(cluster: Cluster, directory: Path) -> Iterator[Callable[..., ProxyProcess]]:
    """A factory of proxies in front of ``cluster`` (the integration tests' ``own_proxy``), all stopped at the end."""
    started: list[ProxyProcess] = []

    def start(*args: str) -> ProxyProcess:
        proxy = ProxyProcess(cluster.bootstrap, directory / f"proxy-{uuid.uuid4().hex[:8]}.log", *args,
                             node_ids=cluster.node_ids)
        started.append(proxy)
        return proxy.start()

    try:
        yield start
    finally:
        for proxy in started:
            proxy.stop()


def burst(cluster: Cluster, directory: Path) -> float:
    with proxies(cluster, directory) as start:
        return max(burst_of_clients(start().port))


def quota_reach(cluster: Cluster, directory: Path) -> float:
    with proxies(cluster, directory) as start:
        fleet_directory = Path(tempfile.mkdtemp(dir=directory))
        fleet = start_fleet(start, fleet_directory, "[settings]\n")
        user = f"user-{uuid.uuid4().hex[:6]}"
        configs(fleet[0], "--alter", "--entity-type", "users", "--entity-name", user,
                "--add-config", "producer_byte_rate=50000")
        started = time.monotonic()  # the member that took the change has answered the tool
        waiting = list(fleet)
        while waiting:  # every 20 ms: a wait of 0.2 s steps would read most of the aim
            waiting = [proxy for proxy in waiting if described_producer_rate(proxy, user) != 50_000]
            if time.monotonic() - started > 60:
                raise TimeoutError(f"{len(waiting)} members do not describe the quota after 60 s")
            time.sleep(0.02)
        return time.monotonic() - started


def scrape_seconds(cluster: Cluster, directory: Path) -> float:
    with proxies(cluster, directory) as start:
        proxy = start(*default_client_quota(Path(tempfile.mkdtemp(dir=directory))))
        produce_as_many_client_ids(proxy, cluster, f"scrape-{uuid.uuid4().hex[:8]}")
        started = time.monotonic()
        scrape(f"http://127.0.0.1:{proxy.metrics_port}/metrics")
        return time.monotonic() - started


CASES: dict[str, Callable[[Cluster, Path], float]] = {"burst": burst, "quota_reach": quota_reach,
                                                      "scrape": scrape_seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/latency-aims-results.json")
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = new_results()
    directory = Path(tempfile.mkdtemp(prefix="kqp-latency-aims-"))
    with KafkaCluster(log_directory=directory / "kafka") as kafka:
        cluster = Cluster(kafka.bootstrap).wait_until_ready()
        for name in args.only:
            seconds = [CASES[name](cluster, directory) for _ in range(args.rounds)]
            case: dict[str, Any] = {"aim_s": AIMS_S[name], "seconds": [round(s, 3) for s in seconds],
                                    "median_s": round(statistics.median(seconds), 3),
                                    "within_aim": max(seconds) < AIMS_S[name]}
            results["cases"][name] = case
            print(f"{name}: {case['seconds']} s (aim {AIMS_S[name]} s)", flush=True)
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
