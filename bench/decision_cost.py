"""What the proxy's decision on one request costs, in process (``python -m bench.decision_cost``).

The request chain as the proxy wires it (``Services.request_chain``: the API's handler, the request rate, the answer's
finish attached), handed the same small requests as ``bench.request_cost`` (a Produce of one 100-byte record, a
Metadata of one topic, a Fetch with nothing new), without quotas, with ``bench.run``'s quotas, and with the authorizer
judging them by ``ACLS`` ACLs of ``PRINCIPALS`` principals (the sender one of them, allowed). No socket and no
cluster: only the proxy's own Python for a request, which a run through the network on a shared machine measures
with far more noise (``bench.request_cost`` measures the whole, beside the floor). Figures are the fastest of several
timed loops; the charges accumulate in the quota buckets as they would (the bench's quotas do not bind). The
authorizer's Metadata answer is rewritten for the principal too, in the finish, which is not timed here.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from functools import partial
from pathlib import Path

from bench.protocol import fastest_us
from bench.report import new_results, write_results
from bench.request_cost import ACLS, KINDS, PRINCIPALS, acl_file_text
from bench.run import QUOTAS
from protocol.addresses import carries_addresses
from protocol.apis import Api
from protocol.header import peek_request
from proxy.decision.outcome import ResponseFinisher, Sender
from proxy.runtime.wiring import Services
from proxy.settings.config import AuthorizerSettings, HostPort, ProxyConfig

TOPIC = "team-0.decisions"
SENDER = Sender("user-0", "127.0.0.1:9092", "127.0.0.1")


class UnchangedAnswers:
    """The server's ``ClusterAnswers`` in shape (a finish for the answers that name brokers, and ApiVersions'), whose
    finish is never run here: only the decision is timed."""

    @staticmethod
    def finisher(api_key: int, api_version: int) -> ResponseFinisher | None:
        if api_key == Api.API_VERSIONS or carries_addresses(api_key, api_version):
            return lambda body: None
        return None


def decision_us(state_dir: Path, quota_file: Path | None, acl_file: Path | None = None) -> dict[str, float]:
    """``acl_file``: the ACLs of an authorizer judging the requests (none: no authorizer)."""
    authorizer = None if acl_file is None else AuthorizerSettings(acl_file=acl_file)
    config = ProxyConfig(upstream=(HostPort("127.0.0.1", 9092),), listen=HostPort("127.0.0.1", 0),
                         advertised_host="127.0.0.1", broker_port_base=0, state_dir=state_dir, quota_file=quota_file,
                         authorizer=authorizer)
    services = Services(config, tuple)
    if services.authorizer is not None:
        assert len(services.authorizer.acls) == ACLS, len(services.authorizer.acls)
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
        acl_file = workdir / "acls.toml"
        acl_file.write_text(acl_file_text())
        without = decision_us(workdir / "without", None)
        with_quotas = decision_us(workdir / "with", quota_file)
        with_acls = decision_us(workdir / "acls", None, acl_file)
    results["acls"] = {"acls": ACLS, "principals": PRINCIPALS}
    results["cases"] = {kind: {"without_quotas_us": without[kind], "with_quotas_us": with_quotas[kind],
                               "quotas_add_us": with_quotas[kind] - without[kind], "with_acls_us": with_acls[kind],
                               "acls_add_us": with_acls[kind] - without[kind]} for kind in KINDS}
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
