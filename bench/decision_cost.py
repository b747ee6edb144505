"""What the proxy's decision on one request costs, in process (``python -m bench.decision_cost``).

The request chain as the proxy wires it (``Services.request_chain``: the API's handler, the request rate, the answer's
finish attached), handed the same small requests as ``bench.request_cost`` (a Produce of one 100-byte record, a
Metadata of one topic, a Fetch with nothing new), without quotas and with ``bench.run``'s quotas. No socket and no
cluster: only the proxy's own Python for a request, which a run through the network on a shared machine measures
with far more noise (``bench.request_cost`` measures the whole, beside the floor). Figures are the fastest of several
timed loops; the charges accumulate in the quota buckets as they would (the bench's quotas do not bind).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from functools import partial
from pathlib import Path

from bench.protocol import fastest_us
from bench.report import new_results, write_results
from bench.request_cost import KINDS
from bench.run import QUOTAS
from protocol.addresses import carries_addresses
from protocol.apis import Api
from protocol.header import peek_request
from proxy.decision.outcome import ResponseFinisher, Sender
from proxy.runtime.wiring import Services
from proxy.settings.config import HostPort, ProxyConfig

TOPIC = "bench-decisions"
SENDER = Sender("ANONYMOUS", "127.0.0.1:9092")


class UnchangedAnswers:
    """The server's ``ClusterAnswers`` in shape (a finish for the answers that name brokers, and ApiVersions'), whose
    finish is never run here: only the decision is timed."""

    @staticmethod
    def finisher(api_key: int, api_version: int) -> ResponseFinisher | None:
        if api_key == Api.API_VERSIONS or carries_addresses(api_key, api_version):
            return lambda body: None
        return None


def decision_us(state_dir: Path, quota_file: Path | None) -> dict[str, float]:
    config = ProxyConfig(upstream=(HostPort("127.0.0.1", 9092),), listen=HostPort("127.0.0.1", 0),
                         advertised_host="127.0.0.1", broker_port_base=0, state_dir=state_dir, quota_file=quota_file)
    services = Services(config, tuple)
    chain = services.request_chain(UnchangedAnswers())
    costs = {}
    for kind, make in KINDS.items():
        frame = memoryview(make(TOPIC))[4:]
        api_key, api_version, _ = peek_request(frame)
        costs[kind] = fastest_us(partial(chain.decide, frame, api_key, api_version, SENDER, None, True),
                                 loops=20_000, repeats=7)
    asyncio.run(services.close())
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/decision-cost-results.json")
    args = parser.parse_args()
    results = new_results()
    with tempfile.TemporaryDirectory(prefix="kqp-decisions-") as directory:
        workdir = Path(directory)
        quota_file = workdir / "quotas.toml"
        quota_file.write_text(QUOTAS)
        without = decision_us(workdir / "without", None)
        with_quotas = decision_us(workdir / "with", quota_file)
    results["cases"] = {kind: {"without_quotas_us": without[kind], "with_quotas_us": with_quotas[kind],
                               "quotas_add_us": with_quotas[kind] - without[kind]} for kind in KINDS}
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
