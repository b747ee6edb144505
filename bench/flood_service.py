"""A well-behaved client beside clients that never read (``python -m bench.flood_service``): how long a client
connecting anew waits for Metadata through the proxy while 1, 20 and 100 connections flood it, and how long a client
straight to the cluster waits at the same moment (the flood loads the machine's cores, and the broker stalls with
it). Every kind of flood and setting of ``tests/integration/test_bounded_memory.py``, which holds the proxy to its
memory total and checks that the client is served; the wait is a figure here, with its aim reported, not asserted:
within ``AIM_BEYOND_DIRECT_S`` beyond the direct client. Writes ``bench/flood-service-results.json``.
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.report import new_results, write_results
from proxy.dev.apache_kafka import KafkaCluster
from tests.integration.test_bounded_memory import (
    KINDS,
    MIB,
    SERVED_TIMEOUT_S,
    SETTINGS,
    Step,
    flood_in_steps,
    flood_port,
    proxy_flags,
    seconds_to_metadata,
    served_once,
)
from tests.support import Cluster, ProxyProcess

AIM_BEYOND_DIRECT_S = 1.0


def served_directly(cluster: Cluster) -> float:
    """Straight to the cluster."""
    return seconds_to_metadata(lambda: socket.create_connection((cluster.host, cluster.port),
                                                                timeout=SERVED_TIMEOUT_S))


def one_case(cluster: Cluster, directory: Path, kind: str, settings: str) -> dict[str, Any]:
    """One proxy flooded in steps, a well-behaved client and a direct one timed side by side throughout."""
    flood = KINDS[kind]
    case_directory = directory / uuid.uuid4().hex[:8]
    case_directory.mkdir()
    proxy = ProxyProcess(cluster.bootstrap, case_directory / "proxy.log", *proxy_flags(case_directory, kind, settings),
                         node_ids=cluster.node_ids).start()
    waits: dict[int, list[tuple[float, float]]] = {}
    try:
        topic = f"flood-{uuid.uuid4().hex[:10]}"
        port = flood_port(proxy, flood, topic)
        with ThreadPoolExecutor(1) as beside:
            def timed(step: Step) -> None:
                direct = beside.submit(served_directly, cluster)
                through_proxy_s = served_once(proxy, flood.sasl)
                waits.setdefault(step.connections, []).append((through_proxy_s, direct.result()))
                step.served += 1

            steps = flood_in_steps(proxy, port, flood.requests(topic), flood, timed)
    finally:
        proxy.stop()
    by_connections = []
    for step in steps:
        step_waits = waits[step.connections]
        slowest_added_s = max(through - direct for through, direct in step_waits)
        by_connections.append({
            "connections": step.connections, "served": step.served, "rss_growth_mib": round(step.peak_growth / MIB, 1),
            "slowest_ms": round(max(through for through, _ in step_waits) * 1000),
            "slowest_direct_ms": round(max(direct for _, direct in step_waits) * 1000),
            "slowest_beyond_direct_ms": round(slowest_added_s * 1000),
            "within_aim": slowest_added_s < AIM_BEYOND_DIRECT_S})
    return {"kind": kind, "settings": settings, "steps": by_connections}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/flood-service-results.json")
    parser.add_argument("--kinds", nargs="+", choices=sorted(KINDS), default=list(KINDS))
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=list(SETTINGS))
    args = parser.parse_args()
    results = new_results()
    results["aim_beyond_direct_ms"] = round(AIM_BEYOND_DIRECT_S * 1000)
    directory = Path(tempfile.mkdtemp(prefix="kqp-flood-service-"))
    with KafkaCluster(log_directory=directory / "kafka") as kafka:
        cluster = Cluster(kafka.bootstrap).wait_until_ready()
        for kind in args.kinds:
            for settings in args.settings:
                case = one_case(cluster, directory, kind, settings)
                results["cases"][f"{kind}, {settings}"] = case
                print(f"{kind}, {settings}: " + ", ".join(
                    f"{s['connections']}: {s['slowest_ms']} ms (+{s['slowest_beyond_direct_ms']} beyond direct)"
                    for s in case["steps"]), flush=True)
    results["all_within_aim"] = all(step["within_aim"] for case in results["cases"].values()
                                    for step in case["steps"])
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
