"""TLS benchmark: clients with TLS to Apache Kafka's own SSL listener, against the same clients with TLS to the proxy
and to Kroxylicious (each in plaintext to the cluster, and in TLS to Kafka's SSL listener), beside the proxy in
plaintext, in one run (interleaved). Writes bench/tls-results.json (``make bench``).

(g) producer throughput (confluent-kafka, as bench.run's (a)), consumer throughput (as (f)) and Kafka's
    ProducerPerformance (Java, as (h)); for each, the CPU per MB moved of the proxy and of the broker. Reported as
    ratios: each TLS proxy (Kroxylicious's too) against Kafka's TLS (the comparison a user who needs TLS makes), and
    the proxy's TLS against its plaintext.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NamedTuple

import psutil

from bench.kroxylicious import KroxyliciousProcess
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
from proxy.dev.apache_kafka import KafkaCluster, SslCertificate
from tests.certificates import CertificateAuthority
from tests.support import ProxyProcess

WAYS = ("produce", "consume", "java_produce")
TLS_PROXIES = ("proxy_tls", "proxy_tls_upstream_tls", "kroxylicious_tls", "kroxylicious_tls_upstream_tls")
"""Every target with TLS to its clients but Kafka itself."""


class Target(NamedTuple):
    bootstrap: str
    client: ClientSettings
    """librdkafka's settings beyond the bootstrap."""
    java: tuple[str, ...]
    """The Java client's properties beyond the bootstrap."""
    proxy: psutil.Process | None
    """The proxy in between, if any."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/tls-results.json")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kqp-bench-tls-"))
    ca = CertificateAuthority(workdir / "pki")  # signs the proxy's certificate and Kafka's: clients trust both
    proxy_certificate = ca.issue("proxy", "proxy", server=True)
    kafka_certificate = ca.issue("kafka", "kafka", server=True)
    front = f'[tls]\ncertfile = "{proxy_certificate.certfile}"\nkeyfile = "{proxy_certificate.keyfile}"\n'
    (workdir / "tls.toml").write_text(front)
    (workdir / "tls-both.toml").write_text(f'{front}[upstream-tls]\ncafile = "{ca.cafile}"\n')
    tls_client: ClientSettings = {"security.protocol": "SSL", "ssl.ca.location": str(ca.cafile)}
    # Kafka's Java producer writes full 16 KB TLS records where librdkafka writes one per buffer piece (1-2 KB for
    # 1 KB records): the proxy's TLS cost is per record
    java_tls = ("security.protocol=SSL", "ssl.truststore.type=PEM", f"ssl.truststore.location={ca.cafile}")
    results: dict[str, Any] = {"machine": {"cpus": psutil.cpu_count(), "python": platform.python_version(),
                                           "platform": platform.platform()}, "settings": vars(args)}
    mb = args.records * 1024 / 1e6
    kroxylicious_certificate = ca.issue("kroxylicious", "kroxylicious", server=True)
    kroxylicious_key_pair = (kroxylicious_certificate.certfile, kroxylicious_certificate.keyfile)
    kafka_ssl = SslCertificate(kafka_certificate.certfile, kafka_certificate.keyfile)
    with KafkaCluster(log_directory=workdir, ssl=kafka_ssl) as kafka, ExitStack() as stack:
        kroxylicious = {
            "kroxylicious_tls": stack.enter_context(KroxyliciousProcess(
                kafka.bootstrap, workdir, kroxylicious_key_pair, name="kroxylicious-tls")),
            "kroxylicious_tls_upstream_tls": stack.enter_context(KroxyliciousProcess(
                kafka.ssl_bootstrap, workdir, kroxylicious_key_pair, ca.cafile, name="kroxylicious-tls-both")),
        }
        proxies = {
            "proxy_plaintext": ProxyProcess(kafka.bootstrap, workdir / "plain.log", "--log-level", "WARNING",
                                            node_ids=kafka.broker_ids),
            "proxy_tls": ProxyProcess(kafka.bootstrap, workdir / "tls.log", "--log-level", "WARNING",
                                      "--config", str(workdir / "tls.toml"), node_ids=kafka.broker_ids),
            "proxy_tls_upstream_tls": ProxyProcess(kafka.ssl_bootstrap, workdir / "tls-both.log", "--log-level",
                                                   "WARNING", "--config", str(workdir / "tls-both.toml"),
                                                   node_ids=kafka.broker_ids),
        }
        try:
            running = {name: psutil.Process(proxy.start().process.pid)  # type: ignore[union-attr]
                       for name, proxy in proxies.items()}
            targets = {
                "kafka_tls": Target(kafka.ssl_bootstrap, tls_client, java_tls, None),
                "proxy_tls": Target(proxies["proxy_tls"].bootstrap, tls_client, java_tls, running["proxy_tls"]),
                "proxy_tls_upstream_tls": Target(proxies["proxy_tls_upstream_tls"].bootstrap, tls_client, java_tls,
                                                 running["proxy_tls_upstream_tls"]),
                "proxy_plaintext": Target(proxies["proxy_plaintext"].bootstrap, {}, (), running["proxy_plaintext"]),
                **{name: Target(process.bootstrap, tls_client, java_tls, psutil.Process(process.process.pid))
                   for name, process in kroxylicious.items() if process.process is not None},
            }
            assert kafka.controller.pid is not None
            broker_process = psutil.Process(kafka.controller.pid)
            proxy_cpu = {(name, way): CpuPerMb(target.proxy) for name, target in targets.items()
                         if target.proxy is not None for way in WAYS}
            broker_cpu = {(name, way): CpuPerMb(broker_process) for name in targets for way in WAYS}

            def measured(name: str, way: str, run: Any) -> float:
                """``run`` with the CPU of the broker and of the proxy in between (if any) counted."""
                if (name, way) in proxy_cpu:
                    return float(broker_cpu[name, way].measure(mb, lambda: proxy_cpu[name, way].measure(mb, run)))
                return float(broker_cpu[name, way].measure(mb, run))

            names = {name: name for name in targets}
            results["g_produce_mb_s"] = interleaved_medians(names, args.rounds, lambda name: measured(
                name, "produce", lambda: throughput_mb_s(targets[name].bootstrap, args.records,
                                                         client=targets[name].client)))
            filled = fill_topic(kafka.bootstrap, args.records)
            results["g_consume_mb_s"] = interleaved_medians(names, args.rounds, lambda name: measured(
                name, "consume", lambda: consume_mb_s(targets[name].bootstrap, filled, args.records,
                                                      client=targets[name].client)))
            results["g_java_produce_mib_s"] = interleaved_medians(names, args.rounds, lambda name: measured(
                name, "java_produce", lambda: producer_performance_mb_s(
                    targets[name].bootstrap, args.records, [], *targets[name].java, client=targets[name].client)))
            results["g_proxy_cpu_ms_per_mb"] = {f"{name}_{way}": meter.ms_per_mb
                                                for (name, way), meter in proxy_cpu.items()}
            results["g_broker_cpu_ms_per_mb"] = {f"{name}_{way}": meter.ms_per_mb
                                                 for (name, way), meter in broker_cpu.items()}
        finally:
            for proxy in proxies.values():
                if proxy.process is not None:
                    proxy.stop()
    results["ratios"] = _ratios(results)
    print(results["ratios"], file=sys.stderr)
    write_results(args.out, results)
    return 0


def _ratios(results: dict[str, Any]) -> dict[str, float]:
    """Throughput of each TLS proxy against Kafka's own TLS (the aim: 0.9x or more) and of the proxy's TLS against
    its plaintext; the proxy's CPU per MB with TLS against without."""
    ratios: dict[str, float] = {}
    per_mb = results["g_proxy_cpu_ms_per_mb"]
    for figure, way in (("g_produce_mb_s", "produce"), ("g_consume_mb_s", "consume"),
                        ("g_java_produce_mib_s", "java_produce")):
        medians = {name: figures["median"] for name, figures in results[figure].items()}
        for name in TLS_PROXIES:
            ratios[f"g_{way}_{name}_vs_kafka_tls"] = medians[name] / medians["kafka_tls"]
        ratios[f"g_{way}_proxy_tls_vs_plaintext"] = medians["proxy_tls"] / medians["proxy_plaintext"]
        ratios[f"g_cpu_per_mb_{way}_tls_vs_plaintext"] = per_mb[f"proxy_tls_{way}"] / per_mb[f"proxy_plaintext_{way}"]
    return ratios


if __name__ == "__main__":
    raise SystemExit(main())
