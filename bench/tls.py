"""TLS benchmark: the proxy with TLS on its client listeners against the same proxy in plaintext, in
one run (interleaved). Writes bench/tls-results.json (``make bench``).

(g) producer throughput (confluent-kafka, as bench.run's (a)), consumer throughput (as (f)) and Kafka's
    ProducerPerformance (Java, as (h)), each with the proxy's CPU per MB moved; reported as ratios of the
    plaintext proxy.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

from bench.report import write_results
from bench.run import (
    ClientSettings,
    CpuPerMb,
    consume_mb_s,
    fill_topic,
    interleaved_medians,
    producer_performance_mb_s,
    throughput_mb_s,
)
from proxy.dev.apache_kafka import KafkaCluster
from tests.certificates import CertificateAuthority
from tests.support import ProxyProcess


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/tls-results.json")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kqp-bench-tls-"))
    ca = CertificateAuthority(workdir / "pki")
    server = ca.issue("proxy", "proxy", server=True)
    config = workdir / "tls.toml"
    config.write_text(f'[tls]\ncertfile = "{server.certfile}"\nkeyfile = "{server.keyfile}"\n')
    tls_client: ClientSettings = {"security.protocol": "SSL", "ssl.ca.location": str(ca.cafile)}
    results: dict[str, Any] = {"machine": {"cpus": psutil.cpu_count(), "python": platform.python_version(),
                                           "platform": platform.platform()}, "settings": vars(args)}
    mb = args.records * 1024 / 1e6
    with KafkaCluster(log_directory=workdir) as broker:
        plain = ProxyProcess(broker.bootstrap, workdir / "plain.log", "--log-level", "WARNING",
                             node_ids=broker.broker_ids).start()
        tls = ProxyProcess(broker.bootstrap, workdir / "tls.log", "--log-level", "WARNING",
                           "--config", str(config), node_ids=broker.broker_ids).start()
        try:
            proxies = {"plaintext": plain, "tls": tls}
            settings = {"plaintext": {}, "tls": tls_client}
            assert plain.process is not None and tls.process is not None
            cpu = {(name, way): CpuPerMb(psutil.Process(proxy.process.pid))  # type: ignore[union-attr]
                   for name, proxy in proxies.items() for way in ("produce", "consume", "java_produce")}
            targets = {name: name for name in proxies}

            def produce(name: str) -> float:
                return cpu[name, "produce"].measure(mb, lambda: throughput_mb_s(
                    proxies[name].bootstrap, args.records, client=settings[name]))

            results["g_produce_mb_s"] = interleaved_medians(targets, args.rounds, produce)
            filled = fill_topic(broker.bootstrap, args.records)

            def consume(name: str) -> float:
                return cpu[name, "consume"].measure(mb, lambda: consume_mb_s(
                    proxies[name].bootstrap, filled, args.records, client=settings[name]))

            results["g_consume_mb_s"] = interleaved_medians(targets, args.rounds, consume)
            # Kafka's Java producer writes full 16 KB TLS records where librdkafka writes one per buffer
            # piece (1-2 KB for 1 KB records): the proxy's TLS cost is per record
            java_tls = ("security.protocol=SSL", "ssl.truststore.type=PEM", f"ssl.truststore.location={ca.cafile}")
            java_properties = {"plaintext": (), "tls": java_tls}

            def java_produce(name: str) -> float:
                return cpu[name, "java_produce"].measure(mb, lambda: producer_performance_mb_s(
                    proxies[name].bootstrap, args.records, [], *java_properties[name], client=settings[name]))

            results["g_java_produce_mib_s"] = interleaved_medians(targets, args.rounds, java_produce)
            results["g_cpu_ms_per_mb"] = {f"{name}_{way}": meter.ms_per_mb for (name, way), meter in cpu.items()}
        finally:
            plain.stop()
            tls.stop()
    medians = {way: {name: figures["median"] for name, figures in results[f"g_{way}"].items()}
               for way in ("produce_mb_s", "consume_mb_s", "java_produce_mib_s")}
    per_mb = results["g_cpu_ms_per_mb"]
    results["ratios"] = {
        **{f"g_{way.rsplit('_', 2)[0]}_tls_vs_plaintext": figures["tls"] / figures["plaintext"]
           for way, figures in medians.items()},
        **{f"g_cpu_per_mb_{way}_tls_vs_plaintext": per_mb[f"tls_{way}"] / per_mb[f"plaintext_{way}"]
           for way in ("produce", "consume", "java_produce")},
    }
    print(results["ratios"], file=sys.stderr)
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
