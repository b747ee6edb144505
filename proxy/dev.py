"""``make run``: the proxy on 127.0.0.1:9092 in front of $KAFKA_BOOTSTRAP or an embedded Tansu."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack

from proxy.cli import main as proxy_main
from proxy.embedded_broker import EmbeddedBroker


def main() -> int:
    with ExitStack() as stack:
        upstream = os.environ.get("KAFKA_BOOTSTRAP")
        if not upstream:
            broker = stack.enter_context(EmbeddedBroker())
            upstream = broker.bootstrap
            print(f"embedded Tansu broker on {upstream}", file=sys.stderr)
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
