"""What one small request costs (``python -m bench.request_cost``): straight to Apache Kafka, through a uvloop relay
that decides nothing (the floor, ``bench.relay_floor.ForwardingRelay``), through this proxy (without quotas, with
the quotas ``bench/run.py`` configures, a member of a fleet: topics of its own, which every Produce, Metadata and
Fetch is checked against, and with the authorizer judging every request by ``ACLS`` ACLs of ``PRINCIPALS``
principals, the sender, ANONYMOUS, allowed the topic) and through Kroxylicious, in interleaved rounds.
Three kinds: a Produce of one 100-byte record (v7, acks=1), a Metadata of one topic (v12, which the proxy rewrites),
and a Fetch with nothing new (v11, ``max_wait_ms`` 0). Per kind and target:

- requests sent one at a time on one connection: latency p50 and p99, the latency added to the direct one, and each
  relay's or proxy's CPU per request (the run time of its process's threads, and its children's, over the requests
  sent to it: the median of the rounds');
- the request rate with 1, 10 and 100 connections, each keeping ``DEPTH`` requests in flight: the median over the
  rounds, and its ratio to the direct one.

Each round measures the targets in a rotated order.

Writes ``bench/request-cost-results.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bench.kroxylicious import KroxyliciousProcess
from bench.relay_floor import ForwardingRelay
from bench.report import new_results, write_results
from bench.rounds import rotated
from bench.run import QUOTAS, create_topic, delete_topic, one_at_a_time_us, pipelined_rate, produce_frame
from proxy.dev.apache_kafka import KafkaCluster
from tests.support import ProxyProcess, encode_request

WARM_UP = 200
PRINCIPALS = 1_000
ACLS = 10 * PRINCIPALS
DEPTH = 8
"""Requests in flight on each connection while the rate is measured (as ``bench/run.py``'s (c))."""


def metadata_frame(topic: str) -> bytes:
    return encode_request(3, 12, correlation_id=1, topics=[{"topic_id": None, "name": topic}],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def empty_fetch_frame(topic: str) -> bytes:
    partition = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 1 << 40, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}
    return encode_request(1, 11, correlation_id=1, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                          isolation_level=0, session_id=0, session_epoch=-1,
                          topics=[{"topic": topic, "partitions": [partition]}], forgotten_topics_data=[], rack_id="")


def acl_file_text(first_principal: str = "User:user-0") -> str:
    """``ACLS`` ACLs, ten for each principal: read, write and describe of its topics (by prefix and by name), read and
    describe of its groups, and two denied of a topic among its own. The bench's sender is the first principal
    (``first_principal``), whose topics are ``team-0.``'s."""
    entries = []
    for user in range(PRINCIPALS):
        principal = first_principal if user == 0 else f"User:user-{user}"
        entries += [(principal, "topic", f"team-{user}.", "prefixed", '"read", "write", "describe"', "allow"),
                    (principal, "topic", f"team-{user}-orders", "literal", '"read", "write", "describe"', "allow"),
                    (principal, "group", f"team-{user}.", "prefixed", '"read", "describe"', "allow"),
                    (principal, "topic", f"team-{user}.secret", "literal", '"read", "write"', "deny")]
    return "".join(f'[[acl]]\nprincipal = "{principal}"\nresource-type = "{kind}"\nresource-name = "{name}"\n'
                   f'pattern-type = "{pattern}"\noperations = [{operations}]\npermission = "{permission}"\n\n'
                   for principal, kind, name, pattern, operations, permission in entries)


KINDS: dict[str, Callable[[str], bytes]] = {
    "produce": lambda topic: produce_frame(topic, 100, acks=1),
    "metadata": metadata_frame,
    "fetch_nothing_new": empty_fetch_frame,
}


_RUN_TIMES = Path("/proc/self/task").exists()
"""Linux: each thread's run time is in ``/proc/<pid>/task/<tid>/schedstat``."""


def cpu_s(process: psutil.Process | None) -> float:
    """The CPU time ``process`` and its children have run: on Linux the kernel's count of each live thread's run time
    (``schedstat``, in ns), elsewhere ``cpu_times``, which counts scheduler ticks (one every few ms: a few percent off
    over a round's requests, more than the differences measured here). A thread that ends during a round takes its run
    time out of the count: the proxies' threads last as long as they do, a JVM may end idle ones."""
    if process is None:
        return 0.0
    if not _RUN_TIMES:
        times = process.cpu_times()
        return float(times.user + times.system + times.children_user + times.children_system)
    return sum(_run_time_s(each.pid) for each in (process, *process.children(recursive=True)))


def _run_time_s(pid: int) -> float:
    """The run time of every live thread of ``pid`` (``/proc/<pid>/task/<tid>/schedstat``'s first field)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return 0.0  # a child that ended since it was listed
    total_ns = 0
    for task in tasks:
        try:
            total_ns += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended between the listing and the read
    return total_ns / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/request-cost-results.json")
    parser.add_argument("--requests", type=int, default=2_000, help="per kind, target and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate-seconds", type=float, default=2.0, help="per kind, connections, target and round")
    parser.add_argument("--rate-connections", type=int, nargs="+", default=[1, 10, 100])
    args = parser.parse_args()
    results = new_results()
    results["settings"] = vars(args)
    workdir = Path(tempfile.mkdtemp(prefix="kqp-request-cost-"))
    with (KafkaCluster(log_directory=workdir) as broker, KroxyliciousProcess(broker.bootstrap, workdir) as kroxylicious,
          ForwardingRelay(broker.bootstrap) as floor):
        plain = ProxyProcess(broker.bootstrap, workdir / "proxy.log", "--log-level", "WARNING",
                             node_ids=broker.broker_ids).start()
        quota_file = workdir / "quotas.toml"
        quota_file.write_text(QUOTAS)
        with_quotas = ProxyProcess(broker.bootstrap, workdir / "proxy-quotas.log", "--log-level", "WARNING",
                                   "--quota-file", str(quota_file), node_ids=broker.broker_ids).start()
        fleet_config = workdir / "fleet.toml"
        fleet_config.write_text('[fleet]\ntopic = "bench-usage"\nquotas-topic = "bench-quotas"\n'
                                'instance-id = "bench-member"\n')
        fleet_member = ProxyProcess(broker.bootstrap, workdir / "proxy-fleet.log", "--log-level", "WARNING",
                                    "--config", str(fleet_config), node_ids=broker.broker_ids).start()
        acl_file = workdir / "acls.toml"
        acl_file.write_text(acl_file_text("User:ANONYMOUS"))
        authorizer_config = workdir / "authorizer.toml"
        authorizer_config.write_text(f'[authorizer]\nenabled = true\nacl-file = "{acl_file}"\n')
        with_acls = ProxyProcess(broker.bootstrap, workdir / "proxy-acls.log", "--log-level", "WARNING",
                                 "--config", str(authorizer_config), node_ids=broker.broker_ids).start()
        try:
            assert plain.process is not None and with_quotas.process is not None and fleet_member.process is not None
            assert with_acls.process is not None
            assert kroxylicious.process is not None
            targets: dict[str, tuple[str, psutil.Process | None]] = {
                "direct": (broker.bootstrap, None),
                "bare_relay": (floor.bootstrap, floor.process),
                "proxy": (plain.bootstrap, psutil.Process(plain.process.pid)),
                "proxy_with_quotas": (with_quotas.bootstrap, psutil.Process(with_quotas.process.pid)),
                "proxy_with_own_topics": (fleet_member.bootstrap, psutil.Process(fleet_member.process.pid)),
                "proxy_with_acls": (with_acls.bootstrap, psutil.Process(with_acls.process.pid)),
                "kroxylicious": (kroxylicious.bootstrap, psutil.Process(kroxylicious.process.pid)),
            }
            topic = create_topic(broker.bootstrap, prefix="team-0.")
            figures: dict[str, Any] = {}
            rates: dict[str, Any] = {}
            for kind, make_frame in KINDS.items():
                frame = make_frame(topic)
                samples: dict[str, list[float]] = {name: [] for name in targets}
                cpu: dict[str, list[float]] = {name: [] for name in targets}
                for bootstrap, _process in targets.values():  # not counted: the first target must not pay for all
                    one_at_a_time_us(bootstrap, frame, 0, WARM_UP)
                for round_index in range(args.rounds):
                    for name in rotated(list(targets), round_index):
                        bootstrap, process = targets[name]
                        before = cpu_s(process)
                        samples[name] += one_at_a_time_us(bootstrap, frame, args.requests, WARM_UP)
                        cpu[name].append(cpu_s(process) - before)
                figures[kind] = _figures(samples, cpu, WARM_UP + args.requests)
                print(kind, {name: (round(f["p50_us"]), round(f.get("added_p50_us", 0)), round(f["cpu_us"]))
                             for name, f in figures[kind].items()}, flush=True)
                rates[kind] = {}
                for connections in args.rate_connections:
                    runs: dict[str, list[float]] = {name: [] for name in targets}
                    for round_index in range(args.rounds):
                        for name in rotated(list(targets), round_index):
                            bootstrap = targets[name][0]
                            runs[name].append(pipelined_rate(bootstrap, frame, connections, DEPTH, args.rate_seconds))
                    rates[kind][connections] = _rate_figures(runs)
                    print(kind, connections, "connections:", {name: (round(f["per_s"]), round(f.get("ratio", 1), 2))
                                                              for name, f in rates[kind][connections].items()},
                          flush=True)
            delete_topic(broker.bootstrap, topic)
        finally:
            plain.stop()
            with_quotas.stop()
            fleet_member.stop()
            with_acls.stop()
    results["cases"] = figures
    results["rates"] = rates
    write_results(args.out, results)
    return 0


def _figures(samples: dict[str, list[float]], cpu: dict[str, list[float]], sent: int) -> dict[str, dict[str, Any]]:
    """p50/p99 per target, the added p50/p99 over direct, and CPU per request: the median of the rounds' (``cpu``: each
    round's CPU seconds, over the requests ``sent`` to the target in a round, the warm-up ones included; a round the
    machine disturbed counts for no more than the others)."""
    out: dict[str, dict[str, Any]] = {}
    for name, values in samples.items():
        values.sort()
        out[name] = {"p50_us": statistics.median(values), "p99_us": values[int(len(values) * 0.99)],
                     "cpu_us": statistics.median(cpu[name]) / sent * 1e6, "cpu_rounds_us": [
                         seconds / sent * 1e6 for seconds in cpu[name]]}
    for name, figure in out.items():
        if name != "direct":
            figure["added_p50_us"] = figure["p50_us"] - out["direct"]["p50_us"]
            figure["added_p99_us"] = figure["p99_us"] - out["direct"]["p99_us"]
    return out


def _rate_figures(runs: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """The median rate per target over the rounds (each round's too), and its ratio to the direct one."""
    out: dict[str, dict[str, Any]] = {name: {"per_s": statistics.median(values), "runs": values}
                                      for name, values in runs.items()}
    for name, figure in out.items():
        if name != "direct":
            figure["ratio"] = figure["per_s"] / out["direct"]["per_s"]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
