"""``make run``: the proxy on 127.0.0.1:9092 in front of $KAFKA_BOOTSTRAP or an Apache Kafka node started here."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path

from proxy.cli.main import main as proxy_main
from proxy.dev.apache_kafka import KafkaCluster
from proxy.dev.kafka_jars import KAFKA_VERSION, KafkaUnavailable

KAFKA_LOGS = Path("state-kafka")
"""Where the Apache Kafka node of ``make run`` writes its log (its data goes with it when it stops)."""


def main() -> int:
    with ExitStack() as stack:
        upstream = os.environ.get("KAFKA_BOOTSTRAP")
        if not upstream:
            try:
                kafka = stack.enter_context(KafkaCluster(log_directory=KAFKA_LOGS))
            except KafkaUnavailable as error:
                print(f"make run: {error}", file=sys.stderr)
                return 2
            upstream = kafka.bootstrap
            print(f"Apache Kafka {KAFKA_VERSION} on {upstream} (log: {KAFKA_LOGS / 'kafka-1.log'})", file=sys.stderr)
        return proxy_main([
            "--upstream", upstream,
            "--listen", os.environ.get("PROXY_LISTEN", "127.0.0.1:9092"),
            "--metrics-listen", os.environ.get("PROXY_METRICS_LISTEN", "127.0.0.1:9100"),
            "--config", "examples/proxy.toml",
            "--quota-file", "examples/quotas.toml",
            "--state-dir", "state",
            *sys.argv[1:],
        ])


if __name__ == "__main__":
    raise SystemExit(main())
