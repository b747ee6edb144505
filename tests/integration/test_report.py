"""End to end, as the getting-started tour goes (docs/getting-started.md): a quota set with Kafka's own
``kafka-configs`` through the proxy, Kafka's ProducerPerformance held to it, then ``kafka-quota-proxy report`` on the
proxy's state directory: every chart's line has its points, its time axis covers the run second by second, and the
quota drawn is the one that was in force, set through AlterClientQuotas (the usage log says so, no quota file
given)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from quotas.config import QuotaType, load_quota_file
from quotas.overrides import ALTERED_ORIGIN, OVERRIDES_FILE
from tests.fidelity import java_tool
from tests.integration.test_kafka_tools import configs
from tests.support import admin_config, proxy_command

pytestmark = pytest.mark.integration
QUOTA = 1_048_576
RECORDS = 5_000
RECORD_BYTES = 1_000


def test_a_tour_through_the_proxy_becomes_a_report_of_what_happened(own_proxy, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                     topic: str) -> None:
    quota_file = tmp_path / "quotas.toml"  # three windows of 1 s: a burst of 2 MB, the rest at the quota
    quota_file.write_text('[settings]\n"quota.window.num" = 3\n"quota.window.size.seconds" = 1\n'
                          '[[quota]]\nuser = "<default>"\nproducer_byte_rate = 10485760\n')
    proxy = own_proxy("--quota-file", str(quota_file), *admin_config(tmp_path))
    configs(proxy, "--alter", "--entity-type", "users", "--entity-name", "ANONYMOUS",
            "--add-config", f"producer_byte_rate={QUOTA}")
    produced = java_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records",
                         str(RECORDS), "--record-size", str(RECORD_BYTES), "--throughput", "-1",
                         "--command-property", f"bootstrap.servers={proxy.bootstrap}", "acks=all")
    assert f"{RECORDS} records sent" in produced, produced
    assert proxy.stop() == 0  # the last second of the usage log is written at shutdown
    (proxy.state_dir / OVERRIDES_FILE).unlink()  # the usage log alone says which quota was in force
    out = tmp_path / "report"
    done = subprocess.run([*proxy_command(), "report", "--usage", str(proxy.state_dir / "usage"),
                           "--ledger", str(proxy.state_dir / "pid-ledger"), "--out", str(out), "--master", "local[1]"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    producer = next(p for p in summary["principals"] if p["client_id"].startswith("perf-producer"))
    assert producer["user"] == "ANONYMOUS" and producer["total_bytes"] > RECORDS * RECORD_BYTES
    assert (producer["producer_quota"], producer["producer_quota_source"].split(" (")[0]) == (QUOTA, ALTERED_ORIGIN)
    chart = next(c for c in json.loads((out / "charts.json").read_text()) if c["client_id"] == producer["client_id"])
    assert chart["bin_seconds"] == 1 and chart["x_range"] == [producer["first_time"], producer["last_time"] + 1]
    produce_panel, throttle_panel = chart["panels"][0], chart["panels"][-1]
    traffic, quota = produce_panel["lines"][0], produce_panel["lines"][-1]
    seconds = producer["last_time"] - producer["first_time"] + 1
    assert seconds >= 3 and traffic["points"] == seconds + 1 and traffic["max"] > 0
    assert quota["label"].startswith(f"quota in force: 1.05 MB/s ({ALTERED_ORIGIN}") and quota["max"] == QUOTA
    assert throttle_panel["lines"][0]["max"] > 0  # held to the quota: throttled
    # a run of seconds is no ground for a quota: its figures, and the reason there is no recommendation
    recommended = (out / "recommended-quotas.toml").read_text()
    assert f'client-id = "{producer["client_id"]}": no recommendation: {producer["seconds"]} seconds' in recommended
    assert load_quota_file(out / "recommended-quotas.toml").resolve(
        QuotaType.PRODUCER_BYTE_RATE, "ANONYMOUS", producer["client_id"]) is None
    assert producer["recommendation"] in (out / "report.html").read_text()
