"""End to end: traffic through a running proxy -> its usage log -> the Spark report."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from quotas.config import QuotaType, load_quota_file
from tests.integration.test_produce_quotas import create_topic, produce
from tests.support import proxy_command

pytestmark = pytest.mark.integration


def test_usage_through_the_proxy_becomes_a_report(own_proxy, tmp_path: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\nclient-id = "reporter"\nproducer_byte_rate = 100000000\n')
    proxy = own_proxy("--quota-file", str(quota_file))
    create_topic(proxy.bootstrap, topic)
    _, producer = produce(proxy.bootstrap, topic, "reporter", 4)
    producer.close()
    assert proxy.stop() == 0  # the last second of the usage log is written at shutdown
    out = tmp_path / "report"
    done = subprocess.run([*proxy_command(), "report", "--usage", str(proxy.state_dir / "usage"),
                           "--ledger", str(proxy.state_dir / "pid-ledger"), "--out", str(out),
                           "--quota-file", str(quota_file), "--master", "local[1]"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    reporter = next(p for p in summary["principals"] if (p["user"], p["client_id"]) == ("ANONYMOUS", "reporter"))
    assert reporter["total_bytes"] > 4 * 1024 * 1024  # every record plus the request framing
    assert summary["malformed_lines"] == 0
    assert "reporter" in (out / "report.html").read_text()
    recommended = load_quota_file(out / "recommended-quotas.toml")
    assert recommended.resolve(QuotaType.PRODUCER_BYTE_RATE, "ANONYMOUS", "reporter") is not None
